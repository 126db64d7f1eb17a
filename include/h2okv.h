// h2okv.h: the C API of h2okv (C99; usable from C++, Rust, Python's ctypes, ...).
//
// Two libraries implement it:
//   - libh2okv.so (CMake h2okv::h2okv, pkg-config h2okv): everything below. Load a GGUF model, open sessions
//     with a policy-managed KV cache, tokenize, process tokens, read logits, sample, read KV statistics.
//   - libh2okv_policy.so (CMake h2okv::policy, pkg-config h2okv-policy): the eviction policy alone, no model,
//     no kernels, for use inside another engine's attention loop: the version, error and h2okv_policy_*
//     functions. libh2okv.so has them too; link one of the two libraries, not both.
// Both export only the h2okv_* symbols of this header. While H2OKV_VERSION_MAJOR is 0 a minor release may
// change the ABI (the shared libraries' SONAME carries major.minor).
//
// Conventions:
//   - Functions that can fail return an h2okv_status; on failure h2okv_last_error() holds a message saying
//     what was wrong and what was expected ("kv spec: unknown policy 'h2'; valid: full, window, ...").
//     Nothing is thrown across this boundary: every entry point catches.
//   - Objects are opaque handles created by *_load / *_open / *_create and released by the matching *_free
//     (which accepts NULL). Output pointers are written only on success.
//   - Pointers returned into an object (const int32_t*, const float*, const char*) stay valid until the next
//     call that changes that object, or its *_free.
//   - Threads: distinct objects may be used from distinct threads at once; one object from one thread at a
//     time. A model may be shared by several sessions, used from one thread at a time.
//
// Generation, greedy (examples/simple.c is the complete program):
//
//   h2okv_model* model;
//   if (h2okv_model_load("stories260K.gguf", &model) != H2OKV_OK) {
//       fprintf(stderr, "%s\n", h2okv_last_error());
//       return 1;
//   }
//   int32_t prompt[512];
//   size_t n_prompt;
//   h2okv_tokenize(model, "Once upon a time", 16, 1, 0, prompt, 512, &n_prompt);
//   h2okv_session_params sp = h2okv_session_default_params();
//   sp.kv = "h2o:budget=0.2,decay=0.98";
//   h2okv_session* s;
//   h2okv_session_open(model, &sp, (int64_t)n_prompt + 50, &s);  // run length: prompt + generated tokens
//   h2okv_session_process(s, prompt, n_prompt);
//   for (int i = 0; i < 50; ++i) {
//       int32_t id = h2okv_sample_greedy(h2okv_session_logits(s), h2okv_model_n_vocab(model));
//       ...print h2okv_token_piece(model, id, ...), stop at h2okv_token_is_eog(model, id)...
//       h2okv_session_process(s, &id, 1);
//   }
//   h2okv_session_free(s);
//   h2okv_model_free(model);
//
// The policy inside another engine (examples/policy_only.c is the complete program):
//
//   h2okv_policy_layout l = {.n_layer = 32, .n_kv_head = 8, .n_head = 32, .head_dim = 128,
//                            .max_chunk = 512, .max_positions = 4096};
//   h2okv_policy* p;
//   h2okv_policy_create("h2o:budget=1024,granularity=model", &l, 4096, &p);
//   for each chunk [first, first + n):
//       h2okv_policy_begin_chunk(p, first, n);
//       for each query i of the chunk, each unit u (h2okv_policy_unit_of): the unit's query heads attend
//           kept slots (h2okv_policy_kept_slots) + the chunk's slots 0..i (h2okv_policy_chunk_slots); sum
//           their softmax weights per slot into row[capacity] (double) and call h2okv_policy_add_row(p, u, i,
//           row) (only when h2okv_policy_needs_attention(p));
//       h2okv_policy_end_chunk(p);
//       h2okv_policy_victims(p, u, &positions, &slots, &n_victims): drop those positions from your cache
//           (llama.cpp: seq_rm(seq, pos, pos + 1)), or overwrite the victims' slots with the next newcomers.
//
// The contract these calls implement (units, rows, scores, eviction, the policies and their parameters) is
// docs/EVICTION_CONTRACT.md; docs/API.md describes this API with a worked example.
#ifndef H2OKV_H
#define H2OKV_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define H2OKV_API
#else
#define H2OKV_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Version

