// The oracle of h2okv.simulate's test (test_h2okv.py): the same replay of recorded attention scores, driven
// through the brute-force reference of tests/policy/reference_policy.h, which shares no code with
// src/policy. The policy library only resolves the spec's defaults (tested on their own in tests/policy).
//
//   simulate_reference --policies                  the registered policy names, one per line
//   simulate_reference SPEC T CHUNK LOGITS [D KEYS]
//
// LOGITS: T * T float64 (row-major, row t = query t over positions 0..t) or "-" for none; KEYS: T * D
// float64. Prints a JSON list with one list of kept positions per chunk.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/reference_policy.h"

namespace {

std::vector<double> read_doubles(const std::string& path, size_t count) {
    std::vector<double> v(count);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(double)));
    if (!in) throw std::runtime_error("cannot read " + std::to_string(count) + " doubles from " + path);
    return v;
}

int run(int argc, char** argv) {
    using h2okv::testing::reference_policy;
    if (argc == 2 && std::string(argv[1]) == "--policies") {
        for (const auto& name : h2okv::policy::policy_names()) std::cout << name << "\n";
        return 0;
    }
    if (argc != 5 && argc != 7) {
        std::cerr << "usage: simulate_reference SPEC T CHUNK LOGITS|- [D KEYS]\n";
        return 2;
    }
    const std::string spec = argv[1];
    const int64_t t_len = std::stoll(argv[2]);
    const int chunk = std::stoi(argv[3]);
    const std::string logits_path = argv[4];
    const bool has_logits = logits_path != "-";
    const std::vector<double> logits =
        has_logits ? read_doubles(logits_path, t_len * t_len) : std::vector<double>{};
    const int64_t dim = argc == 7 ? std::stoll(argv[5]) : 0;
    const std::vector<double> keys = argc == 7 ? read_doubles(argv[6], t_len * dim) : std::vector<double>{};

    auto parsed = h2okv::policy::params::parse(spec);
    if (!parsed.ok()) throw std::runtime_error(parsed.error().to_string());
    h2okv::policy::layout l;
    l.max_chunk = chunk;
    l.max_positions = t_len;
    auto pol = h2okv::policy::kv_policy::create(*parsed, l, t_len);
    if (!pol.ok()) throw std::runtime_error(pol.error().to_string());
    const auto& c = (*pol)->config();
    const auto rule = reference_policy::rule_of(c.name);
    if (!rule)
        throw std::runtime_error("policy '" + c.name + "' has no rule in tests/policy/reference_policy.h");
    reference_policy ref(*rule, c.budget, c.recent, c.sinks, c.decay, /*n_units=*/1);
    ref.set_policy(c.name, c.extra, /*heads_per_unit=*/1);

    nlohmann::json out = nlohmann::json::array();
    for (int64_t first = 0; first < t_len; first += chunk) {
        const int n = static_cast<int>(std::min<int64_t>(chunk, t_len - first));
        const std::vector<int64_t> kept = ref.kept(0);
        ref.begin_chunk(first, n);
        for (int i = 0; i < n; ++i) {
            const int64_t t = first + i;
            if (dim > 0) {
                std::vector<float> key(static_cast<size_t>(dim));
                for (int64_t d = 0; d < dim; ++d) key[d] = static_cast<float>(keys[t * dim + d]);
                ref.add_key(0, t, key);
            }
            if (!has_logits) continue;
            std::vector<int64_t> attended = kept;
            for (int64_t p = first; p <= t; ++p) attended.push_back(p);
            double top = -INFINITY;
            for (int64_t p : attended) top = std::max(top, logits[t * t_len + p]);
            std::vector<double> e;
            double sum = 0.0;
            for (int64_t p : attended) {
                e.push_back(std::exp(logits[t * t_len + p] - top));
                sum = sum + e.back();
            }
            reference_policy::row r;
            for (size_t j = 0; j < attended.size(); ++j) r.emplace_back(attended[j], e[j] / sum);
            ref.add_row(0, i, r);
        }
        ref.end_chunk();
        out.push_back(ref.kept(0));
    }
    std::cout << out.dump() << "\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "simulate_reference: " << e.what() << "\n";
        return 1;
    }
}
