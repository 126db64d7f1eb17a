#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "gguf/gguf_internal.h"
#include "gguf/sha256.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

// Deeper than any real file; bounds the recursion so a crafted file cannot exhaust the stack.
constexpr int k_max_array_depth = 16;
// Smallest encodings, used to refuse counts that cannot fit in the bytes left before anything is reserved.
constexpr uint64_t k_min_kv_bytes = 8 + 4 + 1;                   // empty key, type, one-byte value
constexpr uint64_t k_min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one dim, type, offset
constexpr uint32_t k_max_value_type = static_cast<uint32_t>(value_type::f64);

uint64_t min_encoded_bytes(value_type t) {
    switch (t) {
        case value_type::u8:
        case value_type::i8:
        case value_type::boolean: return 1;
        case value_type::u16:
        case value_type::i16: return 2;
        case value_type::u32:
        case value_type::i32:
        case value_type::f32: return 4;
        case value_type::u64:
        case value_type::i64:
        case value_type::f64:
        case value_type::string: return 8;  // the length
        case value_type::array: return 12;  // element type and count
    }
    return 1;
}

// Printable ASCII as is, anything else as \xNN: magic numbers and keys from arbitrary bytes.
std::string escape(std::string_view bytes) {
    std::string out;
    for (char ch : bytes) {
        const auto u = static_cast<unsigned char>(ch);
        if (u >= 0x20 && u < 0x7f && ch != '\\' && ch != '\'') {
            out.push_back(ch);
        } else {
            out += fmt::format("\\x{:02x}", u);
        }
    }
    return out;
}

// Where a metadata value sits, for messages: metadata 'tokenizer.ggml.tokens'[17][2].
struct value_path {
    const value_path* parent = nullptr;
    const std::string* key = nullptr;  // set on the root only
    uint64_t index = 0;
};

std::string describe(const value_path& p) {
    if (p.parent == nullptr) return fmt::format("metadata '{}'", escape(*p.key));
    return fmt::format("{}[{}]", describe(*p.parent), p.index);
}

// Reads little-endian fields from a byte range, refusing any read that runs past its end. `what` is called
// only on failure, to name the field being read.
class cursor {
public:
    cursor(const std::byte* base, size_t size) : base_(base), size_(size) {}

    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }

    template <typename Describe>
    status need(uint64_t n, Describe&& what) const {
        if (n <= left()) return ok_status();
        return invalid_file("truncated file: {} needs {} bytes at byte {} but only {} remain", what(), n,
                            pos_, left());
    }

    template <typename T, typename Describe>
    result<T> read(Describe&& what) {
        H2OKV_RETURN_IF_ERROR(need(sizeof(T), what));
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    template <typename Describe>
    result<std::string> read_string(Describe&& what) {
        H2OKV_ASSIGN_OR_RETURN(uint64_t n,
                               read<uint64_t>([&] { return fmt::format("the length of {}", what()); }));
        if (n > left()) {
            return invalid_file(
                "{} has string length {} at byte {}, past the end of the file ({} bytes left)", what(), n,
                pos_ - sizeof(uint64_t), left());
        }
        std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
        pos_ += n;
        return s;
    }

private:
    const std::byte* base_;
    size_t size_;
    size_t pos_ = 0;
};

