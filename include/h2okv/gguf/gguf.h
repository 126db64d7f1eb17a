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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/core/tensor_type.h"

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

// Tensor element types and their block sizes (h2okv/core/tensor_type.h, the one table).
using core::block_bytes;
using core::block_elements;
using core::tensor_type;
// "F32", "Q8_0", ...; "type 17" for numbers h2okv does not know.
std::string tensor_type_name(uint32_t t);
std::string tensor_type_name(tensor_type t);
bool is_known_tensor_type(uint32_t t);

// One metadata value. `data` holds uint64_t for u8/u16/u32/u64, int64_t for i8/i16/i32/i64, double for
// f32/f64, bool, std::string, or (for arrays) the elements, all of type `element_type`. Arrays of arrays
// nest: each inner array carries its own element type and length. The make_* factories build consistent
// values.
struct value;
using array = std::vector<value>;
struct value {
    value_type type = value_type::u8;
    std::variant<uint64_t, int64_t, double, bool, std::string, array> data;
    value_type element_type = value_type::u8;  // arrays only; kept so that empty arrays round-trip

    static value make_uint(value_type t, uint64_t v);  // t: u8, u16, u32 or u64
    static value make_int(value_type t, int64_t v);    // t: i8, i16, i32 or i64
    static value make_float(value_type t, double v);   // t: f32 or f64
    static value make_bool(bool v);
    static value make_string(std::string v);
    static value make_array(value_type element_type, array elements);

    // Integer value of any integer type (bool too); error for other types or out-of-range values.
    result<int64_t> as_int() const;
    result<double> as_float() const;  // f32, f64 or any integer type
    result<std::string> as_string() const;
    result<bool> as_bool() const;
    // Elements of an array value (nullptr for other types).
    const array* as_array() const { return std::get_if<array>(&data); }

    // Same type tags and same data (so a NaN never equals itself).
    friend bool operator==(const value&, const value&) = default;
};

struct tensor_info {
    std::string name;
    std::vector<int64_t> dims;  // ggml order: dims[0] is the fastest-varying (row length)
    tensor_type type = tensor_type::f32;
    uint64_t offset = 0;              // relative to the data section
    const std::byte* data = nullptr;  // into the mapped file
    int64_t n_elements() const;
    int64_t n_bytes() const;  // exact size of the data (no padding)
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
    // Absolute byte offset of the tensor data section (may equal or exceed file_size() when there are no
    // tensors).
    uint64_t data_offset() const { return data_offset_; }

    const std::map<std::string, value>& metadata() const { return metadata_; }
    // The keys in the order the file lists them (metadata() is sorted by key).
    const std::vector<std::string>& keys() const { return keys_; }
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

    // Tells the system that the tensor's mapped pages will not be read again (a loader copied them), so they
    // leave the process's resident memory; reading them later still works (they come back from the file).
    // Nothing for a file parsed from memory.
    void release(const tensor_info& t) const noexcept;

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
    uint64_t data_offset_ = 0;
    std::map<std::string, value> metadata_;
    std::vector<std::string> keys_;
    std::vector<tensor_info> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index into tensors_
};

// Builds GGUF files (v3) in memory: fixtures for tests, synthetic models, malformed-file corpora.
//
// The writer lays the file out correctly (alignment, offsets, padding) but writes metadata values as given,
// so tests can also build files the reader must refuse (an odd general.alignment, say). A value is encoded as
// its type tag says (array elements as the array's element_type), numbers converted from whichever
// alternative `data` holds; the make_* factories keep tags and data consistent.
// llama.cpp refuses arrays of arrays, which this reader accepts: keep them to tests.
//
//   gguf::writer w;
//   w.set_string("general.architecture", "llama");
//   w.set_u32("llama.block_count", 2);
//   w.add_tensor("token_embd.weight", tensor_type::f32, {64, 512}, bytes);
//   auto st = w.write_file("x.gguf");
class writer {
public:
    // Setting a key again replaces its value and keeps its original position.
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
    // Writes general.alignment. The layout follows general.alignment when it is a u32 power of two, else 32.
    void set_alignment(uint32_t alignment);
    // `data` must hold exactly the tensor's byte size for `type` and `dims` (ggml order); refused otherwise,
    // and for a duplicate name, a name over 63 bytes (ggml's limit), n_dims outside 1..4, a dim < 1 or a row
    // length that is not a whole number of blocks.
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
    uint64_t layout_alignment() const;
};

}  // namespace h2okv::gguf
