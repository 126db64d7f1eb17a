// SHA-256 (FIPS 180-4), used to fingerprint model files: results files record the hash of the model they ran.
//
//   gguf::detail::sha256 h;
//   h.update(bytes, n);
//   std::string hex = h.hex_digest();  // 64 lowercase hex digits
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace h2okv::gguf::detail {

class sha256 {
public:
    sha256();
    void update(const void* data, size_t size);
    // Finishes the hash; the object must not be updated afterwards.
    std::array<uint8_t, 32> digest();
    std::string hex_digest();

private:
    void compress(const uint8_t* block);

    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> buffer_{};
    size_t buffered_ = 0;
    uint64_t total_bytes_ = 0;
};

// SHA-256 of `size` bytes at `data`, lowercase hex.
std::string sha256_hex(const void* data, size_t size);

}  // namespace h2okv::gguf::detail
