#!/usr/bin/python3
"""An independent numpy reference of h2okv: a float64 decoder forward pass (llama, qwen2, qwen3, phi3, gemma2,
gemma3, mistral3: biases, q/k norms, fused matrices, NeoX pairing, rope_freqs factors, linear and yarn rope
scaling, GeGLU, post norms, embedding scaling, soft-caps, sliding-window layers with their own rope, the query
temperature; see ARCH_PARTS) plus the KV eviction contract.

Sliding-window layers (Gemma's local layers, as llama.cpp defines them): layer l slides unless l % period ==
period - 1 (attention.sliding_window_pattern: gemma2 2, gemma3 6); a query at t attends the positions p <= t
with t - p < W (attention.sliding_window: gemma2 4096 by default, gemma3 only when the key is present). They are
outside the eviction policy: its units, budget and score rows count the global layers alone, and a sliding
layer's kept set after a chunk is the last W - 1 positions (what a later query can still attend).

It shares no code with the C++ engine: its own GGUF parser (v2/v3), dequantisation (F32, F16, BF16, Q8_0,
Q4_0, Q4_K, Q6_K, from ggml's block layouts),
SentencePiece encoder/decoder, forward pass and eviction bookkeeping, written from the GGUF format description
and /work/shared/SPEC.md ("the eviction contract"). Needs only numpy; run it with /usr/bin/python3.

Usage:
  llama_ref.py --model M --tokens "1 403 407 261 378" --out LOGITS.npy
  llama_ref.py --model M --tokens "..." --policy h2o --budget 8 [--recent R] [--sinks S] [--decay D]
               [--granularity head|layer|model] [--chunk C] --out LOGITS.npy [--trace TRACE.jsonl]
  llama_ref.py --model M --text-file F --max-tokens 512 --perplexity      # BOS + the text's first tokens
  llama_ref.py --model M --text "Once upon a time" --generate 196        # greedy continuation, printed
  llama_ref.py --model M --text "Once upon a time" --print-ids           # the token ids (BOS first)
  llama_ref.py --model M --matmul blk.0.attn_q.weight --x X.npy --out Y.npy  # one product, X: [n][cols]

--kv-type f32|f16|q8_0|q4_0|q4_1 stores K (after RoPE) and V rounded as the engine's KV cache stores them: f32 keeps
the float64 values (the engine's f32 rounding is below this reference's tolerance), f16 rounds to the
nearest binary16 (ties to even), q8_0 rounds each block of 32 as ggml's quantize_row_q8_0_ref does
(d = max|x| / 127 stored as fp16, q = round-half-away(x / d) with the unrounded d, value fp16(d) * q),
q4_0 as quantize_row_q4_0_ref (d = the signed extreme / -8, q = min(15, floor(x / d + 8.5)) with the
unrounded d, value fp16(d) * (q - 8)), q4_1 as quantize_row_q4_1_ref (d = (max - min) / 15, q = min(15,
floor((x - min) / d + 0.5)) with the unrounded d and min, value fp16(d) * q + fp16(min)). Attention then reads
the rounded values.

Products with Q4_K or Q6_K weights first round their activations as the engine does (src/kernels/q8k.h):
per position and block of 256, in float32, d = max|x| / 127 and q = round-half-even(clamp(x * (127 / max|x|),
-127, 127)); the product then uses d * q. Products with Q8_0 weights round them the same way per block of 32
with d stored as fp16, as llama.cpp's quantize_row_q8_0 (src/kernels/q8_0_act.h). --no-act-quant skips that
(to measure the rounding's own effect).

--out writes the logits of every processed position as float64 [n_tokens][n_vocab]; --trace writes one JSON
line per chunk after its evictions: {"pos": last position of the chunk, "kept": [[positions of layer 0 KV
head 0], [layer 0 KV head 1], ...]} (layer-major, sorted; coarser granularities repeat their shared set).
"""

import argparse
import heapq
import json
import math
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------------- GGUF

GGUF_SCALARS = {  # value type -> struct format
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}
GGUF_STRING, GGUF_ARRAY = 8, 9
T_F32, T_F16, T_Q4_0, T_Q8_0, T_Q4_K, T_Q6_K, T_BF16 = 0, 1, 2, 8, 12, 14, 30
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])  # 34 bytes: fp16 scale, 32 int8
Q4_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes: byte i = element i | element 16+i << 4
# 144 bytes: fp16 d, fp16 dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes of nibbles
Q4_K_BLOCK = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", (12,)), ("qs", "u1", (128,))])
# 210 bytes: 4 low bits, 2 high bits, int8 sub-block scales, fp16 d
Q6_K_BLOCK = np.dtype([("ql", "u1", (128,)), ("qh", "u1", (64,)), ("scales", "i1", (16,)), ("d", "<f2")])


def dequant_q4_0(b):
    """Q4_0 blocks -> [n_blocks * 32]: d * (nibble - 8); low nibbles are elements 0..15, high 16..31."""
    q = np.concatenate([b["qs"] & 15, b["qs"] >> 4], axis=1).astype(np.float64) - 8.0
    return (b["d"].astype(np.float64)[:, None] * q).reshape(-1)


def dequant_q4_k(b):
    """Q4_K super-blocks -> [n * 256]: 8 sub-blocks of 32, x = d*sc*q - dmin*m with 6-bit sc, m.

    scales[12]: bytes 0..3 hold sc0..3 (low 6 bits) and the top 2 bits of sc4..7; bytes 4..7 m0..3 and the
    top bits of m4..7; bytes 8..11 the low nibbles of sc4..7 (low) and m4..7 (high). qs[32p + l] holds
    sub-block 2p element l in its low nibble and sub-block 2p+1 element l in its high nibble."""
    s = b["scales"].astype(np.int64)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    qs = b["qs"].reshape(-1, 4, 32).astype(np.int64)
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float64)
    d = b["d"].astype(np.float64)[:, None, None]
    dmin = b["dmin"].astype(np.float64)[:, None, None]
    return (d * sc[:, :, None] * q - dmin * m[:, :, None]).reshape(-1)


