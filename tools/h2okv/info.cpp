// h2okv info: a GGUF file's header, metadata and (with --tensors) tensor index, as text or JSON.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "h2okv/gguf/gguf.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct info_options {
    std::string model_path = default_model_path();
    bool tensors = false;
    bool json = false;
};

// Arrays are summarised: their type, length and this many leading elements.
constexpr size_t k_preview_items = 8;
// Longer strings (chat templates, say) are cut in the text output.
constexpr size_t k_max_string_bytes = 80;

// A string as a quoted, escaped literal, cut at a UTF-8 character boundary when long.
std::string quoted(const std::string& s) {
    size_t end = s.size();
    if (end > k_max_string_bytes) {
        end = k_max_string_bytes;
        while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
    }
    std::string out = "\"";
    for (size_t i = 0; i < end; ++i) {
        const char c = s[i];
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (u < 0x20 || u == 0x7f) {
            out += fmt::format("\\x{:02x}", u);
        } else {
            out += c;
        }
    }
    out += '"';
    if (end < s.size()) out += fmt::format("... ({} bytes)", s.size());
    return out;
}

std::string scalar_text(const gguf::value& v) {
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return fmt::format("{}", *u);
    if (const auto* i = std::get_if<int64_t>(&v.data)) return fmt::format("{}", *i);
    if (const auto* d = std::get_if<double>(&v.data)) {
        // An f32 printed as the shortest float that reads back the same (1e-05, not 9.99999974737875e-06).
        return v.type == gguf::value_type::f32 ? fmt::format("{}", static_cast<float>(*d))
                                               : fmt::format("{}", *d);
    }
    if (const auto* b = std::get_if<bool>(&v.data)) return *b ? "true" : "false";
    if (const auto* s = std::get_if<std::string>(&v.data)) return quoted(*s);
    return "?";
}

// "array[string] 512" (nested: "array[array] 2")
std::string type_text(const gguf::value& v) {
    if (const auto* a = v.as_array())
        return fmt::format("array[{}] {}", gguf::value_type_name(v.element_type), a->size());
    return gguf::value_type_name(v.type);
}

std::string value_text(const gguf::value& v) {
    const auto* a = v.as_array();
    if (a == nullptr) return scalar_text(v);
    std::vector<std::string> items;
    for (size_t i = 0; i < std::min(a->size(), k_preview_items); ++i) {
        const auto& e = (*a)[i];
        items.push_back(e.as_array() != nullptr ? fmt::format("({}: {})", type_text(e), value_text(e))
                                                : value_text(e));
    }
    if (a->size() > k_preview_items) items.push_back("...");
    return fmt::format("[{}]", fmt::join(items, ", "));
}

nlohmann::json value_json(const gguf::value& v) {
    if (const auto* a = v.as_array()) {
        nlohmann::json first = nlohmann::json::array();
        for (size_t i = 0; i < std::min(a->size(), k_preview_items); ++i)
            first.push_back(value_json((*a)[i]));
        return {{"type", "array"},
                {"element_type", gguf::value_type_name(v.element_type)},
                {"length", a->size()},
                {"first", std::move(first)}};
    }
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
    if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
    if (const auto* d = std::get_if<double>(&v.data)) return *d;  // NaN and inf become null
    if (const auto* b = std::get_if<bool>(&v.data)) return *b;
    if (const auto* s = std::get_if<std::string>(&v.data)) return *s;
    return nullptr;
}

