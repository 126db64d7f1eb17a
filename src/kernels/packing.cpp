// Weights packed at load time (kernels::packed_weights) and the x16 layouts (kernels/q4_k_x16.h,
// kernels/q8_0_x16.h).
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "h2okv/kernels/kernels.h"
#include "kernels/blocks.h"
#include "kernels/q4_k_x16.h"
#include "kernels/q8_0_x16.h"

namespace h2okv::kernels {
namespace detail {

bool q4_k_x16_fits(int64_t rows, int64_t cols) noexcept {
    return rows > 0 && rows % q4_k_x16_rows == 0 && cols > 0 && cols % q4_k_elems == 0;
}

size_t q4_k_x16_bytes(int64_t rows, int64_t cols) noexcept {
    return static_cast<size_t>(rows / q4_k_x16_rows) * static_cast<size_t>(cols / q4_k_elems) *
           q4_k_x16_block_bytes;
}

void pack_q4_k_x16(const std::byte* src, int64_t rows, int64_t cols, size_t row_bytes,
                   std::byte* dst) noexcept {
    const int64_t nb = cols / q4_k_elems;
    for (int64_t g = 0; g < rows / q4_k_x16_rows; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            std::byte* out = dst + static_cast<size_t>(g * nb + b) * q4_k_x16_block_bytes;
            for (int r = 0; r < q4_k_x16_rows; ++r) {
                const std::byte* block = src + static_cast<size_t>(g * q4_k_x16_rows + r) * row_bytes +
                                         static_cast<size_t>(b) * q4_k_bytes;
                for (int w = 0; w < 32; ++w)
                    std::memcpy(out + q4_k_x16_qs_offset + (w * q4_k_x16_rows + r) * 4,
                                block + q4_k_qs_offset + 4 * w, 4);
                const auto* scales = reinterpret_cast<const uint8_t*>(block + q4_k_scales_offset);
                auto* sc = reinterpret_cast<uint8_t*>(out + q4_k_x16_sc_offset);
                auto* m = reinterpret_cast<uint8_t*>(out + q4_k_x16_m_offset);
                for (int j = 0; j < 8; ++j)
                    scale_min_k4(j, scales, &sc[j * q4_k_x16_rows + r],
                                 &m[(j / 2 * q4_k_x16_rows + r) * 2 + j % 2]);
                std::memcpy(out + q4_k_x16_d_offset + 2 * r, block, 2);
                std::memcpy(out + q4_k_x16_dmin_offset + 2 * r, block + 2, 2);
            }
        }
    }
}

void unpack_q4_k_x16_block(const matrix_view& w, int64_t r, int64_t b, std::byte* block) noexcept {
    const int64_t nb = w.cols / q4_k_elems;
    const std::byte* in = w.data + static_cast<size_t>(r / q4_k_x16_rows * nb + b) * q4_k_x16_block_bytes;
    const auto lane = static_cast<size_t>(r % q4_k_x16_rows);
    std::memcpy(block, in + q4_k_x16_d_offset + 2 * lane, 2);
    std::memcpy(block + 2, in + q4_k_x16_dmin_offset + 2 * lane, 2);
    uint8_t sc[8];
    uint8_t m[8];
    const auto* psc = reinterpret_cast<const uint8_t*>(in + q4_k_x16_sc_offset);
    const auto* pm = reinterpret_cast<const uint8_t*>(in + q4_k_x16_m_offset);
    for (size_t j = 0; j < 8; ++j) {
        sc[j] = psc[j * q4_k_x16_rows + lane];
        m[j] = pm[(j / 2 * q4_k_x16_rows + lane) * 2 + j % 2];
    }
    pack_scale_min_k4(sc, m, reinterpret_cast<uint8_t*>(block + q4_k_scales_offset));
    for (size_t k = 0; k < 32; ++k)
        std::memcpy(block + q4_k_qs_offset + 4 * k, in + q4_k_x16_qs_offset + (k * q4_k_x16_rows + lane) * 4,
                    4);
}

bool q8_0_x16_fits(int64_t rows, int64_t cols) noexcept {
    return rows > 0 && rows % q8_0_x16_rows == 0 && cols > 0 && cols % q8_0_elems == 0;
}

size_t q8_0_x16_bytes(int64_t rows, int64_t cols) noexcept {
    return static_cast<size_t>(rows / q8_0_x16_rows) * static_cast<size_t>(cols / q8_0_elems) *
           q8_0_x16_block_bytes;
}

void pack_q8_0_x16(const std::byte* src, int64_t rows, int64_t cols, size_t row_bytes,
                   std::byte* dst) noexcept {
    const int64_t nb = cols / q8_0_elems;
    for (int64_t g = 0; g < rows / q8_0_x16_rows; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            std::byte* out = dst + static_cast<size_t>(g * nb + b) * q8_0_x16_block_bytes;
            for (int r = 0; r < q8_0_x16_rows; ++r) {
                const std::byte* block = src + static_cast<size_t>(g * q8_0_x16_rows + r) * row_bytes +
                                         static_cast<size_t>(b) * q8_0_bytes;
                for (int k = 0; k < 8; ++k) {
                    for (int i = 0; i < 4; ++i)
                        out[q8_0_x16_qs_offset + (k * q8_0_x16_rows + r) * 4 + i] =
                            block[2 + 4 * k + i] ^ std::byte{0x80};
                }
                std::memcpy(out + q8_0_x16_d_offset + 2 * r, block, 2);
            }
        }
    }
}

