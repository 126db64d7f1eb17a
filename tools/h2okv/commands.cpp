#include "commands.h"

namespace h2okv::cli {

void add_commands(CLI::App& app, int* exit_code) {}

}  // namespace h2okv::cli