#define H2OKV_VERSION_MAJOR 0
#define H2OKV_VERSION_MINOR 1
#define H2OKV_VERSION_PATCH 0
// MAJOR * 10000 + MINOR * 100 + PATCH: compare with h2okv_version_number() to detect a header/library
// mismatch.
#define H2OKV_VERSION_NUMBER (H2OKV_VERSION_MAJOR * 10000 + H2OKV_VERSION_MINOR * 100 + H2OKV_VERSION_PATCH)

// The library's version, "0.1.0" (a static string).
H2OKV_API const char* h2okv_version(void);
// The library's version as H2OKV_VERSION_NUMBER computes it.
H2OKV_API int32_t h2okv_version_number(void);

// Status and errors

typedef enum h2okv_status {
    H2OKV_OK = 0,
    H2OKV_ERR_INVALID_ARGUMENT = 1,  // a bad parameter, spec string, token id, or a call out of order
    H2OKV_ERR_INVALID_FILE = 2,      // a malformed or unsupported model file
    H2OKV_ERR_IO = 3,                // a file that cannot be opened or read
    H2OKV_ERR_OUT_OF_RANGE = 4,      // a value past a limit (context length, a buffer too small)
    H2OKV_ERR_OUT_OF_MEMORY = 5,
    H2OKV_ERR_INTERNAL = 6,  // a bug in h2okv: please report it with h2okv_last_error()
} h2okv_status;

// "ok", "invalid_argument", "invalid_file", "io_error", "out_of_range", "out_of_memory", "internal";
// "unknown" for other values. A static string.
H2OKV_API const char* h2okv_status_name(h2okv_status status);
// The message of the last failed call on this thread ("" when none has failed). Valid until the next failing
// call on this thread; successful calls leave it as it is.
H2OKV_API const char* h2okv_last_error(void);

// The policy library (no model)

// The model as the policy sees it.
typedef struct h2okv_policy_layout {
    int32_t n_layer;        // >= 1
    int32_t n_kv_head;      // KV heads per layer, >= 1
    int32_t n_head;         // query heads per layer, a multiple of n_kv_head
    int32_t head_dim;       // the length of a key (read by the policies that score keys), >= 1
    int32_t max_chunk;      // the largest chunk h2okv_policy_begin_chunk will be given, >= 1
    int64_t max_positions;  // the context length: the largest position + 1, the capacity of `full`
} h2okv_policy_layout;

typedef struct h2okv_policy h2okv_policy;

// Creates a policy from a spec string, "NAME[:key=value,...]": "h2o:budget=0.2,decay=0.98",
// "streaming:budget=256,sinks=4", "h2o:budget=512,recent=256,granularity=model". Keys: budget (a token count
// "256", or a fraction of run_length "0.2"), recent, sinks, decay, granularity (head | layer | model;
// default: the policy's, layer for tova, head for the others), positions (original | rolling), and the
// policy's own parameters (h2okv_policy_catalog). Defaults and validation are the contract's
// (docs/EVICTION_CONTRACT.md); an unknown name or key is refused with the list of valid ones. run_length: the
// tokens the run will process (resolves a fractional budget), 1 to max_positions.
H2OKV_API h2okv_status h2okv_policy_create(const char* spec, const h2okv_policy_layout* layout,
                                           int64_t run_length, h2okv_policy** out);
H2OKV_API void h2okv_policy_free(h2okv_policy* policy);

// Every registered policy, one per line: "name: what it evicts; its defaults". A static string.
H2OKV_API const char* h2okv_policy_catalog(void);