def dequant_q6_k(b):
    """Q6_K super-blocks -> [n * 256]: 16 sub-blocks of 16, x = d * scale * (q - 32), q 6 bits.

    Each half h (128 elements) uses ql[64h:64h+64] and qh[32h:32h+32]; its element 32k + l (k < 4, l < 32)
    has low bits (ql[l + 32*(k%2)] >> 4*(k//2)) & 15 and high bits (qh[l] >> 2k) & 3."""
    ql = b["ql"].reshape(-1, 2, 64).astype(np.int64)
    qh = b["qh"].reshape(-1, 2, 32).astype(np.int64)
    parts = []
    for k in range(4):
        lo = (ql[:, :, 32 * (k % 2):32 * (k % 2) + 32] >> (4 * (k // 2))) & 15
        hi = (qh >> (2 * k)) & 3
        parts.append((lo | (hi << 4)) - 32)
    q = np.stack(parts, axis=2).reshape(-1, 256).astype(np.float64)
    scale = np.repeat(b["scales"].astype(np.float64), 16, axis=1)
    return (b["d"].astype(np.float64)[:, None] * scale * q).reshape(-1)


BLOCK_TYPES = {  # type -> (name, elements per block, block dtype, dequantiser)
    T_Q4_0: ("Q4_0", 32, Q4_0_BLOCK, dequant_q4_0),
    T_Q4_K: ("Q4_K", 256, Q4_K_BLOCK, dequant_q4_k),
    T_Q6_K: ("Q6_K", 256, Q6_K_BLOCK, dequant_q6_k),
}


class GgufError(Exception):
    pass


class Gguf:
    """Parses a GGUF v2/v3 file: metadata dict, tensor infos, data section offset."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        magic = self.buf[:4]
        if magic != b"GGUF":
            raise GgufError(f"{path}: magic {magic!r}, expected b'GGUF'")
        self.pos = 4
        self.version = self._scalar("<I")
        if self.version not in (2, 3):
            raise GgufError(f"{path}: version {self.version}, expected 2 or 3")
        n_tensors = self._scalar("<Q")
        n_kv = self._scalar("<Q")
        self.metadata = {}
        for _ in range(n_kv):
            key = self._string()
            vtype = self._scalar("<I")
            self.metadata[key] = self._value(vtype)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar("<I")
            dims = [self._scalar("<Q") for _ in range(n_dims)]
            ttype = self._scalar("<I")
            offset = self._scalar("<Q")
            self.tensors[name] = (dims, ttype, offset)
        alignment = int(self.metadata.get("general.alignment", 32))
        self.data_start = (self.pos + alignment - 1) // alignment * alignment

    def _scalar(self, fmt):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GgufError(f"truncated file at byte {self.pos}")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def _string(self):
        n = self._scalar("<Q")
        if self.pos + n > len(self.buf):
            raise GgufError(f"string of {n} bytes at {self.pos} runs past the end")
        s = self.buf[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype in GGUF_SCALARS:
            return self._scalar(GGUF_SCALARS[vtype])
        if vtype == GGUF_STRING:
            return self._string()
        if vtype == GGUF_ARRAY:
            etype = self._scalar("<I")
            n = self._scalar("<Q")
            if etype in GGUF_SCALARS:  # read numeric arrays in one go
                dt = np.dtype(GGUF_SCALARS[etype])
                a = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
                self.pos += n * dt.itemsize
                return a.tolist()
            return [self._value(etype) for _ in range(n)]
        raise GgufError(f"unknown metadata value type {vtype} at byte {self.pos}")

    def tensor(self, name):
        """The tensor as float64, numpy shape = reversed GGUF dims (a matrix is [rows][cols])."""
        dims, ttype, offset = self.tensors[name]
        n = int(np.prod(dims))
        start = self.data_start + offset
        if ttype == T_F32:
            a = np.frombuffer(self.buf, dtype="<f4", count=n, offset=start).astype(np.float64)
        elif ttype == T_F16:
            a = np.frombuffer(self.buf, dtype="<f2", count=n, offset=start).astype(np.float64)
        elif ttype == T_BF16:
            h = np.frombuffer(self.buf, dtype="<u2", count=n, offset=start).astype(np.uint32) << 16
            a = h.view(np.float32).astype(np.float64)
        elif ttype == T_Q8_0:
            if n % 32:
                raise GgufError(f"{name}: {n} elements is not a whole number of Q8_0 blocks")
            blocks = np.frombuffer(self.buf, dtype=Q8_0_BLOCK, count=n // 32, offset=start)
            a = (blocks["d"].astype(np.float64)[:, None] * blocks["qs"].astype(np.float64)).reshape(-1)
        elif ttype in BLOCK_TYPES:
            tname, per_block, dtype, dequant = BLOCK_TYPES[ttype]
            if n % per_block:
                raise GgufError(f"{name}: {n} elements is not a whole number of {tname} blocks")
            a = dequant(np.frombuffer(self.buf, dtype=dtype, count=n // per_block, offset=start))
        else:
            raise GgufError(
                f"{name}: tensor type {ttype} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)")
        return a.reshape(list(reversed(dims)))


# ----------------------------------------------------------------------------------------------- tokenizer

class SpmTokenizer:
    """SentencePiece-style BPE from GGUF metadata (tokenizer.ggml.model = llama): merge the adjacent pair
    whose concatenation is the highest-scoring vocabulary piece (leftmost on ties) until none is left, then
    byte fallback (<0xXX>) for pieces not in the vocabulary."""

    def __init__(self, gguf):
        md = gguf.metadata
        self.pieces = md["tokenizer.ggml.tokens"]
        self.scores = md.get("tokenizer.ggml.scores", [0.0] * len(self.pieces))
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.bos = md.get("tokenizer.ggml.bos_token_id", 1)
        self.add_space_prefix = md.get("tokenizer.ggml.add_space_prefix", True)

    def encode(self, text, bos=True):
        if not text:  # no dummy prefix for empty text (llama.cpp's convention)
            return [self.bos] if bos else []
        if self.add_space_prefix:
            text = " " + text
        symbols = list(text.replace(" ", "\u2581"))
        alive = [True] * len(symbols)
        prev = list(range(-1, len(symbols) - 1))
        nxt = list(range(1, len(symbols) + 1))
        heap = []

        def push(i):
            j = nxt[i]
            if j >= len(symbols):
                return
            merged = symbols[i] + symbols[j]
            tid = self.ids.get(merged)
            if tid is not None:
                heapq.heappush(heap, (-self.scores[tid], i, symbols[i], symbols[j]))

        for i in range(len(symbols) - 1):
            push(i)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = nxt[i] if alive[i] else len(symbols)
            if not alive[i] or j >= len(symbols) or symbols[i] != left or symbols[j] != right:
                continue  # stale: one side changed since this pair was queued
            symbols[i] = left + right
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[i] < len(symbols):
                prev[nxt[i]] = i
            if prev[i] >= 0:
                push(prev[i])
            push(i)
        out = [self.bos] if bos else []
        for i, s in enumerate(symbols):
            if not alive[i]:
                continue
            tid = self.ids.get(s)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self.ids[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
        return out

    def decode(self, ids):
        data = bytearray()
        for tid in ids:
            p = self.pieces[tid]
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                data.append(int(p[3:5], 16))
            else:
                data.extend(p.replace("\u2581", " ").encode("utf-8"))
        text = data.decode("utf-8", errors="replace")
        return text[1:] if self.add_space_prefix and text.startswith(" ") else text


# ------------------------------------------------------------------------------------------------- model

class Llama:
    def __init__(self, gguf, act_quant=True):
        md = gguf.metadata
        arch = md.get("general.architecture")
        if arch not in ARCH_PARTS:
            raise GgufError(f"architecture {arch!r}, expected one of {', '.join(ARCH_PARTS)}")
        a = arch + "."
        self.arch = arch
        self.n_embd = int(md[a + "embedding_length"])
        self.n_layer = int(md[a + "block_count"])
        self.n_head = int(md[a + "attention.head_count"])
        self.n_kv = int(md.get(a + "attention.head_count_kv", self.n_head))
        self.head_dim = int(md.get(a + "attention.key_length", self.n_embd // self.n_head))
        self.eps = float(md[a + "attention.layer_norm_rms_epsilon"])
        self.rope_dim = int(md.get(a + "rope.dimension_count", self.head_dim))
        self.freq_base = float(md.get(a + "rope.freq_base", 10000.0))
        self.group = self.n_head // self.n_kv
        parts = ARCH_PARTS[arch]
        self.gemma = parts["gemma"]
        # Gemma (llama.cpp's gemma2 / gemma3 graphs): embeddings times sqrt(n_embd), GeGLU with tanh GELU,
        # RMSNorm of the attention and FFN outputs, soft-caps, sliding-window layers.
        self.embd_scale = math.sqrt(self.n_embd) if self.gemma else 1.0
        self.window = int(md.get(a + "attention.sliding_window", 4096 if arch == "gemma2" else 0))
        period = int(md.get(a + "attention.sliding_window_pattern", 2 if arch == "gemma2" else 6))
        self.sliding = [self.gemma and self.window > 0 and i % period < period - 1
                        for i in range(self.n_layer)]
        self.attn_softcap = float(md.get(a + "attn_logit_softcapping", 50.0)) if arch == "gemma2" else 0.0
        self.final_softcap = float(md.get(a + "final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0))
        # Llama 4's query temperature (mistral3's attention.temperature_scale): a query at RoPE position p is
        # scaled by 1 + T ln(floor(p / n_orig) + 1), n_orig the yarn original context (else context_length).
        self.temp_scale = float(md.get(a + "attention.temperature_scale", 0.0)) if arch == "mistral3" else 0.0
        self.temp_floor = int(md.get(a + "rope.scaling.original_context_length", md.get(a + "context_length", 2048)))
        big = {"gemma2": 46, "gemma3": 62}.get(arch)  # llama.cpp: the 27B models scale by n_embd / n_head
        self.scale = 1.0 / math.sqrt(self.n_embd // self.n_head if self.n_layer == big else self.head_dim)
        t = gguf.tensor
        self.tok_embd = t("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        # Per matrix: the rounding its product applies to the activations (k-quant and Q8_0 weights, as the
        # engine), or None.
        def kq(name):
            return act_quantiser(gguf.tensors[name][1]) if act_quant else None
        self.layers, self.quantises = [], {}
        for i in range(self.n_layer):
            self.layers.append(arch_layer(gguf, i, self.n_head * self.head_dim, self.n_kv * self.head_dim))
            self.quantises[i] = {name: kq(src) for name, src in self.layers[i].pop("sources").items()}
        self.output_norm = t("output_norm.weight")
        output_name = "output.weight" if "output.weight" in gguf.tensors else "token_embd.weight"
        self.output = t(output_name)
        self.output_bias = t("output.bias") if "output.bias" in gguf.tensors else 0.0
        self.output_quantises = kq(output_name)
        self.neox, self.inv_freq, self.rope_magnitude = arch_rope(gguf, arch, self.rope_dim, self.freq_base)
        # Per layer (inverse frequencies, magnitude): sliding layers rotate with rope.freq_base_swa (gemma2:
        # the file's base and scaling by default; gemma3: 10000, unscaled).
        self.layer_rope = [(self.inv_freq, self.rope_magnitude)] * self.n_layer
        if any(self.sliding):
            base_swa = float(md.get(a + "rope.freq_base_swa", self.freq_base if arch == "gemma2" else 10000.0))
            _, f, mag = arch_rope(gguf, arch, self.rope_dim, base_swa, scaled=arch == "gemma2")
            self.layer_rope = [(f, mag) if sl else r for sl, r in zip(self.sliding, self.layer_rope)]

    def temperature(self, positions):
        """[C][1][1] multipliers of the queries at these RoPE positions (ones without a temperature)."""
        t = 1.0 + self.temp_scale * np.log(np.floor(positions / self.temp_floor) + 1.0)
        return t[:, None, None]

    def linear(self, x, layer, name):
        """x @ W.T (+ the bias, where the file has one) for layer `layer`'s matrix `name`, rounding x first
        where the engine does."""
        if self.quantises[layer][name] is not None:
            x = self.quantises[layer][name](x)
        return x @ self.layers[layer][name].T + self.layers[layer].get(name + ".bias", 0.0)

    def head_norm(self, x, layer, name):
        """RMSNorm of every head vector of x ([C][heads][head_dim]) with the layer's `name` weight (Qwen3's
        attn_q_norm / attn_k_norm); x itself where the architecture has none."""
        w = self.layers[layer].get(name)
        return x if w is None else self.rmsnorm(x, w)

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, positions, magnitude=True, layer=0):
        """x: [C][heads][head_dim]; rotates pairs (2i, 2i+1) of the first rope_dim dims ("normal" pairing), or
        (i, i + rope_dim/2) for NeoX pairing, and scales them by the rope magnitude (YaRN; 1 otherwise) unless
        magnitude is False (turning a key already rotated, rolling positions), with layer `layer`'s rope."""
        inv_freq, rope_mag = self.layer_rope[layer]
        theta = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [C][rope_dim/2]
        mag = rope_mag if magnitude else 1.0
        c = mag * np.cos(theta)[:, None, :]
        s = mag * np.sin(theta)[:, None, :]
        x = x.copy()
        ia, ib = rope_pairs(self.rope_dim, self.neox)
        a = x[..., ia].copy()
        b = x[..., ib].copy()
        x[..., ia] = a * c - b * s
        x[..., ib] = a * s + b * c
        return x


# ------------------------------------------------------------------------------------------- architectures
# What each architecture adds to the llama blocks, read from the file (written from llama.cpp's model
# definitions and the Hugging Face configs they convert, not from h2okv's loader).

# architecture -> (NeoX rope pairing, per-head q/k RMSNorm, fused q/k/v, fused gate/up, rope_freqs factors,
# Gemma's blocks: see Llama.__init__)
ARCH_PARTS = {
    "llama": dict(neox=False, qk_norm=False, fused=False, rope_freqs=True, gemma=False),
    "qwen2": dict(neox=True, qk_norm=False, fused=False, rope_freqs=False, gemma=False),
    "qwen3": dict(neox=True, qk_norm=True, fused=False, rope_freqs=False, gemma=False),
    "phi3": dict(neox=True, qk_norm=False, fused=True, rope_freqs=False, gemma=False),
    "gemma2": dict(neox=True, qk_norm=False, fused=False, rope_freqs=False, gemma=True),
    "gemma3": dict(neox=True, qk_norm=True, fused=False, rope_freqs=False, gemma=True),
    "mistral3": dict(neox=False, qk_norm=False, fused=False, rope_freqs=True, gemma=False),
}


def gelu_tanh(x):
    """GELU's tanh approximation (ggml_gelu, Gemma's hidden activation)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softcap(x, cap):
    return cap * np.tanh(x / cap) if cap > 0 else x


def arch_layer(gguf, i, q_dim, kv_dim):
    """Layer i's tensors by role: matrices [rows][cols], biases (role + ".bias"), q/k norms; fused tensors
    split (attn_qkv into q, k, v rows; Phi-3's ffn_up into gate, then up). "sources" maps each matrix role to
    the tensor it came from (its type decides the activation rounding)."""
    t, p = gguf.tensor, f"blk.{i}."
    parts = ARCH_PARTS[gguf.metadata["general.architecture"]]
    L = {"sources": {}}
    for role in ("attn_norm", "ffn_norm", "attn_output", "ffn_down"):
        L[role] = t(p + role + ".weight")
        L["sources"][role] = p + role + ".weight"
    if p + "attn_qkv.weight" in gguf.tensors:
        w = t(p + "attn_qkv.weight")
        for role, lo, hi in (("attn_q", 0, q_dim), ("attn_k", q_dim, q_dim + kv_dim),
                             ("attn_v", q_dim + kv_dim, q_dim + 2 * kv_dim)):
            L[role] = w[lo:hi]
            L["sources"][role] = p + "attn_qkv.weight"
            if p + "attn_qkv.bias" in gguf.tensors:
                L[role + ".bias"] = t(p + "attn_qkv.bias")[lo:hi]
    else:
        for role in ("attn_q", "attn_k", "attn_v"):
            L[role] = t(p + role + ".weight")
            L["sources"][role] = p + role + ".weight"
            if p + role + ".bias" in gguf.tensors:
                L[role + ".bias"] = t(p + role + ".bias")
    if parts["gemma"]:
        L["post_attention_norm"] = t(p + "post_attention_norm.weight")
        L["post_ffw_norm"] = t(p + "post_ffw_norm.weight")
    if parts["qk_norm"]:
        L["attn_q_norm"] = t(p + "attn_q_norm.weight")
        L["attn_k_norm"] = t(p + "attn_k_norm.weight")
    if parts["fused"]:
        w = t(p + "ffn_up.weight")
        n_ff = w.shape[0] // 2
        L["ffn_gate"], L["ffn_up"] = w[:n_ff], w[n_ff:]
        L["sources"]["ffn_gate"] = L["sources"]["ffn_up"] = p + "ffn_up.weight"
    else:
        for role in ("ffn_gate", "ffn_up"):
            L[role] = t(p + role + ".weight")
            L["sources"][role] = p + role + ".weight"
    return L


def rope_pairs(rope_dim, neox):
    """The index arrays of the rotated pairs: (2i, 2i+1), or (i, i + rope_dim/2) for NeoX."""
    i = np.arange(rope_dim // 2)
    return (i, i + rope_dim // 2) if neox else (2 * i, 2 * i + 1)


def arch_rope(gguf, arch, rope_dim, base, scaled=True):
    """(NeoX pairing, inverse frequencies [rope_dim/2], magnitude): the base's frequencies divided by
    rope_freqs.weight (Llama 3.1), then the rope.scaling.* type: linear divides them by the factor; YaRN
    blends interpolated (/ factor) and original frequencies with a ramp over the pair index between the
    correction dims of beta_fast = 32 and beta_slow = 1 turns in the original context, and scales the
    rotation by 0.1 ln(factor) + 1; rope.scaling.attn_factor multiplies the magnitude. scaled=False: the
    base's frequencies alone (Gemma 3's sliding layers)."""
    md, a = gguf.metadata, arch + "."
    freq = base ** (-2.0 * np.arange(rope_dim // 2) / rope_dim)
    if ARCH_PARTS[arch]["rope_freqs"] and "rope_freqs.weight" in gguf.tensors:
        freq = freq / gguf.tensor("rope_freqs.weight")
    if not scaled:
        return ARCH_PARTS[arch]["neox"], freq, 1.0
    kind = md.get(a + "rope.scaling.type", "linear")
    factor = float(md.get(a + "rope.scaling.factor", md.get(a + "rope.scale_linear", 0.0))) or 1.0
    magnitude = float(md.get(a + "rope.scaling.attn_factor", 1.0))
    if kind == "linear":
        freq = freq / factor
    elif kind == "yarn":
        n_orig = int(md.get(a + "rope.scaling.original_context_length", md.get(a + "context_length", 2048)))

        def corr_dim(turns):  # the pair whose wavelength fits `turns` rotations into the original context
            return rope_dim * math.log(n_orig / (turns * 2 * math.pi)) / (2 * math.log(base))
        # mistral3 files carry their own betas and log multiplier (llama.cpp reads them for it alone).
        own = arch == "mistral3"
        beta_fast = float(md.get(a + "rope.scaling.yarn_beta_fast", 32.0)) if own else 32.0
        beta_slow = float(md.get(a + "rope.scaling.yarn_beta_slow", 1.0)) if own else 1.0
        log_mul = float(md.get(a + "rope.scaling.yarn_log_multiplier", 0.0)) if own else 0.0
        low = max(0.0, math.floor(corr_dim(beta_fast)))
        high = min(rope_dim - 1.0, math.ceil(corr_dim(beta_slow)))
        ramp = 1.0 - np.clip((np.arange(rope_dim // 2) - low) / max(0.001, high - low), 0.0, 1.0)
        freq = freq * ((1.0 - ramp) / factor + ramp)
        if factor > 1.0:
            # HF's yarn attention factor get_mscale(factor, 1) / get_mscale(factor, mscale_all_dim)
            # (mscale_all_dim = the log multiplier), times llama.cpp's 1 + 0.1 ln(factor) / its cancellation
            # of the same: (1 + 0.1 ln f) / (1 + 0.1 L ln f), and 1 + 0.1 ln f without a multiplier.
            magnitude *= (1.0 + 0.1 * math.log(factor)) / (1.0 + 0.1 * log_mul * math.log(factor)
                                                            if log_mul else 1.0)
    elif kind != "none":
        raise GgufError(f"{a}rope.scaling.type {kind!r} is not supported (none, linear, yarn)")
    return ARCH_PARTS[arch]["neox"], freq, magnitude


# ---------------------------------------------------------------------------------------------- KV types

KV_TYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1")


def quantize_q8k(x):
    """x: [..][n], n a multiple of 256 -> the activations the engine's k-quant products multiply, float64."""
    b = x.astype(np.float32).reshape(*x.shape[:-1], -1, 256)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        iscale = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(np.clip(b * iscale, np.float32(-127), np.float32(127)))
    d = (amax / np.float32(127)).astype(np.float32)
    return (d.astype(np.float64) * q.astype(np.float64)).reshape(x.shape)


def quantize_q8_0(x):
    """x: [..][n], n a multiple of 32 -> the activations the engine's Q8_0 products multiply, float64."""
    b = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        iscale = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(np.clip(b * iscale, np.float32(-127), np.float32(127)))
    d = (amax / np.float32(127)).astype(np.float32).astype(np.float16)
    return (d.astype(np.float64) * q.astype(np.float64)).reshape(x.shape)


def act_quantiser(tensor_type):
    """The activation rounding of the engine's products with weights of `tensor_type`, or None."""
    if tensor_type in (T_Q4_K, T_Q6_K):
        return quantize_q8k
    if tensor_type == T_Q8_0:
        return quantize_q8_0
    return None


def round_kv(x, kv_type):
    """x: [..][head_dim] float64 -> the values a `kv_type` cache stores, as float64."""
    if kv_type == "f32":
        return x
    if kv_type == "f16":
        return x.astype(np.float16).astype(np.float64)
    if kv_type == "q8_0":
        if x.shape[-1] % 32:
            raise PolicyError(f"q8_0 KV needs head_dim a multiple of 32, got {x.shape[-1]}")
        b = x.reshape(-1, 32)
        d = np.abs(b).max(axis=1, keepdims=True) / 127.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
        t = b * inv
        q = np.sign(t) * np.floor(np.abs(t) + 0.5)  # roundf: halves away from zero
        return (d.astype(np.float16).astype(np.float64) * q).reshape(x.shape)
    if kv_type == "q4_0":
        if x.shape[-1] % 32:
            raise PolicyError(f"q4_0 KV needs head_dim a multiple of 32, got {x.shape[-1]}")
        b = x.reshape(-1, 32)
        # ggml's quantize_row_q4_0_ref: d = (the signed element of largest magnitude) / -8, q = min(15,
        # trunc(x / d + 8.5)) (x / d + 8.5 >= 0.5 here, so trunc is floor), stored d rounded to fp16.
        idx = np.abs(b).argmax(axis=1)
        d = b[np.arange(b.shape[0]), idx][:, None] / -8.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.minimum(15.0, np.floor(b * inv + 8.5))
        return (d.astype(np.float16).astype(np.float64) * (q - 8.0)).reshape(x.shape)
    if kv_type == "q4_1":
        if x.shape[-1] % 32:
            raise PolicyError(f"q4_1 KV needs head_dim a multiple of 32, got {x.shape[-1]}")
        b = x.reshape(-1, 32)
        # ggml's quantize_row_q4_1_ref: d = (max - min) / 15, q = min(15, trunc((x - min) / d + 0.5)) (the
        # argument is >= 0.5, so trunc is floor) with the unrounded d and min; stored d and m = min as fp16.
        lo = b.min(axis=1, keepdims=True)
        d = (b.max(axis=1, keepdims=True) - lo) / 15.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.minimum(15.0, np.floor((b - lo) * inv + 0.5))
        f16 = lambda v: v.astype(np.float16).astype(np.float64)  # noqa: E731
        return (f16(d) * q + f16(lo)).reshape(x.shape)
    raise PolicyError(f"unknown KV type '{kv_type}' (valid: {', '.join(KV_TYPES)})")


# ------------------------------------------------------------------------------------------------ policy

POLICIES = ("full", "window", "streaming", "h2o", "tova", "scissorhands", "keyformer", "l2norm", "keydiff",
            "snapkv")
# Each policy's own parameters and their defaults (docs/EVICTION_CONTRACT.md, clause 9).
EXTRA_PARAMS = {"h2o": {"proxy": 0.0}, "tova": {"proxy": 0.0}, "scissorhands": {"history": 32.0, "proxy": 0.0},
                "keyformer": {"tau": 1.0, "seed": 0.0, "proxy": 0.0},
                "snapkv": {"window": 8.0, "kernel": 5.0, "decode": 0.0, "proxy": 0.0}}
GRANULARITIES = ("head", "layer", "model")
POSITION_MODES = ("original", "rolling")


class PolicyError(Exception):
    """A refused policy parameter or run setting."""


def resolve_budget(text, run_length):
    """SPEC 6: an integer is a count (>= 1); a value with a decimal point a fraction in (0, 1] of the run."""
    if text is None:
        return None
    if "." in text:
        f = float(text)
        if not 0.0 < f <= 1.0:
            raise PolicyError(f"budget fraction {text} must be in (0, 1]")
        return max(1, int(math.floor(f * run_length)))
    n = int(text)
    if n < 1:
        raise PolicyError(f"budget {n} must be >= 1")
    return n


def resolve_extra(name, given):
    """The policy's own parameters (clause 9) with defaults applied and validated; returns a dict."""
    extra = dict(EXTRA_PARAMS.get(name, {}))
    for key, value in given.items():
        if key not in extra:
            raise PolicyError(f"{name}: unknown parameter '{key}'")
        extra[key] = float(value)
    if name == "scissorhands" and not (1 <= extra["history"] <= 64 and extra["history"] == int(extra["history"])):
        raise PolicyError(f"scissorhands: history {extra['history']} must be an integer in [1, 64]")
    if name == "keyformer" and not (extra["tau"] >= 0 and math.isfinite(extra["tau"])):
        raise PolicyError(f"keyformer: tau {extra['tau']} must be >= 0")
    if extra.get("proxy", 0.0) not in (0.0, 1.0):
        raise PolicyError(f"{name}: proxy {extra['proxy']} must be 0 or 1")
    if name == "keyformer" and not (0 <= extra["seed"] <= 2**53 and extra["seed"] == int(extra["seed"])):
        raise PolicyError(f"keyformer: seed {extra['seed']} must be an integer in [0, 2^53]")
    if name == "snapkv":
        w, k = extra["window"], extra["kernel"]
        if not (w >= 1 and w == int(w)):
            raise PolicyError(f"snapkv: window {w} must be an integer >= 1")
        if not (k >= 1 and k == int(k) and int(k) % 2 == 1):
            raise PolicyError(f"snapkv: kernel {k} must be an odd integer >= 1")
        if extra["decode"] not in (0.0, 1.0):
            raise PolicyError(f"snapkv: decode {extra['decode']} must be 0 or 1")
    return extra


def resolve_policy(name, budget, recent, sinks, decay, extra=None):
    """Applies SPEC 5's defaults and validation (clause 9's for the policies beyond it; extra: the policy's own
    parameters as resolve_extra returns them); returns (budget, recent, sinks, decay)."""
    if name not in POLICIES:
        raise PolicyError(f"unknown policy '{name}' (valid: {', '.join(POLICIES)})")
    for label, v in (("recent", recent), ("sinks", sinks)):
        if v is not None and v < 0:
            raise PolicyError(f"{label} {v} must be >= 0")
    if name == "full":
        return None, 0, 0, 1.0
    if budget is None:
        raise PolicyError(f"policy '{name}' needs a budget")
    if name == "window":
        if recent is not None and recent != budget:
            raise PolicyError(f"window: recent {recent} must equal the budget {budget} (the window is the budget)")
        if sinks not in (None, 0):
            raise PolicyError(f"window: sinks {sinks} must be 0")
        if decay is not None:
            raise PolicyError(f"window: decay {decay} does not apply")
        return budget, budget, 0, 1.0
    if name == "streaming":
        sinks = 4 if sinks is None else sinks
        recent = 0 if recent is None else recent
        if sinks >= budget:
            raise PolicyError(f"streaming: sinks {sinks} must be < budget {budget}")
        if sinks + recent > budget:
            raise PolicyError(f"streaming: sinks {sinks} + recent {recent} must be <= budget {budget}")
        if decay is not None:
            raise PolicyError(f"streaming: decay {decay} does not apply")
        return budget, recent, sinks, 1.0
    if name in ("h2o", "keyformer", "scissorhands", "l2norm", "keydiff"):
        recent = budget // 2 if recent is None else recent
        sinks = 0 if sinks is None else sinks
        if name in ("scissorhands", "l2norm", "keydiff") and decay is not None:
            raise PolicyError(f"{name}: decay {decay} does not apply")
        decay = 1.0 if decay is None else decay
        if not 0.0 < decay <= 1.0:
            raise PolicyError(f"{name}: decay {decay} must be in (0, 1]")
        if sinks + recent >= budget:
            raise PolicyError(f"h2o: sinks {sinks} + recent {recent} must be < budget {budget} "
                              f"(at least one heavy-hitter slot)")
        return budget, recent, sinks, decay
    if name == "snapkv":
        # Clause 9.6: the observation window stays (recent defaults to it), scores are plain sums.
        window = int((extra or resolve_extra(name, {}))["window"])
        recent = window if recent is None else recent
        sinks = 0 if sinks is None else sinks
        if decay is not None:
            raise PolicyError(f"snapkv: decay {decay} does not apply")
        if sinks + recent >= budget:
            raise PolicyError(f"snapkv: sinks {sinks} + recent {recent} must be < budget {budget}")
        return budget, recent, sinks, 1.0
    # tova
    recent = 0 if recent is None else recent
    sinks = 0 if sinks is None else sinks
    if decay is not None and decay != 0.0:
        raise PolicyError(f"tova: decay {decay} is forced to 0")
    if sinks + recent > budget:
        raise PolicyError(f"tova: sinks {sinks} + recent {recent} must be <= budget {budget}")
    return budget, recent, sinks, 0.0


def allocate_budgets(budget, n_units, n_layer, schedule="uniform", ratio=None, shares=None):
    """Contract clause 11.1-11.3: per-unit budgets from a schedule or shares; total n_units * budget, split by
    weight, floors first, the rest to the largest remainders (tie: lower unit), then at least 1 each."""
    if schedule not in ("uniform", "pyramid"):
        raise PolicyError(f"unknown budget schedule '{schedule}'")
    per_layer = n_units // n_layer
    if schedule == "pyramid":
        if shares:
            raise PolicyError("shares and schedule=pyramid both set the units' budgets")
        r = 0.5 if ratio is None else ratio
        if not 0.0 <= r < 1.0:
            raise PolicyError(f"pyramid ratio {r} must be in [0, 1)")
        if n_units == 1 and n_layer > 1:
            raise PolicyError("schedule=pyramid needs granularity head or layer")
        w = [1.0 if n_layer == 1 else 1.0 + r * (n_layer - 1 - 2 * (u // per_layer)) / (n_layer - 1)
             for u in range(n_units)]
    elif shares:
        if len(shares) != n_units:
            raise PolicyError(f"{len(shares)} shares for {n_units} units")
        w = list(shares)
    else:
        w = [1.0] * n_units
    total = budget * n_units
    wsum = 0.0
    for x in w:
        wsum += x
    xs = [total * x / wsum for x in w]
    b = [int(math.floor(x)) for x in xs]
    left = total - sum(b)
    order = sorted(range(n_units), key=lambda u: (-(xs[u] - b[u]), u))
    for u in order[:max(0, left)]:
        b[u] += 1
    return [max(1, x) for x in b]


class Run:
    """The state of one run: K/V at every position, and per eviction unit a kept set with float64 scores."""

    def __init__(self, model, n_total, policy="full", budget=None, recent=0, sinks=0, decay=1.0,
                 granularity="head", kv_type="f32", positions="original", extra=None, units=None):
        """units: clause 11's (budgets, recents, decays) per unit, or None for the shared ones."""
        self.m = model
        self.extra = resolve_extra(policy, extra or {})
        if positions not in POSITION_MODES:
            raise PolicyError(f"unknown position mode '{positions}' (valid: {', '.join(POSITION_MODES)})")
        # Nothing moves in a cache that never evicts: its ranks are its positions.
        self.positions = "original" if policy == "full" else positions
        if kv_type not in KV_TYPES:
            raise PolicyError(f"unknown KV type '{kv_type}' (valid: {', '.join(KV_TYPES)})")
        if kv_type in ("q8_0", "q4_0", "q4_1") and model.head_dim % 32:
            raise PolicyError(f"{kv_type} KV needs head_dim a multiple of 32, got {model.head_dim}")
        self.kv_type = kv_type
        self.policy, self.budget, self.recent, self.sinks, self.decay = policy, budget, recent, sinks, decay
        if granularity not in GRANULARITIES:
            raise PolicyError(f"unknown granularity '{granularity}' (valid: {', '.join(GRANULARITIES)})")
        self.granularity = granularity
        L, H, hd = model.n_layer, model.n_kv, model.head_dim
        # The policy's layers: the global ones (sliding-window layers keep their window, outside it).
        self.global_layers = [li for li in range(L) if not model.sliding[li]]
        if not self.global_layers:
            raise PolicyError("every layer is a sliding-window layer; no layer for the policy")
        if self.positions == "rolling" and any(model.sliding):
            raise PolicyError("rolling positions are not defined for sliding-window layers")
        G = len(self.global_layers)
        self.n_units = {"head": G * H, "layer": G, "model": 1}[granularity]
        if units is None:
            units = ([budget] * self.n_units, [recent] * self.n_units, [decay] * self.n_units)
        self.unit_budget, self.unit_recent = list(units[0]), list(units[1])
        self.unit_decay = np.asarray(units[2], dtype=np.float64)[:, None]
        self.k = np.zeros((L, n_total, H, hd))
        self.v = np.zeros((L, n_total, H, hd))
        self.kept = np.zeros((self.n_units, n_total), dtype=bool)
        self.score = np.zeros((self.n_units, n_total))
        # scissorhands: per unit and position, the above-fair-share flags of the last `history` rows, newest
        # in bit 0.
        self.history = np.zeros((self.n_units, n_total), dtype=np.uint64)
        # keydiff and the proxy (clauses 9.4-9.5): every token's key as computed, rotated at the position it
        # was admitted at, before the KV type's rounding.
        self.keys = np.zeros((L, n_total, H, hd))
        self.proxy = self.extra.get("proxy", 0.0) == 1.0
        # Rolling positions: per unit, the position each token's stored key was rotated at (its admission).
        self.admitted = np.zeros((self.n_units, n_total), dtype=np.int64)
        # snapkv (clause 9.6): per unit and position, the last prefill chunk's votes, and that chunk's length.
        self.vote = np.zeros((self.n_units, n_total))
        self.chunk = 0
        self.n = 0  # positions processed

    def unit_of(self, layer, kv_head):
        """The unit of a global layer's KV head (layer: the model's layer index)."""
        gi = self.global_layers.index(layer)
        return {"head": gi * self.m.n_kv + kv_head, "layer": gi, "model": 0}[self.granularity]

    def step(self, tokens):
        """Processes one chunk; returns its logits [C][n_vocab]."""
        m = self.m
        C = len(tokens)
        c0, c1 = self.n, self.n + C
        pos = np.arange(c0, c1)
        scale = m.scale
        # allowed[u][t][p], p < c1: kept before the chunk, or a chunk position <= the query's.
        causal = np.zeros((C, c1), dtype=bool)
        causal[:, c0:] = np.tril(np.ones((C, C), dtype=bool))
        allowed = self.kept[:, None, :c1] & (np.arange(c1) < c0)[None, None, :] | causal[None]
        # A sliding layer's query at t attends p <= t with t - p < W, whatever the policy keeps.
        tq, tp = pos[:, None], np.arange(c1)[None, :]
        window = (tp <= tq) & (tq - tp < m.window)  # [C][c1]
        weights = []  # per global layer: [n_head][C][c1]
        x = m.tok_embd[np.asarray(tokens)] * m.embd_scale
        for li, w in enumerate(m.layers):
            h = m.rmsnorm(x, w["attn_norm"])
            q_raw = m.head_norm(m.linear(h, li, "attn_q").reshape(C, m.n_head, m.head_dim), li, "attn_q_norm")
            k_raw = m.head_norm(m.linear(h, li, "attn_k").reshape(C, m.n_kv, m.head_dim), li, "attn_k_norm")
            v = m.linear(h, li, "attn_v").reshape(C, m.n_kv, m.head_dim)
            if self.positions == "rolling":
                p = self._attend_rolling(li, q_raw, k_raw, v, allowed, c0, c1, scale)
                V = self.v[li, :c1]
            else:
                q = m.rope(q_raw, pos, layer=li) * m.temperature(pos)
                k = m.rope(k_raw, pos, layer=li)
                self.k[li, c0:c1] = round_kv(k, self.kv_type)
                self.v[li, c0:c1] = round_kv(v, self.kv_type)
                K = self.k[li, :c1]  # [c1][n_kv][hd]
                V = self.v[li, :c1]
                qg = q.reshape(C, m.n_kv, m.group, m.head_dim)  # query head h reads KV head h // group
                s = softcap(np.einsum("tkgd,pkd->kgtp", qg, K) * scale, m.attn_softcap)  # [n_kv][group][C][c1]
                if m.sliding[li]:
                    mask = np.stack([window] * m.n_kv)
                else:
                    mask = np.stack([allowed[self.unit_of(li, kh)] for kh in range(m.n_kv)])  # [n_kv][C][c1]
                s = np.where(mask[:, None], s, -np.inf)
                s -= s.max(axis=-1, keepdims=True)
                e = np.exp(s)
                p = e / e.sum(axis=-1, keepdims=True)
            if self.positions == "rolling":
                for kh in range(m.n_kv):
                    here = self.admitted[self.unit_of(li, kh), c0:c1]
                    self.keys[li, c0:c1, kh] = m.rope(k_raw[:, kh:kh + 1], here)[:, 0]
            else:
                self.keys[li, c0:c1] = m.rope(k_raw, pos)
            if self.policy == "l2norm":
                # Clause 9.3: -||k|| of each (layer, KV head) key, added when the token arrives (rotation
                # keeps the norm, so both position modes give the key's norm as the model computed it).
                norms = np.sqrt((m.rope(k_raw, pos) ** 2).sum(axis=-1))  # [C][n_kv]
                for kh in range(m.n_kv):
                    self.score[self.unit_of(li, kh), c0:c1] += -norms[:, kh]
            o = np.einsum("kgtp,pkd->tkgd", p, V).reshape(C, m.n_head * m.head_dim)
            if not m.sliding[li]:
                weights.append(p.reshape(m.n_head, C, c1))
            a = m.linear(o, li, "attn_output")
            x = x + (m.rmsnorm(a, w["post_attention_norm"]) if m.gemma else a)
            h = m.rmsnorm(x, w["ffn_norm"])
            g = m.linear(h, li, "ffn_gate")
            act = gelu_tanh(g) if m.gemma else g / (1.0 + np.exp(-g))
            f = m.linear(act * m.linear(h, li, "ffn_up"), li, "ffn_down")
            x = x + (m.rmsnorm(f, w["post_ffw_norm"]) if m.gemma else f)
        xo = m.rmsnorm(x, m.output_norm)
        xo = m.output_quantises(xo) if m.output_quantises is not None else xo
        logits = softcap(xo @ m.output.T + m.output_bias, m.final_softcap)
        self.chunk = C
        self._update_scores(weights, C, c0, c1)
        self.kept[:, c0:c1] = True
        self.n = c1
        self._evict()
        return logits

    def _attend_rolling(self, li, q_raw, k_raw, v, allowed, c0, c1, scale):
        """Attention with rolling positions (docs/EVICTION_CONTRACT.md): per unit, the kept positions in
        ascending order sit at 0..k-1 and the chunk's tokens at k, k+1, ...; a token's key is stored as rotated
        at its admission position (then rounded to the KV type) and turned by (its position now - that one)
        when attended. Stores the chunk's K/V; returns the softmax weights [n_kv][group][C][c1]."""
        m = self.m
        C = c1 - c0
        p = np.zeros((m.n_kv, m.group, C, c1))
        for kh in range(m.n_kv):
            u = self.unit_of(li, kh)
            kept = np.flatnonzero(self.kept[u, :c0])
            base = len(kept)
            here = base + np.arange(C)  # the chunk's rolling positions, queries and keys alike
            self.admitted[u, c0:c1] = here
            self.k[li, c0:c1, kh] = round_kv(m.rope(k_raw[:, kh:kh + 1], here)[:, 0], self.kv_type)
            self.v[li, c0:c1, kh] = round_kv(v[:, kh], self.kv_type)
            K = self.k[li, :c1, kh].copy()
            if base:
                turn = np.arange(base) - self.admitted[u, kept]
                K[kept] = m.rope(self.k[li, kept, kh][:, None], turn, magnitude=False)[:, 0]
            q = m.rope(q_raw[:, kh * m.group:(kh + 1) * m.group], here) * m.temperature(here)  # [C][group][hd]
            s = softcap(np.einsum("tgd,pd->gtp", q, K) * scale, m.attn_softcap)
            s = np.where(allowed[u][None], s, -np.inf)
            s -= s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            p[kh] = e / e.sum(axis=-1, keepdims=True)
        return p

    def _update_scores(self, weights, C, c0, c1):
        """SPEC 2-3: per query position t in order, per unit: decay every present score, then add the row
        increment (the unit's query heads' weights summed in double in ascending (layer, head) order)."""
        m = self.m
        W = np.stack(weights)  # [global layers][n_head][C][c1]
        G = len(self.global_layers)
        if self.granularity == "head":
            Wg = W.reshape(G, m.n_kv, m.group, C, c1)
            inc = Wg[:, :, 0].copy()
            for g in range(1, m.group):
                inc += Wg[:, :, g]
            inc = inc.reshape(G * m.n_kv, C, c1)
        elif self.granularity == "layer":
            inc = W[:, 0].copy()
            for h in range(1, m.n_head):
                inc += W[:, h]
        else:
            inc = np.zeros((1, C, c1))
            for li in range(G):
                for h in range(m.n_head):
                    inc[0] += W[li, h]
        if self.policy in ("l2norm", "keydiff"):
            return
        if self.proxy:
            inc = self._proxy_rows(C, c0, c1)
        if self.policy == "scissorhands":
            # Clause 9.1: per query, positions given more than the fair share G / m of the row (G query heads
            # per unit, m positions attended) set a flag; the score counts the last `history` flags.
            G = {"head": m.group, "layer": m.n_head, "model": m.n_head * m.n_layer}[self.granularity]
            if self.proxy:
                G = len(self._pairs(0))
            mask = np.uint64((1 << int(self.extra["history"])) - 1)
            for t in range(C):
                for u in range(self.n_units):
                    att = np.flatnonzero(self.kept[u, :c0]).tolist() + list(range(c0, c0 + t + 1))
                    fair = G / len(att)
                    for p in att:
                        bit = np.uint64(1 if inc[u, t, p] > fair else 0)
                        self.history[u, p] = ((self.history[u, p] << np.uint64(1)) | bit) & mask
                        self.score[u, p] = float(bin(int(self.history[u, p])).count("1"))
            return
        if self.policy == "snapkv":
            # Clause 9.6: a prefill chunk's last `window` queries (all of a shorter chunk) vote with their rows.
            self.vote[:] = 0.0
            if C > 1:
                for t in range(max(0, C - int(self.extra["window"])), C):
                    self.vote[:, :c1] += inc[:, t]
        for t in range(C):
            # Present at query c0 + t: kept positions and chunk positions < c0 + t. Everything else holds 0
            # (positions not admitted yet) or is never read again (evicted), so scaling the whole row is the
            # same as scaling the present scores.
            if (self.unit_decay < 1.0).any():
                self.score[:, :c1] *= self.unit_decay  # a unit with decay 1 is unchanged: x * 1.0 == x
            self.score[:, :c1] += inc[:, t]

    def _evict(self):
        """SPEC 4: while a unit holds more than budget positions, remove its evictable position with the lowest
        score (tie: lower position); evictable = not a sink and not among the `recent` largest held."""
        if self.policy == "full":
            return
        by_position = self.policy in ("window", "streaming")
        for u in range(self.n_units):
            budget, recent = self.unit_budget[u], self.unit_recent[u]
            held0 = np.flatnonzero(self.kept[u]).tolist()
            distance = self._key_distance(u, held0) if self.policy == "keydiff" and len(held0) > budget else None
            if self.policy == "snapkv" and len(held0) > budget:
                if self.chunk > 1:
                    distance = self._pooled_votes(u, held0)
                elif self.extra["decode"] == 0.0:
                    by_position = True
            while True:
                held = np.flatnonzero(self.kept[u])
                if len(held) <= budget:
                    break
                protected_recent = set(held[len(held) - recent:].tolist()) if recent > 0 else set()
                if self.policy == "streaming":
                    protected_recent = set()  # the oldest non-sink goes, whatever `recent` says
                cand = [p for p in held.tolist() if p >= self.sinks and p not in protected_recent]
                if not cand:
                    raise PolicyError(f"unit {u}: {len(held)} positions held, budget {budget}, "
                                      f"nothing evictable")
                if by_position:
                    victim = cand[0]
                elif distance is not None:
                    victim = min(cand, key=lambda p: (distance[p], p))
                elif self.policy == "keyformer" and self.extra["tau"] != 0.0:
                    tau = self.extra["tau"]
                    victim = min(cand, key=lambda p: (self.score[u, p] + tau * self._gumbel(u, p), p))
                else:
                    victim = min(cand, key=lambda p: (self.score[u, p], p))
                self.kept[u, victim] = False
                self.score[u, victim] = 0.0
                self.history[u, victim] = 0

    def _pooled_votes(self, u, held):
        """Clause 9.6: each held position's vote averaged over the kernel of held positions around it (by
        index in ascending position order, cut at the ends)."""
        half = int(self.extra["kernel"]) // 2
        m = len(held)
        rank = {}
        for j, p in enumerate(held):
            lo, hi = max(0, j - half), min(m - 1, j + half)
            total = 0.0
            for k in range(lo, hi + 1):
                total += self.vote[u, held[k]]
            rank[p] = total / (hi - lo + 1)
        return rank

    def _pairs(self, u):
        """The (layer, KV head) pairs of unit u, layer-major."""
        m = self.m
        return [(li, kh) for li in range(m.n_layer) for kh in range(m.n_kv) if self.unit_of(li, kh) == u]

    def _proxy_rows(self, C, c0, c1):
        """Clause 9.5: per unit and chunk query t, the sum over the unit's pairs of softmax(K k_t / sqrt(d))
        over the positions t attends."""
        inc = np.zeros((self.n_units, C, c1))
        scale = 1.0 / math.sqrt(self.m.head_dim)
        for u in range(self.n_units):
            kept = np.flatnonzero(self.kept[u, :c0]).tolist()
            for t in range(C):
                att = kept + list(range(c0, c0 + t + 1))
                for li, kh in self._pairs(u):
                    z = self.keys[li, att, kh] @ self.keys[li, c0 + t, kh] * scale
                    e = np.exp(z - z.max())
                    inc[u, t, att] += e / e.sum()
        return inc

    def _key_distance(self, u, held):
        """Clause 9.4: per held position, the sum over the unit's pairs of 1 - cos(k, sum of held keys)."""
        rank = {p: 0.0 for p in held}
        for li, kh in self._pairs(u):
            K = self.keys[li, held, kh]
            a = K.sum(axis=0)
            na = np.linalg.norm(a)
            for j, p in enumerate(held):
                nk = np.linalg.norm(K[j])
                cos = 0.0 if nk == 0.0 or na == 0.0 else float(K[j] @ a) / (nk * na)
                rank[p] += 1.0 - cos
        return rank

    def _gumbel(self, u, p):
        """Clause 9.2: keyformer's noise for unit u, position p, at the eviction after position self.n - 1."""
        def mix(z):
            M = (1 << 64) - 1
            z = (z + 0x9e3779b97f4a7c15) & M
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
            return z ^ (z >> 31)
        x = mix(mix(mix(mix(int(self.extra["seed"])) ^ u) ^ p) ^ self.n)
        uniform = ((x >> 11) + 0.5) / 2.0**53
        return -math.log(-math.log(uniform))

    def kept_lists(self):
        """Layer-major, one list per (layer, KV head)."""
        out = []
        for li in range(self.m.n_layer):
            for kh in range(self.m.n_kv):
                if self.m.sliding[li]:  # what a later query can still attend: the last W - 1 positions
                    out.append(list(range(max(0, self.n - max(1, self.m.window - 1)), self.n)))
                else:
                    out.append(np.flatnonzero(self.kept[self.unit_of(li, kh)]).tolist())
        return out


# --------------------------------------------------------------------------------------------------- main

def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--tokens", help="space-separated token ids (BOS included if wanted)")
    src.add_argument("--text", help="text, encoded with the model's SentencePiece vocabulary, BOS first")
    src.add_argument("--text-file", help="like --text, from a UTF-8 file")
    ap.add_argument("--max-tokens", type=int, help="keep the first N tokens (BOS included)")
    ap.add_argument("--policy", default="full")
    ap.add_argument("--budget", help="token count, or a fraction of the run length with a decimal point")
    ap.add_argument("--recent", type=int)
    ap.add_argument("--sinks", type=int)
    ap.add_argument("--decay", type=float)
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a parameter of the policy's own (scissorhands: history; keyformer: tau, seed; "
                         "snapkv: window, kernel, decode; h2o, tova, scissorhands, keyformer, snapkv: proxy)")
    ap.add_argument("--granularity", default="head")
    ap.add_argument("--schedule", default="uniform", help="budgets per unit (contract clause 11): uniform or pyramid")
    ap.add_argument("--ratio", type=float, help="the pyramid schedule's ratio (default 0.5)")
    ap.add_argument("--shares", help="per-unit budget weights, w0/w1/... (clause 11)")
    ap.add_argument("--recents", help="per-layer recent shares of each unit's budget, f0/f1/...")
    ap.add_argument("--decays", help="per-layer decays, d0/d1/...")
    ap.add_argument("--positions", default="original", help="RoPE positions: original or rolling")
    ap.add_argument("--chunk", type=int, default=1, help="prefill chunk size (decode is always 1)")
    ap.add_argument("--kv-type", default="f32", help="stored K/V rounding: f32 (none), f16, q8_0, q4_0 or q4_1")
    ap.add_argument("--no-act-quant", action="store_true",
                    help="multiply Q4_K/Q6_K weights with unrounded activations (the engine rounds them)")
    ap.add_argument("--generate", type=int, default=0, help="greedy-decode N tokens after the input")
    ap.add_argument("--out", help="write the logits of every processed position, float64 .npy")
    ap.add_argument("--trace", help="write the kept sets after every chunk, JSON lines")
    ap.add_argument("--perplexity", action="store_true", help="print exp(mean NLL of tokens[1:])")
    ap.add_argument("--print-ids", action="store_true", help="print the token ids and exit")
    ap.add_argument("--matmul", metavar="TENSOR",
                    help="only multiply TENSOR with the float32 rows of --x (as the forward pass does, "
                         "activation rounding included) and write the float64 result to --out")
    ap.add_argument("--x", help="the .npy input of --matmul")
    args = ap.parse_args(argv)
    if args.matmul is None and args.tokens is None and args.text is None and args.text_file is None:
        ap.error("one of the arguments --tokens --text --text-file is required")
    if args.matmul is not None and (args.x is None or args.out is None):
        ap.error("--matmul needs --x and --out")

    gguf = Gguf(args.model)
    if args.matmul is not None:
        x = np.load(args.x).astype(np.float64)
        quantise = act_quantiser(gguf.tensors[args.matmul][1])
        if not args.no_act_quant and quantise is not None:
            x = quantise(x)
        np.save(args.out, x @ gguf.tensor(args.matmul).T)
        return 0
    if args.tokens is not None:
        tokens = [int(t) for t in args.tokens.split()]
    else:
        text = args.text
        if args.text_file is not None:
            with open(args.text_file, encoding="utf-8") as f:
                text = f.read()
            if args.max_tokens is not None:
                # Encoding is local to words, so a prefix of 16 characters per token (never less than the
                # file's tokens need here) gives the same leading tokens as the whole file.
                text = text[:16 * args.max_tokens]
        tokens = SpmTokenizer(gguf).encode(text)
    if args.max_tokens is not None:
        tokens = tokens[:args.max_tokens]
    if args.print_ids:
        print(" ".join(map(str, tokens)))
        return 0
    if args.chunk < 1:
        raise PolicyError(f"chunk {args.chunk} must be >= 1")

    model = Llama(gguf, act_quant=not args.no_act_quant)
    bad = [t for t in tokens if not 0 <= t < model.n_vocab]
    if bad:
        raise PolicyError(f"token ids {bad[:5]} are outside the vocabulary [0, {model.n_vocab})")
    if not tokens:
        raise PolicyError("no tokens to process")
    n_total = len(tokens) + args.generate
    budget = resolve_budget(args.budget, n_total)
    extra = {}
    for item in args.param:
        if "=" not in item:
            raise PolicyError(f"--param {item}: expected NAME=VALUE")
        key, value = item.split("=", 1)
        extra[key] = value
    own = resolve_extra(args.policy, extra)
    budget, recent, sinks, decay = resolve_policy(args.policy, budget, args.recent, args.sinks, args.decay, own)
    units = None
    lists = {k: [float(x) for x in v.split("/")] if v else None
             for k, v in (("shares", args.shares), ("recents", args.recents), ("decays", args.decays))}
    if args.policy != "full" and (args.schedule != "uniform" or args.ratio is not None or any(lists.values())):
        n_layer = sum(1 for s_ in model.sliding if not s_)
        n_units = {"head": n_layer * model.n_kv, "layer": n_layer, "model": 1}[args.granularity]
        budgets = allocate_budgets(budget, n_units, n_layer, args.schedule, args.ratio, lists["shares"])
        per_layer = max(1, n_units // n_layer)
        units = ([], [], [])
        for u, b_u in enumerate(budgets):
            layer = u // per_layer if args.granularity != "model" else 0
            r_u = math.floor(lists["recents"][layer] * b_u) if lists["recents"] else args.recent
            d_u = lists["decays"][layer] if lists["decays"] else args.decay
            b_u, r_u, _, d_u = resolve_policy(args.policy, b_u, r_u, args.sinks, d_u, own)
            units[0].append(b_u)
            units[1].append(r_u)
            units[2].append(d_u)
    run = Run(model, n_total, args.policy, budget, recent, sinks, decay, args.granularity, args.kv_type,
              args.positions, extra, units)
    trace = open(args.trace, "w") if args.trace else None
    logits = []

    def process(chunk):
        logits.append(run.step(chunk))
        if trace:
            trace.write(json.dumps({"pos": run.n - 1, "kept": run.kept_lists()}) + "\n")

    for i in range(0, len(tokens), args.chunk):
        process(tokens[i:i + args.chunk])
    generated = []
    for i in range(args.generate):
        generated.append(int(np.argmax(logits[-1][-1])))
        if i + 1 < args.generate:  # the last generated token is never fed back
            process(generated[-1:])
    if trace:
        trace.close()
    all_logits = np.concatenate(logits, axis=0)
    if args.out:
        np.save(args.out, all_logits.astype(np.float64))
    if args.perplexity:
        lp = log_softmax(all_logits[:len(tokens) - 1])
        nll = -lp[np.arange(len(tokens) - 1), np.asarray(tokens[1:])]
        print(f"perplexity {math.exp(nll.mean()):.6f} mean_nll {nll.mean():.6f} tokens {len(tokens)}")
    if args.generate:
        tok = SpmTokenizer(gguf)
        print(tok.decode(tokens[1:] + generated if tokens and tokens[0] == tok.bos else tokens + generated))
        print("ids:", " ".join(map(str, tokens + generated)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (GgufError, PolicyError) as e:
        print(f"llama_ref: {e}", file=sys.stderr)
        sys.exit(2)
