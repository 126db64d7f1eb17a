// The h2okv CLI's subcommands. Each subcommand lives in its own file and registers itself on the app with
// one add_*_command function; it returns the callback's exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace h2okv::cli {

// Registers every subcommand on `app`; the chosen one stores its exit code in `*exit_code` when it runs.
void add_commands(CLI::App& app, int* exit_code);

}  // namespace h2okv::cli
