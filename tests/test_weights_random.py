#!/usr/bin/python3
"""make_random_model.py checkpoints (F32, F16, BF16; one file and sharded; tied and untied) read
back through weights_open: weights_dump's config, shapes, dtypes and a hash of every tensor's
bytes must match what the generator wrote. Also checks the generator's BF16 rounding.

Usage: test_weights_random.py PATH_TO_weights_dump
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_random_model as mrm  # noqa: E402


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def check_bf16_rounding():
    # 1+2^-8 is a tie between 0x3f80 and 0x3f81: to even. 1+3*2^-8 ties to 0x3f82. -2.5 exact.
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -2.5, np.nan], np.float32)
    got = [int(v) for v in mrm.to_bf16_bits(x)]
    want = [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x7FC0]
    ok = got == want
    print(f"{'ok  ' if ok else 'FAIL'} bf16 rounding {[hex(v) for v in got]}")
    return ok


def dump(tool, out_dir):
    r = subprocess.run([tool, out_dir], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL weights_dump {out_dir}: {r.stderr.strip()}")
        return None
    return r.stdout.splitlines()


def check_model(tool, tmp, dtype, shards, tie, seed):
    what = f"{dtype} shards={shards} tie={tie}"
    out = os.path.join(tmp, f"{dtype}-{shards}-{int(tie)}")
    config, stored = mrm.write_model(out, dim=96, hidden=200, layers=2, heads=6, kv_heads=2,
                                     vocab=512, max_seq=1024, dtype=dtype, shards=shards,
                                     seed=seed, tie=tie)
    files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    lines = dump(tool, out)
    if lines is None:
        return False
    want_config = (f"config dim=96 hidden_dim=200 n_layers=2 n_heads=6 n_kv_heads=2 head_dim=16 "
                   f"vocab_size=512 max_seq_len=1024 norm_eps=9.99999975e-06 rope_theta=10000 "
                   f"tie_embeddings={int(tie)} bos_id=1 eos_id=2")
    errors = [] if lines[0] == want_config else [f"config line {lines[0]!r}"]
    tensors = {}
    for line in lines[2:]:
        _, name, dt, shape, nbytes, h = line.split(" ")
        tensors[name] = (dt, shape, int(nbytes), int(h, 16))
    total = 0
    for name, values in stored.items():
        data, _ = mrm.encode(dtype, values)
        total += len(data)
        want = (dtype, ",".join(str(d) for d in values.shape), len(data), fnv1a64(data))
        if tensors.get(name) != want:
            errors.append(f"{name}: read {tensors.get(name)}, wrote {want}")
    if set(tensors) != set(stored):
        errors.append(f"names differ: {sorted(set(tensors) ^ set(stored))}")
    if lines[1] != f"bytes {total}":
        errors.append(f"{lines[1]!r}, want bytes {total}")
    if ("lm_head.weight" in tensors) == tie:
        errors.append("lm_head.weight present/absent against tie_word_embeddings")
    want_files = 1 if shards == 1 else shards
    if len(files) != want_files:
        errors.append(f"{len(files)} safetensors files, want {want_files}")
    print(f"{'ok  ' if not errors else 'FAIL'} {what}: {len(tensors)} tensors in {len(files)} files")
    for e in errors[:10]:
        print(f"     {e}")
    return not errors


def main():
    tool = sys.argv[1]
    ok = check_bf16_rounding()
    with tempfile.TemporaryDirectory(prefix="burst_weights_random_") as tmp:
        for i, (dtype, shards, tie) in enumerate([("F32", 1, False), ("F16", 3, False),
                                                  ("BF16", 2, True), ("BF16", 1, False),
                                                  ("F32", 5, True)]):
            ok &= check_model(tool, tmp, dtype, shards, tie, seed=i)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