// The configuration the policy runs with, defaults applied and the budget resolved, as a spec string that
// h2okv_policy_create reads back: "h2o:budget=51,recent=25,sinks=0,decay=0.98,granularity=layer" (the
// granularity only where it is not the policy's default).
H2OKV_API const char* h2okv_policy_config(const h2okv_policy* policy);
// 1 when the policy reads attention rows (h2okv_policy_add_row); 0 for full, window, streaming and the
// key-scoring policies, whose engines compute no rows.
H2OKV_API int h2okv_policy_needs_attention(const h2okv_policy* policy);
// 1 when the policy reads the keys of each chunk's tokens (h2okv_policy_add_key): l2norm, keydiff, proxy=1.
H2OKV_API int h2okv_policy_needs_keys(const h2okv_policy* policy);
// The number of eviction units: n_layer * n_kv_head (granularity head), n_layer (layer) or 1 (model).
H2OKV_API int32_t h2okv_policy_n_units(const h2okv_policy* policy);
// The unit KV head `kv_head` of `layer` belongs to; -1 when either is out of range.
H2OKV_API int32_t h2okv_policy_unit_of(const h2okv_policy* policy, int32_t layer, int32_t kv_head);
// Slots per unit: budget + max_chunk (at most max_positions); `full`: max_positions. Rows have this length.
H2OKV_API int64_t h2okv_policy_capacity(const h2okv_policy* policy);
// The first position of the next chunk (tokens seen so far).
H2OKV_API int64_t h2okv_policy_next_position(const h2okv_policy* policy);

// Starts the chunk of positions [first, first + n): first = h2okv_policy_next_position, 1 <= n <= max_chunk,
// first + n <= max_positions, and the previous chunk ended. Every unit gives chunk token i a slot.
H2OKV_API h2okv_status h2okv_policy_begin_chunk(h2okv_policy* policy, int64_t first, int32_t n);
// The slots `unit` held before the open chunk (every query of the chunk attends them), ascending; after
// h2okv_policy_end_chunk, every slot it holds. *slots points into the policy.
H2OKV_API h2okv_status h2okv_policy_kept_slots(const h2okv_policy* policy, int32_t unit,
                                               const int32_t** slots, size_t* n);
// The slots of the chunk's tokens in `unit` (token i in (*slots)[i]), of the open or the last chunk.
H2OKV_API h2okv_status h2okv_policy_chunk_slots(const h2okv_policy* policy, int32_t unit,
                                                const int32_t** slots, size_t* n);
// The position each slot of `unit` holds (-1 when free): h2okv_policy_capacity entries; chunk slots hold
// their positions from begin_chunk on. How an engine that names tokens by position finds a slot's token.
H2OKV_API h2okv_status h2okv_policy_slot_positions(const h2okv_policy* policy, int32_t unit,
                                                   const int64_t** positions, size_t* n);
// The row increment of chunk query i in `unit`: row[slot] (h2okv_policy_capacity doubles) is the sum, over
// the query heads that read the unit, of their softmax weights on that slot (0 where the query did not
// attend). The policy decays and adds (the contract's clause 3). Rows of one unit come in increasing i within
// a chunk; a unit without a row for some i keeps its scores (a null row). A no-op unless needs_attention.
// The one call that may run concurrently on one policy: from several threads, for distinct units.
H2OKV_API h2okv_status h2okv_policy_add_row(h2okv_policy* policy, int32_t unit, int32_t i, const double* row);
// The key of chunk token i as KV head `kv_head` of `layer` stores it (head_dim floats, rotated as the engine
// attends it): once per (layer, KV head) and chunk token, before end_chunk. A no-op unless needs_keys.
H2OKV_API h2okv_status h2okv_policy_add_key(h2okv_policy* policy, int32_t i, int32_t layer, int32_t kv_head,
                                            const float* key, size_t n);
// Admits the chunk's tokens and evicts, per unit, down to the budget.
H2OKV_API h2okv_status h2okv_policy_end_chunk(h2okv_policy* policy);
// The positions the last end_chunk evicted from `unit`, ascending, and their (now free) slots; *n of each.
// Either output pointer may be NULL.
H2OKV_API h2okv_status h2okv_policy_victims(const h2okv_policy* policy, int32_t unit,
                                            const int64_t** positions, const int32_t** slots, size_t* n);
