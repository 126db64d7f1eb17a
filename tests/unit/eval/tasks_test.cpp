// Multiple-choice tasks: the parsers read every item of every shipped file (counts as PROVENANCE.md documents
// them, COPA's gold labels as its separate gold files give them), malformed items fail naming the file and
// item, and the scoring is checked on the bundled model against a direct session run and on hand-made items
// whose answer is known.
#include "h2okv/eval/tasks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "test_support.h"

namespace h2okv {
namespace {

const std::string data_dir = std::string(H2OKV_SHARED_DIR) + "/data";

bool have_data() {
    return std::filesystem::exists(data_dir + "/copa/copa-dev.xml");
}

#define SKIP_WITHOUT_DATA() \
    if (!have_data()) GTEST_SKIP() << data_dir << " is absent: the shipped task files cannot be checked"

std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The sizes PROVENANCE.md documents, per (task, split): items in the file and items evaluated.
struct documented {
    std::string task, split;
    size_t file_items, eval_items;
};
const std::vector<documented> sizes = {
    {"copa", "val", 500, 100},
    {"copa", "dev", 500, 500},
    {"copa", "test", 500, 500},
    {"copa", "all", 1000, 1000},
    {"piqa", "test", 1838, 1838},
    {"openbookqa", "test", 500, 500},
    {"winogrande", "test", 1267, 1267},
    {"arc-easy", "test", 2376, 2376},
    {"arc-challenge", "test", 1172, 1172},
    {"boolq", "test", 3270, 3270},
    {"siqa", "test", 1954, 1954},
    {"mathqa", "test", 2985, 2985},
};

TEST(TaskData, EveryShippedFileParsesToItsDocumentedSize) {
    SKIP_WITHOUT_DATA();
    for (const auto& d : sizes) {
        SCOPED_TRACE(d.task + " " + d.split);
        auto set = eval::load_task(d.task, data_dir, d.split);
        ASSERT_TRUE(set.ok()) << set.error().to_string();
        EXPECT_EQ(set->items.size(), d.file_items);
        EXPECT_EQ(set->eval.size(), d.eval_items);
        for (const auto& it : set->items) {
            ASSERT_GE(it.choices.size(), 2u) << "item " << it.id;
            ASSERT_GE(it.gold, 0);
            ASSERT_LT(static_cast<size_t>(it.gold), it.choices.size());
            for (const auto& c : it.choices) {
                EXPECT_FALSE(c.context.empty()) << "item " << it.id;
                ASSERT_GE(c.continuation.size(), 2u) << "item " << it.id;
                EXPECT_EQ(c.continuation[0], ' ');
            }
        }
    }
    // The raw parsers on every file of the two folders, MathQA's included.
    for (const char* f : {"copa-dev.xml", "copa-test.xml", "copa-all.xml"}) {
        auto items = eval::parse_copa_xml(read(data_dir + "/copa/" + f), f);
        ASSERT_TRUE(items.ok()) << items.error().to_string();
        EXPECT_EQ(items->size(), std::string(f) == "copa-all.xml" ? 1000u : 500u) << f;
    }
    const std::map<std::string, size_t> json_sizes = {
        {"ARC-Challenge", 1172}, {"ARC-Easy", 2376}, {"boolq", 3270},       {"mathqa", 2985},
        {"openbookqa", 500},     {"piqa", 1838},     {"social_i_qa", 1954}, {"winogrande", 1267}};
    size_t folders = 0;
    for (const auto& e : std::filesystem::directory_iterator(data_dir + "/llm-adapters-commonsense")) {
        if (!e.is_directory()) continue;
        ++folders;
        const std::string name = e.path().filename().string();
        ASSERT_TRUE(json_sizes.count(name)) << "unexpected folder " << name;
        auto items = eval::parse_commonsense_json(read(e.path().string() + "/test.json"), name);
        ASSERT_TRUE(items.ok()) << items.error().to_string();
        EXPECT_EQ(items->size(), json_sizes.at(name)) << name;
    }
    EXPECT_EQ(folders, json_sizes.size());
}

// COPA's gold labels agree with the separate gold files ("id alt1 alt2", 1 marking the right one).
TEST(TaskData, CopaGoldMatchesTheGoldFiles) {
    SKIP_WITHOUT_DATA();
    for (const char* split : {"dev", "test"}) {
        auto items = eval::parse_copa_xml(read(data_dir + "/copa/copa-" + split + ".xml"), split);
        ASSERT_TRUE(items.ok()) << items.error().to_string();
        std::istringstream gold(read(data_dir + "/copa/gold." + split));
        size_t n = 0;
        int64_t id = 0;
        int a1 = 0, a2 = 0;
        while (gold >> id >> a1 >> a2) {
            ASSERT_LT(n, items->size());
            EXPECT_EQ((*items)[n].id, id);
            EXPECT_EQ((*items)[n].gold, a1 == 1 ? 0 : 1) << "id " << id;
            EXPECT_EQ(a1 + a2, 1);
            ++n;
        }
        EXPECT_EQ(n, items->size()) << split;
    }
}

TEST(TaskData, PromptsFollowLmEval) {
    SKIP_WITHOUT_DATA();
    auto copa = eval::load_task("copa", data_dir, "dev");
    ASSERT_TRUE(copa.ok()) << copa.error().to_string();
    const auto& c0 = copa->items[0];  // id 1, asks for the cause
    EXPECT_EQ(c0.id, "1");
    EXPECT_EQ(c0.choices[0].context, "My body cast a shadow over the grass because");
    EXPECT_EQ(c0.choices[0].continuation, " the sun was rising.");
    EXPECT_EQ(c0.choices[1].continuation, " the grass was cut.");
    EXPECT_EQ(c0.gold, 0);
    auto val = eval::load_task("copa", data_dir);
    ASSERT_TRUE(val.ok()) << val.error().to_string();
    EXPECT_EQ(val->split, "val");
    EXPECT_EQ(val->items[val->eval.front()].id, "401");
    EXPECT_EQ(val->items[val->eval.back()].id, "500");

    auto piqa = eval::load_task("piqa", data_dir);
    ASSERT_TRUE(piqa.ok()) << piqa.error().to_string();
    EXPECT_EQ(piqa->items[0].choices[0].context,
              "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:");
    EXPECT_EQ(piqa->items[0].choices[1].continuation,
              " Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans "
              "material, you will also need to supply it with a water bottle and a food dish.");
    EXPECT_EQ(piqa->items[0].gold, 0);

    auto wino = eval::load_task("winogrande", data_dir);
    ASSERT_TRUE(wino.ok()) << wino.error().to_string();
    EXPECT_EQ(wino->items[0].choices[0].context, "Sarah was a much better surgeon than Maria so Sarah");
    EXPECT_EQ(wino->items[0].choices[1].context, "Sarah was a much better surgeon than Maria so Maria");
    EXPECT_EQ(wino->items[0].choices[1].continuation, " always got the easier cases.");
    EXPECT_EQ(wino->items[0].gold, 1);

    auto arc = eval::load_task("arc-challenge", data_dir);
    ASSERT_TRUE(arc.ok()) << arc.error().to_string();
    ASSERT_EQ(arc->items[0].choices.size(), 4u);
    EXPECT_EQ(arc->items[0].choices[2].continuation, " Planetary days will become shorter.");
    EXPECT_EQ(arc->items[0].gold, 2);
    // ARC has a few 3- and 5-choice questions.
    std::map<size_t, int> arity;
    auto easy = eval::load_task("arc-easy", data_dir);
    ASSERT_TRUE(easy.ok()) << easy.error().to_string();
    for (const auto& it : easy->items) ++arity[it.choices.size()];
    EXPECT_EQ(arity, (std::map<size_t, int>{{3, 7}, {4, 2365}, {5, 4}}));

    auto boolq = eval::load_task("boolq", data_dir);
    ASSERT_TRUE(boolq.ok()) << boolq.error().to_string();
    EXPECT_EQ(boolq->items[0].choices[0].context,
              "Question: does ethanol take more energy make that produces?\nAnswer:");
    EXPECT_EQ(boolq->items[0].choices[0].continuation, " no");
    EXPECT_EQ(boolq->items[0].gold, 0);  // "false"

    auto siqa = eval::load_task("siqa", data_dir);
    ASSERT_TRUE(siqa.ok()) << siqa.error().to_string();
    EXPECT_EQ(siqa->items[0].choices[0].context,
              "Q: Tracy didn't go home that evening and resisted Riley's attacks. What does Tracy need to do "
              "before this?\nA:");
    EXPECT_EQ(siqa->items[0].choices[2].continuation, " Find somewhere to go");
    EXPECT_EQ(siqa->items[0].gold, 2);

    auto math = eval::load_task("mathqa", data_dir);
    ASSERT_TRUE(math.ok()) << math.error().to_string();
    ASSERT_EQ(math->items[0].choices.size(), 5u);
    EXPECT_EQ(math->items[0].choices[1].continuation, " 27.675");
    EXPECT_EQ(math->items[0].gold, 0);
    // Item 82 lists its options as a Python list; item 628 repeats each label.
    EXPECT_EQ(math->items[82].choices[3].continuation, " 7 : 9");
    EXPECT_EQ(math->items[628].choices[0].continuation, " 4 inChEs");
}

TEST(TaskData, CopaXmlEdgeCases) {
    const std::string ok = R"(<?xml version="1.0"?>
<!DOCTYPE copa-corpus SYSTEM "copa.dtd">
<!-- a comment -->
<copa-corpus version="1.0">
  <item most-plausible-alternative='2' id="7" asks-for="effect">
    <p>Tom &amp; Ann laughed &#x263A;.</p><a1>X.</a1>
    <a2><![CDATA[It <was> funny.]]></a2>
  </item>
</copa-corpus>)";
    auto items = eval::parse_copa_xml(ok, "mini.xml");
    ASSERT_TRUE(items.ok()) << items.error().to_string();
    ASSERT_EQ(items->size(), 1u);
    EXPECT_EQ((*items)[0].id, 7);
    EXPECT_EQ((*items)[0].premise, "Tom & Ann laughed \xE2\x98\xBA.");
    EXPECT_EQ((*items)[0].alternative2, "It <was> funny.");
    EXPECT_FALSE((*items)[0].asks_for_cause);
    EXPECT_EQ((*items)[0].gold, 1);

