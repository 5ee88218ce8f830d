"""Peak memory and time of a one-shot CPU prefill of N tokens on a random-weight model over G
ranks, for N = 2K..32K: peak RSS grows linearly in N (no N x N buffer anywhere), and the ring
steps' time splits into attention compute and waiting for the K/V transfer (the overlap).
   /usr/bin/python3 bench/bench_memory.py BUILD_DIR [--ranks G] [N ...]"""
import os, re, subprocess, sys, tempfile, time
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from make_random_model import write_model

args = sys.argv[1:]
if not args or args[0].startswith("-"):
    sys.exit(__doc__)
build, G = args.pop(0), 2
if args[:1] == ["--ranks"]:
    G = int(args[1]); args = args[2:]
Ns = [int(a) for a in args] or [2048, 4096, 8192, 16384, 32768]
tool = os.path.join(build, "tests", "forward_dump")
rng = np.random.default_rng(0)
print(f"one-shot prefill, random model dim 128, 2 heads (1 kv), 1 layer, f32; G={G} CPU ranks")
print(f"{'N':>8} {'time s':>8} {'peak RSS MB':>12} {'bytes/token':>12} {'N*N*4 MB':>10} {'compute/step':>13} {'wait/transfer':>14}")
with tempfile.TemporaryDirectory() as d:
    write_model(d, dim=128, hidden=256, layers=1, heads=2, kv_heads=1, vocab=512, max_seq=max(Ns))
    for N in Ns:
        toks = [str(t) for t in rng.integers(3, 512, N)]
        t0 = time.time()
        p = subprocess.Popen([tool, d, os.path.join(d, "out.bin"), str(N), str(G)] + toks,
                             stderr=subprocess.PIPE, text=True)
        err = p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        if status:
            sys.exit(f"forward_dump failed at N={N}: {err}")
        rss = ru.ru_maxrss * 1024  # Linux reports KiB
        m = re.search(r"ring: (\d+) steps, compute ([\d.]+) s, waiting for transfers ([\d.]+) s over (\d+)", err)
        steps, comp, wait, transfers = (int(m[1]), float(m[2]), float(m[3]), int(m[4])) if m else (1, 0, 0, 1)
        print(f"{N:>8} {time.time() - t0:>8.2f} {rss / 1e6:>12.1f} {rss / N:>12.0f} {N * N * 4 / 1e6:>10.0f} "
              f"{1e3 * comp / steps:>10.1f} ms {1e3 * wait / max(transfers, 1):>11.3f} ms")
print("command: /usr/bin/python3 bench/bench_memory.py build --ranks", G, *Ns)