// The positions `unit` holds, ascending, copied into out[0..capacity): *n is their number. When capacity is
// smaller, nothing is copied, *n is the number needed and the call fails with H2OKV_ERR_OUT_OF_RANGE.
H2OKV_API h2okv_status h2okv_policy_kept_positions(const h2okv_policy* policy, int32_t unit, int64_t* out,
                                                   size_t capacity, size_t* n);
// Evictions from all units since creation or the last reset.
H2OKV_API int64_t h2okv_policy_total_evictions(const h2okv_policy* policy);
// Back to the state right after h2okv_policy_create.
H2OKV_API void h2okv_policy_reset(h2okv_policy* policy);

#ifndef H2OKV_POLICY_ONLY  // the rest is libh2okv.so's alone

// Threads

// Threads the calls made from this thread use (OpenMP); 0 or less: all cores (the default). Results do not
// depend on it.
H2OKV_API void h2okv_set_threads(int32_t n_threads);

// Models

typedef struct h2okv_model h2okv_model;

// Loads a GGUF model (mapped, validated: a malformed file is refused with what was wrong). llama, qwen2,
// qwen3, gemma2, gemma3 and phi3 architectures; F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q6_K weights.
H2OKV_API h2okv_status h2okv_model_load(const char* path, h2okv_model** out);
// Frees the model; every session opened on it must be freed first.
H2OKV_API void h2okv_model_free(h2okv_model* model);

H2OKV_API int32_t h2okv_model_n_vocab(const h2okv_model* model);
H2OKV_API int32_t h2okv_model_n_layer(const h2okv_model* model);
H2OKV_API int32_t h2okv_model_n_head(const h2okv_model* model);     // query heads per layer
H2OKV_API int32_t h2okv_model_n_kv_head(const h2okv_model* model);  // KV heads per layer
// The context length the file states (it may be wrong: stories260K says 2048, it was trained at 512).
H2OKV_API int64_t h2okv_model_n_ctx_train(const h2okv_model* model);
// The architecture ("llama", "qwen2", ...), a string owned by the model.
H2OKV_API const char* h2okv_model_arch(const h2okv_model* model);

// Tokens

// Special token ids; -1 when the model has none.
H2OKV_API int32_t h2okv_token_bos(const h2okv_model* model);
H2OKV_API int32_t h2okv_token_eos(const h2okv_model* model);
// 1 when `token` ends a generation (EOS, EOT, and the tokens llama.cpp recognises by text); 0 otherwise.
H2OKV_API int h2okv_token_is_eog(const h2okv_model* model, int32_t token);

// The token ids of text[0..len) (bytes, any content) into tokens[0..capacity); *n_tokens is their number.
// add_special: prepend BOS / append EOS as the model asks; parse_special: match special-token text ("</s>").
// When capacity is too small, nothing is written, *n_tokens is the number needed and the call fails with
// H2OKV_ERR_OUT_OF_RANGE.
H2OKV_API h2okv_status h2okv_tokenize(const h2okv_model* model, const char* text, size_t len, int add_special,
                                      int parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens);
// The text of tokens[0..n) as llama.cpp's llama_detokenize, into buf[0..capacity) followed by a NUL; *len is
// the text's length without the NUL (the text may hold NUL bytes). When capacity < *len + 1, nothing is
// written, *len is set and the call fails with H2OKV_ERR_OUT_OF_RANGE. Ids outside the vocabulary give
// nothing.
H2OKV_API h2okv_status h2okv_detokenize(const h2okv_model* model, const int32_t* tokens, size_t n, char* buf,
                                        size_t capacity, size_t* len);
// The bytes one token stands for, as llama.cpp's llama_token_to_piece (what `h2okv generate` prints), into
// buf as h2okv_detokenize writes. special: 1 gives control tokens their text (otherwise ""). An id outside
// the vocabulary is refused.
H2OKV_API h2okv_status h2okv_token_piece(const h2okv_model* model, int32_t token, int special, char* buf,
                                         size_t capacity, size_t* len);

// Sessions

