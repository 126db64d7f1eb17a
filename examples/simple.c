// simple: greedy generation through the C API, printing what `h2okv generate` prints on stdout.
//
//   simple -m MODEL -p PROMPT -n N [--kv SPEC]
//   simple -m models/stories260K.gguf -p "Once upon a time" -n 64 --kv "h2o:budget=0.2,decay=0.98"
//
// The prompt (BOS added first) is processed as one chunk, then one token at a time is picked (argmax) and fed
// back; the prompt and each token's text go to stdout, then a newline, and the KV statistics to stderr.
// stdout equals `h2okv generate -m MODEL -p PROMPT -n N` with the same policy (its --kv-* flags), byte for
// byte (tests/capi/check_simple.py).
#include <h2okv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char* argv0) {
    fprintf(stderr, "usage: %s -m MODEL -p PROMPT -n N [--kv SPEC]\n", argv0);
    fprintf(stderr, "  SPEC: an eviction policy, e.g. \"h2o:budget=0.2,decay=0.98\" (default: full)\n");
    return 2;
}

int main(int argc, char** argv) {
    const char* model_path = NULL;
    const char* prompt = NULL;
    const char* kv = NULL;
    long n_predict = -1;
    for (int i = 1; i < argc; ++i) {
        if (i + 1 >= argc) return usage(argv[0]);
        if (strcmp(argv[i], "-m") == 0) {
            model_path = argv[++i];
        } else if (strcmp(argv[i], "-p") == 0) {
            prompt = argv[++i];
        } else if (strcmp(argv[i], "-n") == 0) {
            char* end = NULL;
            n_predict = strtol(argv[++i], &end, 10);
            if (*end != '\0' || n_predict < 0) {
                fprintf(stderr, "simple: -n '%s' must be a count >= 0\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--kv") == 0) {
            kv = argv[++i];
        } else {
            return usage(argv[0]);
        }
    }
    if (model_path == NULL || prompt == NULL || n_predict < 0) return usage(argv[0]);
    if (h2okv_version_number() != H2OKV_VERSION_NUMBER) {
        fprintf(stderr, "simple: built against h2okv %d.%d.%d, running with %s\n", H2OKV_VERSION_MAJOR,
                H2OKV_VERSION_MINOR, H2OKV_VERSION_PATCH, h2okv_version());
        return 1;
    }

    // Every handle starts NULL and is freed at `done` (the *_free functions accept NULL).
    int rc = 1;
    h2okv_model* model = NULL;
    h2okv_session* session = NULL;
    int32_t* tokens = NULL;
    size_t piece_cap = 64;
    char* piece = malloc(piece_cap);
    const char* what = "loading the model";
    h2okv_status st = h2okv_model_load(model_path, &model);
    if (st != H2OKV_OK) goto failed;

    // Ask for the token count first: a buffer too small fails and says how many are needed.
    size_t n_prompt = 0;
    const size_t prompt_len = strlen(prompt);
    h2okv_tokenize(model, prompt, prompt_len, 1, 0, NULL, 0, &n_prompt);
    tokens = malloc((n_prompt > 0 ? n_prompt : 1) * sizeof(int32_t));
    what = "tokenizing the prompt";
    st = tokens == NULL || piece == NULL
             ? H2OKV_ERR_OUT_OF_MEMORY
             : h2okv_tokenize(model, prompt, prompt_len, 1, 0, tokens, n_prompt, &n_prompt);
    if (st != H2OKV_OK) goto failed;
    if (n_prompt == 0) {
        fprintf(stderr, "simple: the prompt has no tokens (the model adds no BOS)\n");
        goto done;
    }

    h2okv_session_params sp = h2okv_session_default_params();
    sp.kv = kv;
    // The prompt is the only multi-token chunk: slots for a larger chunk would never be used.
    if ((size_t)sp.prefill_chunk > n_prompt) sp.prefill_chunk = (int32_t)n_prompt;
    what = "opening the session";
    st = h2okv_session_open(model, &sp, (int64_t)n_prompt + n_predict, &session);
    if (st != H2OKV_OK) goto failed;

    fwrite(prompt, 1, prompt_len, stdout);
    fflush(stdout);
    what = "processing the prompt";
    st = h2okv_session_process(session, tokens, n_prompt);
    if (st != H2OKV_OK) goto failed;
    const int32_t n_vocab = h2okv_model_n_vocab(model);
    for (long i = 0; i < n_predict; ++i) {
        int32_t id = h2okv_sample_greedy(h2okv_session_logits(session), (size_t)n_vocab);
        size_t len = 0;
        what = "reading a token's text";
        st = h2okv_token_piece(model, id, 0, piece, piece_cap, &len);
        if (st == H2OKV_ERR_OUT_OF_RANGE) {  // a longer piece than the buffer: grow it to the size reported
            char* grown = realloc(piece, len + 1);
            if (grown == NULL) goto failed;
            piece = grown;
            piece_cap = len + 1;
            st = h2okv_token_piece(model, id, 0, piece, piece_cap, &len);
        }
        if (st != H2OKV_OK) goto failed;
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        if (h2okv_token_is_eog(model, id) || i + 1 == n_predict) break;
        what = "processing a token";
        st = h2okv_session_process(session, &id, 1);
        if (st != H2OKV_OK) goto failed;
    }
    fputc('\n', stdout);

    h2okv_kv_stats stats;
    what = "reading the KV statistics";
    st = h2okv_session_kv_stats(session, &stats);
    if (st != H2OKV_OK) goto failed;
    fprintf(stderr, "kv policy: %s\n", h2okv_session_kv_config(session));
    fprintf(stderr,
            "kv: %lld positions processed, %lld kept over %d units, %lld evicted; %lld bytes (full: %lld)\n",
            (long long)stats.n_past, (long long)stats.kept, stats.n_units, (long long)stats.evicted,
            (long long)stats.kv_bytes, (long long)stats.full_kv_bytes);
    rc = 0;
    goto done;

failed:
    fprintf(stderr, "simple: %s: %s: %s\n", what, h2okv_status_name(st), h2okv_last_error());
done:
    h2okv_session_free(session);
    free(piece);
    free(tokens);
    h2okv_model_free(model);
    return rc;
}
