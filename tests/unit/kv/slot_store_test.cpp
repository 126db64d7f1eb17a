// The slot store keeps each row at its slot in the requested type; the memory pool admits by bytes.
#include "h2okv/kv/slot_store.h"

#include <gtest/gtest.h>

#include <vector>

#include "h2okv/kv/kv_cache.h"
#include "h2okv/kv/memory_pool.h"

namespace h2okv::kv {
namespace {

std::vector<float> row_values(const kernels::kv_rows& r, int32_t slot, int head_dim) {
    std::vector<float> out(static_cast<size_t>(head_dim));
    kernels::dequantize_row(r.type, r.data + static_cast<size_t>(slot) * r.row_bytes, head_dim, out.data());
    return out;
}

TEST(SlotStore, RowsLandInTheirSlotInTheirType) {
    for (kv_type type : {kv_type::f32, kv_type::f16, kv_type::q8_0, kv_type::q4_0, kv_type::q4_1}) {
        SCOPED_TRACE(kv_type_name(type));
        auto s = slot_store::create(2, 3, 32, 5, type);
        ASSERT_TRUE(s.ok()) << s.error().to_string();
        EXPECT_EQ(s->bytes(), slot_store::bytes_for(2, 3, 32, 5, type));
        EXPECT_EQ(s->bytes(), static_cast<int64_t>(2 * 2 * 3 * 5 * kv_row_bytes(type, 32)));
        std::vector<float> k(32), v(32);
        for (int i = 0; i < 32; ++i) {
            k[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i - 16);
            v[static_cast<size_t>(i)] = -0.5f * static_cast<float>(i);
        }
        s->write(1, 2, 4, k.data(), v.data());
        // Exact in every type: multiples of 0.25 and 0.5 with small magnitudes (q8_0: max 15.5 / 127 steps
        // would not be exact, so compare against the type's own rounding).
        std::vector<std::byte> rk(kv_row_bytes(type, 32));
        ASSERT_TRUE(type == kv_type::f32 ||
                    kernels::quantize_row(kv_tensor_type(type), k.data(), 32, rk.data()));
        const auto got = row_values(s->k(1, 2), 4, 32);
        if (type == kv_type::f32) {
            EXPECT_EQ(got, k);
        } else {
            std::vector<float> want(32);
            kernels::dequantize_row(kv_tensor_type(type), rk.data(), 32, want.data());
            EXPECT_EQ(got, want);
        }
        EXPECT_EQ(row_values(s->k(1, 2), 3, 32), std::vector<float>(32, 0.0f)) << "other slots untouched";
        EXPECT_EQ(row_values(s->v(0, 2), 4, 32), std::vector<float>(32, 0.0f)) << "other heads untouched";
    }
}

TEST(SlotStore, RefusesWhatItCannotHold) {
    auto s = slot_store::create(1, 1, 8, 4, kv_type::q8_0);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("multiple of 32"), std::string::npos) << s.error().message();
    EXPECT_FALSE(slot_store::create(1, 1, 48, 4, kv_type::q4_0).ok());
    EXPECT_FALSE(slot_store::create(1, 1, 48, 4, kv_type::q4_1).ok());
    EXPECT_EQ(kv_row_bytes(kv_type::q4_1, 64), 40u);  // ggml's block_q4_1: fp16 d and m, 16 bytes of nibbles
    EXPECT_EQ(kv_row_bytes(kv_type::q4_1, 48), 0u);
    EXPECT_FALSE(slot_store::create(1, 1, 32, 0, kv_type::f16).ok());
}

// Per-head capacities (contract clause 11): each head's rows are its own, back to back, and a write lands
// in its head only.
TEST(SlotStore, HeadsOfTheirOwnSizes) {
    const std::vector<int64_t> caps = {3, 7, 1, 5};  // 2 layers x 2 KV heads
    auto s = slot_store::create(2, 2, 8, caps, kv_type::f32);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    EXPECT_EQ(s->bytes(), 2 * 16 * 4 * 8);
    EXPECT_EQ(s->bytes(), slot_store::bytes_for(8, caps, kv_type::f32));
    EXPECT_EQ(s->capacity(), 7);
    for (int h = 0; h < 4; ++h) EXPECT_EQ(s->capacity(h / 2, h % 2), caps[static_cast<size_t>(h)]);
    std::vector<float> k(8, 1.5f), v(8, -2.0f);
    s->write(0, 1, 6, k.data(), v.data());  // the last row of the largest head
    s->write(1, 0, 0, v.data(), k.data());  // the only row of the smallest
    EXPECT_EQ(row_values(s->k(0, 1), 6, 8), k);
    EXPECT_EQ(row_values(s->v(1, 0), 0, 8), k);
    EXPECT_EQ(row_values(s->k(1, 1), 0, 8), std::vector<float>(8, 0.0f)) << "the next head untouched";
    EXPECT_EQ(s->k(1, 0).data - s->k(0, 0).data, static_cast<ptrdiff_t>(10 * 8 * sizeof(float)));
    EXPECT_FALSE(slot_store::create(2, 2, 8, std::vector<int64_t>{3, 7, 0, 5}, kv_type::f32).ok());
    EXPECT_FALSE(slot_store::create(2, 2, 8, std::vector<int64_t>{3, 7}, kv_type::f32).ok());
}

TEST(CacheFootprint, PlanIsWhatCreateAllocates) {
    model::hparams hp;
    hp.n_layer = 2;
    hp.n_head = 4;
    hp.n_kv_head = 2;
    hp.head_dim = 32;
    for (const char* spec : {"full", "h2o:budget=10", "window:budget=10", "tova:budget=0.5,granularity=layer",
                             "h2o:budget=10,schedule=pyramid", "window:budget=10,shares=1/3/2/2",
                             "tova:budget=0.5,schedule=pyramid,granularity=layer"}) {
        auto p = policy::params::parse(spec);
        ASSERT_TRUE(p.ok());
        auto fp = kv_cache::plan(hp, *p, 4, 40, 40, kv_type::f16);
        ASSERT_TRUE(fp.ok()) << fp.error().to_string();
        auto c = kv_cache::create(hp, *p, 4, 40, 40, kv_type::f16);
        ASSERT_TRUE(c.ok());
        EXPECT_EQ(fp->capacity, (*c)->capacity()) << spec;
        EXPECT_EQ(fp->kv_bytes, (*c)->bytes()) << spec;
        EXPECT_GT(fp->table_bytes, 0) << spec;
        EXPECT_EQ((*c)->footprint().total(), fp->total()) << spec;
        int64_t rows = 0;
        for (int64_t cap : fp->head_capacity) rows += cap;
        EXPECT_EQ(fp->kv_bytes, 2 * rows * static_cast<int64_t>(kv_row_bytes(kv_type::f16, 32))) << spec;
    }
    // The pyramid's layers really differ: budgets 15 and 5 (+ the chunk of 4).
    auto pyr =
        kv_cache::plan(hp, *policy::params::parse("h2o:budget=10,schedule=pyramid"), 4, 40, 40, kv_type::f16);
    ASSERT_TRUE(pyr.ok());
    EXPECT_EQ(pyr->head_capacity, (std::vector<int64_t>{19, 19, 9, 9}));
    auto bad = policy::params::parse("h2o:budget=100");
    ASSERT_TRUE(bad.ok());
    EXPECT_TRUE(kv_cache::plan(hp, *bad, 4, 40, 40, kv_type::f16).ok())
        << "a budget above the run holds it all";
    auto none = policy::params::parse("h2o");
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(kv_cache::plan(hp, *none, 4, 40, 40, kv_type::f16).ok()) << "h2o needs a budget";
}

TEST(MemoryPool, TakesWhatFitsAndGivesItBack) {
    memory_pool pool(1000);
    EXPECT_TRUE(pool.try_take(600));
    EXPECT_FALSE(pool.try_take(500));
    EXPECT_EQ(pool.used(), 600);
    EXPECT_TRUE(pool.try_take(400));
    EXPECT_EQ(pool.peak(), 1000);
    pool.give(600);
    EXPECT_EQ(pool.used(), 400);
    EXPECT_TRUE(pool.could_fit(1000));
    EXPECT_FALSE(pool.could_fit(1001));
    memory_pool unlimited;
    EXPECT_TRUE(unlimited.try_take(int64_t{1} << 50));
    EXPECT_TRUE(unlimited.could_fit(int64_t{1} << 60));
}

TEST(MemoryPool, ParsesByteSizes) {
    EXPECT_EQ(*parse_bytes("1024"), 1024);
    EXPECT_EQ(*parse_bytes("512MiB"), int64_t{512} << 20);
    EXPECT_EQ(*parse_bytes("512M"), int64_t{512} << 20);
    EXPECT_EQ(*parse_bytes("512mb"), int64_t{512} << 20);
    EXPECT_EQ(*parse_bytes("1.5GiB"), int64_t{3} << 29);
    EXPECT_EQ(*parse_bytes("64K"), 65536);
    EXPECT_EQ(*parse_bytes("0"), 0);
    for (const char* bad : {"", "MiB", "12XB", "-5", "1.2.3G", "5 M", "1e99T", "12MiBs"}) {
        auto r = parse_bytes(bad);
        EXPECT_FALSE(r.ok()) << bad;
        if (!r.ok()) {
            EXPECT_NE(r.error().message().find(bad), std::string::npos) << r.error().message();
        }
    }
    EXPECT_EQ(format_bytes(900), "900 B");
    EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace h2okv::kv
