#include "h2okv/eval/ruler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>

#include "h2okv/engine/generate.h"
#include "h2okv/eval/passkey.h"
#include "h2okv/eval/prompt_pieces.h"

namespace h2okv::eval {
namespace {

// Keys and word values are adjective-noun pairs from these lists (RULER draws them from wonderwords).
constexpr std::array<std::string_view, 32> adjectives = {
    "quiet", "amber", "brave",  "calm",   "dusty",  "eager",  "faint", "gentle", "hollow", "icy",   "jolly",
    "keen",  "lucky", "mellow", "narrow", "olive",  "proud",  "rapid", "silent", "tidy",   "vivid", "wary",
    "young", "zesty", "bitter", "crisp",  "frosty", "golden", "hasty", "lively", "misty",  "rusty"};
constexpr std::array<std::string_view, 32> nouns = {
    "harbor", "lantern", "meadow", "anchor", "basket", "candle",  "desert", "falcon",
    "garden", "hammer",  "island", "jacket", "kettle", "ladder",  "mirror", "needle",
    "orchid", "pepper",  "quarry", "ribbon", "saddle", "tunnel",  "valley", "wagon",
    "yarrow", "zipper",  "bridge", "cellar", "forest", "glacier", "pillow", "violin"};

constexpr int n_needles = 4;  // multikey, multivalue, multiquery
constexpr int vt_hops = 4;
constexpr int cwe_common = 5;
constexpr int cwe_common_count = 6;
constexpr int fwe_top = 3;
constexpr int max_draws = 16;

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return r;
}

int count_occurrences(std::string_view haystack, std::string_view needle) {
    if (needle.empty()) return 0;
    int n = 0;
    for (size_t i = haystack.find(needle); i != std::string_view::npos; i = haystack.find(needle, i + 1)) ++n;
    return n;
}

std::string word_pair(ruler_rng& rng) {
    return fmt::format("{}-{}", adjectives[rng.below(adjectives.size())], nouns[rng.below(nouns.size())]);
}

std::string uuid4(ruler_rng& rng) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < 32; ++i) {
        if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
        uint32_t v = rng.below(16);
        if (i == 12) v = 4;                 // version 4
        if (i == 16) v = 8 + rng.below(4);  // variant 10xx
        s += hex[v];
    }
    return s;
}

// `n` distinct values drawn by `draw`, none equal to any of `avoid`.
std::vector<std::string> distinct(int n, const std::function<std::string()>& draw,
                                  const std::vector<std::string>& avoid = {}) {
    std::vector<std::string> out;
    while (static_cast<int>(out.size()) < n) {
        std::string v = draw();
        if (std::find(out.begin(), out.end(), v) == out.end() &&
            std::find(avoid.begin(), avoid.end(), v) == avoid.end()) {
            out.push_back(std::move(v));
        }
    }
    return out;
}

std::string join_keys(const std::vector<std::string>& keys) {
    if (keys.size() == 1) return keys[0];
    std::string s;
    for (size_t i = 0; i < keys.size(); ++i) {
        if (i > 0) s += i + 1 == keys.size() ? ", and " : ", ";
        s += keys[i];
    }
    return s;
}

// Whether token i of `t` starts a sentence: the token before it ends with . ! ? or a newline (a closing quote
// after them included) and token i starts a word.
bool sentence_start(const tokenizer::tokenizer& tok, std::span<const int32_t> t, int64_t i) {
    if (i <= 0 || i >= static_cast<int64_t>(t.size())) return false;
    std::string prev = tok.piece(t[static_cast<size_t>(i - 1)]);
    const std::string cur = tok.piece(t[static_cast<size_t>(i)]);
    if (prev.empty() || cur.empty()) return false;
    if (prev.back() == '\n') return true;
    if (prev.back() == '"' || prev.back() == '\'') prev.pop_back();
    if (prev.empty()) return false;
    const char e = prev.back();
    return (e == '.' || e == '!' || e == '?') && cur.front() == ' ';
}