    const std::string good_item =
        R"(<item id="1" asks-for="cause" most-plausible-alternative="1"><p>P.</p><a1>A.</a1><a2>B.</a2></item>)";
    struct bad_case {
        std::string item, message;
    };
    const std::vector<bad_case> bad = {
        {R"(<item id="2" asks-for="cause" most-plausible-alternative="1"><p>P.</p><a1>A.</a1></item>)",
         "expected <p>, <a1> and <a2>"},
        {R"(<item id="2" asks-for="why" most-plausible-alternative="1"><p>P</p><a1>A</a1><a2>B</a2></item>)",
         "asks-for 'why'"},
        {R"(<item id="2" asks-for="cause" most-plausible-alternative="3"><p>P</p><a1>A</a1><a2>B</a2></item>)",
         "most-plausible-alternative '3'"},
        {R"(<item id="x2" asks-for="cause" most-plausible-alternative="1"><p>P</p><a1>A</a1><a2>B</a2></item>)",
         "id 'x2'"},
        {R"(<item id="2" asks-for="cause" most-plausible-alternative="1"><p>P &bogus; </p><a1>A</a1><a2>B</a2></item>)",
         "unknown entity"},
        {R"(<item id="2" asks-for="cause" most-plausible-alternative="1"><p>P</a1><a1>A</a1><a2>B</a2></item>)",
         "</a1> closes <p>"},
        {R"(<item id="2" asks-for="cause" most-plausible-alternative="1"><p>P</p><a1>A</a1><a2> </a2></item>)",
         "<a2> is empty"},
    };
    for (const auto& b : bad) {
        const std::string xml = "<copa-corpus>" + good_item + b.item + "</copa-corpus>";
        auto r = eval::parse_copa_xml(xml, "bad.xml");
        ASSERT_FALSE(r.ok()) << b.item;
        EXPECT_NE(r.error().message().find("bad.xml: item 1"), std::string::npos) << r.error().message();
        EXPECT_NE(r.error().message().find(b.message), std::string::npos) << r.error().message();
    }
    EXPECT_FALSE(eval::parse_copa_xml("<copa-corpus>" + good_item, "cut.xml").ok());
    EXPECT_FALSE(eval::parse_copa_xml("", "empty.xml").ok());
    EXPECT_FALSE(eval::parse_copa_xml("<other/>", "other.xml").ok());
}

TEST(TaskData, CommonsenseJsonShapesAndErrors) {
    const std::string ok = R"([
      {"instruction": "Please choose the correct answer to the question: Why: now?\n\nAnswer1: red Answer2: blue sky Answer3: x\n\nAnswer format: answer1/answer2/answer3", "input": "", "output": "", "answer": "answer2"},
      {"instruction": "Please answer the following question with true or false, question: is it?\n\nAnswer format: true/false", "answer": "true"},
      {"instruction": "what is 1 + 1 ? The options: A ) 1 , B ) 2 , 000 , C ) 3", "answer": "B"},
      {"instruction": "what is 2 + 2 ? The options: ['A ) 4', 'B ) B ) 5 \\' x', \"C ) it's 6\"]", "answer": "C"},
      {"instruction": "Fill: the _ sat.\n\nOption1: cat Option2: dog Answer format: option1/option2", "answer": "option1"}
    ])";
    auto q = eval::parse_commonsense_json(ok, "ok.json");
    ASSERT_TRUE(q.ok()) << q.error().to_string();
    ASSERT_EQ(q->size(), 5u);
    EXPECT_EQ((*q)[0].question, "Why: now?");
    EXPECT_EQ((*q)[0].options, (std::vector<std::string>{"red", "blue sky", "x"}));
    EXPECT_EQ((*q)[0].gold, 1);
    EXPECT_EQ((*q)[1].question, "is it?");
    EXPECT_EQ((*q)[1].options, (std::vector<std::string>{"true", "false"}));
    EXPECT_EQ((*q)[1].gold, 0);
    EXPECT_EQ((*q)[2].question, "what is 1 + 1 ?");
    EXPECT_EQ((*q)[2].options, (std::vector<std::string>{"1", "2 , 000", "3"}));
    EXPECT_EQ((*q)[2].gold, 1);
    EXPECT_EQ((*q)[3].options, (std::vector<std::string>{"4", "5 ' x", "it's 6"}));
    EXPECT_EQ((*q)[3].gold, 2);
    EXPECT_EQ((*q)[4].options, (std::vector<std::string>{"cat", "dog"}));

    const std::string good =
        R"({"instruction": "Q: a?\n\nAnswer1: x Answer2: y\n\nAnswer format: answer1/answer2", "answer": "answer1"})";
    struct bad_case {
        std::string item, message;
    };
    const std::vector<bad_case> bad = {
        {R"({"instruction": "Q: a?\n\nAnswer1: x Answer2: y\n\nAnswer format: answer1/answer2", "answer": "answer3"})",
         "answer 'answer3' is none of answer1/answer2"},
        {R"({"instruction": "Q: a?\n\nAnswer1: x\n\nAnswer format: answer1/answer2", "answer": "answer1"})",
         "no 'Answer2: '"},
        {R"({"instruction": "Q: a?\n\nAnswer1: x Answer2: \n\nAnswer format: answer1/answer2", "answer": "answer1"})",
         "option 'answer2' is empty"},
        {R"({"instruction": "Q: a?", "answer": "answer1"})", "neither"},
        {R"({"instruction": 3, "answer": "answer1"})", "string fields"},
        {R"({"answer": "answer1"})", "string fields"},
    };
    for (const auto& b : bad) {
        auto r = eval::parse_commonsense_json("[" + good + "," + b.item + "]", "bad.json");
        ASSERT_FALSE(r.ok()) << b.item;
        EXPECT_NE(r.error().message().find("bad.json: item 1"), std::string::npos) << r.error().message();
        EXPECT_NE(r.error().message().find(b.message), std::string::npos) << r.error().message();
    }
    EXPECT_FALSE(eval::parse_commonsense_json("{}", "obj.json").ok());
    auto broken = eval::parse_commonsense_json("[{\"instruction\": ", "broken.json");
    ASSERT_FALSE(broken.ok());
    EXPECT_NE(broken.error().message().find("broken.json"), std::string::npos);
    EXPECT_FALSE(eval::load_task("nope", data_dir).ok());
    EXPECT_FALSE(eval::load_task("piqa", data_dir, "val").ok());
    EXPECT_FALSE(eval::load_task("piqa", "/nonexistent").ok());
}

