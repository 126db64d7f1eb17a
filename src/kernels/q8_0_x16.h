// Q8_0 weights repacked at load time for the integer products (kernels/q8_0_act.h): 16 rows interleaved, so
// that a vector's lane r holds row r and one load feeds every row of a tile four weights, each multiplied
// with four broadcast activations (vpdpbusd). The packing is lossless (unpack restores ggml's blocks byte for
// byte) and the bytes per row and block are the plain 34.
//
// A matrix of R rows (R a multiple of 16) and nb = cols / 32 blocks is R / 16 groups one after another;
// group g holds its rows' block b at (g * nb + b) * q8_0_x16_block_bytes, as
//   qs [8 words][16 rows] uint32   word k: bytes q[4k .. +4] of the row, each + 128 (XOR 0x80: unsigned,
//                                  the operand vpdpbusd multiplies unsigned)
//   d  [16] fp16                   the rows' scales
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels::detail {

inline constexpr int64_t q8_0_x16_rows = 16;
inline constexpr size_t q8_0_x16_qs_offset = 0;
inline constexpr size_t q8_0_x16_d_offset = 512;
inline constexpr size_t q8_0_x16_block_bytes = 512 + 32;

// Whether a Q8_0 matrix of this shape can be packed (rows a multiple of 16, cols of 32).
bool q8_0_x16_fits(int64_t rows, int64_t cols) noexcept;
// Bytes of the packed matrix.
size_t q8_0_x16_bytes(int64_t rows, int64_t cols) noexcept;
// Packs a plain Q8_0 matrix (rows `row_bytes` apart) into dst (q8_0_x16_bytes(rows, cols) bytes).
void pack_q8_0_x16(const std::byte* src, int64_t rows, int64_t cols, size_t row_bytes,
                   std::byte* dst) noexcept;
// Block b of row r of a packed matrix view as ggml's plain block (34 bytes into `block`).
void unpack_q8_0_x16_block(const matrix_view& w, int64_t r, int64_t b, std::byte* block) noexcept;

}  // namespace h2okv::kernels::detail
