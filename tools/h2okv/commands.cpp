#include "commands.h"

namespace h2okv::cli {

void add_agreement_command(CLI::App&, int*);
void add_batch_command(CLI::App&, int*);
void add_bench_command(CLI::App&, int*);
void add_calibrate_command(CLI::App&, int*);
void add_generate_command(CLI::App&, int*);
void add_gguf_command(CLI::App&, int*);
void add_info_command(CLI::App&, int*);
void add_logits_command(CLI::App&, int*);
void add_passkey_command(CLI::App&, int*);
void add_perplexity_command(CLI::App&, int*);
void add_ruler_command(CLI::App&, int*);
void add_serve_command(CLI::App&, int*);
void add_tasks_command(CLI::App&, int*);
void add_tokenize_command(CLI::App&, int*);

void add_commands(CLI::App& app, int* exit_code) {
    add_agreement_command(app, exit_code);
    add_batch_command(app, exit_code);
    add_bench_command(app, exit_code);
    add_calibrate_command(app, exit_code);
    add_generate_command(app, exit_code);
    add_gguf_command(app, exit_code);
    add_info_command(app, exit_code);
    add_logits_command(app, exit_code);
    add_passkey_command(app, exit_code);
    add_perplexity_command(app, exit_code);
    add_ruler_command(app, exit_code);
    add_serve_command(app, exit_code);
    add_tasks_command(app, exit_code);
    add_tokenize_command(app, exit_code);
}

}  // namespace h2okv::cli
