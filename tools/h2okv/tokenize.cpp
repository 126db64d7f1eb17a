// h2okv tokenize: the token ids of a text under a model's tokenizer, and what each token stands for.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct tokenize_options {
    std::string model_path = default_model_path();
    std::string prompt;
    bool ids_only = false;
    bool no_bos = false;
    bool special = false;
};

// Length of the well-formed UTF-8 sequence at s[i], or 0.
size_t utf8_sequence_at(const std::string& s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80             ? 1
                     : (c & 0xE0) == 0xC0 ? 2
                     : (c & 0xF0) == 0xE0 ? 3
                     : (c & 0xF8) == 0xF0 ? 4
                                          : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    }
    return n;
}

// A piece on one line: control characters and bytes that are not whole UTF-8 characters (byte tokens,
// pieces of a character) as escapes.
std::string printable(const std::string& piece) {
    std::string out;
    for (size_t i = 0; i < piece.size();) {
        const auto c = static_cast<unsigned char>(piece[i]);
        const size_t n = utf8_sequence_at(piece, i);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\\') {
            out += "\\\\";
        } else if (n == 0 || c < 0x20 || c == 0x7F) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out.append(piece, i, n);
            i += n;
            continue;
        }
        ++i;
    }
    return out;
}

int run_tokenize(const tokenize_options& o) {
    if (o.model_path.empty()) return fail(no_model_error());
    auto file = gguf::file::open(o.model_path);
    if (!file.ok()) {
        fmt::print(stderr, "h2okv tokenize: error: {}\n", file.error().message());
        return 1;
    }
    auto tok = tokenizer::tokenizer::from_gguf(**file);
    if (!tok.ok()) {
        fmt::print(stderr, "h2okv tokenize: error: {}\n", tok.error().message());
        return 1;
    }
    for (const auto& note : tok->notes()) fmt::print(stderr, "h2okv tokenize: note: {}\n", note);
    auto ids = tok->encode(o.prompt, /*add_special=*/!o.no_bos, /*parse_special=*/o.special);
    if (!ids.ok()) {
        fmt::print(stderr, "h2okv tokenize: error: {}\n", ids.error().message());
        return 1;
    }
    fmt::print("{}\n", fmt::join(*ids, " "));
    if (!o.ids_only) {
        for (const int32_t id : *ids) fmt::print("{:6} -> '{}'\n", id, printable(tok->piece(id, true)));
    }
    return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, int* exit_code) {
    auto opts = std::make_shared<tokenize_options>();
    CLI::App* cmd = app.add_subcommand(
        "tokenize",
        "Print the token ids of a text (one line), then each token's id and piece (one per line)");
    cmd->add_option("-m,--model", opts->model_path,
                    "GGUF model file (default: the bundled stories260K: " + model_search_text() + ")")
        ->capture_default_str();
    cmd->add_option("-p,--prompt", opts->prompt, "The text to tokenize")->required();
    cmd->add_flag("--ids", opts->ids_only, "Print only the line of ids");
    cmd->add_flag("--no-bos", opts->no_bos, "Do not add the BOS/EOS tokens the model asks for");
    cmd->add_flag("--special", opts->special,
                  "Match control tokens written in the text (\"</s>\", \"<|endoftext|>\") instead of "
                  "tokenizing them as plain text");
    cmd->callback([opts, exit_code] { *exit_code = run_tokenize(*opts); });
}

}  // namespace h2okv::cli