void unpack_q8_0_x16_block(const matrix_view& w, int64_t r, int64_t b, std::byte* block) noexcept {
    const int64_t nb = w.cols / q8_0_elems;
    const std::byte* in = w.data + static_cast<size_t>(r / q8_0_x16_rows * nb + b) * q8_0_x16_block_bytes;
    const auto lane = static_cast<size_t>(r % q8_0_x16_rows);
    std::memcpy(block, in + q8_0_x16_d_offset + 2 * lane, 2);
    for (size_t k = 0; k < 8; ++k) {
        for (size_t i = 0; i < 4; ++i)
            block[2 + 4 * k + i] =
                in[q8_0_x16_qs_offset + (k * q8_0_x16_rows + lane) * 4 + i] ^ std::byte{0x80};
    }
}

}  // namespace detail

namespace {

bool packing_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("H2OKV_PACK_WEIGHTS");
        return v == nullptr || std::string_view(v) != "0";
    }();
    return on;
}

}  // namespace

void packed_weights::release::operator()(std::byte* p) const noexcept {
    std::free(p);
}

matrix_view packed_weights::pack(const matrix_view& w, bool* packed) {
    if (packed != nullptr) *packed = false;
    if (!packing_enabled() || w.layout != weight_layout::rows) return w;
    const bool q4_k = w.type == core::tensor_type::q4_k && detail::q4_k_x16_fits(w.rows, w.cols);
    const bool q8_0 = w.type == core::tensor_type::q8_0 && detail::q8_0_x16_fits(w.rows, w.cols);
    if (!q4_k && !q8_0) return w;
    const size_t n = q4_k ? detail::q4_k_x16_bytes(w.rows, w.cols) : detail::q8_0_x16_bytes(w.rows, w.cols);
    // 64-byte aligned (a cache line: the packed words are read as whole vectors), the size rounded up to
    // whole lines as aligned_alloc wants.
    auto* dst = static_cast<std::byte*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
    if (dst == nullptr) return w;  // the plain rows work as well, only slower
    if (q4_k) {
        detail::pack_q4_k_x16(w.data, w.rows, w.cols, w.row_bytes, dst);
    } else {
        detail::pack_q8_0_x16(w.data, w.rows, w.cols, w.row_bytes, dst);
    }
    buffers_.emplace_back(dst);
    bytes_ += static_cast<int64_t>(n);
    if (packed != nullptr) *packed = true;
    return matrix_view{w.type,
                       dst,
                       w.rows,
                       w.cols,
                       n / static_cast<size_t>(w.rows),
                       q4_k ? weight_layout::q4_k_x16 : weight_layout::q8_0_x16};
}

}  // namespace h2okv::kernels