status read_value(cursor& c, value_type t, const value_path& path, int depth, value& out) {
    out.type = t;
    auto what = [&] { return describe(path); };
    switch (t) {
        case value_type::u8: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<uint8_t>(what));
            out.data = uint64_t{v};
            return ok_status();
        }
        case value_type::i8: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<int8_t>(what));
            out.data = int64_t{v};
            return ok_status();
        }
        case value_type::u16: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<uint16_t>(what));
            out.data = uint64_t{v};
            return ok_status();
        }
        case value_type::i16: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<int16_t>(what));
            out.data = int64_t{v};
            return ok_status();
        }
        case value_type::u32: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<uint32_t>(what));
            out.data = uint64_t{v};
            return ok_status();
        }
        case value_type::i32: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<int32_t>(what));
            out.data = int64_t{v};
            return ok_status();
        }
        case value_type::u64: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<uint64_t>(what));
            out.data = v;
            return ok_status();
        }
        case value_type::i64: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<int64_t>(what));
            out.data = v;
            return ok_status();
        }
        case value_type::f32: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<float>(what));
            out.data = double{v};
            return ok_status();
        }
        case value_type::f64: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<double>(what));
            out.data = v;
            return ok_status();
        }
        case value_type::boolean: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read<uint8_t>(what));
            out.data = v != 0;
            return ok_status();
        }
        case value_type::string: {
            H2OKV_ASSIGN_OR_RETURN(auto v, c.read_string(what));
            out.data = std::move(v);
            return ok_status();
        }
        case value_type::array: break;
    }
    if (depth >= k_max_array_depth) {
        return invalid_file("{} nests arrays deeper than {} levels", what(), k_max_array_depth);
    }
    H2OKV_ASSIGN_OR_RETURN(uint32_t raw_type,
                           c.read<uint32_t>([&] { return fmt::format("the element type of {}", what()); }));
    if (raw_type > k_max_value_type) {
        return invalid_file("{} has unknown element type {}, expected 0 to {}", what(), raw_type,
                            k_max_value_type);
    }
    const auto element_type = static_cast<value_type>(raw_type);
    H2OKV_ASSIGN_OR_RETURN(uint64_t count,
                           c.read<uint64_t>([&] { return fmt::format("the element count of {}", what()); }));
    const uint64_t fit = c.left() / min_encoded_bytes(element_type);
    if (count > fit) {
        return invalid_file(
            "{} has element count {}, but the {} bytes left in the file hold at most {} {} elements", what(),
            count, c.left(), fit, value_type_name(element_type));
    }
    array elements(count);
    for (uint64_t j = 0; j < count; ++j) {
        const value_path child{&path, nullptr, j};
        H2OKV_RETURN_IF_ERROR(read_value(c, element_type, child, depth + 1, elements[j]));
    }
    out.data = std::move(elements);
    out.element_type = element_type;
    return ok_status();
}

status read_header(cursor& c, uint32_t& version) {
    H2OKV_ASSIGN_OR_RETURN(uint32_t magic, c.read<uint32_t>([] { return "the magic"; }));
    std::string magic_text(4, '\0');
    std::memcpy(magic_text.data(), &magic, 4);
    if (magic_text != "GGUF") {
        return invalid_file("invalid magic '{}', expected 'GGUF'", escape(magic_text));
    }
    H2OKV_ASSIGN_OR_RETURN(version, c.read<uint32_t>([] { return "the version"; }));
    if (version == 2 || version == 3) return ok_status();
    if (version == 1) {
        return invalid_file(
            "version 1 is not supported (GGUF v1 used 32-bit counts; convert the file again with a current "
            "llama.cpp), expected 2 or 3");
    }
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
        return invalid_file(
            "version {} (0x{:08x}) is a big-endian GGUF v{}; only little-endian files are "
            "supported, expected version 2 or 3",
            version, version, swapped);
    }
    return invalid_file("unsupported version {}, expected 2 or 3", version);
}

}  // namespace

result<std::unique_ptr<file>> file::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("gguf: cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return io_error("gguf: cannot stat '{}': {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return invalid_argument("gguf: '{}' is not a regular file", path);
    }
    const auto size = static_cast<size_t>(st.st_size);
    void* mapping = nullptr;
    if (size > 0) {
        mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mapping == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            return io_error("gguf: cannot map '{}' ({} bytes): {}", path, size, std::strerror(err));
        }
    }
    ::close(fd);  // the mapping keeps the file alive
    std::unique_ptr<file> f(new file());
    f->path_ = path;
    f->mapping_ = mapping;
    f->base_ = static_cast<const std::byte*>(mapping);
    f->size_ = size;
    H2OKV_RETURN_IF_ERROR(f->parse_all().with_context("gguf: " + path));
    return f;
}

void file::release(const tensor_info& t) const noexcept {
    if (mapping_ == nullptr || t.data == nullptr) return;
    // The whole pages inside the tensor (a page it shares with a neighbour stays).
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(t.data) + page - 1) / page * page;
    const auto end =
        (reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(t.n_bytes())) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

result<std::unique_ptr<file>> file::parse(const std::byte* data, size_t size, std::string name) {
    std::unique_ptr<file> f(new file());
    f->path_ = std::move(name);
    f->base_ = data;
    f->size_ = size;
    H2OKV_RETURN_IF_ERROR(f->parse_all().with_context("gguf: " + f->path_));
    return f;
}

