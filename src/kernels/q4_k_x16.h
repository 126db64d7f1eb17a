// Q4_K weights repacked at load time for the integer products (kernels/q8k.h): 16 rows interleaved, so that a
// vector's lane r holds row r and one load feeds every row of a tile. The packing is lossless (unpack
// restores ggml's blocks byte for byte) and only moves bytes: the products over it are the exact sequence of
// kernels/q8k.h, the bits of the plain layout.
//
// A matrix of R rows (R a multiple of 16) and nb = cols / 256 blocks is R / 16 groups one after another;
// group g holds its rows' block b at g * nb * q4_k_x16_block_bytes + b * q4_k_x16_block_bytes, as
//   qs   [32 words][16 rows] uint32  word 8p + k: bytes qs[32p + 4k .. +4] of the row (low nibbles:
//                                    elements 64p + 4k .. +4 of sub-block 2p; high: 64p + 32 + 4k ..)
//   sc   [8][16]  uint8              the 6-bit scale of sub-block j
//   m    [4][16][2] uint8            the 6-bit mins of sub-blocks 2p and 2p + 1 (an int16 pair per row)
//   d    [16] fp16, dmin [16] fp16   as in the block
// 148 bytes per row and block against the plain 144: the scales are unpacked once instead of at every
// product, and decode reads about as many bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels::detail {

inline constexpr int64_t q4_k_x16_rows = 16;
inline constexpr size_t q4_k_x16_qs_offset = 0;
inline constexpr size_t q4_k_x16_sc_offset = 2048;
inline constexpr size_t q4_k_x16_m_offset = 2048 + 128;
inline constexpr size_t q4_k_x16_d_offset = 2048 + 256;
inline constexpr size_t q4_k_x16_dmin_offset = 2048 + 256 + 32;
inline constexpr size_t q4_k_x16_block_bytes = 2048 + 256 + 64;

// Whether a Q4_K matrix of this shape can be packed (rows a multiple of 16, cols of 256).
bool q4_k_x16_fits(int64_t rows, int64_t cols) noexcept;
// Bytes of the packed matrix.
size_t q4_k_x16_bytes(int64_t rows, int64_t cols) noexcept;
// Packs a plain Q4_K matrix (rows `row_bytes` apart) into dst (q4_k_x16_bytes(rows, cols) bytes).
void pack_q4_k_x16(const std::byte* src, int64_t rows, int64_t cols, size_t row_bytes,
                   std::byte* dst) noexcept;
// Block b of row r of a packed matrix view as ggml's plain block (144 bytes into `block`).
void unpack_q4_k_x16_block(const matrix_view& w, int64_t r, int64_t b, std::byte* block) noexcept;

}  // namespace h2okv::kernels::detail
