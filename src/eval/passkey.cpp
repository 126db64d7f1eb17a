#include "h2okv/eval/passkey.h"

#include <chrono>
#include <cmath>
#include <random>

#include "h2okv/engine/generate.h"
#include "h2okv/eval/prompt_pieces.h"

namespace h2okv::eval {
namespace {

bool all_digits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
    }
    return true;
}

}  // namespace

std::string passkey_needle(std::string_view key) {
    return fmt::format("The pass key is {0}. Remember it. {0} is the pass key.", key);
}

result<std::vector<int32_t>> passkey_filler(const tokenizer::tokenizer& tok, std::string_view text,
                                            int64_t n_tokens) {
    if (n_tokens < 0) return invalid_argument("passkey filler: {} tokens requested, expected >= 0", n_tokens);
    // Tokenizing a whole book for a few hundred tokens is wasteful: take a prefix, cut at whitespace so no
    // word (or UTF-8 sequence) is split, and grow it until it gives enough tokens.
    size_t bytes = std::max<size_t>(256, static_cast<size_t>(n_tokens) * 8);
    std::vector<int32_t> ids;
    for (;;) {
        size_t cut = std::min(bytes, text.size());
        if (cut < text.size()) {
            const size_t ws = text.find_last_of(" \n\t\r", cut);
            if (ws != std::string_view::npos && ws > 0) cut = ws;
        }
        H2OKV_ASSIGN_OR_RETURN(ids, tok.encode(text.substr(0, cut), /*add_special=*/false, false));
        if (static_cast<int64_t>(ids.size()) > n_tokens || cut == text.size()) break;
        bytes *= 2;
    }
    if (ids.empty()) return invalid_argument("passkey filler: the filler text gives no tokens");
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(n_tokens));
    while (static_cast<int64_t>(out.size()) < n_tokens) {
        const auto take = std::min<size_t>(ids.size(), static_cast<size_t>(n_tokens) - out.size());
        out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take));
    }
    return out;
}

result<passkey_prompt> build_passkey_prompt(const tokenizer::tokenizer& tok, std::span<const int32_t> filler,
                                            int64_t length, double depth, std::string_view key) {
    if (!all_digits(key)) return invalid_argument("passkey: key '{}' must be ASCII digits", key);
    if (!(depth >= 0.0 && depth <= 1.0))
        return invalid_argument("passkey: depth {} must be in [0, 1]", depth);
    H2OKV_ASSIGN_OR_RETURN(auto needle, encode_piece(tok, passkey_needle(key)));
    H2OKV_ASSIGN_OR_RETURN(auto question, encode_piece(tok, passkey_question));
    const auto fixed = static_cast<int64_t>(1 + needle.size() + question.size());
    if (length < fixed) {
        return invalid_argument(
            "passkey: length {} is too short: BOS + the needle ({} tokens) + the question ({} tokens) take "
            "{}",
            length, needle.size(), question.size(), fixed);
    }
    const int64_t n_filler = length - fixed;
    if (static_cast<int64_t>(filler.size()) < n_filler) {
        return invalid_argument("passkey: {} filler tokens given, {} needed for length {}", filler.size(),
                                n_filler, length);
    }
    const auto before = static_cast<int64_t>(std::llround(depth * static_cast<double>(n_filler)));
    passkey_prompt p;
    p.tokens.reserve(static_cast<size_t>(length));
    p.tokens.push_back(tok.bos());
    p.tokens.insert(p.tokens.end(), filler.begin(), filler.begin() + before);
    p.needle_begin = static_cast<int64_t>(p.tokens.size());
    p.tokens.insert(p.tokens.end(), needle.begin(), needle.end());
    p.needle_end = static_cast<int64_t>(p.tokens.size());
    p.tokens.insert(p.tokens.end(), filler.begin() + before, filler.begin() + n_filler);
    p.question_begin = static_cast<int64_t>(p.tokens.size());
    p.tokens.insert(p.tokens.end(), question.begin(), question.end());
    p.filler_tokens = n_filler;
    return p;
}

std::string passkey_answer(std::string_view generated) {
    size_t i = 0;
    while (i < generated.size() &&
           (generated[i] == ' ' || generated[i] == '\t' || generated[i] == '\n' || generated[i] == '\r')) {
        ++i;
    }
    size_t j = i;
    while (j < generated.size() && generated[j] >= '0' && generated[j] <= '9') ++j;
    return std::string(generated.substr(i, j - i));
}

std::vector<std::string> passkey_keys(uint64_t seed, int trials) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> dist(10000, 99999);
    std::vector<std::string> keys;
    for (int i = 0; i < trials; ++i) keys.push_back(std::to_string(dist(rng)));
    return keys;
}

status passkey_params::validate() const {
    if (length < 2) return invalid_argument("passkey: --length {} must be >= 2", length);
    if (depths.empty()) return invalid_argument("passkey: no depth given (expected values in [0, 1])");
    for (double d : depths) {
        if (!(d >= 0.0 && d <= 1.0)) return invalid_argument("passkey: depth {} must be in [0, 1]", d);
    }
    if (trials < 1) return invalid_argument("passkey: --trials {} must be >= 1", trials);
    if (answer_tokens < 1) return invalid_argument("passkey: answer tokens {} must be >= 1", answer_tokens);
    return ok_status();
}

result<passkey_result> passkey(model::model& m, const tokenizer::tokenizer& tok,
                               std::span<const int32_t> filler, const passkey_params& p,
                               const engine::session_params& sp, const passkey_progress_fn& progress) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    const auto keys = passkey_keys(p.seed, p.trials);
    engine::generation_params gp;
    gp.n_predict = p.answer_tokens;
    passkey_result r;
    r.run_length = p.length + p.answer_tokens;
    const auto start = std::chrono::steady_clock::now();
    const auto total = static_cast<int64_t>(p.depths.size()) * p.trials;
    for (double depth : p.depths) {
        passkey_depth d;
        d.depth = depth;
        for (int t = 0; t < p.trials; ++t) {
            const std::string& key = keys[static_cast<size_t>(t)];
            H2OKV_ASSIGN_OR_RETURN(auto prompt, build_passkey_prompt(tok, filler, p.length, depth, key));
            H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, sp, r.run_length));
            H2OKV_ASSIGN_OR_RETURN(
                auto g, engine::generate(
                            *s, prompt.tokens, gp, [&tok](int32_t id) { return tok.is_eog(id); }, nullptr));
            passkey_trial tr;
            tr.depth = depth;
            tr.trial = t;
            tr.key = key;
            tr.generated = tok.decode(g.tokens);
            tr.answer = passkey_answer(tr.generated);
            tr.success = tr.answer == key;
            tr.needle_begin = prompt.needle_begin;
            r.evictions += s->cache().policy().total_evictions();
            r.config = s->cache().policy().config();
            d.n_trials += 1;
            d.n_correct += tr.success ? 1 : 0;
            r.trials.push_back(std::move(tr));
            if (progress) progress(static_cast<int64_t>(r.trials.size()), total);
        }
        d.accuracy = static_cast<double>(d.n_correct) / static_cast<double>(d.n_trials);
        r.per_depth.push_back(d);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

}  // namespace h2okv::eval
