// The one instruction-set decision for every dispatched loop: the kernels (h2okv/kernels/kernels.h) and the
// policy's score pass start with selected_isa(), the best ISA this CPU and OS support, or the one named by
// the environment variable H2OKV_ISA (scalar, avx2 or avx512) to force a path, e.g. to run the whole test
// suite on the scalar code (.ci/run does). Builds without x86 SIMD (non-x86, or -DH2OKV_KERNELS_NO_SIMD)
// support scalar only.
//
//   H2OKV_ISA=scalar ctest --preset ci        # every test on the scalar kernels and score pass
//   if (auto r = core::requested_isa(); !r.ok()) return fail(r.error());   // a tool refuses a bad value
#pragma once

#include <optional>

#include "h2okv/core/status.h"

namespace h2okv::core {

enum class cpu_isa { scalar, avx2, avx512 };
const char* cpu_isa_name(cpu_isa i) noexcept;  // "scalar", "avx2", "avx512"

// Whether this build has the ISA's code and the CPU (and, for avx512, the OS's saved register state) runs
// it: avx2 needs AVX2, FMA and F16C; avx512 needs AVX-512 F/BW/DQ/VL besides.
bool cpu_supports(cpu_isa i) noexcept;
// The best supported ISA (avx512 over avx2 over scalar).
cpu_isa detected_isa() noexcept;
// H2OKV_ISA's ISA: none when unset or empty; an error naming the value when it is not one of scalar, avx2,
// avx512, or names an ISA cpu_supports refuses.
result<std::optional<cpu_isa>> requested_isa();
// What dispatched code starts with: requested_isa() when it names one, else detected_isa() (a bad value,
// which tools refuse at start-up through requested_isa, is not applied).
cpu_isa selected_isa() noexcept;

}  // namespace h2okv::core
