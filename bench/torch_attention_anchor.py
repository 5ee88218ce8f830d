# The anchor for bench_flash_attn: torch SDPA (flash and cuDNN backends) on the same shapes,
# B=1, 32 heads, d=128, bf16, timed with CUDA events (median), in the same run as our benchmark.
#   python3 bench/torch_attention_anchor.py [max_n]
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

def median_s(fn, reps, warm=1):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return sorted(ts)[len(ts) // 2]

max_n = int(sys.argv[1]) if len(sys.argv) > 1 else 131072
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
print("| N | causal | backend | ms | TFLOP/s |\n|---|---|---|---|---|")
for n in [4096, 16384, 32768, 65536, 131072]:
    if n > max_n: break
    q = torch.randn(1, 32, n, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q); v = torch.randn_like(q)
    for causal in [True, False]:
        if n > 65536 and not causal: continue
        for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
            try:
                with sdpa_kernel([be]):
                    t = median_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                 reps=10 if n <= 16384 else 3)
                fl = 4 * n * n * 128 * 32 * (0.5 if causal else 1.0)
                print(f"| {n} | {int(causal)} | {name} | {t * 1e3:.3f} | {fl / t / 1e12:.1f} |", flush=True)
            except Exception as ex:
                print(f"| {n} | {int(causal)} | {name} | error: {str(ex)[:80]} | |", flush=True)
    del q, k, v
