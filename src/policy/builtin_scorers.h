// The two score rules most built-in policies share, on the scorer base (h2okv/policy/scorer.h).
//
//   accumulated_attention: score = the contract's decayed sum of attention rows, lowest leaves first (h2o
//                          with its decay, tova with decay 0, keyformer before its noise).
//   recency:               no score, the oldest evictable position leaves first (window, streaming, full).
#pragma once

#include "h2okv/policy/scorer.h"

namespace h2okv::policy::detail {

class accumulated_attention final : public scorer {
public:
    accumulated_attention(const resolved_params& config, const layout& l)
        : scorer(config, l, {.source = score_source::attention}) {}
};

class recency final : public scorer {
public:
    recency(const resolved_params& config, const layout& l)
        : scorer(config, l, {.source = score_source::none, .order = victim_order::oldest}) {}
};

}  // namespace h2okv::policy::detail
