// libFuzzer target: arbitrary bytes as a whole GGUF file. The reader must refuse them with a status or
// accept them; an accepted file then goes through every getter, the tokenizer loader and the model loader,
// which must also answer with a status. Any crash, sanitizer report or abort is a finding.
//
//   fuzz_gguf -max_total_time=30 tests/fuzz/corpus/gguf
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace {

using namespace h2okv;

// Reading every key through every getter must never throw or crash, whatever the key's type.
void exercise_getters(const gguf::file& f) {
    for (const std::string& key : f.keys()) {
        (void)f.get_int(key);
        (void)f.get_u32(key);
        (void)f.get_float(key);
        (void)f.get_string(key);
        (void)f.get_bool(key);
        (void)f.get_string_array(key);
        (void)f.get_float_array(key);
        (void)f.get_int_array(key);
        if (f.find(key) == nullptr) std::abort();  // keys() and find() disagree
    }
    for (const auto& t : f.tensors()) {
        if (f.find_tensor(t.name) != &t) std::abort();
        // The reader promised the data lies inside the file: touch its first and last byte.
        const int64_t n = t.n_bytes();
        if (n <= 0 || t.data == nullptr) std::abort();
        volatile std::byte first = t.data[0];
        volatile std::byte last = t.data[n - 1];
        (void)first;
        (void)last;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto f = gguf::file::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.gguf");
    if (!f.ok()) {
        if (f.error().message().empty()) std::abort();  // a refusal must say why
        return 0;
    }
    exercise_getters(**f);
    if (auto tok = tokenizer::tokenizer::from_gguf(**f); tok.ok()) {
        auto ids = tok->encode("Once upon a time, \xff\xfe <s></s>", true, true);
        if (ids.ok()) (void)tok->decode(*ids);
    }
    if (auto m = model::model::load(**f); !m.ok() && m.error().message().empty()) std::abort();
    return 0;
}
