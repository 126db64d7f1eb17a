// Synthetic models for the engine tests, built in memory, and random token ids for them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/model/synth.h"

namespace h2okv::testing {

// A synthetic model (F32 unless told), with the bytes and the parsed file its weights point into.
struct synthetic_model {
    std::vector<std::byte> bytes;
    std::unique_ptr<gguf::file> file;
    std::unique_ptr<model::model> model;
};

inline synthetic_model load_synthetic(const model::synth_shape& shape, uint64_t seed,
                                      gguf::tensor_type type = gguf::tensor_type::f32) {
    synthetic_model r;
    auto bytes = model::synthesize_model(shape, type, seed);
    EXPECT_TRUE(bytes.ok()) << bytes.error().to_string();
    if (!bytes.ok()) return r;
    r.bytes = std::move(bytes).value();
    auto file = gguf::file::parse(r.bytes.data(), r.bytes.size());
    EXPECT_TRUE(file.ok()) << file.error().to_string();
    if (!file.ok()) return r;
    r.file = std::move(file).value();
    auto m = model::model::load(*r.file);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    if (m.ok()) r.model = std::move(m).value();
    return r;
}

// BOS, then n - 1 ids drawn from [3, n_vocab).
inline std::vector<int32_t> random_ids(size_t n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> tokens{1};
    while (tokens.size() < n)
        tokens.push_back(static_cast<int32_t>(3 + rng() % static_cast<uint32_t>(n_vocab - 3)));
    return tokens;
}

}  // namespace h2okv::testing
