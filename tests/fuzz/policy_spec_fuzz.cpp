// libFuzzer target: arbitrary text as a policy spec ("h2o:budget=0.2,recent=8,...") and as the CLI's flag
// values. params::parse must refuse or accept with a status; an accepted spec must print back to a spec that
// parses to the same configuration (compared by text, so that decay=nan counts as equal), and
// kv_policy::create with a small layout must refuse it with a message or produce a policy that survives a few
// chunks.
//
//   fuzz_policy_spec -max_total_time=30 tests/fuzz/corpus/policy_spec
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/policy/policy.h"

namespace {

using namespace h2okv;

[[noreturn]] void fail(std::string_view what, std::string_view spec, std::string_view detail) {
    std::fprintf(stderr, "fuzz_policy_spec: %.*s\n  spec: '%.*s'\n  %.*s\n", static_cast<int>(what.size()),
                 what.data(), static_cast<int>(spec.size()), spec.data(), static_cast<int>(detail.size()),
                 detail.data());
    std::abort();
}

// Runs `run_length` positions in chunks of up to max_chunk with uniform rows; checks every unit's budget.
void drive(policy::kv_policy& pol, int64_t run_length, std::string_view spec) {
    const int64_t cap = pol.capacity();
    std::vector<double> row(static_cast<size_t>(cap), 0.0);
    const int max_chunk = pol.shape().max_chunk;
    for (int64_t first = 0; first < run_length;) {
        const int n = static_cast<int>(std::min<int64_t>(max_chunk, run_length - first));
        if (auto st = pol.begin_chunk(first, n); !st.ok()) fail("begin_chunk refused", spec, st.message());
        for (int i = 0; i < n; ++i) {
            for (int u = 0; u < pol.n_units(); ++u) {
                std::fill(row.begin(), row.end(), 0.0);
                const auto kept = pol.kept_slots(u);
                const auto chunk = pol.chunk_slots(u);
                const double w = 1.0 / static_cast<double>(kept.size() + static_cast<size_t>(i) + 1);
                for (const int32_t s : kept) row[static_cast<size_t>(s)] = w;
                for (int j = 0; j <= i; ++j) row[static_cast<size_t>(chunk[static_cast<size_t>(j)])] = w;
                pol.add_row(u, i, row.data());
            }
        }
        if (auto st = pol.end_chunk(); !st.ok()) fail("end_chunk refused", spec, st.message());
        // Each unit's own budget: with a schedule or shares (clause 11) units differ from the mean.
        const policy::resolved_params& c = pol.config();
        for (int u = 0; u < pol.n_units(); ++u) {
            const int64_t budget = c.unit_budget.empty() ? c.budget : c.unit_budget[static_cast<size_t>(u)];
            if (budget > 0 && pol.n_kept(u) > budget) {
                fail("more positions kept than the unit's budget", spec,
                     "unit " + std::to_string(u) + " keeps " + std::to_string(pol.n_kept(u)) + " of " +
                         std::to_string(budget));
            }
        }
        first += n;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    // The CLI hands single flag values to these two.
    (void)policy::budget_spec::parse(text);
    (void)policy::parse_granularity(text);
    if (auto b = policy::budget_spec::parse(text); b.ok()) {
        auto again = policy::budget_spec::parse(b->to_string());
        if (!again.ok() || !(*again == *b)) fail("budget does not round-trip", text, b->to_string());
        (void)b->resolve(static_cast<int64_t>(size) + 1);
    }

    auto p = policy::params::parse(text);
    if (!p.ok()) {
        if (p.error().message().empty()) fail("refused without a message", text, "");
        return 0;
    }
    const std::string printed = p->to_string();
    auto back = policy::params::parse(printed);
    if (!back.ok()) fail("to_string() does not parse", text, printed + ": " + back.error().message());
    if (back->to_string() != printed) fail("to_string() does not round-trip", text, printed);

    policy::layout l;
    l.n_layer = 2;
    l.n_kv_head = 2;
    l.n_head = 4;
    l.max_chunk = 3;
    l.max_positions = 24;
    const int64_t run_length = 20;
    auto pol = policy::kv_policy::create(*p, l, run_length);
    if (!pol.ok()) {
        if (pol.error().message().empty()) fail("create refused without a message", text, "");
        return 0;
    }
    // What the policy runs with is itself a spec that creates the same configuration.
    const std::string resolved = (*pol)->config().to_string();
    auto rp = policy::params::parse(resolved);
    if (!rp.ok()) fail("config().to_string() does not parse", text, resolved + ": " + rp.error().message());
    auto pol2 = policy::kv_policy::create(*rp, l, run_length);
    if (!pol2.ok()) fail("config().to_string() is refused", text, resolved + ": " + pol2.error().message());
    if (!((*pol2)->config() == (*pol)->config()))
        fail("config().to_string() creates another policy", text, resolved);
    drive(**pol, run_length, text);
    return 0;
}
