#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (small files, committed).

Run it again after changing a target's input format:  /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# GGUF value type tags.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)


def gguf_string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t == STRING:
        return gguf_string(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
           U64: "<Q", I64: "<q", F64: "<d"}[t]
    return struct.pack(fmt, v)


def gguf_file(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, ggml_type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gguf_string(key) + struct.pack("<I", t) + gguf_value(t, v)
    offset = 0
    offsets = []
    for name, dims, gt, data in tensors:
        offsets.append(offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    for (name, dims, gt, data), off in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gt, off)
    out += b"\0" * ((alignment - len(out) % alignment) % alignment)
    for name, dims, gt, data in tensors:
        out += data + b"\0" * ((alignment - len(data) % alignment) % alignment)
    return out


def f32(n, seed):
    vals = [((i * 7919 + seed * 104729) % 200 - 100) / 400.0 for i in range(n)]
    return struct.pack("<%df" % n, *vals)


def tiny_llama():
    """1 layer, n_embd 8, 2 heads (head_dim 4), 1 KV head, n_ff 8, 8 tokens: loadable by h2okv."""
    sp = "\u2581"
    tokens = ["<unk>", "<s>", "</s>", "<0x0A>", sp + "a", "a", "b", sp]
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("general.name", STRING, "fuzz seed"),
        ("llama.context_length", U32, 32),
        ("llama.embedding_length", U32, 8),
        ("llama.block_count", U32, 1),
        ("llama.feed_forward_length", U32, 8),
        ("llama.attention.head_count", U32, 2),
        ("llama.attention.head_count_kv", U32, 1),
        ("llama.rope.dimension_count", U32, 4),
        ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("tokenizer.ggml.model", STRING, "llama"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3, 6, 1, 1, 1, 1])),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
    ]
    t = [("token_embd.weight", [8, 8], 0, f32(64, 1)), ("output_norm.weight", [8], 0, f32(8, 2)),
         ("blk.0.attn_norm.weight", [8], 0, f32(8, 3)), ("blk.0.ffn_norm.weight", [8], 0, f32(8, 4)),
         ("blk.0.attn_q.weight", [8, 8], 0, f32(64, 5)), ("blk.0.attn_k.weight", [8, 4], 0, f32(32, 6)),
         ("blk.0.attn_v.weight", [8, 4], 0, f32(32, 7)), ("blk.0.attn_output.weight", [8, 8], 0, f32(64, 8)),
         ("blk.0.ffn_gate.weight", [8, 8], 0, f32(64, 9)), ("blk.0.ffn_up.weight", [8, 8], 0, f32(64, 10)),
         ("blk.0.ffn_down.weight", [8, 8], 0, f32(64, 11))]
    return gguf_file(kvs, t)


def every_type():
    kvs = [
        ("general.alignment", U32, 16),
        ("a.u8", U8, 200), ("a.i8", I8, -5), ("a.u16", U16, 60000), ("a.i16", I16, -300),
        ("a.u32", U32, 4294967295), ("a.i32", I32, -7), ("a.f32", F32, 0.5), ("a.bool", BOOL, 1),
        ("a.str", STRING, "h\u00e9llo"), ("a.u64", U64, 2**63), ("a.i64", I64, -2**40), ("a.f64", F64, 1e300),
        ("a.arr", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"]), (ARRAY, [])])),
        ("a.empty", ARRAY, (F32, [])),
    ]
    f16 = struct.pack("<8e", *[0.5 * i for i in range(8)])
    bf16 = bytes(16)
    q8_0 = struct.pack("<e", 0.25) + bytes(range(32))
    t = [("t.f16", [8], 1, f16), ("t.bf16", [4, 2], 30, bf16), ("t.q8_0", [32], 8, q8_0)]
    return gguf_file(kvs, t, version=2, alignment=16)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    write("gguf", "empty_v3", gguf_file([], []))
    write("gguf", "tiny_llama", tiny_llama())
    write("gguf", "every_type_v2", every_type())
    write("gguf", "vocab_only_bpe", gguf_file([
        ("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "gpt-2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "b", "ab", "\u0120", "<|endoftext|>"])),
        ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b"])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [1, 1, 1, 1, 3]))], []))

    # Tokenizer: the first byte picks the vocabulary (stories260K, then ../shared/vocab/*.gguf sorted) and
    # the flags (0x40 add BOS/EOS, 0x80 parse specials).
    texts = ["Once upon a time, there was a little girl.", "Hello world! 123 4567 ...",
             "  leading spaces\tand\ttabs\n\nnew lines", "caf\u00e9 \u65e5\u672c\u8a9e \U0001f600 \u0905\u0928",
             "</s><s><|endoftext|> <unk>", "it's we're I'll don't", "\xff\xfe\xc3 invalid \xe2\x82"]
    for i, text in enumerate(texts):
        raw = text.encode("latin-1") if i == len(texts) - 1 else text.encode()
        for vocab in range(7):
            sel = vocab | (0x40 if i % 2 else 0) | (0x80 if i == 4 else 0)
            write("tokenizer", "t%d_v%d" % (i, vocab), bytes([sel]) + raw)

    specs = ["full", "window:budget=16", "streaming:budget=16,sinks=4", "h2o:budget=256,recent=128",
             "h2o:budget=0.2,decay=0.98,granularity=layer", "tova:budget=8,granularity=model",
             "h2o: budget = 8 , recent = 2 , sinks = 1", "window:budget=1.0,recent=20", "h2o:budget=8,budget=9"]
    for i, s in enumerate(specs):
        write("policy_spec", "spec%d" % i, s)

    # Policy rows: policy, granularity, layout bits, max_chunk, budget, recent, sinks, decay, run length; then
    # row bytes (chunk sizes, null-row draws, weights).
    rows = bytes((i * 37 + 11) % 256 for i in range(400))
    headers = [
        (3, 0, 7, 3, 8, 0x80 | 2, 0x80 | 1, 0x80 | 2, 40),   # h2o, head units, 2 layers x 2 KV x 2 heads
        (3, 1, 3, 0, 0x80 | 16, 0, 0, 0, 30),                # h2o, layer units, fractional budget
        (4, 2, 5, 1, 6, 0, 0, 0, 25),                        # tova, one unit
        (1, 0, 1, 2, 5, 0, 0, 0, 20),                        # window
        (2, 0, 2, 3, 7, 0x80 | 1, 0x80 | 2, 0, 33),          # streaming
        (0, 0, 7, 3, 0, 0, 0, 0, 12),                        # full
    ]
    for i, h in enumerate(headers):
        write("policy_rows", "run%d" % i, bytes(h) + rows)


if __name__ == "__main__":
    main()
