// Helpers the test folders share: the bundled model loaded once per test binary, and running a command (the
// CLI, the numpy reference) the way a user would.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::testing {

struct loaded_model {
    std::unique_ptr<gguf::file> file;
    std::unique_ptr<model::model> model;
    std::unique_ptr<tokenizer::tokenizer> tok;
};

// models/stories260K.gguf with its tokenizer, loaded on first use; a load failure fails the calling test.
inline const loaded_model& bundled_stories() {
    static const loaded_model m = [] {
        loaded_model r;
        auto f = gguf::file::open(std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf");
        EXPECT_TRUE(f.ok()) << f.error().to_string();
        if (!f.ok()) return r;
        r.file = std::move(f).value();
        auto md = model::model::load(*r.file);
        EXPECT_TRUE(md.ok()) << md.error().to_string();
        if (md.ok()) r.model = std::move(md).value();
        auto t = tokenizer::tokenizer::from_gguf(*r.file);
        EXPECT_TRUE(t.ok()) << t.error().to_string();
        if (t.ok()) r.tok = std::make_unique<tokenizer::tokenizer>(std::move(t).value());
        return r;
    }();
    return m;
}

// Runs a shell command; returns its stdout and sets *rc to its exit status (as pclose reports it).
inline std::string run_command(const std::string& cmd, int* rc) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
        *rc = -1;
        return out;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    *rc = pclose(p);
    return out;
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace h2okv::testing