TEST(TaskScoring, BestChoiceRawVersusNormalised) {
    // Raw: -8 > -10; per byte: -10/20 = -0.5 > -8/4 = -2.
    const std::vector<eval::choice_score> s = {{-10.0, 20}, {-8.0, 4}};
    EXPECT_EQ(eval::best_choice(s, false), 1);
    EXPECT_EQ(eval::best_choice(s, true), 0);
    const std::vector<eval::choice_score> tie = {{-3.0, 3}, {-1.0, 1}, {-1.0, 1}};
    EXPECT_EQ(eval::best_choice(tie, false), 1);  // the first of the tied maxima
    EXPECT_EQ(eval::best_choice(tie, true), 0);   // all -1 per byte
}

TEST(TaskScoring, FewShotDrawIsSeededDistinctAndExcludesTheItem) {
    auto a = eval::few_shot_indices(10, 3, 5, 42);
    auto b = eval::few_shot_indices(10, 3, 5, 42);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
    std::vector<size_t> sorted = *a;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (size_t i : *a) {
        EXPECT_LT(i, 10u);
        EXPECT_NE(i, 3u);
    }
    auto all = eval::few_shot_indices(10, 3, 9, 7);  // every other item
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->size(), 9u);
    EXPECT_FALSE(eval::few_shot_indices(10, 3, 10, 7).ok());
    EXPECT_FALSE(eval::few_shot_indices(10, 3, -1, 7).ok());
    // Seeds and items change the draw (over 20 draws a coincidence is negligible).
    int same_seed = 0, same_item = 0;
    for (uint64_t s = 0; s < 20; ++s) {
        same_seed += *eval::few_shot_indices(1000, 0, 3, s) == *eval::few_shot_indices(1000, 0, 3, s + 100);
        same_item += *eval::few_shot_indices(1000, s, 3, 1) == *eval::few_shot_indices(1000, s + 100, 3, 1);
    }
    EXPECT_EQ(same_seed, 0);
    EXPECT_EQ(same_item, 0);

    eval::task_set set;
    for (int i = 0; i < 4; ++i) {
        eval::task_item it;
        it.id = std::to_string(i);
        it.choices = {{"C" + std::to_string(i), " a"}, {"C" + std::to_string(i), " b"}};
        it.gold = i % 2;
        set.items.push_back(it);
        set.eval.push_back(static_cast<size_t>(i));
    }
    auto shot = eval::with_few_shot(set, 2, 2, 9);
    ASSERT_TRUE(shot.ok());
    auto picked = *eval::few_shot_indices(4, 2, 2, 9);
    std::string prefix;
    for (size_t i : picked) prefix += "C" + std::to_string(i) + (i % 2 ? " b" : " a") + "\n\n";
    EXPECT_EQ(shot->choices[0].context, prefix + "C2");
    EXPECT_EQ(shot->choices[1].context, prefix + "C2");
    EXPECT_EQ(shot->choices[1].continuation, " b");
}

