// policy_only: the eviction policy alone (libh2okv_policy.so) inside a hand-written attention loop, the way
// an engine with one KV cell per position (llama.cpp's cache) would use it.
//
//   policy_only [--kv SPEC] [-n TOKENS] [--rows]
//   policy_only --kv "h2o:budget=12,recent=4,decay=0.9,granularity=model" -n 48
//
// The toy model has 2 layers of 4 query heads over 2 KV heads (head_dim 8) with pseudo-random queries and
// keys (uniform in [-2.5, 2.5): peaked enough that some tokens draw much more attention than others). The
// engine keeps a cell per position and names tokens by position; the policy runs at `model` granularity (one
// kept set for the whole model, so one removal per victim serves every layer and head). The prompt is one
// chunk of 8 tokens, then one token per step. Per chunk:
//   - begin_chunk; the engine writes the chunk's K/V into its cells;
//   - per query, every (layer, head) attends the live cells up to the query (softmax in float), and the
//     weights, as double, are summed per position and handed to the policy as a row indexed by its slots
//     (h2okv_policy_slot_positions maps slots to positions);
//   - end_chunk; each victim's cell is removed (llama.cpp: llama_memory_seq_rm(mem, seq, pos, pos + 1)).
// Output: the policy's configuration, then per chunk "kept <last position>: <positions>" (the engine's live
// cells, checked against the policy's kept set); --rows adds per query "row <t>: <pos>=<increment> ..."
// (%.17g) so that tests/capi/check_policy_only.py can replay the contract and compare the kept sets.
#include <h2okv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { n_layer = 2, n_kv_head = 2, n_head = 4, head_dim = 8, prompt_chunk = 8, max_tokens = 4096 };

// The engine's cache: one cell per position, live until the policy evicts it.
struct cell {
    int live;
    float k[n_layer][n_kv_head][head_dim];
};

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

// Uniform in [-1, 1), the same sequence everywhere (xorshift64*).
static float uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const uint64_t r = rng_state * 0x2545F4914F6CDD1Du;
    return (float)((double)(r >> 40) / (double)(1u << 23)) - 1.0f;
}

static int usage(const char* argv0) {
    fprintf(stderr, "usage: %s [--kv SPEC] [-n TOKENS] [--rows]\n", argv0);
    fprintf(stderr,
            "  SPEC: a policy at model granularity (default "
            "h2o:budget=12,recent=4,decay=0.9,granularity=model)\n");
    fprintf(stderr, "  TOKENS: tokens to run, %d to %d (default 48)\n", prompt_chunk, max_tokens);
    return 2;
}