// The sentence start of `part` nearest to offset `at` (0 and the end count as starts; ties: the earlier),
// within 128 tokens; `at` itself when none is that near.
int64_t nearest_sentence_start(const tokenizer::tokenizer& tok, std::span<const int32_t> part, int64_t at) {
    const auto n = static_cast<int64_t>(part.size());
    auto is_start = [&](int64_t i) { return i == 0 || i == n || sentence_start(tok, part, i); };
    for (int64_t d = 0; d <= 128; ++d) {
        if (at - d >= 0 && is_start(at - d)) return at - d;
        if (at + d <= n && is_start(at + d)) return at + d;
    }
    return at;
}

struct needle_spec {
    std::string text;
    double depth;
};

// BOS, instruction, the haystack part with the needles at their depths, question: exactly `length` tokens.
result<ruler_prompt> haystack_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay,
                                     int64_t length, std::string_view instruction,
                                     const std::vector<needle_spec>& needles, std::string_view question,
                                     ruler_rng& rng) {
    std::vector<int32_t> instr;
    if (!instruction.empty()) {
        H2OKV_ASSIGN_OR_RETURN(instr, encode_piece(tok, instruction));
    }
    H2OKV_ASSIGN_OR_RETURN(auto q, encode_piece(tok, question));
    std::vector<std::vector<int32_t>> pieces;
    int64_t fixed = 1 + static_cast<int64_t>(instr.size() + q.size());
    for (const auto& n : needles) {
        H2OKV_ASSIGN_OR_RETURN(auto p, encode_piece(tok, n.text));
        fixed += static_cast<int64_t>(p.size());
        pieces.push_back(std::move(p));
    }
    if (length < fixed) {
        return invalid_argument(
            "ruler: length {} is too short: BOS, the instruction, {} needle(s) and the question take {} "
            "tokens",
            length, needles.size(), fixed);
    }
    const int64_t n_filler = length - fixed;
    const auto pool = static_cast<int64_t>(hay.tokens.size());
    if (pool < n_filler) {
        return invalid_argument("ruler: {} haystack tokens given, {} needed for length {}", pool, n_filler,
                                length);
    }
    // The haystack part starts at a sentence when one starts within reach of the drawn offset.
    int64_t offset = rng.below(static_cast<uint32_t>(pool - n_filler + 1));
    for (int64_t o = offset; o <= pool - n_filler && o < offset + 256; ++o) {
        if (o == 0 || sentence_start(tok, hay.tokens, o)) {
            offset = o;
            break;
        }
    }
    const std::span<const int32_t> part(hay.tokens.data() + offset, static_cast<size_t>(n_filler));
    std::vector<int64_t> at(needles.size());
    std::vector<size_t> order(needles.size());
    for (size_t i = 0; i < needles.size(); ++i) {
        at[i] =
            nearest_sentence_start(tok, part, std::llround(needles[i].depth * static_cast<double>(n_filler)));
        order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return at[a] < at[b]; });
    ruler_prompt p;
    p.tokens.reserve(static_cast<size_t>(length));
    p.tokens.push_back(tok.bos());
    p.tokens.insert(p.tokens.end(), instr.begin(), instr.end());
    p.needle_begin.assign(needles.size(), 0);
    const auto filler = part.begin();
    int64_t used = 0;
    for (size_t i : order) {
        p.tokens.insert(p.tokens.end(), filler + used, filler + at[i]);
        used = at[i];
        p.needle_begin[i] = static_cast<int64_t>(p.tokens.size());
        p.tokens.insert(p.tokens.end(), pieces[i].begin(), pieces[i].end());
    }
    p.tokens.insert(p.tokens.end(), filler + used, filler + n_filler);
    p.question_begin = static_cast<int64_t>(p.tokens.size());
    p.tokens.insert(p.tokens.end(), q.begin(), q.end());
    p.question = std::string(question);
    return p;
}

