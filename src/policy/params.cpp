// Parameter types: granularity, budgets, the policy spec string, resolved parameters and the layout.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/registry.h"

namespace h2okv::policy {
namespace {

constexpr const char* k_param_names =
    "budget, recent, sinks, decay, granularity, positions, schedule, ratio, shares, recents, decays";

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

template <class T>
bool parse_number(std::string_view text, T& out) {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return ec == std::errc() && ptr == end && !text.empty();
}

// The shortest text that parses back to f and still reads as a fraction (it has a decimal point).
std::string fraction_text(double f) {
    std::string s = fmt::format("{}", f);
    if (s.find('.') == std::string::npos) {
        const size_t e = s.find('e');
        s.insert(e == std::string::npos ? s.size() : e, ".0");
    }
    return s;
}

// "1.5/0.5/1" -> {1.5, 0.5, 1}: every item a number.
result<std::vector<double>> parse_list(std::string_view key, std::string_view value) {
    std::vector<double> out;
    while (true) {
        const size_t slash = value.find('/');
        const std::string_view item = trim(value.substr(0, slash));
        double v = 0.0;
        if (!parse_number(item, v)) {
            return invalid_argument("{}: '{}' is not a number; expected numbers separated by '/' (1.2/0.8)",
                                    key, item);
        }
        out.push_back(v);
        if (slash == std::string_view::npos) break;
        value = value.substr(slash + 1);
    }
    return out;
}

std::string list_text(const std::vector<double>& v) {
    return fmt::format("{}", fmt::join(v, "/"));
}

}  // namespace

const char* budget_schedule_name(budget_schedule s) {
    return s == budget_schedule::pyramid ? "pyramid" : "uniform";
}

result<budget_schedule> parse_budget_schedule(std::string_view s) {
    for (budget_schedule b : {budget_schedule::uniform, budget_schedule::pyramid}) {
        if (s == budget_schedule_name(b)) return b;
    }
    return invalid_argument("unknown budget schedule '{}'; valid: uniform, pyramid", s);
}

bool resolved_params::uneven_budgets() const {
    return std::any_of(unit_budget.begin(), unit_budget.end(),
                       [&](int64_t b) { return b != unit_budget.front(); });
}

const char* granularity_name(granularity g) {
    switch (g) {
        case granularity::head: return "head";
        case granularity::layer: return "layer";
        case granularity::model: return "model";
    }
    return "unknown";
}

result<granularity> parse_granularity(std::string_view s) {
    for (granularity g : {granularity::head, granularity::layer, granularity::model}) {
        if (s == granularity_name(g)) return g;
    }
    return invalid_argument("unknown granularity '{}'; valid: head, layer, model", s);
}

const char* position_mode_name(position_mode m) {
    return m == position_mode::rolling ? "rolling" : "original";
}

result<position_mode> parse_position_mode(std::string_view s) {
    for (position_mode m : {position_mode::original, position_mode::rolling}) {
        if (s == position_mode_name(m)) return m;
    }
    return invalid_argument("unknown position mode '{}'; valid: original, rolling", s);
}

result<budget_spec> budget_spec::parse(std::string_view text) {
    if (text.find('.') != std::string_view::npos) {
        double f = 0.0;
        if (!parse_number(text, f)) {
            return invalid_argument(
                "budget '{}' is not a number; expected a token count like 256 or a fraction "
                "like 0.2",
                text);
        }
        if (!(f > 0.0 && f <= 1.0)) {
            return invalid_argument("budget fraction {} must be in (0, 1] (a share of the run's length)",
                                    text);
        }
        return of_length(f);
    }
    int64_t n = 0;
    if (!parse_number(text, n)) {
        return invalid_argument("budget '{}' is neither a token count like 256 nor a fraction like 0.2",
                                text);
    }
    if (n < 1) return invalid_argument("budget {} must be >= 1 token", n);
    return count(n);
}

result<int64_t> budget_spec::resolve(int64_t run_length) const {
    if (!is_fraction) {
        if (tokens < 1) return invalid_argument("budget {} must be >= 1 token", tokens);
        return tokens;
    }
    if (!(fraction > 0.0 && fraction <= 1.0)) {
        return invalid_argument("budget fraction {} must be in (0, 1]", fraction_text(fraction));
    }
    constexpr int64_t k_max_run = int64_t{1} << 53;  // beyond it f * N is no longer exact in double
    if (run_length < 1 || run_length > k_max_run) {
        return invalid_argument(
            "budget {} is a fraction of the run's length, which must be in [1, 2^53]; got {}",
            fraction_text(fraction), run_length);
    }
    const double tokens_f = std::floor(fraction * static_cast<double>(run_length));
    return std::max<int64_t>(1, static_cast<int64_t>(tokens_f));
}

std::string budget_spec::to_string() const {
    return is_fraction ? fraction_text(fraction) : fmt::format("{}", tokens);
}

result<params> params::parse(std::string_view spec) {
    const auto fail = [&](const status& s) { return s.with_context(fmt::format("policy spec '{}'", spec)); };
    params p;
    const size_t colon = spec.find(':');
    const std::string_view name = trim(spec.substr(0, colon));
    if (detail::find_policy(name) == nullptr) {
        return fail(
            invalid_argument("unknown policy '{}'; valid: {}", name, fmt::join(policy_names(), ", ")));
    }
    p.name = std::string(name);
    if (colon == std::string_view::npos) return p;

    std::string_view rest = spec.substr(colon + 1);
    if (trim(rest).empty()) return p;
    std::vector<std::string_view> seen;
    while (true) {
        const size_t comma = rest.find(',');
        const std::string_view item = trim(rest.substr(0, comma));
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos) {
            return fail(invalid_argument("expected name=value, got '{}'", item));
        }
        const std::string_view key = trim(item.substr(0, eq));
        const std::string_view value = trim(item.substr(eq + 1));
        for (std::string_view s : seen) {
            if (s == key) return fail(invalid_argument("parameter '{}' is given twice", key));
        }
        seen.push_back(key);
        if (key == "budget") {
            auto b = budget_spec::parse(value);
            if (!b.ok()) return fail(b.error());
            p.budget = *b;
        } else if (key == "recent" || key == "sinks") {
            int64_t v = 0;
            if (!parse_number(value, v))
                return fail(invalid_argument("{} '{}' is not an integer", key, value));
            (key == "recent" ? p.recent : p.sinks) = v;
        } else if (key == "decay") {
            double v = 0.0;
            if (!parse_number(value, v)) return fail(invalid_argument("decay '{}' is not a number", value));
            p.decay = v;
        } else if (key == "granularity") {
            auto g = parse_granularity(value);
            if (!g.ok()) return fail(g.error());
            p.gran = *g;
        } else if (key == "positions") {
            auto m = parse_position_mode(value);
            if (!m.ok()) return fail(m.error());
            p.positions = *m;
        } else if (key == "schedule") {
            auto b = parse_budget_schedule(value);
            if (!b.ok()) return fail(b.error());
            p.schedule = *b;
        } else if (key == "ratio") {
            double v = 0.0;
            if (!parse_number(value, v)) return fail(invalid_argument("ratio '{}' is not a number", value));
            p.ratio = v;
        } else if (key == "shares" || key == "recents" || key == "decays") {
            auto list = parse_list(key, value);
            if (!list.ok()) return fail(list.error());
            (key == "shares" ? p.shares : key == "recents" ? p.recents : p.decays) = std::move(*list);
        } else {
            const detail::policy_entry* entry = detail::find_policy(p.name);
            std::string valid = k_param_names;
            bool known = false;
            for (const extra_param_def& x : entry->extra) {
                valid += fmt::format(", {}", x.name);
                known = known || key == x.name;
            }
            if (!known) {
                return fail(invalid_argument("unknown parameter '{}'; valid: {}", key, valid));
            }
            double v = 0.0;
            if (!parse_number(value, v)) {
                return fail(invalid_argument("{} '{}' is not a number", key, value));
            }
            p.extra.emplace(std::string(key), v);
        }
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    return p;
}

std::string params::to_string() const {
    std::vector<std::string> items;
    if (budget) items.push_back("budget=" + budget->to_string());
    if (recent) items.push_back(fmt::format("recent={}", *recent));
    if (sinks) items.push_back(fmt::format("sinks={}", *sinks));
    if (decay) items.push_back(fmt::format("decay={}", *decay));
    if (gran) items.push_back(fmt::format("granularity={}", granularity_name(*gran)));
    if (positions != position_mode::original) items.emplace_back("positions=rolling");
    for (const auto& [key, value] : extra) items.push_back(fmt::format("{}={}", key, value));
    if (schedule != budget_schedule::uniform)
        items.push_back(fmt::format("schedule={}", budget_schedule_name(schedule)));
    if (ratio) items.push_back(fmt::format("ratio={}", *ratio));
    if (!shares.empty()) items.push_back("shares=" + list_text(shares));
    if (!recents.empty()) items.push_back("recents=" + list_text(recents));
    if (!decays.empty()) items.push_back("decays=" + list_text(decays));
    if (items.empty()) return name;
    return fmt::format("{}:{}", name, fmt::join(items, ","));
}

std::string resolved_params::to_string() const {
    std::vector<std::string> items;
    if (budget > 0) {
        items.push_back(fmt::format("budget={}", budget));
        // Units whose recent is their own default (floor of their budget / 2) re-derive it from the
        // allocation, so recent is written only when every unit protects the same.
        const bool one_recent =
            std::all_of(unit_recent.begin(), unit_recent.end(), [&](int64_t r) { return r == recent; });
        if (one_recent || !recents.empty()) items.push_back(fmt::format("recent={}", recent));
        items.push_back(fmt::format("sinks={}", sinks));
        if (decay != 1.0) items.push_back(fmt::format("decay={}", decay));
    }
    // The granularity and the policy's own parameters where they differ from its defaults (parse restores
    // the defaults).
    params bare;
    bare.name = name;
    if (gran != granularity_of(bare)) items.push_back(fmt::format("granularity={}", granularity_name(gran)));
    const detail::policy_entry* entry = detail::find_policy(name);
    if (positions != position_mode::original) items.emplace_back("positions=rolling");
    for (const auto& [key, value] : extra) {
        bool is_default = false;
        if (entry != nullptr) {
            for (const extra_param_def& x : entry->extra)
                is_default = is_default || (key == x.name && value == x.default_value);
        }
        if (!is_default) items.push_back(fmt::format("{}={}", key, value));
    }
    if (schedule != budget_schedule::uniform) {
        items.push_back(fmt::format("schedule={}", budget_schedule_name(schedule)));
        items.push_back(fmt::format("ratio={}", ratio));
    }
    if (!shares.empty()) items.push_back("shares=" + list_text(shares));
    if (!recents.empty()) items.push_back("recents=" + list_text(recents));
    if (!decays.empty()) items.push_back("decays=" + list_text(decays));
    if (items.empty()) return name;
    return fmt::format("{}:{}", name, fmt::join(items, ","));
}

status layout::validate() const {
    const auto positive = [](const char* what, int64_t v) {
        return v >= 1 ? ok_status() : invalid_argument("layout: {} {} must be >= 1", what, v);
    };
    H2OKV_RETURN_IF_ERROR(positive("n_layer", n_layer));
    H2OKV_RETURN_IF_ERROR(positive("n_kv_head", n_kv_head));
    H2OKV_RETURN_IF_ERROR(positive("n_head", n_head));
    H2OKV_RETURN_IF_ERROR(positive("max_chunk", max_chunk));
    H2OKV_RETURN_IF_ERROR(positive("max_positions", max_positions));
    if (n_head % n_kv_head != 0) {
        return invalid_argument("layout: n_head {} must be a multiple of n_kv_head {}", n_head, n_kv_head);
    }
    constexpr int64_t k_int_max = std::numeric_limits<int>::max();
    if (int64_t{n_layer} * n_head > k_int_max) {
        return invalid_argument("layout: n_layer {} x n_head {} query heads exceed {}", n_layer, n_head,
                                k_int_max);
    }
    return ok_status();
}

}  // namespace h2okv::policy
