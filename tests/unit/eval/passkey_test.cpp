// The passkey harness on the bundled model: exact prompt construction (length, depth placement, the pieces'
// tokens), filler trimming and repetition, answer extraction, key generation, argument errors, and an
// end-to-end run whose answers equal an independent greedy generation on the same prompts.
#include "h2okv/eval/passkey.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "h2okv/engine/generate.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "test_support.h"

namespace h2okv {
namespace {

const testing::loaded_model& stories() {
    return testing::bundled_stories();
}

const tokenizer::tokenizer& tok() {
    return *stories().tok;
}

std::string story_text() {
    std::string s;
    for (int i = 0; i < 20; ++i) {
        s += "Once upon a time, there was a little dog named Max. Max liked to run in the big green park. ";
        s += "One day, he found a red ball under a tree and played with it all day.\n";
    }
    return s;
}

std::vector<int32_t> encode(const std::string& text) {
    auto ids = tok().encode(text, false, false);
    EXPECT_TRUE(ids.ok());
    return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(Passkey, NeedleAndQuestionText) {
    EXPECT_EQ(eval::passkey_needle("12345"), "The pass key is 12345. Remember it. 12345 is the pass key.");
    EXPECT_EQ(eval::passkey_question, "What is the pass key? The pass key is");
}

TEST(Passkey, FillerIsThePrefixOfTheTextsTokens) {
    const std::string text = story_text();
    const auto all = encode(text);
    ASSERT_GT(all.size(), 300u);
    for (int64_t n : {0, 1, 37, 300}) {
        auto f = eval::passkey_filler(tok(), text, n);
        ASSERT_TRUE(f.ok()) << f.error().to_string();
        EXPECT_EQ(*f, std::vector<int32_t>(all.begin(), all.begin() + n));
    }
}

TEST(Passkey, ShortFillerRepeats) {
    const auto once = encode("a red ball");
    ASSERT_FALSE(once.empty());
    auto f = eval::passkey_filler(tok(), "a red ball", 50);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    ASSERT_EQ(f->size(), 50u);
    for (size_t i = 0; i < f->size(); ++i) EXPECT_EQ((*f)[i], once[i % once.size()]) << i;
}

TEST(Passkey, FillerRefusesAnEmptyText) {
    auto f = eval::passkey_filler(tok(), "", 10);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().to_string().find("no tokens"), std::string::npos) << f.error().to_string();
}

TEST(Passkey, PromptLayoutIsExact) {
    const int64_t length = 200;
    auto filler = eval::passkey_filler(tok(), story_text(), length);
    ASSERT_TRUE(filler.ok());
    const auto needle = encode(eval::passkey_needle("48213"));
    const auto question = encode(std::string(eval::passkey_question));
    const auto n_filler = length - 1 - static_cast<int64_t>(needle.size() + question.size());
    ASSERT_GT(n_filler, 100);
    for (double depth : {0.0, 0.1, 0.25, 0.5, 0.9, 1.0}) {
        SCOPED_TRACE(depth);
        auto p = eval::build_passkey_prompt(tok(), *filler, length, depth, "48213");
        ASSERT_TRUE(p.ok()) << p.error().to_string();
        const auto before = static_cast<int64_t>(std::llround(depth * static_cast<double>(n_filler)));
        ASSERT_EQ(static_cast<int64_t>(p->tokens.size()), length);
        EXPECT_EQ(p->tokens[0], tok().bos());
        EXPECT_EQ(p->filler_tokens, n_filler);
        EXPECT_EQ(p->needle_begin, 1 + before);
        EXPECT_EQ(p->needle_end, p->needle_begin + static_cast<int64_t>(needle.size()));
        EXPECT_EQ(p->question_begin, length - static_cast<int64_t>(question.size()));
        const auto at = [&](int64_t i) { return p->tokens.begin() + i; };
        EXPECT_EQ(std::vector<int32_t>(at(1), at(p->needle_begin)),
                  std::vector<int32_t>(filler->begin(), filler->begin() + before));
        EXPECT_EQ(std::vector<int32_t>(at(p->needle_begin), at(p->needle_end)), needle);
        EXPECT_EQ(std::vector<int32_t>(at(p->needle_end), at(p->question_begin)),
                  std::vector<int32_t>(filler->begin() + before, filler->begin() + n_filler));
        EXPECT_EQ(std::vector<int32_t>(at(p->question_begin), p->tokens.end()), question);
        const std::string text = tok().decode(p->tokens);
        EXPECT_NE(text.find("The pass key is 48213. Remember it. 48213 is the pass key."), std::string::npos);
        EXPECT_EQ(text.substr(text.size() - eval::passkey_question.size()), eval::passkey_question);
    }
    auto first = eval::build_passkey_prompt(tok(), *filler, length, 0.0, "48213");
    auto last = eval::build_passkey_prompt(tok(), *filler, length, 1.0, "48213");
    ASSERT_TRUE(first.ok() && last.ok());
    EXPECT_EQ(first->needle_begin, 1);
    EXPECT_EQ(last->needle_end, last->question_begin);
}

TEST(Passkey, PromptOfTheShortestLengthHasNoFiller) {
    const auto needle = encode(eval::passkey_needle("10000"));
    const auto question = encode(std::string(eval::passkey_question));
    const auto length = static_cast<int64_t>(1 + needle.size() + question.size());
    const std::vector<int32_t> filler;
    auto p = eval::build_passkey_prompt(tok(), filler, length, 0.5, "10000");
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    EXPECT_EQ(p->filler_tokens, 0);
    EXPECT_EQ(p->needle_begin, 1);
    auto short_by_one = eval::build_passkey_prompt(tok(), filler, length - 1, 0.5, "10000");
    ASSERT_FALSE(short_by_one.ok());
    EXPECT_NE(short_by_one.error().to_string().find(fmt::format("length {} is too short", length - 1)),
              std::string::npos)
        << short_by_one.error().to_string();
}

TEST(Passkey, PromptRefusesBadArguments) {
    auto filler = eval::passkey_filler(tok(), story_text(), 100);
    ASSERT_TRUE(filler.ok());
    for (double depth : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
        auto p = eval::build_passkey_prompt(tok(), *filler, 100, depth, "12345");
        ASSERT_FALSE(p.ok());
        EXPECT_NE(p.error().to_string().find("must be in [0, 1]"), std::string::npos)
            << p.error().to_string();
    }
    for (const char* key : {"", "12a45", "-1234"}) {
        auto p = eval::build_passkey_prompt(tok(), *filler, 100, 0.5, key);
        ASSERT_FALSE(p.ok()) << key;
        EXPECT_NE(p.error().to_string().find("ASCII digits"), std::string::npos) << p.error().to_string();
    }
    auto few =
        eval::build_passkey_prompt(tok(), std::span<const int32_t>(*filler).first(10), 100, 0.5, "12345");
    ASSERT_FALSE(few.ok());
    EXPECT_NE(few.error().to_string().find("10 filler tokens given"), std::string::npos)
        << few.error().to_string();
}

TEST(Passkey, AnswerIsTheLeadingDigits) {
    EXPECT_EQ(eval::passkey_answer(" 12345. The"), "12345");
    EXPECT_EQ(eval::passkey_answer("12345"), "12345");
    EXPECT_EQ(eval::passkey_answer("\n\t 9876 is it"), "9876");
    EXPECT_EQ(eval::passkey_answer(" 123456"), "123456");
    EXPECT_EQ(eval::passkey_answer(" 12 345"), "12");
    EXPECT_EQ(eval::passkey_answer(" the key is 12345"), "");
    EXPECT_EQ(eval::passkey_answer(""), "");
}

TEST(Passkey, KeysAreSeededFiveDigitNumbers) {
    const auto a = eval::passkey_keys(7, 20);
    ASSERT_EQ(a.size(), 20u);
    EXPECT_EQ(eval::passkey_keys(7, 20), a);
    EXPECT_NE(eval::passkey_keys(8, 20), a);
    for (const auto& k : a) {
        ASSERT_EQ(k.size(), 5u) << k;
        EXPECT_GE(std::stoi(k), 10000);
        EXPECT_LE(std::stoi(k), 99999);
    }
    EXPECT_EQ(eval::passkey_keys(7, 5), std::vector<std::string>(a.begin(), a.begin() + 5));
}

TEST(Passkey, ParamsValidate) {
    eval::passkey_params p;
    EXPECT_TRUE(p.validate().ok());
    p.depths = {};
    EXPECT_FALSE(p.validate().ok());
    p.depths = {0.5, 1.01};
    EXPECT_FALSE(p.validate().ok());
    p.depths = {0.5};
    p.trials = 0;
    EXPECT_FALSE(p.validate().ok());
    p.trials = 1;
    p.answer_tokens = 0;
    EXPECT_FALSE(p.validate().ok());
    p.answer_tokens = 1;
    p.length = 1;
    EXPECT_FALSE(p.validate().ok());
}

TEST(Passkey, HarnessAnswersAreTheGreedyGeneration) {
    eval::passkey_params pp;
    pp.length = 96;
    pp.depths = {0.0, 1.0};
    pp.trials = 2;
    pp.seed = 3;
    pp.answer_tokens = 6;
    auto filler = eval::passkey_filler(tok(), story_text(), pp.length);
    ASSERT_TRUE(filler.ok());
    for (const std::string spec : {"full", "h2o:budget=0.5"}) {
        SCOPED_TRACE(spec);
        engine::session_params sp;
        sp.kv = *policy::params::parse(spec);
        auto r = eval::passkey(*stories().model, tok(), *filler, pp, sp, nullptr);
        ASSERT_TRUE(r.ok()) << r.error().to_string();
        EXPECT_EQ(r->run_length, 102);
        EXPECT_EQ(r->config.budget, spec == "full" ? 0 : 51);
        if (spec != "full") {
            EXPECT_GT(r->evictions, 0);
        }
        const auto keys = eval::passkey_keys(3, 2);
        ASSERT_EQ(r->trials.size(), 4u);
        ASSERT_EQ(r->per_depth.size(), 2u);
        for (size_t i = 0; i < r->trials.size(); ++i) {
            const auto& t = r->trials[i];
            EXPECT_EQ(t.depth, pp.depths[i / 2]);
            EXPECT_EQ(t.trial, static_cast<int>(i % 2));
            EXPECT_EQ(t.key, keys[i % 2]);
            auto prompt = eval::build_passkey_prompt(tok(), *filler, pp.length, t.depth, t.key);
            ASSERT_TRUE(prompt.ok());
            EXPECT_EQ(t.needle_begin, prompt->needle_begin);
            auto s = engine::session::create(*stories().model, sp, r->run_length);
            ASSERT_TRUE(s.ok());
            engine::generation_params gp;
            gp.n_predict = pp.answer_tokens;
            auto g = engine::generate(
                **s, prompt->tokens, gp, [](int32_t id) { return tok().is_eog(id); }, nullptr);
            ASSERT_TRUE(g.ok());
            EXPECT_EQ(t.generated, tok().decode(g->tokens));
            EXPECT_EQ(t.answer, eval::passkey_answer(t.generated));
            EXPECT_EQ(t.success, t.answer == t.key);
        }
        for (size_t d = 0; d < 2; ++d) {
            const auto& pd = r->per_depth[d];
            EXPECT_EQ(pd.depth, pp.depths[d]);
            EXPECT_EQ(pd.n_trials, 2);
            const int correct = (r->trials[2 * d].success ? 1 : 0) + (r->trials[2 * d + 1].success ? 1 : 0);
            EXPECT_EQ(pd.n_correct, correct);
            EXPECT_EQ(pd.accuracy, correct / 2.0);
        }
    }
}

}  // namespace
}  // namespace h2okv