// The needle-in-a-haystack family. kind: "numbers", "words" or "uuids".
result<ruler_prompt> niah_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length,
                                 double depth, ruler_rng& rng, std::string_view kind, int n_keys,
                                 int n_values, int n_asked) {
    const std::function<std::string()> value = [&]() -> std::string {
        if (kind == "words") return word_pair(rng);
        if (kind == "uuids") return uuid4(rng);
        return rng.digits(7);
    };
    const auto keys = distinct(n_keys, [&] { return word_pair(rng); });
    const auto values = distinct(n_keys * n_values, value, keys);
    std::vector<needle_spec> needles;
    std::vector<std::string> expected;
    for (int k = 0; k < n_keys; ++k) {
        for (int v = 0; v < n_values; ++v) {
            const std::string& val = values[static_cast<size_t>(k * n_values + v)];
            const double d = needles.empty() ? depth : rng.unit();
            needles.push_back(
                {fmt::format("One of the special magic {} for {} is: {}.", kind, keys[k], val), d});
            if (k < n_asked) expected.push_back(val);
        }
    }
    const std::vector<std::string> asked(keys.begin(), keys.begin() + n_asked);
    const std::string query = join_keys(asked);
    const std::string instruction = fmt::format(
        "Some special magic {0} are hidden within the following text. Make sure to memorize it. I will quiz "
        "you "
        "about the {0} afterwards.",
        kind);
    const std::string question = fmt::format(
        "What are all the special magic {0} for {1} mentioned in the provided text? The special magic {0} "
        "for {1} "
        "mentioned in the provided text are",
        kind, query);
    H2OKV_ASSIGN_OR_RETURN(auto p, haystack_prompt(tok, hay, length, instruction, needles, question, rng));
    p.expected = expected;
    return p;
}

result<ruler_prompt> passkey_task_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay,
                                         int64_t length, double depth, ruler_rng& rng) {
    const std::string key = rng.digits(5);
    H2OKV_ASSIGN_OR_RETURN(
        auto p, haystack_prompt(tok, hay, length, "", {{passkey_needle(key), depth}}, passkey_question, rng));
    p.expected = {key};
    return p;
}

std::string var_name(ruler_rng& rng) {
    std::string s;
    for (int i = 0; i < 5; ++i) s += static_cast<char>('A' + rng.below(26));
    return s;
}

result<ruler_prompt> vt_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length,
                               ruler_rng& rng) {
    const std::string value = rng.digits(5);
    const auto vars = distinct(vt_hops + 1, [&] { return var_name(rng); });
    std::vector<double> depths(vars.size());
    for (double& d : depths) d = rng.unit();
    std::sort(depths.begin(), depths.end());
    std::vector<needle_spec> needles;
    needles.push_back({fmt::format("VAR {} = {}.", vars[0], value), depths[0]});
    for (size_t i = 1; i < vars.size(); ++i) {
        needles.push_back({fmt::format("VAR {} = {}.", vars[i], vars[i - 1]), depths[i]});
    }
    const std::string question = fmt::format(
        "Question: Find all variables that are assigned the value {0} in the text above. Answer: According "
        "to "
        "the chain(s) of variable assignment in the text above, {1} variables are assigned the value {0}, "
        "they "
        "are:",
        value, vars.size());
    H2OKV_ASSIGN_OR_RETURN(
        auto p, haystack_prompt(
                    tok, hay, length,
                    "Memorize and track the chain(s) of variable assignment hidden in the following text.",
                    needles, question, rng));
    p.expected = vars;
    return p;
}

// BOS, instruction, the items (whole words while they fit, shuffled), question.
result<ruler_prompt> list_prompt(const tokenizer::tokenizer& tok, int64_t length,
                                 std::string_view instruction, std::vector<std::vector<int32_t>> items,
                                 std::string_view question, ruler_rng& rng) {
    H2OKV_ASSIGN_OR_RETURN(auto instr, encode_piece(tok, instruction));
    H2OKV_ASSIGN_OR_RETURN(auto q, encode_piece(tok, question));
    rng.shuffle(items);
    ruler_prompt p;
    p.tokens.push_back(tok.bos());
    p.tokens.insert(p.tokens.end(), instr.begin(), instr.end());
    for (const auto& it : items) p.tokens.insert(p.tokens.end(), it.begin(), it.end());
    p.question_begin = static_cast<int64_t>(p.tokens.size());
    p.tokens.insert(p.tokens.end(), q.begin(), q.end());
    p.question = std::string(question);
    if (static_cast<int64_t>(p.tokens.size()) > length) {
        return invalid_argument("ruler: length {} is too short for the list task's {} tokens", length,
                                p.tokens.size());
    }
    return p;
}

