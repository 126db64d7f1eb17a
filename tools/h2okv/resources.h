// Where the CLI finds its bundled model and the shared data folder when no flag names them: an environment
// variable, else share/h2okv/ found relative to the executable itself (/proc/self/exe), never a path of the
// source tree. Installed (cmake --install): <prefix>/bin/h2okv finds <prefix>/share/h2okv/. In a build tree,
// tools/h2okv/h2okv finds <build>/share/h2okv/, which CMake links to the sources' models/ and ../shared/data
// (tools/h2okv/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

namespace h2okv::cli {

// The bundled model: $H2OKV_MODEL when set, else the first existing of model_candidates(); "" when none
// exists (load_model("") then says which paths were tried).
std::string default_model_path();
// The shared data folder (tinystories/, moby-dick/, copa/, ...): $H2OKV_DATA when set, else the first
// existing of data_candidates(), else the first candidate (so a missing file's error names a real place).
std::string default_data_dir();

// The paths tried after the environment variable, in order.
std::vector<std::string> model_candidates();
std::vector<std::string> data_candidates();
// One sentence for --help and errors: "$H2OKV_MODEL, else <exe dir>/../share/h2okv/models/stories260K.gguf
// (installed), else ... (build tree)".
std::string model_search_text();
std::string data_search_text();

}  // namespace h2okv::cli
