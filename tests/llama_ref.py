"""Float64 numpy reference of the LLaMA forward pass (Hugging Face semantics), reading a
checkpoint directory with its own safetensors reader, independent of burst's C code."""
import json, math, os, struct
import numpy as np

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[base + b:base + e]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: dtype {t['dtype']}")
        out[name] = a.astype(np.float64).reshape(t["shape"])
    return out

def load(dir):
    cfg = json.load(open(os.path.join(dir, "config.json")))
    index = os.path.join(dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(dir, f)))
    return cfg, w

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

def rope_frequencies(cfg, hd):
    """RoPE's inverse frequencies (hd / 2) and the factor on cos and sin, with config.json's
    rope_scaling: linear divides every frequency by factor; YaRN (the paper's reference code, as
    Hugging Face and vLLM): pairs that turn more than beta_fast times over the original context
    keep theirs, those turning fewer than beta_slow times are divided by factor, a linear ramp
    between; cos and sin are scaled by attention_factor (default 0.1 ln(factor) + 1)."""
    theta, rs = cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling") or {}
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        return inv / rs["factor"], 1.0
    if kind != "yarn":
        return inv, 1.0
    factor, ctx = rs["factor"], rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])

    def pair(turns):  # the (real) pair index that turns `turns` times over ctx positions
        return hd * math.log(ctx / (turns * 2 * math.pi)) / (2 * math.log(theta))
    lo, hi = max(math.floor(pair(rs.get("beta_fast", 32))), 0), min(math.ceil(pair(rs.get("beta_slow", 1))), hd - 1)
    ramp = np.clip((np.arange(hd // 2) - lo) / ((hi if hi != lo else hi + 0.001) - lo), 0, 1)
    return inv * (1 - ramp) + inv / factor * ramp, rs.get("attention_factor", 0.1 * math.log(factor) + 1)

def rope(x, pos, inv, mscale=1.0):  # x (n, heads, hd), rotate-half layout
    hd = x.shape[-1]
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

def bf16(x):
    """x rounded to the nearest bf16 value (ties to even), through float32 as burst rounds it."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    u = (u + np.uint32(0x7fff) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xffff0000)
    return u.view(np.float32).astype(np.float64)

def q8(w):
    """The values a 2-D weight holds as burst's Q8 (--quantize q8): each group of 32 columns of a
    row (the last may be short) int8 times the group's largest magnitude / 127, each rounded to the
    nearest (ties to even), in float32 as burst computes them."""
    rows, cols = w.shape
    groups = -(-cols // 32)
    padded = np.zeros((rows, groups * 32), dtype=np.float32)
    padded[:, :cols] = w
    blocks = padded.reshape(rows, groups, 32)
    amax = np.abs(blocks).max(-1)
    scale = amax / np.float32(127)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv[..., None])
    return (q * scale[..., None].astype(np.float64)).reshape(rows, groups * 32)[:, :cols]

def q4(w):
    """The values a 2-D weight holds as burst's Q4 (--quantize q4): each group of 32 columns of a
    row (the last may be short) an integer in -8..7 times the group's largest magnitude, signed,
    over -8, each rounded to the nearest (ties to even), in float32 as burst computes them."""
    rows, cols = w.shape
    groups = -(-cols // 32)
    padded = np.zeros((rows, groups * 32), dtype=np.float32)
    padded[:, :cols] = w
    blocks = padded.reshape(rows, groups, 32)
    mx, mn = blocks.max(-1), blocks.min(-1)  # the padding's zeros count, as burst's start of 0
    scale = (np.where(-mn > mx, mn, mx) / np.float32(-8)).astype(np.float32)
    inv = np.where(scale != 0, np.float32(1) / np.where(scale != 0, scale, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inv[..., None]), -8, 7)
    return (q * scale[..., None]).astype(np.float64).reshape(rows, groups * 32)[:, :cols]

def forward(cfg, w, tokens, kv_bf16=False, act_bf16=False, bf16_weights=False):
    """Logits (n, vocab) for every position of tokens, causal; kv_bf16: K/V rounded to bf16 as a
    bf16 KV cache holds them; act_bf16: the matmuls' inputs rounded to bf16 where the cpu-bf16
    backend keeps them in bf16 (the normed rows, the gate and up projections and the SwiGLU rows),
    and, with bf16_weights (its weights BF16, or F16 rounded to bf16), where it rounds float32
    inputs for BF16 weights (the attention rows, the final norm's)."""
    act = bf16 if act_bf16 else (lambda a: a)
    by_weights = bf16 if act_bf16 and bf16_weights else (lambda a: a)
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd, eps = D // H, cfg["rms_norm_eps"]
    inv, mscale = rope_frequencies(cfg, hd)
    n = len(tokens)
    pos = np.arange(n)
    x = w["model.embed_tokens.weight"][np.asarray(tokens)]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = act(rmsnorm(x, w[p + "input_layernorm.weight"], eps))
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, H, hd), pos, inv, mscale)
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, KV, hd), pos, inv, mscale)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, KV, hd)
        if kv_bf16:
            k, v = bf16(k), bf16(v)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("hqk,khd->qhd", s / s.sum(-1, keepdims=True), v).reshape(n, D)
        x = x + by_weights(o) @ w[p + "self_attn.o_proj.weight"].T
        h = act(rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps))
        g, u = act(h @ w[p + "mlp.gate_proj.weight"].T), act(h @ w[p + "mlp.up_proj.weight"].T)
        x = x + act(g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return by_weights(rmsnorm(x, w["model.norm.weight"], eps)) @ head.T