result<ruler_prompt> cwe_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length,
                                ruler_rng& rng) {
    if (hay.words.size() < static_cast<size_t>(cwe_common + 1)) {
        return invalid_argument("ruler: cwe needs at least {} distinct words in the haystack, it has {}",
                                cwe_common + 1, hay.words.size());
    }
    static constexpr std::string_view instruction =
        "Below is a list of words. In these words, some appear more often than others. Memorize the ones "
        "that "
        "appear most often.";
    const std::string question = fmt::format(
        "Question: What are the {0} most common words in the above list? Answer: The top {0} words that "
        "appear "
        "most often in the list are:",
        cwe_common);
    H2OKV_ASSIGN_OR_RETURN(auto instr, encode_piece(tok, instruction));
    H2OKV_ASSIGN_OR_RETURN(auto q, encode_piece(tok, question));
    const int64_t room = length - 1 - static_cast<int64_t>(instr.size() + q.size());
    // A partial Fisher-Yates over the vocabulary's indices: the first draws are the common words, then the
    // uncommon ones while they fit (a word too long for the rest is skipped; 64 such in a row end the list).
    std::vector<uint32_t> idx(hay.words.size());
    std::iota(idx.begin(), idx.end(), 0u);
    std::vector<std::string> common;
    std::vector<std::vector<int32_t>> items;
    int64_t used = 0;
    int misses = 0;
    for (size_t i = 0; i < idx.size() && misses < 64; ++i) {
        std::swap(idx[i], idx[i + rng.below(static_cast<uint32_t>(idx.size() - i))]);
        const std::string& w = hay.words[idx[i]];
        H2OKV_ASSIGN_OR_RETURN(auto t, encode_piece(tok, w + ","));
        const bool is_common = common.size() < static_cast<size_t>(cwe_common);
        const int copies = is_common ? cwe_common_count : 1;
        const int64_t need = copies * static_cast<int64_t>(t.size());
        if (used + need > room) {
            if (is_common) {
                return invalid_argument("ruler: length {} is too short for cwe's {} x {} common words",
                                        length, cwe_common, cwe_common_count);
            }
            ++misses;
            continue;
        }
        misses = 0;
        used += need;
        if (is_common) common.push_back(w);
        for (int c = 0; c < copies; ++c) items.push_back(t);
    }
    H2OKV_ASSIGN_OR_RETURN(auto p, list_prompt(tok, length, instruction, std::move(items), question, rng));
    p.expected = common;
    return p;
}

std::string coded_word(ruler_rng& rng) {
    static constexpr std::string_view consonants = "bcdfghjklmnprstvz", vowels = "aeiou";
    std::string s;
    for (int i = 0; i < 2; ++i) {
        s += consonants[rng.below(consonants.size())];
        s += vowels[rng.below(vowels.size())];
    }
    return s;
}

