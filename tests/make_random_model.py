#!/usr/bin/python3
"""Writes a random-weight LLaMA checkpoint in Hugging Face layout: config.json, model.safetensors
(or K shards plus model.safetensors.index.json), and optionally tokenizer.model.

Weights are drawn in float64 with numpy, then stored as F32, F16 or BF16 (BF16: float32 rounded to
nearest-even on its top 16 bits). write_model returns the tensors as float64 arrays holding exactly
the stored values, so a test can compute its reference from what the C code reads.

Run with Debian's /usr/bin/python3 (it has numpy). Importable: write_safetensors, write_model.
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

DTYPES = ("F32", "F16", "BF16")


def to_bf16_bits(x):
    """float values -> uint16 BF16 bit patterns, rounded to nearest, ties to even; NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype("<u2")


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view("<f4").astype(np.float64)


def encode(dtype, arr):
    """(stored bytes, float64 array of the stored values) for one tensor."""
    if dtype == "F32":
        a = np.ascontiguousarray(arr, dtype="<f4")
        return a.tobytes(), a.astype(np.float64)
    if dtype == "F16":
        a = np.ascontiguousarray(arr, dtype="<f2")
        return a.tobytes(), a.astype(np.float64)
    if dtype == "BF16":
        b = to_bf16_bits(arr)
        return b.tobytes(), from_bf16_bits(b)
    raise ValueError(f"dtype {dtype} unsupported (want {'/'.join(DTYPES)})")


def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> (dtype_str, np array), written in that order. The header is padded
    with spaces to a multiple of 8 bytes, as the safetensors library does, so data is aligned.
    Returns dict name -> float64 array of the stored values."""
    header, blobs, stored, offset = {}, [], {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, arr) in tensors.items():
        data, stored[name] = encode(dtype, arr)
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return stored


def llama_tensors(rng, dim, hidden, layers, heads, kv_heads, vocab, tie, std):
    """Hugging Face LLaMA tensor names and float64 values, in the order HF lists them."""
    head_dim = dim // heads
    kv_dim = kv_heads * head_dim

    def w(*shape):
        return rng.standard_normal(shape) * std

    def norm():
        return 1.0 + 0.1 * rng.standard_normal(dim)

    t = {"model.embed_tokens.weight": w(vocab, dim)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = w(dim, dim)
        t[p + "self_attn.k_proj.weight"] = w(kv_dim, dim)
        t[p + "self_attn.v_proj.weight"] = w(kv_dim, dim)
        t[p + "self_attn.o_proj.weight"] = w(dim, dim)
        t[p + "mlp.gate_proj.weight"] = w(hidden, dim)
        t[p + "mlp.up_proj.weight"] = w(hidden, dim)
        t[p + "mlp.down_proj.weight"] = w(dim, hidden)
        t[p + "input_layernorm.weight"] = norm()
        t[p + "post_attention_layernorm.weight"] = norm()
    t["model.norm.weight"] = norm()
    if not tie:
        t["lm_head.weight"] = w(vocab, dim)
    return t


def split_shards(names, sizes, k):
    """Splits names (in order) into k non-empty contiguous groups of roughly equal bytes."""
    k = max(1, min(k, len(names)))
    total, groups, acc, g = sum(sizes), [[] for _ in range(k)], 0, 0
    for i, (name, size) in enumerate(zip(names, sizes)):
        want = max(acc * k // max(total, 1), k - (len(names) - i))  # each later shard gets one
        g = min(want, g + 1 if groups[g] else g, k - 1)               # no shard left empty
        groups[g].append(name)
        acc += size
    return groups


def write_model(out_dir, dim=96, hidden=200, layers=2, heads=6, kv_heads=2, vocab=512,
                max_seq=1024, dtype="F32", shards=1, seed=0, tie=False, tokenizer=None,
                std=0.05, norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None):
    """Writes the checkpoint; returns (config dict, dict name -> float64 array as stored)."""
    dtype = dtype.upper()
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype} unsupported (want {'/'.join(DTYPES)})")
    if dim % heads or heads % kv_heads:
        raise ValueError(f"heads {heads} must divide dim {dim}, kv_heads {kv_heads} must divide heads")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    values = llama_tensors(rng, dim, hidden, layers, heads, kv_heads, vocab, tie, std)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": dim, "intermediate_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
        "max_position_embeddings": max_seq, "rms_norm_eps": norm_eps, "rope_theta": rope_theta,
        "hidden_act": "silu", "tie_word_embeddings": tie, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
    }
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    names = list(values)
    esize = 4 if dtype == "F32" else 2
    groups = split_shards(names, [values[n].size * esize for n in names], shards)
    stored = {}
    if len(groups) == 1:
        stored = write_safetensors(os.path.join(out_dir, "model.safetensors"),
                                   {n: (dtype, values[n]) for n in names}, {"format": "pt"})
    else:
        weight_map = {}
        for i, group in enumerate(groups):
            file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
            stored.update(write_safetensors(os.path.join(out_dir, file),
                                            {n: (dtype, values[n]) for n in group}, {"format": "pt"}))
            weight_map.update({n: file for n in group})
        total = sum(values[n].size * esize for n in names)
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    if tokenizer:
        shutil.copyfile(tokenizer, os.path.join(out_dir, "tokenizer.model"))
    return config, stored


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--hidden", type=int, default=200)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tie", action="store_true")
    p.add_argument("--tokenizer", help="tokenizer.model to copy into OUT_DIR")
    p.add_argument("--std", type=float, default=0.05, help="weight scale (norms are 1 + noise)")
    a = p.parse_args()
    write_model(a.out_dir, a.dim, a.hidden, a.layers, a.heads, a.kv_heads, a.vocab, a.max_seq,
                a.dtype, a.shards, a.seed, a.tie, a.tokenizer, a.std)


if __name__ == "__main__":
    main()