file::~file() {
    if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

status file::parse_all() {
    cursor c(base_, size_);
    H2OKV_RETURN_IF_ERROR(read_header(c, version_));
    H2OKV_ASSIGN_OR_RETURN(uint64_t n_tensors, c.read<uint64_t>([] { return "the tensor count"; }));
    H2OKV_ASSIGN_OR_RETURN(uint64_t n_kv, c.read<uint64_t>([] { return "the metadata count"; }));
    if (n_kv > c.left() / k_min_kv_bytes) {
        return invalid_file(
            "metadata count {} cannot fit in the {} bytes left (each entry takes at least {} bytes)", n_kv,
            c.left(), k_min_kv_bytes);
    }
    if (n_tensors > c.left() / k_min_tensor_info_bytes) {
        return invalid_file(
            "tensor count {} cannot fit in the {} bytes left (each tensor info takes at least {} "
            "bytes)",
            n_tensors, c.left(), k_min_tensor_info_bytes);
    }

    keys_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        H2OKV_ASSIGN_OR_RETURN(std::string key,
                               c.read_string([&] { return fmt::format("metadata key #{}", i); }));
        H2OKV_ASSIGN_OR_RETURN(uint32_t raw_type, c.read<uint32_t>([&] {
            return fmt::format("the type of metadata '{}'", escape(key));
        }));
        if (raw_type > k_max_value_type) {
            return invalid_file("metadata '{}' has unknown value type {}, expected 0 to {}", escape(key),
                                raw_type, k_max_value_type);
        }
        value v;
        const value_path root{nullptr, &key, 0};
        H2OKV_RETURN_IF_ERROR(read_value(c, static_cast<value_type>(raw_type), root, 0, v));
        if (metadata_.count(key) != 0) {
            const auto first = std::find(keys_.begin(), keys_.end(), key) - keys_.begin();
            return invalid_file("duplicate metadata key '{}' (entries #{} and #{})", escape(key), first, i);
        }
        metadata_.emplace(key, std::move(v));
        keys_.push_back(std::move(key));
    }

    if (const value* a = find("general.alignment")) {
        if (a->type != value_type::u32) {
            return invalid_file("general.alignment has type {}, expected u32", value_type_name(a->type));
        }
        const uint64_t alignment = std::get<uint64_t>(a->data);
        if (!std::has_single_bit(alignment)) {
            return invalid_file("general.alignment = {}, expected a non-zero power of two", alignment);
        }
        alignment_ = alignment;
    }

    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        tensor_info t;
        H2OKV_ASSIGN_OR_RETURN(t.name,
                               c.read_string([&] { return fmt::format("the name of tensor #{}", i); }));
        const std::string name = escape(t.name);
        H2OKV_ASSIGN_OR_RETURN(uint32_t n_dims,
                               c.read<uint32_t>([&] { return fmt::format("n_dims of tensor '{}'", name); }));
        if (n_dims < 1 || n_dims > static_cast<uint32_t>(detail::k_max_dims)) {
            return invalid_file("tensor '{}' has n_dims {}, expected 1 to {}", name, n_dims,
                                detail::k_max_dims);
        }
        for (uint32_t d = 0; d < n_dims; ++d) {
            H2OKV_ASSIGN_OR_RETURN(uint64_t dim, c.read<uint64_t>([&] {
                return fmt::format("dims[{}] of tensor '{}'", d, name);
            }));
            if (dim < 1 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                return invalid_file("tensor '{}' has dims[{}] = {}, expected 1 to {}", name, d, dim,
                                    std::numeric_limits<int64_t>::max());
            }
            t.dims.push_back(static_cast<int64_t>(dim));
        }
        H2OKV_ASSIGN_OR_RETURN(uint32_t raw_type, c.read<uint32_t>([&] {
            return fmt::format("the type of tensor '{}'", name);
        }));
        if (!is_known_tensor_type(raw_type)) {
            const char* ggml_name = detail::ggml_type_name(raw_type);
            if (ggml_name != nullptr) {
                return invalid_file(
                    "tensor '{}' has type {} ({}), which h2okv does not support (supported: {})", name,
                    raw_type, ggml_name, detail::supported_tensor_types());
            }
            return invalid_file("tensor '{}' has unknown type {} (supported: {})", name, raw_type,
                                detail::supported_tensor_types());
        }
        t.type = static_cast<tensor_type>(raw_type);
        H2OKV_ASSIGN_OR_RETURN(
            t.offset, c.read<uint64_t>([&] { return fmt::format("the offset of tensor '{}'", name); }));
        H2OKV_RETURN_IF_ERROR(detail::tensor_extent_of(name, t.type, t.dims));
        const auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
        if (!inserted) {
            return invalid_file("duplicate tensor name '{}' (tensors #{} and #{})", name, it->second, i);
        }
        tensors_.push_back(std::move(t));
    }

    const uint64_t end_of_infos = c.pos();
    data_offset_ = end_of_infos + (alignment_ - end_of_infos % alignment_) % alignment_;
    for (auto& t : tensors_) {
        const std::string name = escape(t.name);
        if (t.offset % alignment_ != 0) {
            return invalid_file("tensor '{}' has offset {}, expected a multiple of the alignment {}", name,
                                t.offset, alignment_);
        }
        if (data_offset_ > size_ || t.offset > size_ - data_offset_) {
            if (t.offset > std::numeric_limits<uint64_t>::max() - data_offset_) {
                return invalid_file("tensor '{}' has offset {}, past the end of the file ({} bytes)", name,
                                    t.offset, size_);
            }
            return invalid_file(
                "tensor '{}' starts at byte {} (offset {} in the data section at byte {}) but the "
                "file has {} bytes",
                name, data_offset_ + t.offset, t.offset, data_offset_, size_);
        }
        const uint64_t start = data_offset_ + t.offset;
        const auto n_bytes = static_cast<uint64_t>(t.n_bytes());
        if (n_bytes > size_ - start) {
            return invalid_file("tensor '{}' ends at byte {} but the file has {} bytes", name,
                                start + n_bytes, size_);
        }
        t.data = base_ + start;
    }
    return ok_status();
}