result<ruler_prompt> fwe_prompt(const tokenizer::tokenizer& tok, int64_t length, ruler_rng& rng) {
    static constexpr std::string_view instruction =
        "Read the following coded text and track the frequency of each coded word. Find the three most "
        "frequently appeared coded words.";
    static constexpr std::string_view question =
        "Question: What are the three most frequently appeared words in the above coded text? Answer: "
        "According "
        "to the coded text above, the three most frequently appeared words are:";
    H2OKV_ASSIGN_OR_RETURN(auto instr, encode_piece(tok, instruction));
    H2OKV_ASSIGN_OR_RETURN(auto q, encode_piece(tok, question));
    const int64_t room = length - 1 - static_cast<int64_t>(instr.size() + q.size());
    // K words, rank r occurring round(K / r^2) times (at least once); the largest K that fits. K >= 14 keeps
    // the third rank above the fourth.
    std::vector<std::string> words;
    std::vector<std::vector<int32_t>> word_tokens;
    auto count = [](int64_t k, int64_t r) {
        return std::max<int64_t>(1, std::llround(static_cast<double>(k) / static_cast<double>(r * r)));
    };
    int64_t best = 0;
    for (int64_t k = 1;; ++k) {
        while (static_cast<int64_t>(words.size()) < k) {
            std::string w = coded_word(rng);
            if (std::find(words.begin(), words.end(), w) != words.end()) continue;
            H2OKV_ASSIGN_OR_RETURN(auto t, encode_piece(tok, w));
            words.push_back(std::move(w));
            word_tokens.push_back(std::move(t));
        }
        int64_t need = 0;
        for (int64_t r = 1; r <= k; ++r)
            need += count(k, r) * static_cast<int64_t>(word_tokens[r - 1].size());
        if (need > room) break;
        best = k;
    }
    if (best < 14) {
        return invalid_argument(
            "ruler: length {} is too short for fwe (room for K = {} coded words, 14 needed)", length, best);
    }
    std::vector<std::vector<int32_t>> items;
    for (int64_t r = 1; r <= best; ++r) {
        for (int64_t c = 0; c < count(best, r); ++c) items.push_back(word_tokens[r - 1]);
    }
    H2OKV_ASSIGN_OR_RETURN(auto p, list_prompt(tok, length, instruction, std::move(items), question, rng));
    p.expected.assign(words.begin(), words.begin() + fwe_top);
    return p;
}

// The prompt builders' common signature; depth is 0 for tasks that do not use it.
using build_fn = result<ruler_prompt> (*)(const tokenizer::tokenizer&, const ruler_haystack&, int64_t length,
                                          double depth, ruler_rng&);
// How often expected answer i of n must occur in the prompt's text (case-insensitively) for the prompt to be
// kept; -1: not checked.
using occurrences_fn = int (*)(size_t i, size_t n);

int once(size_t, size_t) {
    return 1;
}

struct task_entry {
    ruler_task_info info;
    build_fn build;
    occurrences_fn occurrences;
};

const std::array<task_entry, 10> task_table = {{
    {{"passkey", "the h2okv passkey format: a 5-digit key stated twice in one needle", true, false, 8},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) { return passkey_task_prompt(tok, hay, length, depth, rng); },
     [](size_t, size_t) { return 2; }},
    {{"niah_single", "one needle, a 7-digit number for a key", true, true, 12},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) { return niah_prompt(tok, hay, length, depth, rng, "numbers", 1, 1, 1); },
     once},
    {{"niah_single_word", "one needle, an adjective-noun word for a key", true, true, 12},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) { return niah_prompt(tok, hay, length, depth, rng, "words", 1, 1, 1); },
     once},
    {{"niah_single_uuid", "one needle, a UUID for a key", true, true, 48},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) { return niah_prompt(tok, hay, length, depth, rng, "uuids", 1, 1, 1); },
     once},
    {{"niah_multikey", "the target needle among 3 distractor needles with other keys", true, true, 12},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) { return niah_prompt(tok, hay, length, depth, rng, "numbers", n_needles, 1, 1); },
     once},
    {{"niah_multivalue", "4 values of one key; all must be recalled", true, true, 48},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) { return niah_prompt(tok, hay, length, depth, rng, "numbers", 1, n_needles, 1); },
     once},
    {{"niah_multiquery", "4 keys asked in one question; all values must be recalled", true, true, 48},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double depth,
        ruler_rng& rng) {
         return niah_prompt(tok, hay, length, depth, rng, "numbers", n_needles, 1, n_needles);
     },
     once},
    {{"vt", "variable tracking: a chain of 5 assignments; name the variables that hold the value", false,
      false, 30},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double, ruler_rng& rng) {
         return vt_prompt(tok, hay, length, rng);
     },
     // Every variable but the last is named where it is assigned and where the next one copies it.
     [](size_t i, size_t n) { return i + 1 == n ? 1 : 2; }},
    {{"cwe", "common-words extraction: name the 5 words that occur 6 times in a list", false, false, 40},
     [](const tokenizer::tokenizer& tok, const ruler_haystack& hay, int64_t length, double, ruler_rng& rng) {
         return cwe_prompt(tok, hay, length, rng);
     },
     [](size_t, size_t) { return -1; }},
    {{"fwe", "frequent-words extraction: name the 3 most frequent Zipf-distributed coded words", false, false,
      30},
     [](const tokenizer::tokenizer& tok, const ruler_haystack&, int64_t length, double, ruler_rng& rng) {
         return fwe_prompt(tok, length, rng);
     },
     [](size_t, size_t) { return -1; }},
}};

