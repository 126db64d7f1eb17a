// h2okv logits: the logits of every position of a teacher-forced run over given tokens, written as a NumPy
// .npy array, so that they can be compared with another engine's on the same tokens
// (scripts/compare_logits.py; scripts/llamacpp/ writes llama.cpp's in the same format).
//
// The file holds float32 [n_pos, n_vocab], little-endian, C order: row i is the logits after tokens 0..i,
// i.e. the distribution of token i + 1. The run is one session fed the tokens in chunks of
// --kv-prefill-chunk, so an evicting policy evicts after each chunk exactly as in `generate`.
//
//   h2okv logits -m smollm.gguf --tokens-file ids.txt -o h2okv.npy
//   h2okv logits -m smollm.gguf -f story.txt --max-tokens 256 --kv-policy h2o --kv-budget 0.2 -o h2o.npy
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/engine/session.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct logits_options {
    model_options model;
    kv_options kv;
    std::string tokens_path;
    std::string prompt;
    std::string text_path;
    int64_t n_tokens = 0;
    std::string out_path;
};

// Whitespace-separated decimal token ids, each in [0, n_vocab).
result<std::vector<int32_t>> parse_token_ids(const std::string& text, const std::string& path,
                                             int64_t n_vocab) {
    std::vector<int32_t> ids;
    size_t i = 0;
    int line = 1;
    while (i < text.size()) {
        const char c = text[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            line += c == '\n' ? 1 : 0;
            ++i;
            continue;
        }
        size_t end = i;
        while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != '\n' &&
               text[end] != '\r') {
            ++end;
        }
        const std::string word = text.substr(i, end - i);
        int64_t id = 0;
        const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
        if (ec == std::errc::result_out_of_range ||
            (ec == std::errc() && ptr == word.data() + word.size() && (id < 0 || id >= n_vocab))) {
            return invalid_argument(
                "'{}' line {}, entry {}: token id {} is outside the model's vocabulary [0, {})", path, line,
                ids.size() + 1, word, n_vocab);
        }
        if (ec != std::errc() || ptr != word.data() + word.size()) {
            return invalid_argument(
                "'{}' line {}, entry {}: '{}' is not a token id; expected whitespace-separated decimal "
                "integers",
                path, line, ids.size() + 1, word.size() > 40 ? word.substr(0, 40) + "..." : word);
        }
        ids.push_back(static_cast<int32_t>(id));
        i = end;
    }
    if (ids.empty()) return invalid_argument("'{}' holds no token ids", path);
    return ids;
}

// The tokens of the run: the token-id file as is, or BOS + the text's tokens; the first n_tokens if given.
result<std::vector<int32_t>> input_tokens(const logits_options& o, const gguf::file& file, int64_t n_vocab) {
    const int given = static_cast<int>(!o.tokens_path.empty()) + static_cast<int>(!o.prompt.empty()) +
                      static_cast<int>(!o.text_path.empty());
    if (given != 1) {
        return invalid_argument("give exactly one of --tokens-file, -p/--prompt and -f/--file (got {})",
                                given);
    }
    std::vector<int32_t> tokens;
    if (!o.tokens_path.empty()) {
        auto text = read_text_file(o.tokens_path);
        if (!text.ok()) return text.error().with_context("--tokens-file");
        H2OKV_ASSIGN_OR_RETURN(tokens, parse_token_ids(*text, o.tokens_path, n_vocab));
    } else {
        H2OKV_ASSIGN_OR_RETURN(auto tok, tokenizer::tokenizer::from_gguf(file));
        std::string text = o.prompt;
        if (!o.text_path.empty()) {
            auto t = read_text_file(o.text_path);
            if (!t.ok()) return t.error().with_context("-f");
            text = std::move(t).value();
        }
        H2OKV_ASSIGN_OR_RETURN(auto ids, tok.encode(text, /*add_special=*/false, /*parse_special=*/false));
        tokens.push_back(tok.bos());
        tokens.insert(tokens.end(), ids.begin(), ids.end());
    }
    if (o.n_tokens > 0) {
        if (static_cast<int64_t>(tokens.size()) < o.n_tokens) {
            return invalid_argument("--max-tokens {} but the input has only {} tokens{}", o.n_tokens, tokens.size(),
                                    o.tokens_path.empty() ? " (BOS included)" : "");
        }
        tokens.resize(static_cast<size_t>(o.n_tokens));
    }
    return tokens;
}

// A .npy (format 1.0) file of float32 [rows, cols] written row block by row block.
class npy_writer {
public:
    static result<npy_writer> create(const std::string& path, int64_t rows, int64_t cols) {
        static_assert(std::endian::native == std::endian::little, "the .npy header says little-endian");
        npy_writer w;
        w.path_ = path;
        w.expected_ = rows * cols;
        w.f_.reset(std::fopen(path.c_str(), "wb"));
        if (!w.f_) return io_error("cannot create '{}': {}", path, std::strerror(errno));
        std::string header =
            fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
        // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64 and
        // ended by a newline, as the format asks.
        const size_t unpadded = 10 + header.size() + 1;
        header.append((64 - unpadded % 64) % 64, ' ');
        header.push_back('\n');
        std::string preamble = "\x93NUMPY";
        preamble.push_back('\x01');
        preamble.push_back('\x00');
        preamble.push_back(static_cast<char>(header.size() & 0xFF));
        preamble.push_back(static_cast<char>(header.size() >> 8));
        H2OKV_RETURN_IF_ERROR(w.write(preamble.data(), preamble.size()));
        H2OKV_RETURN_IF_ERROR(w.write(header.data(), header.size()));
        return w;
    }

