// libFuzzer target: a policy driven by fuzzed attention rows, checked against SPEC.md's eviction contract.
//
// Input: 9 header bytes choose the policy, granularity, layout, budget/recent/sinks/decay (each may be left
// unset to take the policy's default) and the run length; the remaining bytes are the row weights (one byte
// per attended position, /64, cycled) and a null-row mask. After every chunk:
//  - each unit holds at most `budget` positions;
//  - no victim is a sink (position < sinks) or among the `recent` largest positions held;
//  - the kept sets equal the brute-force reference's (tests/policy/reference_policy.h), and so do the
//    scores, bit for bit, for policies that read attention;
// and a second policy fed the same rows ends with the same kept sets and bit-identical scores.
//
//   fuzz_policy_rows -max_total_time=30 tests/fuzz/corpus/policy_rows
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/reference_policy.h"

namespace {

using namespace h2okv;

struct input {
    const uint8_t* data;
    size_t size;
    size_t at = 0;
    uint8_t next() {
        if (size == 0) return 0;
        const uint8_t b = data[at % size];
        ++at;
        return b;
    }
};

struct run_record {
    std::vector<std::vector<int64_t>> kept;  // per unit, after the last chunk
    std::vector<std::vector<double>> scores;
};

[[noreturn]] void fail(const policy::kv_policy& pol, const std::string& what) {
    std::fprintf(stderr, "fuzz_policy_rows: %s: %s\n", pol.config().to_string().c_str(), what.c_str());
    std::abort();
}

std::string show(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (const int64_t x : v) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
    return s + "]";
}

// Feeds the run to `pol` (and to `ref` when given), checking the contract after every chunk.
run_record drive(policy::kv_policy& pol, testing::reference_policy* ref, int64_t run_length, input rows) {
    const int n_units = pol.n_units();
    const auto& cfg = pol.config();
    std::vector<double> row(static_cast<size_t>(pol.capacity()), 0.0);
    testing::reference_policy::row ref_row;
    for (int64_t first = 0; first < run_length;) {
        const int n =
            static_cast<int>(std::min<int64_t>(1 + rows.next() % pol.shape().max_chunk, run_length - first));
        if (auto st = pol.begin_chunk(first, n); !st.ok()) fail(pol, "begin_chunk: " + st.message());
        if (ref) ref->begin_chunk(first, n);
        for (int i = 0; i < n; ++i) {
            for (int u = 0; u < n_units; ++u) {
                if (rows.next() % 8 == 0) continue;  // a null row
                const auto kept = pol.kept_slots(u);
                const auto chunk = pol.chunk_slots(u);
                const auto pos = pol.slot_positions(u);
                std::fill(row.begin(), row.end(), 0.0);
                ref_row.clear();
                const auto attend = [&](int32_t slot) {
                    const double w = rows.next() / 64.0;
                    row[static_cast<size_t>(slot)] = w;
                    ref_row.emplace_back(pos[static_cast<size_t>(slot)], w);
                };
                for (const int32_t s : kept) attend(s);
                for (int j = 0; j <= i; ++j) attend(chunk[static_cast<size_t>(j)]);
                pol.add_row(u, i, row.data());
                if (ref) ref->add_row(u, i, ref_row);
            }
        }
        if (auto st = pol.end_chunk(); !st.ok()) fail(pol, "end_chunk: " + st.message());
        if (ref) ref->end_chunk();
        const int64_t end = first + n;
        for (int u = 0; u < n_units; ++u) {
            if (cfg.budget > 0 && pol.n_kept(u) > cfg.budget) {
                fail(pol, "unit " + std::to_string(u) + " keeps " + std::to_string(pol.n_kept(u)) +
                              " positions, budget " + std::to_string(cfg.budget));
            }
            for (const int64_t v : pol.victims(u)) {
                if (v < cfg.sinks) fail(pol, "evicted sink position " + std::to_string(v));
                if (v >= end - cfg.recent) fail(pol, "evicted recent position " + std::to_string(v));
            }
            if (ref) {
                const auto kept = pol.kept_positions(u);
                if (kept != ref->kept(u)) {
                    fail(pol, "after chunk [" + std::to_string(first) + ", " + std::to_string(end) +
                                  ") unit " + std::to_string(u) + " keeps " + show(kept) +
                                  ", the reference " + show(ref->kept(u)));
                }
                // Policies that read no attention keep no scores (the reference accumulates them anyway).
                if (!pol.needs_attention()) continue;
                const auto slots = pol.slot_positions(u);
                const auto scores = pol.slot_scores(u);
                for (size_t s = 0; s < slots.size(); ++s) {
                    if (slots[s] < 0) continue;
                    const double expected = ref->scores(u).at(slots[s]);
                    if (std::memcmp(&expected, &scores[s], sizeof(double)) != 0) {
                        fail(pol,
                             "score of position " + std::to_string(slots[s]) + " differs from the reference");
                    }
                }
            }
        }
        first = end;
    }
    run_record r;
    for (int u = 0; u < n_units; ++u) {
        r.kept.push_back(pol.kept_positions(u));
        std::vector<double> by_position;
        const auto slots = pol.slot_positions(u);
        const auto scores = pol.slot_scores(u);
        for (const int64_t p : r.kept.back()) {
            for (size_t s = 0; s < slots.size(); ++s) {
                if (slots[s] == p) by_position.push_back(scores[s]);
            }
        }
        r.scores.push_back(std::move(by_position));
    }
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr size_t k_header = 9;
    if (size < k_header) return 0;
    const auto names = policy::policy_names();
    policy::params p;
    p.name = names[data[0] % names.size()];
    p.gran = static_cast<policy::granularity>(data[1] % 3);
    policy::layout l;
    l.n_layer = 1 + (data[2] & 1);
    l.n_kv_head = 1 + ((data[2] >> 1) & 1);
    l.n_head = l.n_kv_head * (1 + ((data[2] >> 2) & 1));
    l.max_chunk = 1 + data[3] % 4;
    const int64_t run_length = 1 + data[8] % 48;
    l.max_positions = run_length;
    if (data[4] & 0x80) {
        p.budget = policy::budget_spec::of_length((1 + data[4] % 64) / 64.0);
    } else if (data[4] != 0) {
        p.budget = policy::budget_spec::count(data[4] % 20);
    }
    if (data[5] & 0x80) p.recent = data[5] % 12;
    if (data[6] & 0x80) p.sinks = data[6] % 6;
    if (data[7] & 0x80) {
        constexpr double k_decays[] = {1.0, 0.5, 0.9, 0.99, 0.0, -1.0};
        p.decay = k_decays[data[7] % 6];
    }
    auto pol = policy::kv_policy::create(p, l, run_length);
    if (!pol.ok()) {
        if (pol.error().message().empty()) std::abort();
        return 0;
    }
    const auto& cfg = (*pol)->config();
    const auto rule = testing::reference_policy::rule_of(cfg.name);
    if (!rule) {
        std::fprintf(stderr, "fuzz_policy_rows: no reference rule for policy '%s'\n", cfg.name.c_str());
        std::abort();
    }
    // Key-scored policies (l2norm, keydiff, the proxy) rank by keys this target does not generate; the
    // conformance suite drives them with keys.
    if ((*pol)->needs_keys()) return 0;
    testing::reference_policy ref(*rule, cfg.budget, cfg.recent, cfg.sinks, cfg.decay, (*pol)->n_units());
    ref.set_policy(cfg.name, cfg.extra, static_cast<int>((*pol)->heads_of(0).size()));
    const input rows{data + k_header, size - k_header};
    const run_record first = drive(**pol, &ref, run_length, rows);

    auto again = policy::kv_policy::create(p, l, run_length);
    if (!again.ok()) fail(**pol, "a second create() refused the same parameters: " + again.error().message());
    const run_record second = drive(**again, nullptr, run_length, rows);
    if (first.kept != second.kept) fail(**pol, "two runs on the same rows keep different sets");
    for (size_t u = 0; u < first.scores.size(); ++u) {
        if (first.scores[u].size() != second.scores[u].size() ||
            std::memcmp(first.scores[u].data(), second.scores[u].data(),
                        first.scores[u].size() * sizeof(double)) != 0) {
            fail(**pol, "two runs on the same rows end with different scores in unit " + std::to_string(u));
        }
    }
    // reset() must bring back the state right after create(): a third run on the reset policy agrees too.
    (*again)->reset();
    const run_record third = drive(**again, nullptr, run_length, rows);
    if (third.kept != first.kept) fail(**pol, "a run after reset() keeps different sets");
    return 0;
}