const task_entry* find_entry(std::string_view name) {
    for (const auto& t : task_table) {
        if (t.info.name == name) return &t;
    }
    return nullptr;
}

}  // namespace

uint32_t ruler_rng::below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<uint64_t>(gen_()) * n) >> 32);
}

double ruler_rng::unit() {
    return static_cast<double>(gen_()) / 4294967296.0;
}

std::string ruler_rng::digits(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>('0' + (i == 0 ? 1 + below(9) : below(10)));
    return s;
}

std::string_view ruler_protocol_name(ruler_protocol p) {
    return p == ruler_protocol::agnostic ? "agnostic" : "aware";
}

result<ruler_protocol> parse_ruler_protocol(std::string_view name) {
    if (name == "agnostic") return ruler_protocol::agnostic;
    if (name == "aware") return ruler_protocol::aware;
    return invalid_argument("ruler: unknown protocol '{}', expected agnostic or aware", name);
}

std::span<const ruler_task_info> ruler_tasks() {
    static const auto infos = [] {
        std::array<ruler_task_info, task_table.size()> a;
        for (size_t i = 0; i < a.size(); ++i) a[i] = task_table[i].info;
        return a;
    }();
    return infos;
}

result<ruler_task_info> find_ruler_task(std::string_view name) {
    if (const auto* e = find_entry(name)) return e->info;
    std::string known;
    for (const auto& t : task_table) known += (known.empty() ? "" : ", ") + std::string(t.info.name);
    return invalid_argument("ruler: unknown task '{}', expected one of {} or all", name, known);
}

result<ruler_haystack> ruler_haystack::make(const tokenizer::tokenizer& tok, std::string_view text,
                                            int64_t n_tokens) {
    ruler_haystack h;
    H2OKV_ASSIGN_OR_RETURN(h.tokens, passkey_filler(tok, text, n_tokens));
    std::set<std::string> words;
    std::string w;
    bool ascii = true;
    auto flush = [&] {
        if (ascii && w.size() >= 4 && w.size() <= 10) words.insert(w);
        w.clear();
        ascii = true;
    };
    for (char c : text) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            w += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        } else if (static_cast<unsigned char>(c) >= 0x80) {
            ascii = false;
            w += c;
        } else {
            flush();
        }
    }
    flush();
    h.words.assign(words.begin(), words.end());
    return h;
}

uint64_t ruler_trial_seed(uint64_t seed, std::string_view task, int64_t length, int trial) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the task's name
    for (char c : task) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    uint64_t x = splitmix64(seed);
    x = splitmix64(x ^ h);
    x = splitmix64(x ^ static_cast<uint64_t>(length));
    return splitmix64(x ^ static_cast<uint64_t>(trial));
}

result<ruler_prompt> build_ruler_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay,
                                        std::string_view task, int64_t length, double depth,
                                        uint64_t trial_seed) {
    H2OKV_ASSIGN_OR_RETURN(auto info, find_ruler_task(task));
    const task_entry& entry = *find_entry(task);
    if (info.uses_depth && !(depth >= 0.0 && depth <= 1.0)) {
        return invalid_argument("ruler: depth {} must be in [0, 1]", depth);
    }
    ruler_rng rng(trial_seed);
    for (int attempt = 0; attempt < max_draws; ++attempt) {
        H2OKV_ASSIGN_OR_RETURN(auto p, entry.build(tok, hay, length, info.uses_depth ? depth : 0.0, rng));
        const std::string text = lower(tok.decode(p.tokens));
        bool ok = true;
        for (size_t i = 0; i < p.expected.size() && ok; ++i) {
            const int need = entry.occurrences(i, p.expected.size());
            ok = need < 0 || count_occurrences(text, lower(p.expected[i])) == need;
        }
        if (ok) return p;
    }
    return invalid_argument(
        "ruler: {} at length {}: no prompt in {} draws whose answers occur only where placed", task, length,
        max_draws);
}

