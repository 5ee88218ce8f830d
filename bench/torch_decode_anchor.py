"""Hugging Face transformers decode speed on the GPU machine, the anchor beside bench_prefill's
"decode_ms": a random-weight LLaMA-7B (or 13B) shape in bf16 with SDPA prefills N random tokens
with its KV cache (the default DynamicCache, as generate() uses), then runs STEPS one-token steps;
prints one JSON line per N with the mean ms per step (logits of the last token, no sampling).
    python3 bench/torch_decode_anchor.py 4096,32768 [7b|13b]"""
import json, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

STEPS = 32  # bench_prefill's DECODE_STEPS
ns = [int(n) for n in sys.argv[1].split(",")]
shape = sys.argv[2] if len(sys.argv) > 2 else "7b"
dim, hidden, layers = {"7b": (4096, 11008, 32), "13b": (5120, 13824, 40)}[shape]
cfg = LlamaConfig(hidden_size=dim, intermediate_size=hidden, num_hidden_layers=layers, num_attention_heads=dim // 128,
                  num_key_value_heads=dim // 128, vocab_size=32000, max_position_embeddings=262144)
cfg._attn_implementation = "sdpa"
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
torch.set_default_dtype(torch.float32)

with torch.inference_mode():
    for n in ns:
        ids = torch.randint(0, 32000, (1, n + STEPS), device="cuda")
        for rep in range(2):  # the first run warms up kernels and the allocator
            past = model(input_ids=ids[:, :n], use_cache=True, logits_to_keep=1).past_key_values
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for j in range(STEPS):
                out = model(input_ids=ids[:, n + j:n + j + 1], past_key_values=past, use_cache=True)
                past = out.past_key_values
                out.logits.float().cpu()  # the logits on the host, as bench_prefill's llama_forward
            ms = (time.perf_counter() - t0) * 1e3 / STEPS
            del past, out
            torch.cuda.empty_cache()
        print(json.dumps({"model": shape, "N": n, "hf_decode_ms": ms, "cache": "DynamicCache"}), flush=True)
