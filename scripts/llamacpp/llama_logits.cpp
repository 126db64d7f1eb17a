// llama_logits: llama.cpp's logits for every position of a token-id file, written as the same .npy array
// `h2okv logits --tokens-file` writes (float32 [n_pos, n_vocab], row i: the logits after tokens 0..i), so
// that scripts/compare_logits.py can compare the two engines on identical inputs.
//
// Part of h2okv (MIT licence, see LICENSE); it is not part of llama.cpp and contains none of its code. It is
// compiled by scripts/llamacpp/compare.sh against a llama.cpp build the user already has (libllama and its
// headers); h2okv neither ships nor builds llama.cpp. It uses the llama.h API of 2025-2026 snapshots
// (llama_model_load_from_file, llama_init_from_model, llama_vocab_n_tokens, flash_attn_type).
//
// The run: one sequence, a context of exactly the file's token count, every position in one batch with its
// logits requested, no sampling. The KV cache type is llama.cpp's default (F16) unless --kv-type says
// otherwise.
//
//   llama_logits -m model.gguf --tokens-file ids.txt -o llama.npy [-t 2] [--kv-type f16|f32]
//                [--flash-attn auto|on|off] [-v]
#include <ggml.h>
#include <llama.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct options {
    std::string model_path;
    std::string tokens_path;
    std::string out_path;
    int threads = 2;
    ggml_type kv_type = GGML_TYPE_F16;
    llama_flash_attn_type flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
    bool verbose = false;
};

void usage(std::FILE* to) {
    std::fprintf(
        to,
        "usage: llama_logits -m MODEL --tokens-file FILE -o OUT.npy [-t THREADS] [--kv-type f16|f32]\n"
        "                    [--flash-attn auto|on|off] [-v]\n"
        "Writes llama.cpp's logits of every position of a teacher-forced run over the token ids in\n"
        "FILE (whitespace-separated) as float32 [n_pos, n_vocab] to OUT.npy.\n");
}

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "llama_logits: error: %s\n", message.c_str());
    std::exit(1);
}

options parse_args(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "-m" || a == "--model") {
            o.model_path = value();
        } else if (a == "--tokens-file") {
            o.tokens_path = value();
        } else if (a == "-o" || a == "--output") {
            o.out_path = value();
        } else if (a == "-t" || a == "--threads") {
            const std::string v = value();
            char* end = nullptr;
            const long t = std::strtol(v.c_str(), &end, 10);
            if (end == v.c_str() || *end != '\0' || t < 1 || t > 1024) {
                die("-t '" + v + "': expected a thread count in [1, 1024]");
            }
            o.threads = static_cast<int>(t);
        } else if (a == "--kv-type") {
            const std::string v = value();
            if (v == "f16") {
                o.kv_type = GGML_TYPE_F16;
            } else if (v == "f32") {
                o.kv_type = GGML_TYPE_F32;
            } else {
                die("--kv-type '" + v + "': expected f16 or f32");
            }
        } else if (a == "--flash-attn") {
            const std::string v = value();
            if (v == "auto") {
                o.flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
            } else if (v == "on") {
                o.flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            } else if (v == "off") {
                o.flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            } else {
                die("--flash-attn '" + v + "': expected auto, on or off");
            }
        } else if (a == "-v" || a == "--verbose") {
            o.verbose = true;
        } else if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        } else {
            usage(stderr);
            die("unknown argument '" + a + "'");
        }
    }
    if (o.model_path.empty() || o.tokens_path.empty() || o.out_path.empty()) {
        usage(stderr);
        die("-m, --tokens-file and -o are required");
    }
    return o;
}

