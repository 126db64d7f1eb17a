// GGUF: the model file format of llama.cpp (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
//
// Layout (little-endian): magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count, then the
// metadata key/value pairs, then one info record per tensor (name, n_dims, dims[], type, offset relative to
// the data section), then padding to `general.alignment` (default 32), then the tensor data.
//
// The reader maps the file read-only and checks every offset, size, count and string length against the file
// before it is used; a malformed file is refused with a message naming the field, the value seen and what was
// expected. Tensor data is not copied: tensor_info::data points into the mapping, valid while the file lives.
//
//   H2OKV_ASSIGN_OR_RETURN(auto file, h2okv::gguf::file::open("models/stories260K.gguf"));
//   auto n_layer = file->get_u32("llama.block_count");     // result<uint32_t>
//   const auto* t = file->find_tensor("token_embd.weight");  // nullptr when absent
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "h2okv/core/status.h"

namespace h2okv::gguf {

// Metadata value types, numbered as in the file.
enum class value_type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};
const char* value_type_name(value_type t);

// Tensor element types, numbered as ggml's `ggml_type`. Only the ones h2okv knows are listed; others are
// refused by name and number.
enum class tensor_type : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q8_0 = 8,
    q4_k = 12,
    q6_k = 14,
    bf16 = 30,
};
// "F32", "Q8_0", ...; "type 17" for numbers h2okv does not know.
std::string tensor_type_name(uint32_t t);
bool is_known_tensor_type(uint32_t t);
// Elements per block and bytes per block (F32: 1 and 4; Q8_0: 32 and 34; Q4_K: 256 and 144 ...).
int64_t block_elements(tensor_type t);
int64_t block_bytes(tensor_type t);

// One metadata value. Arrays hold their elements (all of one type) as a vector of values.
struct value;
using array = std::vector<value>;
struct value {
    value_type type = value_type::u8;
    std::variant<uint64_t, int64_t, double, bool, std::string, array> data;

    // Integer value of any integer type (bool too); error for other types or out-of-range values.
    result<int64_t> as_int() const;
    result<double> as_float() const;  // f32, f64 or any integer type
    result<std::string> as_string() const;
    result<bool> as_bool() const;
};

struct tensor_info {
    std::string name;
    std::vector<int64_t> dims;  // ggml order: dims[0] is the fastest-varying (row length)
    tensor_type type = tensor_type::f32;
    uint64_t offset = 0;              // relative to the data section
    const std::byte* data = nullptr;  // into the mapped file
    int64_t n_elements() const;
    int64_t n_bytes() const;  // exact size of the data
};

class file {
public:
    // Maps and validates `path`. Vocabulary-only files (no tensors) are valid.
    static result<std::unique_ptr<file>> open(const std::string& path);
    // Parses a GGUF held in memory (the bytes must outlive the file object). Used by tests and fuzzers.
    static result<std::unique_ptr<file>> parse(const std::byte* data, size_t size,
                                               std::string name = "<memory>");
    ~file();
    file(const file&) = delete;
    file& operator=(const file&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    size_t file_size() const { return size_; }

    const std::map<std::string, value>& metadata() const { return metadata_; }
    const value* find(std::string_view key) const;  // nullptr when absent
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed getters: an error naming the key when it is absent or has another type.
    result<int64_t> get_int(std::string_view key) const;
    result<uint32_t> get_u32(std::string_view key) const;
    result<double> get_float(std::string_view key) const;
    result<std::string> get_string(std::string_view key) const;
    result<bool> get_bool(std::string_view key) const;
    // Array getters: every element converted; an error naming the key and the index that does not convert.
    result<std::vector<std::string>> get_string_array(std::string_view key) const;
    result<std::vector<double>> get_float_array(std::string_view key) const;
    result<std::vector<int64_t>> get_int_array(std::string_view key) const;
    // The same getters with a default for optional keys (a present key of the wrong type is still an error).
    result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
    result<double> get_float_or(std::string_view key, double fallback) const;
    result<std::string> get_string_or(std::string_view key, std::string fallback) const;

    const std::vector<tensor_info>& tensors() const { return tensors_; }
    const tensor_info* find_tensor(std::string_view name) const;  // nullptr when absent

    // SHA-256 of the whole file, lowercase hex (results files record the model hash).
    std::string sha256() const;

private:
    file() = default;
    status parse_all();

    std::string path_;
    const std::byte* base_ = nullptr;
    size_t size_ = 0;
    void* mapping_ = nullptr;  // non-null when this object owns an mmap
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    std::map<std::string, value> metadata_;
    std::vector<tensor_info> tensors_;
};

// Builds GGUF files (v3) in memory: fixtures for tests, synthetic models, malformed-file corpora.
//
//   gguf::writer w;
//   w.set("general.architecture", "llama");
//   w.set_u32("llama.block_count", 2);
//   w.add_tensor("token_embd.weight", tensor_type::f32, {64, 512}, bytes);
//   auto st = w.write_file("x.gguf");
class writer {
public:
    void set(std::string key, value v);
    void set_u32(std::string key, uint32_t v);
    void set_i32(std::string key, int32_t v);
    void set_u64(std::string key, uint64_t v);
    void set_f32(std::string key, float v);
    void set_bool(std::string key, bool v);
    void set_string(std::string key, std::string v);
    void set_string_array(std::string key, const std::vector<std::string>& v);
    void set_f32_array(std::string key, const std::vector<float>& v);
    void set_i32_array(std::string key, const std::vector<int32_t>& v);
    void set_alignment(uint32_t alignment);  // also writes general.alignment
    // `data` must hold exactly the tensor's byte size for `type` and `dims` (ggml order).
    status add_tensor(std::string name, tensor_type type, std::vector<int64_t> dims,
                      std::vector<std::byte> data);

    std::vector<std::byte> to_bytes() const;
    status write_file(const std::string& path) const;

private:
    std::vector<std::pair<std::string, value>> metadata_;  // in insertion order
    struct pending_tensor {
        std::string name;
        tensor_type type;
        std::vector<int64_t> dims;
        std::vector<std::byte> data;
    };
    std::vector<pending_tensor> tensors_;
    uint32_t alignment_ = 32;
};

}  // namespace h2okv::gguf
