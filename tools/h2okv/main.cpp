// h2okv: run llama-family GGUF models on the CPU with an H2O-managed, bounded KV cache.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
    CLI::App app{
        "h2okv — llama-family GGUF inference on the CPU with a bounded KV cache managed by Heavy-Hitter "
        "Oracle (H2O) eviction, next to the full, window, streaming and TOVA baselines."};
    app.set_version_flag("--version", "h2okv 0.1.0");
    app.require_subcommand(1);
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