// Whitespace-separated decimal ids, each in [0, n_vocab).
std::vector<llama_token> read_tokens(const std::string& path, int32_t n_vocab) {
    std::ifstream in(path);
    if (!in) die("cannot open token file '" + path + "': " + std::strerror(errno));
    std::vector<llama_token> ids;
    std::string word;
    while (in >> word) {
        char* end = nullptr;
        errno = 0;
        const long long id = std::strtoll(word.c_str(), &end, 10);
        if (end == word.c_str() || *end != '\0' || errno == ERANGE) {
            die("'" + path + "': '" + word + "' (token " + std::to_string(ids.size()) +
                ") is not a decimal token id");
        }
        if (id < 0 || id >= n_vocab) {
            die("'" + path + "': token " + std::to_string(ids.size()) + " is " + word +
                ", outside the model's vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
        ids.push_back(static_cast<llama_token>(id));
    }
    if (ids.empty()) die("'" + path + "' holds no token ids");
    return ids;
}

// NumPy .npy format 1.0: magic, version, little-endian header length, a Python-literal header padded with
// spaces to a multiple of 64 bytes and ended by a newline, then the raw little-endian data.
void write_npy_header(std::FILE* f, int64_t rows, int64_t cols) {
    std::ostringstream h;
    h << "{'descr': '<f4', 'fortran_order': False, 'shape': (" << rows << ", " << cols << "), }";
    std::string header = h.str();
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header.push_back('\n');
    unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    preamble[8] = static_cast<unsigned char>(header.size() & 0xFF);
    preamble[9] = static_cast<unsigned char>(header.size() >> 8);
    if (std::fwrite(preamble, 1, sizeof preamble, f) != sizeof preamble ||
        std::fwrite(header.data(), 1, header.size(), f) != header.size()) {
        die(std::string("writing the .npy header failed: ") + std::strerror(errno));
    }
}

void quiet_log(ggml_log_level level, const char* text, void* verbose) {
    if (*static_cast<bool*>(verbose) || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
    options o = parse_args(argc, argv);
    llama_log_set(quiet_log, &o.verbose);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    std::unique_ptr<llama_model, void (*)(llama_model*)> model(
        llama_model_load_from_file(o.model_path.c_str(), mp), llama_model_free);
    if (!model) die("llama.cpp could not load '" + o.model_path + "' (run with -v for its log)");
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model.get()));
    const std::vector<llama_token> tokens = read_tokens(o.tokens_path, n_vocab);
    const auto n = static_cast<int32_t>(tokens.size());

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n);
    cp.n_batch = static_cast<uint32_t>(n);  // one llama_decode call for the whole sequence
    cp.n_seq_max = 1;
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    cp.type_k = o.kv_type;
    cp.type_v = o.kv_type;
    cp.flash_attn_type = o.flash_attn;
    cp.no_perf = true;
    std::unique_ptr<llama_context, void (*)(llama_context*)> ctx(llama_init_from_model(model.get(), cp),
                                                                 llama_free);
    if (!ctx) die("llama.cpp could not create a context of " + std::to_string(n) + " tokens (run with -v)");

    llama_batch batch = llama_batch_init(n, /*embd=*/0, /*n_seq_max=*/1);
    for (int32_t i = 0; i < n; ++i) {
        batch.token[i] = tokens[static_cast<size_t>(i)];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    const int32_t rc = llama_decode(ctx.get(), batch);
    llama_batch_free(batch);
    if (rc != 0) die("llama_decode returned " + std::to_string(rc) + " for " + std::to_string(n) + " tokens");

    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(o.out_path.c_str(), "wb"), std::fclose);
    if (!f) die("cannot create '" + o.out_path + "': " + std::strerror(errno));
    write_npy_header(f.get(), n, n_vocab);
    for (int32_t i = 0; i < n; ++i) {
        const float* row = llama_get_logits_ith(ctx.get(), i);
        if (row == nullptr) die("llama.cpp returned no logits for position " + std::to_string(i));
        if (std::fwrite(row, sizeof(float), static_cast<size_t>(n_vocab), f.get()) !=
            static_cast<size_t>(n_vocab)) {
            die("writing '" + o.out_path + "' failed: " + std::strerror(errno));
        }
    }
    if (std::fclose(f.release()) != 0) die("closing '" + o.out_path + "': " + std::strerror(errno));
    std::fprintf(stderr, "llama_logits: wrote %s (float32 [%d, %d]; KV %s, %d threads)\n", o.out_path.c_str(),
                 n, n_vocab, o.kv_type == GGML_TYPE_F16 ? "f16" : "f32", o.threads);
    ctx.reset();
    model.reset();
    llama_backend_free();
    return 0;
}