void print_json(const gguf::file& f, bool with_tensors) {
    nlohmann::json out = {{"path", f.path()},
                          {"file_size", f.file_size()},
                          {"version", f.version()},
                          {"alignment", f.alignment()},
                          {"data_offset", f.data_offset()}};
    nlohmann::json metadata = nlohmann::json::array();
    for (const auto& key : f.keys()) {
        const gguf::value& v = *f.find(key);
        nlohmann::json entry = {{"key", key}, {"type", gguf::value_type_name(v.type)}};
        if (v.as_array() != nullptr) {
            entry["element_type"] = gguf::value_type_name(v.element_type);
            entry["length"] = v.as_array()->size();
            entry["first"] = value_json(v)["first"];
        } else {
            entry["value"] = value_json(v);
        }
        metadata.push_back(std::move(entry));
    }
    out["metadata"] = std::move(metadata);
    int64_t tensor_bytes = 0;
    for (const auto& t : f.tensors()) tensor_bytes += t.n_bytes();
    out["n_tensors"] = f.tensors().size();
    out["tensor_bytes"] = tensor_bytes;
    if (with_tensors) {
        nlohmann::json tensors = nlohmann::json::array();
        for (const auto& t : f.tensors()) {
            tensors.push_back({{"name", t.name},
                               {"type", gguf::tensor_type_name(t.type)},
                               {"dims", t.dims},
                               {"n_elements", t.n_elements()},
                               {"bytes", t.n_bytes()},
                               {"offset", t.offset}});
        }
        out["tensors"] = std::move(tensors);
    }
    // GGUF strings are meant to be UTF-8 but nothing enforces it; invalid bytes become U+FFFD.
    fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

void print_text(const gguf::file& f, bool with_tensors) {
    fmt::print("file:      {} ({} bytes)\n", f.path(), f.file_size());
    fmt::print("gguf:      version {}, alignment {}", f.version(), f.alignment());
    if (!f.tensors().empty()) fmt::print(", tensor data at byte {}", f.data_offset());
    fmt::print("\n");
    fmt::print("metadata:  {} keys\n", f.keys().size());
    size_t key_width = 0;
    size_t type_width = 0;
    for (const auto& key : f.keys()) {
        key_width = std::max(key_width, key.size());
        type_width = std::max(type_width, type_text(*f.find(key)).size());
    }
    for (const auto& key : f.keys()) {
        const gguf::value& v = *f.find(key);
        fmt::print("  {:<{}}  {:<{}}  {}\n", key, key_width, type_text(v), type_width, value_text(v));
    }
    int64_t tensor_bytes = 0;
    for (const auto& t : f.tensors()) tensor_bytes += t.n_bytes();
    fmt::print("tensors:   {} ({} bytes of data)\n", f.tensors().size(), tensor_bytes);
    if (!with_tensors) return;
    size_t name_width = 0;
    size_t dims_width = 0;
    for (const auto& t : f.tensors()) {
        name_width = std::max(name_width, t.name.size());
        dims_width = std::max(dims_width, fmt::format("[{}]", fmt::join(t.dims, ", ")).size());
    }
    for (const auto& t : f.tensors()) {
        fmt::print("  {:<{}}  {:<4}  {:<{}}  {:>10} bytes\n", t.name, name_width,
                   gguf::tensor_type_name(t.type), fmt::format("[{}]", fmt::join(t.dims, ", ")), dims_width,
                   t.n_bytes());
    }
}

int run_info(const info_options& o) {
    if (o.model_path.empty()) return fail(no_model_error());
    auto f = gguf::file::open(o.model_path);
    if (!f.ok()) {
        fmt::print(stderr, "h2okv: error: {}\n", f.error().message());
        return 1;
    }
    if (o.json) {
        print_json(**f, o.tensors);
    } else {
        print_text(**f, o.tensors);
    }
    return 0;
}

}  // namespace

void add_info_command(CLI::App& app, int* exit_code) {
    auto opts = std::make_shared<info_options>();
    CLI::App* cmd =
        app.add_subcommand("info", "Show a GGUF file's version, metadata and (with --tensors) tensors");
    cmd->add_option("-m,--model", opts->model_path,
                    "GGUF file (default: the bundled stories260K: " + model_search_text() + ")")
        ->capture_default_str();
    cmd->add_flag("--tensors", opts->tensors, "List every tensor: name, type, dims and bytes");
    cmd->add_flag("--json", opts->json,
                  "Print JSON instead of text (arrays summarised by their first items)");
    cmd->callback([opts, exit_code] { *exit_code = run_info(*opts); });
}

}  // namespace h2okv::cli
