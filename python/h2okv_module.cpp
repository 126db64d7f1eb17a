// The Python module `h2okv` (docs/PYTHON.md): the policy library over recorded attention, and the engine.
//
//   import h2okv, numpy as np
//   kept = h2okv.simulate("h2o:budget=4", logits)   # logits[T, T]: query t's pre-softmax scores of 0..t
//   m = h2okv.Model("models/stories260K.gguf")
//   text = m.generate("Once upon a time", 50, kv="h2o:budget=0.2")
//
// Every library status becomes a Python exception carrying its message (ValueError for bad arguments and
// files, OSError for I/O, MemoryError); nothing the caller passes can crash the interpreter. Arrays are
// validated where they enter (dtype, shape, finite values) and copied to C-contiguous double before use.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "h2okv/engine/generate.h"
#include "h2okv/engine/session.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/kv/kv_cache.h"
#include "h2okv/model/model.h"
#include "h2okv/policy/policy.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace py = pybind11;

namespace h2okv::python {
namespace {

[[noreturn]] void raise(const status& s) {
    PyObject* type = PyExc_RuntimeError;
    switch (s.code()) {
        case status_code::invalid_argument:
        case status_code::invalid_file:
        case status_code::out_of_range: type = PyExc_ValueError; break;
        case status_code::io_error: type = PyExc_OSError; break;
        case status_code::out_of_memory: type = PyExc_MemoryError; break;
        default: break;
    }
    PyErr_SetString(type, s.message().c_str());
    throw py::error_already_set();
}

template <class T>
T value_or_raise(result<T> r) {
    if (!r.ok()) raise(r.error());
    return std::move(r).value();
}

void check(const status& s) {
    if (!s.ok()) raise(s);
}

using double_array = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A floating-point array of `ndim` dimensions as C-contiguous double; other dtypes are refused (an integer
// or object array is a mistake, not scores).
double_array float_array(const py::array& a, const char* name, int ndim) {
    if (a.dtype().kind() != 'f') {
        throw py::type_error(std::string(name) + ": expected a floating-point numpy array, got dtype " +
                             std::string(py::str(a.dtype())));
    }
    if (a.ndim() != ndim) {
        throw py::value_error(std::string(name) + ": expected " + std::to_string(ndim) +
                              " dimensions, got shape " + std::string(py::str(py::tuple(a.attr("shape")))));
    }
    return double_array::ensure(a);
}

// The kept positions of the one unit after every chunk, replaying recorded pre-softmax scores.
std::vector<py::array_t<int64_t>> simulate(const std::string& spec, std::optional<py::array> logits_in,
                                           std::optional<py::array> keys_in, int chunk) {
    const policy::params p = value_or_raise(policy::params::parse(spec));
    if (p.positions == policy::position_mode::rolling) {
        throw py::value_error(
            "simulate: positions=rolling does not apply: the recorded scores were computed with the "
            "engine's rotation already; give the spec without positions=");
    }
    if (chunk < 1) throw py::value_error("simulate: chunk " + std::to_string(chunk) + " must be >= 1");
    std::optional<double_array> logits, keys;
    if (logits_in) logits = float_array(*logits_in, "logits", 2);
    if (keys_in) keys = float_array(*keys_in, "keys", 2);
    if (!logits && !keys) throw py::value_error("simulate: give logits[T, T], keys[T, d] or both");
    const int64_t t_len = logits ? logits->shape(0) : keys->shape(0);
    if (logits && logits->shape(1) != t_len) {
        throw py::value_error("logits: expected a square [T, T] array, got [" + std::to_string(t_len) + ", " +
                              std::to_string(logits->shape(1)) + "]");
    }
    if (keys && keys->shape(0) != t_len) {
        throw py::value_error("keys: expected " + std::to_string(t_len) +
                              " rows (one per position, as logits), got " + std::to_string(keys->shape(0)));
    }
    if (keys && keys->shape(1) < 1) throw py::value_error("keys: expected at least one column, got 0");
    if (t_len < 1) throw py::value_error("simulate: T must be >= 1, got 0 positions");

    policy::layout l;
    l.max_chunk = static_cast<int>(std::min<int64_t>(chunk, t_len));
    l.max_positions = t_len;
    auto pol = value_or_raise(policy::kv_policy::create(p, l, t_len));
    const std::string name = pol->config().name;
    if (pol->needs_attention() && !logits) {
        throw py::value_error("simulate: '" + name + "' scores attention: pass logits[T, T]");
    }
    if (pol->needs_keys() && !keys) {
        throw py::value_error("simulate: '" + name +
                              "' scores keys, which attention logits do not contain: pass keys[T, d] (the "
                              "unit's key of every position, as the engine stores it)");
    }
    // Row t is read at 0..t: NaN and +inf there are refused; -inf (a masked score) gives weight 0, but the
    // query's own score must be finite so that every row has a weight to normalise.
    if (logits && pol->needs_attention()) {
        const auto z = logits->unchecked<2>();
        for (int64_t t = 0; t < t_len; ++t) {
            for (int64_t q = 0; q <= t; ++q) {
                const double v = z(t, q);
                if (std::isnan(v) || v == INFINITY || (q == t && !std::isfinite(v))) {
                    throw py::value_error("logits[" + std::to_string(t) + ", " + std::to_string(q) + "] is " +
                                          std::to_string(v) + "; expected a finite score" +
                                          (q == t ? " (a query's own score cannot be masked)" : " or -inf"));
                }
            }
        }
    }
    if (keys && pol->needs_keys()) {
        const auto k = keys->unchecked<2>();
        for (int64_t t = 0; t < t_len; ++t) {
            for (int64_t d = 0; d < k.shape(1); ++d) {
                if (!std::isfinite(k(t, d))) {
                    throw py::value_error("keys[" + std::to_string(t) + ", " + std::to_string(d) +
                                          "] is not finite");
                }
            }
        }
    }

    std::vector<py::array_t<int64_t>> out;
    std::vector<double> row(static_cast<size_t>(pol->capacity()), 0.0);
    std::vector<std::pair<int64_t, int32_t>> attended;  // (position, slot), ascending position
    std::vector<float> key;
    for (int64_t first = 0; first < t_len; first += chunk) {
        const int n = static_cast<int>(std::min<int64_t>(chunk, t_len - first));
        check(pol->begin_chunk(first, n));
        const auto positions = pol->slot_positions(0);
        for (int i = 0; i < n; ++i) {
            const int64_t t = first + i;
            if (pol->needs_keys()) {
                const auto k = keys->unchecked<2>();
                key.resize(static_cast<size_t>(k.shape(1)));
                for (size_t d = 0; d < key.size(); ++d)
                    key[d] = static_cast<float>(k(t, static_cast<int64_t>(d)));
                pol->add_key(0, i, 0, 0, key);
            }
            if (!pol->needs_attention()) continue;
            attended.clear();
            for (int32_t s : pol->kept_slots(0)) attended.emplace_back(positions[s], s);
            std::sort(attended.begin(), attended.end());
            for (int j = 0; j <= i; ++j) attended.emplace_back(first + j, pol->chunk_slots(0)[j]);
            // softmax over the attended positions, in double: exp(z - max z) / (their sum in position order).
            const auto z = logits->unchecked<2>();
            double top = -INFINITY;
            for (const auto& [pos, s] : attended) top = std::max(top, z(t, pos));
            double sum = 0.0;
            for (const auto& [pos, s] : attended) {
                row[static_cast<size_t>(s)] = std::exp(z(t, pos) - top);
                sum = sum + row[static_cast<size_t>(s)];
            }
            for (const auto& [pos, s] : attended)
                row[static_cast<size_t>(s)] = row[static_cast<size_t>(s)] / sum;
            pol->add_row(0, i, row.data());
            for (const auto& [pos, s] : attended) row[static_cast<size_t>(s)] = 0.0;
        }
        check(pol->end_chunk());
        const std::vector<int64_t> kept = pol->kept_positions(0);
        py::array_t<int64_t> a(static_cast<py::ssize_t>(kept.size()));
        std::copy(kept.begin(), kept.end(), a.mutable_data());
        out.push_back(std::move(a));
    }
    return out;
}

py::list policies() {
    py::list out;
    for (const auto& f : policy::policy_catalog()) {
        py::dict d;
        d["name"] = f.name;
        d["summary"] = f.summary;
        d["defaults"] = f.defaults;
        d["evicts"] = f.evicts;
        d["source"] = policy::score_source_name(f.source);
        d["granularity"] = policy::granularity_name(f.gran);
        py::dict extra;
        for (const auto& x : f.extra) extra[py::str(x.name)] = py::make_tuple(x.default_value, x.help);
        d["params"] = extra;
        out.append(d);
    }
    return out;
}

// Bytes as a str: invalid UTF-8 (a token that ends inside a character) becomes U+FFFD, as Python's
// errors="replace".
py::str text_of(const std::string& bytes) {
    return py::reinterpret_steal<py::str>(
        PyUnicode_DecodeUTF8(bytes.data(), static_cast<py::ssize_t>(bytes.size()), "replace"));
}

// A loaded GGUF model with its tokenizer. Calls are serialised (the forward pass keeps work buffers); the
// GIL is released while the model runs. stats_ is touched only with the GIL held.
class py_model {
public:
    explicit py_model(const std::string& path) : path_(path) {
        file_ = value_or_raise(gguf::file::open(path));
        model_ = value_or_raise(model::model::load(*file_));
        tok_ = value_or_raise(tokenizer::tokenizer::from_gguf(*file_));
    }

    py::array_t<int32_t> tokenize(const std::string& text, bool add_bos, bool special) const {
        const auto ids = value_or_raise(tok_->encode(text, add_bos, special));
        py::array_t<int32_t> a(static_cast<py::ssize_t>(ids.size()));
        std::copy(ids.begin(), ids.end(), a.mutable_data());
        return a;
    }

    py::str detokenize(const py::array& ids_in) const {
        const std::vector<int32_t> ids = token_ids(ids_in);
        return text_of(tok_->decode(ids));
    }

    py::str generate(const std::string& prompt, int n, const std::string& kv, float temperature, int top_k,
                     float top_p, uint64_t seed, bool ignore_eos, const std::string& kv_type,
                     int prefill_chunk, int64_t n_ctx) {
        engine::generation_params gp;
        gp.n_predict = n;
        gp.sampling = {temperature, top_k, top_p, seed};
        gp.ignore_eos = ignore_eos;
        check(gp.validate());
        engine::session_params sp = session_params(kv, kv_type, prefill_chunk, n_ctx);
        const auto ids = value_or_raise(tok_->encode(prompt, /*add_special=*/true));
        // As `h2okv generate`: the prompt is the only multi-token chunk.
        sp.prefill_chunk = std::min(sp.prefill_chunk, static_cast<int>(ids.size()));
        const int64_t run_length = static_cast<int64_t>(ids.size()) + n;
        std::string text;
        stats_values stats;
        status st;
        {
            // The lock is taken without the GIL and released before the GIL is taken back (never both held).
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(mutex_);
            st = run_generation(ids, gp, sp, run_length, &text, &stats);
        }
        check(st);
        stats_ = std::move(stats);
        return text_of(text);
    }

    py::array_t<float> logits(const py::array& ids_in, const std::string& kv, const std::string& kv_type,
                              int prefill_chunk, int64_t n_ctx) {
        const std::vector<int32_t> ids = token_ids(ids_in);
        if (ids.empty()) throw py::value_error("logits: ids is empty; expected at least one token");
        for (size_t i = 0; i < ids.size(); ++i) {
            if (!tok_->is_valid(ids[i])) {
                throw py::value_error("logits: ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                      " is outside the vocabulary [0, " + std::to_string(tok_->n_vocab()) +
                                      ")");
            }
        }
        const engine::session_params sp = session_params(kv, kv_type, prefill_chunk, n_ctx);
        std::vector<float> out;
        status st;
        {
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(mutex_);
            auto s = engine::session::create(*model_, sp, static_cast<int64_t>(ids.size()));
            st = s.ok() ? (*s)->process(ids, model::logits_mode::all, &out) : s.error();
        }
        check(st);
        const auto vocab = static_cast<py::ssize_t>(model_->params().n_vocab);
        py::array_t<float> a({static_cast<py::ssize_t>(ids.size()), vocab});
        std::copy(out.begin(), out.end(), a.mutable_data());
        return a;
    }

    // What the last generate() ran and kept, as `h2okv generate` prints it on stderr.
    py::object last_stats() const {
        if (!stats_) return py::none();
        const stats_values& v = *stats_;
        py::dict d;
        d["policy"] = v.policy;
        d["kv_type"] = v.kv_type;
        d["units"] = v.units;
        d["slots_per_unit"] = v.slots_per_unit;
        d["positions"] = v.positions;
        d["kept"] = v.kept;
        d["evicted"] = v.evicted;
        d["kv_bytes"] = v.kv_bytes;
        d["full_kv_bytes"] = v.full_kv_bytes;
        d["prefill_tokens"] = v.prefill_tokens;
        d["decode_tokens"] = v.decode_tokens;
        d["prefill_seconds"] = v.prefill_seconds;
        d["decode_seconds"] = v.decode_seconds;
        d["generated"] = v.generated;
        d["stopped_at_eos"] = v.stopped_at_eos;
        return d;
    }

    const std::string& path() const { return path_; }
    int64_t n_vocab() const { return model_->params().n_vocab; }
    int64_t n_ctx_train() const { return model_->params().n_ctx_train; }
    const std::string& arch() const { return model_->params().arch; }
    int bos() const { return tok_->bos(); }
    int eos() const { return tok_->eos(); }

private:
    // What a generation ran and kept (plain values: filled with the GIL released).
    struct stats_values {
        std::string policy, kv_type;
        int units = 0;
        int64_t slots_per_unit = 0, positions = 0, kept = 0, evicted = 0, kv_bytes = 0, full_kv_bytes = 0;
        int64_t prefill_tokens = 0, decode_tokens = 0, generated = 0;
        double prefill_seconds = 0, decode_seconds = 0;
        bool stopped_at_eos = false;
    };

    // A 1-D integer array (or sequence) of token ids.
    static std::vector<int32_t> token_ids(const py::array& a) {
        const char kind = a.dtype().kind();
        if (kind != 'i' && kind != 'u') {
            throw py::type_error("ids: expected an integer array of token ids, got dtype " +
                                 std::string(py::str(a.dtype())));
        }
        if (a.ndim() != 1) {
            throw py::value_error("ids: expected a 1-D array, got " + std::to_string(a.ndim()) +
                                  " dimensions");
        }
        const auto wide = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
        std::vector<int32_t> ids;
        for (py::ssize_t i = 0; i < wide.size(); ++i) {
            const int64_t v = wide.data()[i];
            if (v < INT32_MIN || v > INT32_MAX) {
                throw py::value_error("ids[" + std::to_string(i) + "] = " + std::to_string(v) +
                                      " is not a token id");
            }
            ids.push_back(static_cast<int32_t>(v));
        }
        return ids;
    }

    // One generation, without the GIL: the text (the generated pieces) and the statistics.
    status run_generation(std::span<const int32_t> ids, const engine::generation_params& gp,
                          const engine::session_params& sp, int64_t run_length, std::string* text,
                          stats_values* stats) {
        H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(*model_, sp, run_length));
        const tokenizer::tokenizer& t = *tok_;
        H2OKV_ASSIGN_OR_RETURN(const engine::generation g,
                               engine::generate(
                                   *s, ids, gp, [&t](int32_t id) { return t.is_eog(id); },
                                   [&](int32_t id) { *text += t.piece(id); }));
        *stats = stats_of(*s, g, run_length);
        return ok_status();
    }

    static engine::session_params session_params(const std::string& kv, const std::string& kv_type,
                                                 int prefill_chunk, int64_t n_ctx) {
        engine::session_params sp;
        sp.kv = value_or_raise(policy::params::parse(kv));
        sp.kv_type = value_or_raise(kv::parse_kv_type(kv_type));
        sp.prefill_chunk = prefill_chunk;
        sp.n_ctx = n_ctx;
        check(sp.validate());
        return sp;
    }

    stats_values stats_of(const engine::session& s, const engine::generation& g, int64_t run_length) const {
        stats_values v;
        const auto& pol = s.cache().policy();
        v.policy = pol.config().to_string();
        v.kv_type = kv::kv_type_name(s.cache().type());
        v.units = pol.n_units();
        v.slots_per_unit = s.cache().capacity();
        v.positions = s.n_past();
        v.kept = s.cache().kept_total();
        v.evicted = pol.total_evictions();
        v.kv_bytes = s.cache().bytes();
        // What a `full` cache of the run allocates, as `h2okv generate` compares.
        const auto full = kv::kv_cache::plan(model_->params(), policy::params{}, s.params().prefill_chunk,
                                             run_length, run_length, s.cache().type());
        v.full_kv_bytes = full.ok() ? full->kv_bytes : 0;
        v.prefill_tokens = s.stats().prefill_tokens;
        v.decode_tokens = s.stats().decode_tokens;
        v.prefill_seconds = s.stats().prefill_seconds;
        v.decode_seconds = s.stats().decode_seconds;
        v.generated = g.n_generated;
        v.stopped_at_eos = g.stopped_at_eos;
        return v;
    }

    std::string path_;
    std::unique_ptr<gguf::file> file_;
    std::unique_ptr<model::model> model_;
    std::optional<tokenizer::tokenizer> tok_;
    std::mutex mutex_;
    std::optional<stats_values> stats_;
};

}  // namespace
}  // namespace h2okv::python

PYBIND11_MODULE(h2okv, m) {
    using namespace h2okv::python;
    m.doc() = "h2okv: bounded KV caches managed by H2O eviction and related policies (docs/PYTHON.md)";
    m.attr("__version__") = H2OKV_VERSION;
    m.def("simulate", &simulate, py::arg("spec"), py::arg("logits") = py::none(), py::kw_only(),
          py::arg("keys") = py::none(), py::arg("chunk") = 1,
          R"(Replays one eviction unit over recorded pre-softmax attention scores.

spec: a KV spec, "h2o:budget=4,decay=0.98" (a fractional budget is a fraction of T).
logits: float array [T, T]; row t holds query t's scores of positions 0..t (entries above the diagonal
    are ignored; -inf masks a position, the diagonal must be finite). At each step the query attends the
    kept positions plus the chunk's positions up to itself, softmax renormalised over them (in double), and
    the policy updates and evicts per docs/EVICTION_CONTRACT.md.
keys: float array [T, d], the unit's key of every position, for policies that score keys (l2norm, keydiff,
    any proxy=1 policy); they cannot run from attention logits alone.
chunk: positions per chunk (1: decode, one eviction per step; larger: prefill chunks).
Returns a list with one int64 array per chunk (T arrays when chunk=1): the kept positions after it,
ascending.)");
    m.def(
        "policies", &policies,
        "Every registered policy: dicts with name, summary, defaults, evicts, source (none, attention, "
        "keys), "
        "granularity (its default: head, or layer for tova) and params (own parameter -> (default, help)).");
    py::class_<py_model>(m, "Model", "A GGUF model and its tokenizer, loaded once.")
        .def(py::init<const std::string&>(), py::arg("path"))
        .def("tokenize", &py_model::tokenize, py::arg("text"), py::arg("add_bos") = true,
             py::arg("special") = false, "Token ids (int32 array) of text; BOS first when the model adds it.")
        .def("detokenize", &py_model::detokenize, py::arg("ids"),
             "The text of an integer array of token ids.")
        .def("generate", &py_model::generate, py::arg("prompt"), py::arg("n"), py::kw_only(),
             py::arg("kv") = "full", py::arg("temperature") = 0.0f, py::arg("top_k") = 0,
             py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("ignore_eos") = false,
             py::arg("kv_type") = "f16", py::arg("prefill_chunk") = 512, py::arg("n_ctx") = 0,
             "The text generated after prompt (BOS added), at most n tokens, as `h2okv generate -p PROMPT -n "
             "N` "
             "prints it after the prompt; greedy unless temperature > 0. kv: a KV spec such as "
             "\"h2o:budget=0.2\". Statistics: last_stats().")
        .def("logits", &py_model::logits, py::arg("ids"), py::kw_only(), py::arg("kv") = "full",
             py::arg("kv_type") = "f16", py::arg("prefill_chunk") = 512, py::arg("n_ctx") = 0,
             "Logits [len(ids), n_vocab] (float32) of processing ids in one session under the KV spec kv.")
        .def("last_stats", &py_model::last_stats,
             "What the last generate() ran and kept: a dict (policy, units, slots_per_unit, positions, kept, "
             "evicted, kv_bytes, full_kv_bytes, prefill/decode tokens and seconds, generated, "
             "stopped_at_eos); "
             "None before the first.")
        .def_property_readonly("path", &py_model::path)
        .def_property_readonly("arch", &py_model::arch)
        .def_property_readonly("n_vocab", &py_model::n_vocab)
        .def_property_readonly("n_ctx_train", &py_model::n_ctx_train)
        .def_property_readonly("bos", &py_model::bos)
        .def_property_readonly("eos", &py_model::eos);
}