double ruler_score(std::string_view output, std::span<const std::string> expected) {
    if (expected.empty()) return 0.0;
    const std::string out = lower(output);
    int found = 0;
    for (const auto& e : expected) found += out.find(lower(e)) != std::string::npos ? 1 : 0;
    return static_cast<double>(found) / static_cast<double>(expected.size());
}

status ruler_params::validate() const {
    if (tasks.empty()) return invalid_argument("ruler: no task given");
    for (const auto& t : tasks) H2OKV_RETURN_IF_ERROR(find_ruler_task(t));
    if (lengths.empty()) return invalid_argument("ruler: no length given");
    for (int64_t l : lengths) {
        if (l < 16) return invalid_argument("ruler: length {} must be >= 16", l);
    }
    if (depths.empty()) return invalid_argument("ruler: no depth given (expected values in [0, 1])");
    for (double d : depths) {
        if (!(d >= 0.0 && d <= 1.0)) return invalid_argument("ruler: depth {} must be in [0, 1]", d);
    }
    if (trials < 1) return invalid_argument("ruler: --trials {} must be >= 1", trials);
    if (protocols.empty()) return invalid_argument("ruler: no protocol given");
    if (answer_tokens < 0) return invalid_argument("ruler: --answer-tokens {} must be >= 0", answer_tokens);
    return ok_status();
}

int ruler_answer_tokens(const ruler_params& p, const ruler_task_info& task) {
    return p.answer_tokens > 0 ? p.answer_tokens : task.answer_tokens;
}

int64_t ruler_trial_count(const ruler_params& p) {
    int64_t n = 0;
    for (const auto& t : p.tasks) {
        auto info = find_ruler_task(t);
        const auto depths = info.ok() && info->uses_depth ? static_cast<int64_t>(p.depths.size()) : 1;
        n += depths * static_cast<int64_t>(p.lengths.size()) * p.trials *
             static_cast<int64_t>(p.protocols.size());
    }
    return n;
}