int main(int argc, char** argv) {
    const char* spec = "h2o:budget=12,recent=4,decay=0.9,granularity=model";
    long n_tokens = 48;
    int print_rows = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--rows") == 0) {
            print_rows = 1;
        } else if (strcmp(argv[i], "--kv") == 0 && i + 1 < argc) {
            spec = argv[++i];
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            char* end = NULL;
            n_tokens = strtol(argv[++i], &end, 10);
            if (*end != '\0' || n_tokens < prompt_chunk || n_tokens > max_tokens) return usage(argv[0]);
        } else {
            return usage(argv[0]);
        }
    }

    const h2okv_policy_layout layout = {.n_layer = n_layer,
                                        .n_kv_head = n_kv_head,
                                        .n_head = n_head,
                                        .head_dim = head_dim,
                                        .max_chunk = prompt_chunk,
                                        .max_positions = n_tokens};
    int rc = 1;
    h2okv_policy* policy = NULL;
    struct cell* cells = calloc((size_t)n_tokens, sizeof(struct cell));
    double* row = NULL;
    int64_t* kept = NULL;
    const char* what = "creating the policy";
    h2okv_status st =
        cells == NULL ? H2OKV_ERR_OUT_OF_MEMORY : h2okv_policy_create(spec, &layout, n_tokens, &policy);
    if (st != H2OKV_OK) goto failed;
    if (h2okv_policy_n_units(policy) != 1) {
        fprintf(stderr,
                "policy_only: '%s' has %d eviction units; this engine removes cells for the whole model, "
                "so it needs granularity=model\n",
                spec, h2okv_policy_n_units(policy));
        goto done;
    }
    const int64_t capacity = h2okv_policy_capacity(policy);
    row = malloc((size_t)capacity * sizeof(double));
    kept = malloc((size_t)capacity * sizeof(int64_t));
    if (row == NULL || kept == NULL) {
        st = H2OKV_ERR_OUT_OF_MEMORY;
        goto failed;
    }
    printf("policy: %s\n", h2okv_policy_config(policy));

    const float scale = 1.0f / sqrtf((float)head_dim);
    for (int64_t first = 0; first < n_tokens;) {
        const int32_t n = first == 0 ? prompt_chunk : 1;
        what = "beginning a chunk";
        st = h2okv_policy_begin_chunk(policy, first, n);
        if (st != H2OKV_OK) goto failed;
        for (int64_t p = first; p < first + n; ++p) {  // the chunk's keys enter the cache
            cells[p].live = 1;
            for (int l = 0; l < n_layer; ++l)
                for (int h = 0; h < n_kv_head; ++h)
                    for (int d = 0; d < head_dim; ++d) cells[p].k[l][h][d] = 2.5f * uniform();
        }
        const int64_t* slot_pos = NULL;
        size_t n_slots = 0;
        what = "reading the slots";
        st = h2okv_policy_slot_positions(policy, 0, &slot_pos, &n_slots);
        if (st != H2OKV_OK) goto failed;
        for (int32_t i = 0; i < n; ++i) {
            const int64_t t = first + i;
            memset(row, 0, (size_t)capacity * sizeof(double));
            for (int l = 0; l < n_layer; ++l) {
                for (int qh = 0; qh < n_head; ++qh) {
                    const int kvh = qh / (n_head / n_kv_head);
                    float q[head_dim];
                    for (int d = 0; d < head_dim; ++d) q[d] = 2.5f * uniform();
                    // softmax over the live cells up to t, by slot (each slot's cell holds its position).
                    float w[max_tokens];
                    float max_s = -INFINITY;
                    for (size_t s = 0; s < n_slots; ++s) {
                        const int64_t p = slot_pos[s];
                        if (p < 0 || p > t || !cells[p].live) continue;
                        float dot = 0.0f;
                        for (int d = 0; d < head_dim; ++d) dot += q[d] * cells[p].k[l][kvh][d];
                        w[s] = dot * scale;
                        if (w[s] > max_s) max_s = w[s];
                    }
                    float sum = 0.0f;
                    for (size_t s = 0; s < n_slots; ++s) {
                        const int64_t p = slot_pos[s];
                        if (p < 0 || p > t || !cells[p].live) continue;
                        w[s] = expf(w[s] - max_s);
                        sum += w[s];
                    }
                    for (size_t s = 0; s < n_slots; ++s) {
                        const int64_t p = slot_pos[s];
                        if (p < 0 || p > t || !cells[p].live) continue;
                        row[s] += (double)(w[s] / sum);
                    }
                }
            }
            if (print_rows) {
                printf("row %lld:", (long long)t);
                for (size_t s = 0; s < n_slots; ++s)
                    if (row[s] != 0.0) printf(" %lld=%.17g", (long long)slot_pos[s], row[s]);
                printf("\n");
            }
            what = "adding a row";
            st = h2okv_policy_add_row(policy, 0, i, row);
            if (st != H2OKV_OK) goto failed;
        }
        what = "ending a chunk";
        st = h2okv_policy_end_chunk(policy);
        if (st != H2OKV_OK) goto failed;
        const int64_t* victims = NULL;
        size_t n_victims = 0;
        st = h2okv_policy_victims(policy, 0, &victims, NULL, &n_victims);
        if (st != H2OKV_OK) goto failed;
        for (size_t v = 0; v < n_victims; ++v) cells[victims[v]].live = 0;  // seq_rm(pos, pos + 1)
        first += n;

        // The engine's live cells are the policy's kept set.
        size_t n_kept = 0;
        what = "reading the kept positions";
        st = h2okv_policy_kept_positions(policy, 0, kept, (size_t)capacity, &n_kept);
        if (st != H2OKV_OK) goto failed;
        printf("kept %lld:", (long long)(first - 1));
        size_t k = 0;
        for (int64_t p = 0; p < first; ++p) {
            if (!cells[p].live) continue;
            if (k >= n_kept || kept[k] != p) {
                fprintf(stderr, "policy_only: the cache holds position %lld, the policy does not\n",
                        (long long)p);
                goto done;
            }
            printf(" %lld", (long long)p);
            ++k;
        }
        printf("\n");
        if (k != n_kept) {
            fprintf(stderr, "policy_only: the policy keeps %zu positions, the cache %zu\n", n_kept, k);
            goto done;
        }
    }
    printf("evicted: %lld\n", (long long)h2okv_policy_total_evictions(policy));
    rc = 0;
    goto done;

failed:
    fprintf(stderr, "policy_only: %s: %s: %s\n", what, h2okv_status_name(st), h2okv_last_error());
done:
    free(kept);
    free(row);
    free(cells);
    h2okv_policy_free(policy);
    return rc;
}