// How a session's KV cache is managed. Take h2okv_session_default_params() and change what you need.
typedef struct h2okv_session_params {
    const char* kv;         // the policy spec (h2okv_policy_create's syntax); NULL or "": "full"
    const char* kv_type;    // K and V storage: "f32", "f16", "q8_0", "q4_0"; NULL: "f16"
    int32_t prefill_chunk;  // tokens per prefill chunk (evictions after each), >= 1; default 512
    int64_t n_ctx;          // context length; 0: the model's. Bounds the run under `full`
} h2okv_session_params;

H2OKV_API h2okv_session_params h2okv_session_default_params(void);

typedef struct h2okv_session h2okv_session;

// Opens a sequence on `model`. run_length: the tokens the session will process (BOS + prompt + generated);
// it resolves a fractional budget ("budget=0.2" keeps floor(0.2 * run_length)), and no more can be processed.
H2OKV_API h2okv_status h2okv_session_open(h2okv_model* model, const h2okv_session_params* params,
                                          int64_t run_length, h2okv_session** out);
H2OKV_API void h2okv_session_free(h2okv_session* session);

// Processes tokens[0..n) at positions n_past.. in chunks of prefill_chunk (n = 1: a decode step), evicting
// after each chunk, and keeps the logits of the last token. Ids must be in the vocabulary.
H2OKV_API h2okv_status h2okv_session_process(h2okv_session* session, const int32_t* tokens, size_t n);
// The logits of the last token processed (n_vocab floats); NULL before the first h2okv_session_process.
H2OKV_API const float* h2okv_session_logits(const h2okv_session* session);
// Tokens processed so far.
H2OKV_API int64_t h2okv_session_n_past(const h2okv_session* session);
// The configuration the session's policy runs with, as h2okv_policy_config.
H2OKV_API const char* h2okv_session_kv_config(const h2okv_session* session);

// The KV cache's state.
typedef struct h2okv_kv_stats {
    int64_t n_past;          // positions processed
    int32_t n_units;         // eviction units
    int64_t slots_per_unit;  // allocated slots per unit
    int64_t kept;            // positions kept, summed over the units
    int64_t evicted;         // evictions, summed over the units
    int64_t kv_bytes;        // bytes of K and V allocated
    int64_t full_kv_bytes;   // what a `full` cache of the run's length would allocate
} h2okv_kv_stats;

H2OKV_API h2okv_status h2okv_session_kv_stats(const h2okv_session* session, h2okv_kv_stats* out);
// The positions unit `unit` of the session's policy keeps, as h2okv_policy_kept_positions.
H2OKV_API h2okv_status h2okv_session_kept_positions(const h2okv_session* session, int32_t unit, int64_t* out,
                                                    size_t capacity, size_t* n);

// Sampling

// How to pick tokens: greedy when temperature is 0, else softmax(logits / temperature) cut by top-k and
// top-p, drawn with a seeded generator whose sequence is the same on every platform.
typedef struct h2okv_sampler_params {
    float temperature;  // >= 0; 0: greedy (the default)
    int32_t top_k;      // >= 0; 0: no limit
    float top_p;        // in (0, 1]; 1: no limit
    uint64_t seed;
} h2okv_sampler_params;

H2OKV_API h2okv_sampler_params h2okv_sampler_default_params(void);

typedef struct h2okv_sampler h2okv_sampler;

H2OKV_API h2okv_status h2okv_sampler_create(const h2okv_sampler_params* params, h2okv_sampler** out);
H2OKV_API void h2okv_sampler_free(h2okv_sampler* sampler);
// Samples from logits[0..n_vocab).
H2OKV_API h2okv_status h2okv_sampler_sample(h2okv_sampler* sampler, const float* logits, size_t n_vocab,
                                            int32_t* token);
// The argmax of logits[0..n_vocab) (ties to the lowest id), what `h2okv generate` picks at --temp 0; -1 when
// logits is NULL or n_vocab is 0.
H2OKV_API int32_t h2okv_sample_greedy(const float* logits, size_t n_vocab);

#endif  // H2OKV_POLICY_ONLY

#ifdef __cplusplus
}
#endif

#endif  // H2OKV_H