result<ruler_trial> run_ruler_prompt(model::model& m, const tokenizer::tokenizer& tok,
                                     const ruler_prompt& prompt, ruler_protocol protocol, int answer_tokens,
                                     int64_t length, const engine::session_params& sp) {
    H2OKV_RETURN_IF_ERROR(sp.validate());
    if (answer_tokens < 1) return invalid_argument("ruler: answer tokens {} must be >= 1", answer_tokens);
    const auto start = std::chrono::steady_clock::now();
    const auto n = static_cast<int64_t>(prompt.tokens.size());
    const int64_t q = prompt.question_begin;
    if (q < 1 || q >= n) return invalid_argument("ruler: question begins at {} of {} tokens", q, n);
    const int64_t chunk = sp.prefill_chunk;
    // Both protocols' largest chunk is chunk + question, so their caches have the same capacity.
    engine::session_params run = sp;
    run.prefill_chunk = static_cast<int>(chunk + (n - q));
    ruler_trial tr;
    tr.length = length;
    tr.prompt_tokens = n;
    tr.protocol = protocol;
    tr.answer_tokens = answer_tokens;
    tr.run_length = std::max(length, n + answer_tokens);
    tr.expected = prompt.expected;
    const std::span<const int32_t> all(prompt.tokens);
    const int64_t last_begin = (q - 1) / chunk * chunk;  // the context's last chunk
    const int64_t final_begin = protocol == ruler_protocol::agnostic ? q : last_begin;
    // A fresh session with every chunk but the final one processed; the final one (which holds the question)
    // is left to the caller.
    auto prefilled = [&]() -> result<std::unique_ptr<engine::session>> {
        H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, run, tr.run_length));
        for (int64_t b = 0; b < final_begin; b += chunk) {
            const int64_t e = std::min(b + chunk, final_begin);
            H2OKV_RETURN_IF_ERROR(s->process(all.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)),
                                             model::logits_mode::none, nullptr));
        }
        return s;
    };
    const std::span<const int32_t> final_chunk = all.subspan(static_cast<size_t>(final_begin));

    // Teacher-forced answer: the expected answers joined by ", ", fed token by token as generation would.
    std::string joined;
    for (const auto& e : prompt.expected) joined += (joined.empty() ? "" : ", ") + e;
    H2OKV_ASSIGN_OR_RETURN(auto answer, encode_piece(tok, joined));
    if (static_cast<int64_t>(answer.size()) > answer_tokens)
        answer.resize(static_cast<size_t>(answer_tokens));
    {
        H2OKV_ASSIGN_OR_RETURN(auto s, prefilled());
        std::vector<float> logits;
        H2OKV_RETURN_IF_ERROR(s->process(final_chunk, model::logits_mode::last, &logits));
        double nll = 0.0;
        for (size_t i = 0; i < answer.size(); ++i) {
            const float mx = *std::max_element(logits.begin(), logits.end());
            double z = 0.0;
            for (float l : logits) z += std::exp(static_cast<double>(l - mx));
            nll -= static_cast<double>(logits[static_cast<size_t>(answer[i])] - mx) - std::log(z);
            if (i + 1 < answer.size()) {
                H2OKV_RETURN_IF_ERROR(
                    s->process(std::span<const int32_t>(&answer[i], 1), model::logits_mode::last, &logits));
            }
        }
        tr.answer_nll = answer.empty() ? 0.0 : nll / static_cast<double>(answer.size());
        tr.answer_nll_tokens = static_cast<int>(answer.size());
    }

    H2OKV_ASSIGN_OR_RETURN(auto s, prefilled());
    engine::generation_params gp;
    gp.n_predict = answer_tokens;
    H2OKV_ASSIGN_OR_RETURN(auto g,
                           engine::generate(
                               *s, final_chunk, gp, [&tok](int32_t id) { return tok.is_eog(id); }, nullptr));
    tr.generated = tok.decode(g.tokens);
    tr.score = ruler_score(tr.generated, tr.expected);
    tr.evictions = s->cache().policy().total_evictions();
    tr.budget = s->cache().policy().config().budget;
    tr.policy = s->cache().policy().config().to_string();
    tr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return tr;
}

result<std::vector<ruler_trial>> ruler(model::model& m, const tokenizer::tokenizer& tok,
                                       const ruler_haystack& hay, const ruler_params& p,
                                       const engine::session_params& sp, const ruler_progress_fn& progress) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    std::vector<ruler_trial> out;
    const int64_t total = ruler_trial_count(p);
    for (const auto& task : p.tasks) {
        H2OKV_ASSIGN_OR_RETURN(auto info, find_ruler_task(task));
        const int answer_tokens = ruler_answer_tokens(p, info);
        const std::vector<double> depths = info.uses_depth ? p.depths : std::vector<double>{-1.0};
        for (int64_t length : p.lengths) {
            for (double depth : depths) {
                for (int t = 0; t < p.trials; ++t) {
                    H2OKV_ASSIGN_OR_RETURN(
                        auto prompt,
                        build_ruler_prompt(tok, hay, task, length - answer_tokens, std::max(depth, 0.0),
                                           ruler_trial_seed(p.seed, task, length, t)));
                    for (auto protocol : p.protocols) {
                        H2OKV_ASSIGN_OR_RETURN(
                            auto tr, run_ruler_prompt(m, tok, prompt, protocol, answer_tokens, length, sp));
                        tr.task = task;
                        tr.depth = depth;
                        tr.trial = t;
                        out.push_back(std::move(tr));
                        if (progress) progress(static_cast<int64_t>(out.size()), total);
                    }
                }
            }
        }
    }
    return out;
}

}  // namespace h2okv::eval
