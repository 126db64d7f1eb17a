// h2okv: run GGUF language models on the CPU with an H2O-managed, bounded KV cache.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "commands.h"
#include "h2okv/core/cpu_isa.h"

int main(int argc, char** argv) {
    CLI::App app{
        "h2okv — GGUF language-model inference on the CPU with a bounded KV cache managed by Heavy-Hitter "
        "Oracle (H2O) eviction, next to the full, window, streaming and TOVA baselines."};
    app.set_version_flag("--version", "h2okv 0.1.0");
    app.require_subcommand(1);
    // H2OKV_ISA forces the kernels' and score pass's ISA; a value they would not apply is refused here.
    if (auto isa = h2okv::core::requested_isa(); !isa.ok()) {
        fmt::print(stderr, "h2okv: error: {}\n", isa.error().message());
        return 1;
    }
    int exit_code = 0;
    h2okv::cli::add_commands(app, &exit_code);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        fmt::print(stderr, "h2okv: error: {}\n", e.what());
        return 1;
    }
    return exit_code;
}
