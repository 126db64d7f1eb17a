#include "resources.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace h2okv::cli {
namespace {

namespace fs = std::filesystem;

// share/h2okv/ relative to the executable's folder: where `cmake --install` puts it (bin/ -> share/), then
// where the build tree has it (tools/h2okv/ -> share/). Both are relative paths CMake computed; neither
// names the source tree.
const char* const share_dirs[] = {H2OKV_INSTALL_SHARE_REL, H2OKV_BUILD_SHARE_REL};
const char* const model_file = "models/stories260K.gguf";

fs::path exe_dir() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path();
}

std::vector<std::string> candidates(const char* leaf) {
    std::vector<std::string> out;
    const fs::path dir = exe_dir();
    if (dir.empty()) return out;
    for (const char* share : share_dirs) out.push_back((dir / share / leaf).lexically_normal().string());
    return out;
}

std::string first_existing(const std::vector<std::string>& paths) {
    for (const auto& p : paths) {
        std::error_code ec;
        if (fs::exists(p, ec)) return p;
    }
    return "";
}

std::string search_text(const char* env, const char* leaf) {
    return std::string("$") + env + ", else " + H2OKV_INSTALL_SHARE_REL + "/" + leaf +
           " from the executable's folder (installed), else " + H2OKV_BUILD_SHARE_REL + "/" + leaf +
           " (build tree)";
}

}  // namespace

std::vector<std::string> model_candidates() {
    return candidates(model_file);
}

std::vector<std::string> data_candidates() {
    return candidates("data");
}

std::string default_model_path() {
    if (const char* env = std::getenv("H2OKV_MODEL"); env != nullptr && env[0] != '\0') return env;
    return first_existing(model_candidates());
}

std::string default_data_dir() {
    if (const char* env = std::getenv("H2OKV_DATA"); env != nullptr && env[0] != '\0') return env;
    const auto paths = data_candidates();
    const std::string found = first_existing(paths);
    return !found.empty() || paths.empty() ? found : paths.front();
}

std::string model_search_text() {
    return search_text("H2OKV_MODEL", model_file);
}

std::string data_search_text() {
    return search_text("H2OKV_DATA", "data");
}

}  // namespace h2okv::cli