    status append(std::span<const float> values) {
        written_ += static_cast<int64_t>(values.size());
        return write(values.data(), values.size_bytes());
    }

    status close() {
        if (written_ != expected_) {
            return internal_error("'{}': wrote {} values, the header promises {}", path_, written_,
                                  expected_);
        }
        if (std::fclose(f_.release()) != 0) return io_error("closing '{}': {}", path_, std::strerror(errno));
        return ok_status();
    }

private:
    status write(const void* data, size_t n) {
        if (std::fwrite(data, 1, n, f_.get()) != n) {
            return io_error("writing '{}' failed: {}", path_, std::strerror(errno));
        }
        return ok_status();
    }

    std::string path_;
    int64_t expected_ = 0, written_ = 0;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f_{nullptr, &std::fclose};
};

// Runs the tokens through the session one chunk per call, so that progress is reported and only one chunk's
// logits are held, appending each chunk's rows to the .npy file at `path`.
status write_logits(engine::session& s, std::span<const int32_t> tokens, const std::string& path) {
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t n_vocab = s.model().params().n_vocab;
    auto out = npy_writer::create(path, n, n_vocab);
    if (!out.ok()) return out.error().with_context("-o");
    auto run = [&]() -> status {
        progress_line progress("logits", "tokens");
        const int64_t chunk = s.params().prefill_chunk;
        std::vector<float> logits;
        for (int64_t off = 0; off < n; off += chunk) {
            const auto len = static_cast<size_t>(std::min(chunk, n - off));
            H2OKV_RETURN_IF_ERROR(
                s.process(tokens.subspan(static_cast<size_t>(off), len), model::logits_mode::all, &logits));
            H2OKV_RETURN_IF_ERROR(out->append(logits));
            progress(off + static_cast<int64_t>(len), n);
        }
        return out->close();
    };
    status st = run();
    if (!st.ok()) std::remove(path.c_str());  // no half-written array left behind
    return st;
}

int run_logits(const logits_options& o) {
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    const int64_t n_vocab = lm->model->params().n_vocab;
    auto tokens = input_tokens(o, *lm->file, n_vocab);
    if (!tokens.ok()) return fail(tokens.error());
    const auto n = static_cast<int64_t>(tokens->size());
    auto sp = o.kv.to_session_params(o.model.n_ctx);
    if (!sp.ok()) return fail(sp.error());
    auto s = engine::session::create(*lm->model, *sp, n);
    if (!s.ok()) return fail(s.error());
    if (auto st = warn_positions(*lm->model, *sp, n); !st.ok()) return fail(st);
    if (auto st = write_logits(**s, *tokens, o.out_path); !st.ok()) return fail(st);
    fmt::print(stderr, "h2okv logits: wrote {} (float32 [{}, {}]; kv policy {}, {} evictions)\n", o.out_path,
               n, n_vocab, (*s)->cache().policy().config().to_string(),
               (*s)->cache().policy().total_evictions());
    return 0;
}

}  // namespace

void add_logits_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<logits_options>();
    CLI::App* cmd = app.add_subcommand(
        "logits",
        "Write the logits of every position of a teacher-forced run over the given tokens as a .npy file, "
        "float32 [n_pos, n_vocab] (row i: the logits after tokens 0..i). Input: a file of whitespace-"
        "separated token ids (used as is), or a text (BOS + its tokens). The KV flags apply as in generate "
        "(default: full cache), so evicting runs can be dumped too");
    o->model.add_to(*cmd);
    cmd->add_option("--tokens-file", o->tokens_path,
                    "File of whitespace-separated token ids, each in [0, n_vocab); no BOS is added");
    cmd->add_option("-p,--prompt", o->prompt, "A text: BOS + its tokens");
    cmd->add_option("-f,--file", o->text_path, "A text file: BOS + its tokens");
    cmd->add_option("--max-tokens", o->n_tokens,
                    "Use the first N tokens of the input (default: all; as perplexity)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("-o,--output", o->out_path, "Output .npy file")->required();
    o->kv.add_to(*cmd);
    cmd->footer(
        "The .npy file is float32, little-endian, C order, with shape (n_pos, n_vocab) in its header "
        "(numpy.load reads it). Progress goes to stderr on runs longer than a second. To compare with "
        "llama.cpp on the same ids, see scripts/llamacpp/compare.sh and docs/PERFORMANCE.md.\n"
        "Examples:\n"
        "  h2okv logits -m model.gguf --tokens-file ids.txt -o h2okv.npy\n"
        "  h2okv logits -m model.gguf -f story.txt --max-tokens 256 --kv-policy h2o --kv-budget 0.2 "
        "--kv-prefill-chunk 1 -o h2o.npy");
    cmd->callback([o, exit_code] { *exit_code = run_logits(*o); });
}

}  // namespace h2okv::cli