const value* file::find(std::string_view key) const {
    const auto it = metadata_.find(std::string(key));
    return it == metadata_.end() ? nullptr : &it->second;
}

const tensor_info* file::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

template <typename T, typename Convert>
result<T> get_converted(const file& f, std::string_view key, Convert&& convert) {
    const value* v = f.find(key);
    if (v == nullptr) return invalid_file("gguf: {}: metadata key '{}' is missing", f.path(), key);
    auto r = convert(*v);
    if (!r.ok()) return r.error().with_context(fmt::format("gguf: {}: metadata '{}'", f.path(), key));
    return std::move(r).value();
}

template <typename T, typename Convert>
result<std::vector<T>> get_array(const file& f, std::string_view key, const char* expected,
                                 Convert&& convert) {
    const value* v = f.find(key);
    if (v == nullptr) return invalid_file("gguf: {}: metadata key '{}' is missing", f.path(), key);
    const array* elements = v->as_array();
    if (elements == nullptr) {
        return invalid_file("gguf: {}: metadata '{}' has type {}, expected an array of {}", f.path(), key,
                            value_type_name(v->type), expected);
    }
    std::vector<T> out;
    out.reserve(elements->size());
    for (size_t i = 0; i < elements->size(); ++i) {
        auto r = convert((*elements)[i]);
        if (!r.ok())
            return r.error().with_context(fmt::format("gguf: {}: metadata '{}'[{}]", f.path(), key, i));
        out.push_back(std::move(r).value());
    }
    return out;
}

}  // namespace

result<int64_t> file::get_int(std::string_view key) const {
    return get_converted<int64_t>(*this, key, [](const value& v) { return v.as_int(); });
}

result<uint32_t> file::get_u32(std::string_view key) const {
    return get_converted<uint32_t>(*this, key, [](const value& v) -> result<uint32_t> {
        H2OKV_ASSIGN_OR_RETURN(int64_t i, v.as_int());
        if (i < 0 || i > int64_t{std::numeric_limits<uint32_t>::max()}) {
            return out_of_range("value {} ({}) is outside 0..{}", i, value_type_name(v.type),
                                std::numeric_limits<uint32_t>::max());
        }
        return static_cast<uint32_t>(i);
    });
}

result<double> file::get_float(std::string_view key) const {
    return get_converted<double>(*this, key, [](const value& v) { return v.as_float(); });
}

result<std::string> file::get_string(std::string_view key) const {
    return get_converted<std::string>(*this, key, [](const value& v) { return v.as_string(); });
}

result<bool> file::get_bool(std::string_view key) const {
    return get_converted<bool>(*this, key, [](const value& v) { return v.as_bool(); });
}

result<std::vector<std::string>> file::get_string_array(std::string_view key) const {
    return get_array<std::string>(*this, key, "strings", [](const value& v) { return v.as_string(); });
}

result<std::vector<double>> file::get_float_array(std::string_view key) const {
    return get_array<double>(*this, key, "numbers", [](const value& v) { return v.as_float(); });
}

result<std::vector<int64_t>> file::get_int_array(std::string_view key) const {
    return get_array<int64_t>(*this, key, "integers", [](const value& v) { return v.as_int(); });
}

result<int64_t> file::get_int_or(std::string_view key, int64_t fallback) const {
    return has(key) ? get_int(key) : result<int64_t>(fallback);
}

result<double> file::get_float_or(std::string_view key, double fallback) const {
    return has(key) ? get_float(key) : result<double>(fallback);
}

result<std::string> file::get_string_or(std::string_view key, std::string fallback) const {
    return has(key) ? get_string(key) : result<std::string>(std::move(fallback));
}

std::string file::sha256() const {
    return detail::sha256_hex(base_, size_);
}

}  // namespace h2okv::gguf