const testing::loaded_model& stories() {
    return testing::bundled_stories();
}

engine::session_params params(const std::string& spec, int chunk) {
    engine::session_params sp;
    auto p = policy::params::parse(spec);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    sp.kv = *p;
    sp.prefill_chunk = chunk;
    return sp;
}

// The choice's log-likelihood by hand: one session over the whole sequence, token_nll of every scored token.
double direct_loglik(const eval::encoded_choice& e, const engine::session_params& sp) {
    auto s = engine::session::create(*stories().model, sp, static_cast<int64_t>(e.tokens.size()));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    std::vector<float> logits;
    const status st = (*s)->process(e.tokens, model::logits_mode::all, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    const auto n_vocab = static_cast<size_t>(stories().model->params().n_vocab);
    double ll = 0.0;
    for (size_t t = e.n_context; t < e.tokens.size(); ++t) {
        ll -=
            eval::token_nll(std::span<const float>(logits).subspan((t - 1) * n_vocab, n_vocab), e.tokens[t]);
    }
    return ll;
}

const std::string girl = "Once upon a time, there was a little girl named";

TEST(TaskScoring, EncodeChoiceSplitsTheJointEncoding) {
    auto e = eval::encode_choice(*stories().tok, {girl, " Lily."});
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    auto ctx = stories().tok->encode(girl, false, false);
    auto whole = stories().tok->encode(girl + " Lily.", false, false);
    ASSERT_TRUE(ctx.ok() && whole.ok());
    EXPECT_EQ(e->tokens.front(), stories().tok->bos());
    EXPECT_EQ(e->n_context, 1 + ctx->size());
    EXPECT_EQ(e->tokens.size(), 1 + whole->size());
    EXPECT_EQ(e->n_bytes, 6);
    // A trailing space of the context moves to the continuation.
    auto moved = eval::encode_choice(*stories().tok, {girl + " ", "Lily."});
    ASSERT_TRUE(moved.ok());
    EXPECT_EQ(moved->tokens, e->tokens);
    EXPECT_EQ(moved->n_context, e->n_context);
    EXPECT_FALSE(eval::encode_choice(*stories().tok, {girl, ""}).ok());
}

TEST(TaskScoring, LoglikEqualsTheSumOfTokenNllsOfADirectRun) {
    for (const char* spec : {"full", "h2o:budget=6", "h2o:budget=0.5,decay=0.98", "window:budget=5"}) {
        for (int chunk : {1, 4}) {
            SCOPED_TRACE(std::string(spec) + " chunk " + std::to_string(chunk));
            const auto sp = params(spec, chunk);
            for (const char* choice : {" Lily.", " xqzv.", " Lily. She loved to play with her toys."}) {
                auto e = eval::encode_choice(*stories().tok, {girl, choice});
                ASSERT_TRUE(e.ok()) << e.error().to_string();
                auto s = eval::continuation_loglik(*stories().model, e->tokens, e->n_context, sp);
                ASSERT_TRUE(s.ok()) << s.error().to_string();
                EXPECT_EQ(s->n_scored, static_cast<int64_t>(e->tokens.size() - e->n_context));
                EXPECT_LT(s->loglik, 0.0);
                EXPECT_NEAR(s->loglik, direct_loglik(*e, sp), 1e-9 * std::abs(s->loglik));
                if (std::string(spec) != "full") {
                    EXPECT_GT(s->evictions, 0);
                    EXPECT_GT(s->budget, 0);
                }
            }
        }
    }
    auto e = eval::encode_choice(*stories().tok, {girl, " Lily."});
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(eval::continuation_loglik(*stories().model, e->tokens, 0, params("full", 1)).ok());
    EXPECT_FALSE(
        eval::continuation_loglik(*stories().model, e->tokens, e->tokens.size(), params("full", 1)).ok());
}

// Hand-made items whose right choice is the model's own likely continuation; the gold sits at either index.
eval::task_set known_items() {
    eval::task_set set;
    set.task = "hand-made";
    set.path = "hand-made";
    auto add = [&set](std::string context, std::string good, std::string bad, int gold) {
        eval::task_item it;
        it.id = std::to_string(set.items.size());
        it.gold = gold;
        it.choices = {{context, gold == 0 ? good : bad}, {context, gold == 0 ? bad : good}};
        set.eval.push_back(set.items.size());
        set.items.push_back(it);
    };
    add(girl, " Lily.", " xqzv.", 0);
    add(girl, " Lily.", " xqzv.", 1);
    add("Once upon a", " time", " zebra", 1);
    add("Lily and Ben went to the park. They played on the", " swings.", " qwkp.", 0);
    return set;
}

TEST(TaskScoring, KnownAnswersAreChosenUnderEveryPolicy) {
    const auto set = known_items();
    for (const char* spec : {"full", "h2o:budget=0.5", "streaming:budget=0.5,sinks=1"}) {
        SCOPED_TRACE(spec);
        eval::task_options o;
        o.session = params(spec, 1);
        auto r = eval::evaluate_task(*stories().model, *stories().tok, set, o, nullptr);
        ASSERT_TRUE(r.ok()) << r.error().to_string();
        EXPECT_EQ(r->n_items, 4);
        EXPECT_EQ(r->n_sequences, 8);
        EXPECT_EQ(r->correct, 4);
        EXPECT_EQ(r->correct_norm, 4);
        EXPECT_DOUBLE_EQ(r->acc, 1.0);
        ASSERT_EQ(r->items.size(), 4u);
        EXPECT_EQ(r->items[1].gold, 1);
        EXPECT_EQ(r->items[1].pred, 1);
    }
    // A policy the library refuses fails before the first item, not in its name.
    eval::task_options o;
    o.session = params("h2o", 1);
    int calls = 0;
    auto r = eval::evaluate_task(*stories().model, *stories().tok, set, o,
                                 [&calls](int64_t, int64_t) { ++calls; });
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(calls, 0);
    EXPECT_NE(r.error().message().find("budget"), std::string::npos) << r.error().message();
    EXPECT_EQ(r.error().message().find("item"), std::string::npos) << r.error().message();
}

// On real items the bundled model is near chance: nothing is asserted about the level, only the accounting,
// and that a budget holding the whole sequence scores exactly as the full cache.
TEST(TaskScoring, CopaRunsAndAWholeSequenceBudgetEqualsFull) {
    SKIP_WITHOUT_DATA();
    auto set = eval::load_task("copa", data_dir);
    ASSERT_TRUE(set.ok()) << set.error().to_string();
    eval::task_options o;
    o.limit = 12;
    o.session = params("full", 1);
    auto full = eval::evaluate_task(*stories().model, *stories().tok, *set, o, nullptr);
    ASSERT_TRUE(full.ok()) << full.error().to_string();
    EXPECT_EQ(full->n_items, 12);
    EXPECT_EQ(full->n_sequences, 24);
    EXPECT_EQ(full->evictions, 0);
    EXPECT_GE(full->acc, 0.0);
    EXPECT_LE(full->acc, 1.0);
    EXPECT_EQ(full->items[0].index, set->eval[0]);

    o.session = params("h2o:budget=1.0", 1);
    auto whole = eval::evaluate_task(*stories().model, *stories().tok, *set, o, nullptr);
    ASSERT_TRUE(whole.ok()) << whole.error().to_string();
    EXPECT_EQ(whole->evictions, 0);
    EXPECT_GT(whole->mean_budget, 0.0);
    for (size_t i = 0; i < full->items.size(); ++i) {
        for (size_t c = 0; c < 2; ++c) {
            EXPECT_EQ(whole->items[i].scores[c].loglik, full->items[i].scores[c].loglik);
        }
    }

    o.session = params("h2o:budget=0.2", 1);
    o.shots = 2;
    int64_t calls = 0;
    auto shots =
        eval::evaluate_task(*stories().model, *stories().tok, *set, o, [&calls](int64_t done, int64_t total) {
            ++calls;
            EXPECT_EQ(done, calls);
            EXPECT_EQ(total, 12);
        });
    ASSERT_TRUE(shots.ok()) << shots.error().to_string();
    EXPECT_EQ(calls, 12);
    EXPECT_GT(shots->evictions, 0);
    EXPECT_GT(shots->n_tokens, full->n_tokens);  // the examples lengthen every sequence
}

}  // namespace
}  // namespace h2okv
