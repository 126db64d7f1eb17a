#include "gguf/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace h2okv::gguf::detail {
namespace {

std::string hash_of(const std::string& s) {
    return sha256_hex(s.data(), s.size());
}

TEST(Sha256, KnownVectors) {
    EXPECT_EQ(hash_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hash_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hash_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hash_of(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries (55/56 bytes fit one or two final blocks), checked against Python's
// hashlib over bytes (7 i + 3) mod 256.
TEST(Sha256, PaddingBoundaries) {
    const std::pair<size_t, const char*> cases[] = {
        {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
        {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
        {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
        {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
        {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
        {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
        {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
        {1000, "1e9bc38cbf860b9ec31918b065f9b52476c549a782e0e7990bed8ce3868d2371"},
    };
    for (const auto& [n, expected] : cases) {
        std::vector<unsigned char> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<unsigned char>((i * 7 + 3) % 256);
        EXPECT_EQ(sha256_hex(data.data(), n), expected) << "length " << n;
    }
}

TEST(Sha256, PiecewiseUpdatesMatchOneShot) {
    std::vector<unsigned char> data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 7 + 3) % 256);
    for (size_t piece : {1, 3, 63, 64, 65, 200}) {
        sha256 h;
        for (size_t at = 0; at < data.size(); at += piece)
            h.update(data.data() + at, std::min(piece, data.size() - at));
        EXPECT_EQ(h.hex_digest(), "1e9bc38cbf860b9ec31918b065f9b52476c549a782e0e7990bed8ce3868d2371")
            << "pieces of " << piece;
    }
}

}  // namespace
}  // namespace h2okv::gguf::detail
