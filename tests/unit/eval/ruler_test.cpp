// The RULER-style generators, scorer and runner on the bundled model's tokenizer: fixed seeds give fixed
// prompts (tests/golden/ruler_prompts.txt; H2OKV_UPDATE_GOLDEN=1 rewrites it), exact lengths and needle
// placement, answers present exactly as often as each task says, the word-list tasks' counts, the scorer's
// exact / partial / none cases, argument errors, and the two protocols' chunking.
#include "h2okv/eval/ruler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "h2okv/eval/prompt_pieces.h"
#include "test_support.h"

namespace h2okv {
namespace {

const tokenizer::tokenizer& tok() {
    return *testing::bundled_stories().tok;
}

// A self-contained haystack in the bundled model's domain (no dependency on ../shared).
std::string story_text() {
    static const char* sentences[] = {
        "Once upon a time, there was a little dog named Max. ",
        "Max liked to run in the big green park with his friend Lily. ",
        "One day, he found a red ball under a tree and played with it all day. ",
        "Lily was happy because the sun was warm and the flowers were pretty. ",
        "They saw a bird singing on a branch, and the bird flew away. ",
        "Then mom called them home for dinner, and they ate soup and bread. ",
        "At night, Max slept in his bed and dreamed about the park.\n",
    };
    std::string s;
    for (int i = 0; i < 60; ++i) s += sentences[(i * 3) % 7];
    return s;
}

const eval::ruler_haystack& hay() {
    static const eval::ruler_haystack h = [] {
        auto r = eval::ruler_haystack::make(tok(), story_text(), 4 * 512);
        EXPECT_TRUE(r.ok()) << r.error().to_string();
        return r.ok() ? *r : eval::ruler_haystack{};
    }();
    return h;
}

eval::ruler_prompt build(const std::string& task, int64_t length, double depth, int trial,
                         uint64_t seed = 1) {
    auto p = eval::build_ruler_prompt(tok(), hay(), task, length, depth,
                                      eval::ruler_trial_seed(seed, task, length, trial));
    EXPECT_TRUE(p.ok()) << task << ": " << p.error().to_string();
    return p.ok() ? *p : eval::ruler_prompt{};
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

int count(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t i = text.find(needle); i != std::string::npos; i = text.find(needle, i + 1)) ++n;
    return n;
}

TEST(Ruler, RngIsOwnMappingOfMt19937) {
    eval::ruler_rng a(7), b(7);
    std::mt19937 ref(7);
    for (int i = 0; i < 100; ++i) {
        const uint32_t n = 1 + static_cast<uint32_t>(i) * 37;
        const uint32_t v = a.below(n);
        EXPECT_LT(v, n);
        EXPECT_EQ(v, static_cast<uint32_t>((static_cast<uint64_t>(ref()) * n) >> 32));
        EXPECT_EQ(b.below(n), v);
    }
    const std::string d = a.digits(7);
    ASSERT_EQ(d.size(), 7u);
    EXPECT_NE(d[0], '0');
}

TEST(Ruler, TaskTable) {
    std::set<std::string> names;
    for (const auto& t : eval::ruler_tasks()) names.insert(std::string(t.name));
    for (const char* n : {"passkey", "niah_single", "niah_single_word", "niah_single_uuid", "niah_multikey",
                          "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"}) {
        EXPECT_TRUE(names.count(n)) << n;
    }
    EXPECT_FALSE(eval::find_ruler_task("niah_double").ok());
}

// The prompts of trial 0 at 512 tokens, depth 0.5, seed 1, as text: any change to a generator, the rng
// mapping or the seeding shows here.
TEST(Ruler, GoldenPrompts) {
    std::string out;
    for (const auto& t : eval::ruler_tasks()) {
        const auto p = build(std::string(t.name), 512, 0.5, 0);
        out += fmt::format("== {} length 512 depth 0.5 trial 0 seed 1: {} tokens, question at {}\n", t.name,
                           p.tokens.size(), p.question_begin);
        out += tok().decode(p.tokens) + "\n";
        out += "expected:";
        for (const auto& e : p.expected) out += " " + e;
        out += "\n";
    }
    const std::string path = std::string(H2OKV_SOURCE_DIR) + "/tests/golden/ruler_prompts.txt";
    if (std::getenv("H2OKV_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(path, std::ios::binary) << out;
        GTEST_SKIP() << "wrote " << path;
    }
    const std::string golden = testing::read_file(path);
    ASSERT_FALSE(golden.empty()) << path << " is missing (H2OKV_UPDATE_GOLDEN=1 writes it)";
    EXPECT_EQ(out, golden);
}

TEST(Ruler, SameSeedSamePromptOtherSeedOther) {
    for (const auto& t : eval::ruler_tasks()) {
        const std::string name(t.name);
        EXPECT_EQ(build(name, 512, 0.3, 2).tokens, build(name, 512, 0.3, 2).tokens) << name;
        EXPECT_NE(build(name, 512, 0.3, 2).tokens, build(name, 512, 0.3, 3).tokens) << name;
        EXPECT_NE(build(name, 512, 0.3, 2).tokens, build(name, 512, 0.3, 2, 9).tokens) << name;
    }
}

// Counts of the list words in a cwe / fwe context (words separated by spaces and commas).
std::map<std::string, int> list_counts(const eval::ruler_prompt& p, const std::string& after) {
    std::string context =
        tok().decode(std::span<const int32_t>(p.tokens).subspan(0, static_cast<size_t>(p.question_begin)));
    context = context.substr(context.find(after) + after.size());
    std::map<std::string, int> counts;
    std::string w;
    for (char c : context + " ") {
        if (c == ' ' || c == ',' || c == '\n') {
            if (!w.empty()) counts[w] += 1;
            w.clear();
        } else {
            w += c;
        }
    }
    return counts;
}

TEST(Ruler, HaystackTasksAreExactlyTheLengthAndAnswersOccurAsTheTaskSays) {
    for (const auto& t : eval::ruler_tasks()) {
        const std::string name(t.name);
        for (int64_t length : {480, 512}) {
            for (double depth : {0.0, 0.25, 1.0}) {
                for (int trial = 0; trial < 3; ++trial) {
                    const auto p = build(name, length, depth, trial);
                    ASSERT_FALSE(p.tokens.empty()) << name;
                    EXPECT_EQ(p.tokens.front(), tok().bos());
                    if (name == "cwe" || name == "fwe") {
                        EXPECT_LE(static_cast<int64_t>(p.tokens.size()), length) << name;
                        // Short by less than a word, unless cwe used up the haystack's vocabulary.
                        const bool all_words =
                            name == "cwe" && list_counts(p, "most often.").size() == hay().words.size();
                        if (!all_words) {
                            EXPECT_GE(static_cast<int64_t>(p.tokens.size()), length - 8) << name;
                        }
                    } else {
                        EXPECT_EQ(static_cast<int64_t>(p.tokens.size()), length) << name;
                    }
                    ASSERT_FALSE(p.expected.empty()) << name;
                    const std::string text = lower(tok().decode(p.tokens));
                    const std::string context = lower(tok().decode(std::span<const int32_t>(p.tokens).subspan(
                        0, static_cast<size_t>(p.question_begin))));
                    for (size_t i = 0; i < p.expected.size(); ++i) {
                        const std::string e = lower(p.expected[i]);
                        if (t.answers_once) {
                            EXPECT_EQ(count(text, e), 1) << name << " " << e;
                        } else if (name == "passkey") {
                            EXPECT_EQ(count(text, e), 2) << e;  // "The pass key is K. ... K is the pass key."
                        } else if (name == "vt") {
                            EXPECT_EQ(count(context, e), i + 1 == p.expected.size() ? 1 : 2) << e;
                        } else {
                            EXPECT_GE(count(context, e), 1) << name << " " << e;
                        }
                    }
                    // The answer is never in the question (only in the context).
                    if (t.answers_once) {
                        for (const auto& e : p.expected) EXPECT_EQ(count(lower(p.question), lower(e)), 0);
                    }
                }
            }
        }
    }
}

TEST(Ruler, FirstNeedleSitsAtTheDepth) {
    for (const char* name : {"passkey", "niah_single", "niah_multikey", "niah_multivalue"}) {
        const auto at0 = build(name, 512, 0.0, 1);
        const auto at1 = build(name, 512, 1.0, 1);
        ASSERT_FALSE(at0.needle_begin.empty());
        // Depth 0: right after BOS and the instruction; the needle's own tokens start there.
        const std::string needle0 = tok().decode(
            std::span<const int32_t>(at0.tokens).subspan(static_cast<size_t>(at0.needle_begin[0]), 12));
        EXPECT_NE(lower(tok().decode(at0.tokens)).find(lower(at0.expected[0])), std::string::npos);
        int64_t instruction = 0;
        if (std::string(name) != "passkey") {
            auto instr = eval::encode_piece(
                tok(),
                "Some special magic numbers are hidden within the following text. Make sure to memorize "
                "it. I will quiz you about the numbers afterwards.");
            ASSERT_TRUE(instr.ok());
            instruction = static_cast<int64_t>(instr->size());
        }
        EXPECT_EQ(at0.needle_begin[0], 1 + instruction) << name << ": " << needle0;
        // Depth 1: the first needle ends where the question begins (other needles may follow it only when
        // drawn at depth 1 too).
        EXPECT_GT(at1.needle_begin[0], at0.needle_begin[0]);
        EXPECT_LT(at1.needle_begin[0], at1.question_begin);
        // The same trial has the same answers at every depth (paired comparisons).
        EXPECT_EQ(at0.expected, at1.expected) << name;
    }
}

TEST(Ruler, CommonWordsOccurSixTimesOthersOnce) {
    for (int trial = 0; trial < 3; ++trial) {
        const auto p = build("cwe", 400, 0.0, trial);
        ASSERT_EQ(p.expected.size(), 5u);
        const auto counts = list_counts(p, "most often.");
        for (const auto& [w, n] : counts) {
            const bool common = std::find(p.expected.begin(), p.expected.end(), w) != p.expected.end();
            EXPECT_EQ(n, common ? 6 : 1) << w;
        }
        for (const auto& e : p.expected) EXPECT_EQ(counts.count(e), 1u) << e;
        EXPECT_GT(counts.size(), 10u);
    }
}

TEST(Ruler, FrequentWordsTopThreeAreStrictlyMostFrequent) {
    for (int trial = 0; trial < 3; ++trial) {
        const auto p = build("fwe", 400, 0.0, trial);
        ASSERT_EQ(p.expected.size(), 3u);
        const auto counts = list_counts(p, "coded words.");
        int fourth = 0;
        for (const auto& [w, n] : counts) {
            if (std::find(p.expected.begin(), p.expected.end(), w) == p.expected.end())
                fourth = std::max(fourth, n);
        }
        ASSERT_TRUE(counts.count(p.expected[0]) && counts.count(p.expected[1]) &&
                    counts.count(p.expected[2]));
        EXPECT_GT(counts.at(p.expected[0]), counts.at(p.expected[1]));
        EXPECT_GT(counts.at(p.expected[1]), counts.at(p.expected[2]));
        EXPECT_GT(counts.at(p.expected[2]), fourth);
    }
}

TEST(Ruler, ScorerExactPartialNone) {
    const std::vector<std::string> one{"1234567"};
    EXPECT_DOUBLE_EQ(eval::ruler_score(" 1234567.", one), 1.0);
    EXPECT_DOUBLE_EQ(eval::ruler_score(" 123456", one), 0.0);
    const std::vector<std::string> four{"1111111", "2222222", "Quiet-Harbor", "3333333"};
    EXPECT_DOUBLE_EQ(eval::ruler_score("1111111, 2222222, 3333333 and quiet-harbor", four), 1.0);
    EXPECT_DOUBLE_EQ(eval::ruler_score("2222222 and QUIET-HARBOR", four), 0.5);
    EXPECT_DOUBLE_EQ(eval::ruler_score("3333333", four), 0.25);
    EXPECT_DOUBLE_EQ(eval::ruler_score("nothing here", four), 0.0);
    EXPECT_DOUBLE_EQ(eval::ruler_score("", four), 0.0);
    EXPECT_DOUBLE_EQ(eval::ruler_score("anything", {}), 0.0);
}

TEST(Ruler, ArgumentErrors) {
    EXPECT_FALSE(eval::build_ruler_prompt(tok(), hay(), "niah_single", 40, 0.5, 1).ok());  // too short
    EXPECT_FALSE(eval::build_ruler_prompt(tok(), hay(), "niah_single", 256, 1.5, 1).ok());
    EXPECT_FALSE(eval::build_ruler_prompt(tok(), hay(), "nope", 256, 0.5, 1).ok());
    EXPECT_FALSE(eval::parse_ruler_protocol("sometimes").ok());
    eval::ruler_params p;
    EXPECT_TRUE(p.validate().ok());
    p.tasks = {"nope"};
    EXPECT_FALSE(p.validate().ok());
    p = {};
    p.depths = {-0.1};
    EXPECT_FALSE(p.validate().ok());
    p = {};
    p.trials = 0;
    EXPECT_FALSE(p.validate().ok());
    p = {};
    p.protocols.clear();
    EXPECT_FALSE(p.validate().ok());
}

TEST(Ruler, TrialCountAndOrder) {
    eval::ruler_params p;
    p.tasks = {"niah_single", "vt"};
    p.lengths = {340};
    p.depths = {0.0, 1.0};
    p.trials = 2;
    EXPECT_EQ(eval::ruler_trial_count(p), (2 * 2 + 2) * 2);  // vt has no depth
    engine::session_params sp;
    sp.kv = *policy::params::parse("window:budget=64");
    sp.prefill_chunk = 64;
    int64_t last = 0;
    auto r =
        eval::ruler(*testing::bundled_stories().model, tok(), hay(), p, sp, [&](int64_t done, int64_t total) {
            EXPECT_EQ(done, last + 1);
            EXPECT_EQ(total, eval::ruler_trial_count(p));
            last = done;
        });
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_EQ(static_cast<int64_t>(r->size()), eval::ruler_trial_count(p));
    EXPECT_EQ((*r)[0].task, "niah_single");
    EXPECT_EQ((*r)[0].protocol, eval::ruler_protocol::agnostic);
    EXPECT_EQ((*r)[1].protocol, eval::ruler_protocol::aware);
    EXPECT_EQ((*r)[0].expected, (*r)[1].expected);
    EXPECT_EQ(r->back().task, "vt");
    EXPECT_DOUBLE_EQ(r->back().depth, -1.0);
    for (const auto& t : *r) {
        EXPECT_GT(t.evictions, 0);
        EXPECT_EQ(t.budget, 64);
        EXPECT_GE(t.score, 0.0);
        EXPECT_LE(t.score, 1.0);
        EXPECT_DOUBLE_EQ(t.score, eval::ruler_score(t.generated, t.expected));
    }
}

// The protocols differ only in whether the question is in the context's last chunk: under `full` nothing is
// evicted and both give the same answer; under a small window the aware run's last eviction comes after the
// question, so it evicts the same number of tokens in total but keeps a different set when the question
// arrives.
TEST(Ruler, ProtocolsUnderFullAgreeAndEvictionsMatch) {
    auto& m = *testing::bundled_stories().model;
    const auto p = build("niah_single", 300, 0.5, 0);
    engine::session_params full;
    full.prefill_chunk = 128;
    auto a = eval::run_ruler_prompt(m, tok(), p, eval::ruler_protocol::agnostic, 12, 300, full);
    auto b = eval::run_ruler_prompt(m, tok(), p, eval::ruler_protocol::aware, 12, 300, full);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->generated, b->generated);
    EXPECT_NEAR(a->answer_nll, b->answer_nll, 1e-4);
    EXPECT_GT(a->answer_nll, 0.0);
    auto answer = eval::encode_piece(tok(), p.expected[0]);
    ASSERT_TRUE(answer.ok());
    EXPECT_EQ(a->answer_nll_tokens, std::min<int>(12, static_cast<int>(answer->size())));
    EXPECT_EQ(a->evictions, 0);
    EXPECT_EQ(b->evictions, 0);

    engine::session_params win = full;
    win.kv = *policy::params::parse("window:budget=64");
    a = eval::run_ruler_prompt(m, tok(), p, eval::ruler_protocol::agnostic, 12, 300, win);
    b = eval::run_ruler_prompt(m, tok(), p, eval::ruler_protocol::aware, 12, 300, win);
    ASSERT_TRUE(a.ok() && b.ok());
    // A window keeps the last 64 tokens after every eviction: run_length - 1 - 64 positions leave in both.
    EXPECT_EQ(a->evictions, b->evictions);
    EXPECT_EQ(a->prompt_tokens, 300);
}

}  // namespace
}  // namespace h2okv
