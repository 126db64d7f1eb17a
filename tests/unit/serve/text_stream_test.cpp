// text_stream: stop strings cut wherever the tokens split them, held-back tails, characters split across
// tokens, malformed bytes; the pieces always concatenate to the whole text, whatever the token boundaries.
#include "h2okv/serve/text_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace h2okv::serve {
namespace {

// Feeds `pieces` and returns every take() (and the finish()) concatenated; *stopped tells whether it stopped.
std::string run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* stopped,
                std::vector<std::string>* out_pieces = nullptr) {
    text_stream ts(stops);
    std::string all;
    *stopped = false;
    for (const auto& p : pieces) {
        *stopped = ts.push(p);
        const std::string t = ts.take();
        if (out_pieces != nullptr) out_pieces->push_back(t);
        all += t;
        if (*stopped) break;
    }
    return all + ts.finish();
}

TEST(TextStream, NoStopsPassesTextThrough) {
    bool stopped = false;
    EXPECT_EQ(run({}, {"Once", " upon", " a time"}, &stopped), "Once upon a time");
    EXPECT_FALSE(stopped);
}

TEST(TextStream, StopStringSplitAcrossTokens) {
    bool stopped = false;
    std::vector<std::string> pieces;
    EXPECT_EQ(run({"END"}, {"abc E", "N", "Dxyz"}, &stopped, &pieces), "abc ");
    EXPECT_TRUE(stopped);
    // "E" could start the stop string: it is held back until "N" and "D" decide it.
    EXPECT_EQ(pieces, (std::vector<std::string>{"abc ", "", ""}));
}

TEST(TextStream, HeldBackTailReleasedWhenItIsNotAStop) {
    bool stopped = false;
    std::vector<std::string> pieces;
    EXPECT_EQ(run({"END"}, {"abc E", "NX", "y"}, &stopped, &pieces), "abc ENXy");
    EXPECT_FALSE(stopped);
    EXPECT_EQ(pieces, (std::vector<std::string>{"abc ", "ENX", "y"}));
}

TEST(TextStream, EarliestOfSeveralStops) {
    bool stopped = false;
    EXPECT_EQ(run({"\n\n", "b c"}, {"a b c\n\nd"}, &stopped), "a ");
    EXPECT_TRUE(stopped);
}

TEST(TextStream, StopInsideOneToken) {
    bool stopped = false;
    EXPECT_EQ(run({"lo"}, {"hello world"}, &stopped), "hel");
    EXPECT_TRUE(stopped);
}

TEST(TextStream, CharacterSplitAcrossTokensIsHeldWhole) {
    // "é" is C3 A9 and "€" is E2 82 AC: byte tokens deliver them a byte at a time.
    bool stopped = false;
    std::vector<std::string> pieces;
    EXPECT_EQ(run({}, {"caf", "\xC3", "\xA9 ", "\xE2", "\x82", "\xAC!"}, &stopped, &pieces), "café €!");
    EXPECT_EQ(pieces, (std::vector<std::string>{"caf", "", "\xC3\xA9 ", "", "", "\xE2\x82\xAC!"}));
}

TEST(TextStream, MalformedBytesBecomeReplacementCharacters) {
    bool stopped = false;
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(run({}, {"a\xFF", "b"}, &stopped), "a" + fffd + "b");
    // A lead byte whose character never completes: U+FFFD when the next byte shows it, or at the end.
    EXPECT_EQ(run({}, {"\xE2\x82", "x"}, &stopped), fffd + fffd + "x");
    EXPECT_EQ(run({}, {"x\xE2\x82"}, &stopped), "x" + fffd + fffd);
    // Overlong forms and surrogates are malformed.
    EXPECT_EQ(sanitize_utf8("\xC0\xAF"), fffd + fffd);
    EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), fffd + fffd + fffd);
    EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);
    EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98\x80 ok"), "\xF0\x9F\x98\x80 ok");
}

TEST(TextStream, PiecesConcatenateToTheWholeTextUnderAnySplit) {
    const std::string text = "The cat sat.\n\nThe \xE2\x82\xAC dog ran. END of it \xFF\xC3\xA9.";
    const std::vector<std::vector<std::string>> stop_sets = {{}, {"END"}, {"\n\n"}, {"dog", "xyz"}, {"zzz"}};
    std::mt19937 rng(7);
    for (const auto& stops : stop_sets) {
        bool whole_stopped = false;
        const std::string whole = run(stops, {text}, &whole_stopped);
        for (int trial = 0; trial < 200; ++trial) {
            std::vector<std::string> pieces;
            for (size_t i = 0; i < text.size();) {
                const size_t n = 1 + rng() % 4;
                pieces.push_back(text.substr(i, n));
                i += n;
            }
            bool stopped = false;
            EXPECT_EQ(run(stops, pieces, &stopped), whole) << "stops " << stops.size() << " trial " << trial;
            EXPECT_EQ(stopped, whole_stopped);
        }
    }
}

TEST(TextStream, EmptyStopStringsAreIgnored) {
    bool stopped = false;
    EXPECT_EQ(run({""}, {"abc"}, &stopped), "abc");
    EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace h2okv::serve
