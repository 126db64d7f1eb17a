#include "h2okv/core/cpu_isa.h"

#include <cstdlib>
#include <string>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(H2OKV_KERNELS_NO_SIMD)
#define H2OKV_CORE_X86 1
#include <cpuid.h>
#endif

namespace h2okv::core {
namespace {

#ifdef H2OKV_CORE_X86
// CPUID directly: clang 14's __builtin_cpu_supports does not know "f16c".
bool has_avx2() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    const unsigned leaf1_needed = bit_OSXSAVE | bit_FMA | bit_F16C;
    if ((ecx & leaf1_needed) != leaf1_needed) return false;
    // The OS must save the ymm state: XCR0 bits 1 and 2.
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6u) != 0x6u) return false;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ebx & bit_AVX2) != 0;
}

bool has_avx512() {
    if (!has_avx2()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // And the zmm state: XCR0 bits 5, 6, 7 (opmask, zmm0-15 upper halves, zmm16-31).
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0xE0u) != 0xE0u) return false;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const unsigned leaf7_needed = bit_AVX512F | bit_AVX512BW | bit_AVX512DQ | bit_AVX512VL;
    return (ebx & leaf7_needed) == leaf7_needed;
}
#endif

}  // namespace

const char* cpu_isa_name(cpu_isa i) noexcept {
    switch (i) {
        case cpu_isa::scalar: return "scalar";
        case cpu_isa::avx2: return "avx2";
        case cpu_isa::avx512: return "avx512";
    }
    return "unknown";
}

bool cpu_supports(cpu_isa i) noexcept {
#ifdef H2OKV_CORE_X86
    static const bool avx2 = has_avx2();
    static const bool avx512 = has_avx512();
    return i == cpu_isa::scalar || (i == cpu_isa::avx2 && avx2) || (i == cpu_isa::avx512 && avx512);
#else
    return i == cpu_isa::scalar;
#endif
}

cpu_isa detected_isa() noexcept {
    if (cpu_supports(cpu_isa::avx512)) return cpu_isa::avx512;
    if (cpu_supports(cpu_isa::avx2)) return cpu_isa::avx2;
    return cpu_isa::scalar;
}

result<std::optional<cpu_isa>> requested_isa() {
    const char* env = std::getenv("H2OKV_ISA");
    if (env == nullptr || *env == '\0') return std::optional<cpu_isa>{};
    const std::string v = env;
    for (cpu_isa i : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512}) {
        if (v != cpu_isa_name(i)) continue;
        if (!cpu_supports(i)) {
            return invalid_argument("H2OKV_ISA is '{}', which this CPU or build does not run (best: {})", v,
                                    cpu_isa_name(detected_isa()));
        }
        return std::optional<cpu_isa>{i};
    }
    return invalid_argument("H2OKV_ISA is '{}', expected scalar, avx2 or avx512", v);
}

cpu_isa selected_isa() noexcept {
    static const cpu_isa chosen = [] {
        auto r = requested_isa();
        return r.ok() && r->has_value() ? **r : detected_isa();
    }();
    return chosen;
}

}  // namespace h2okv::core
