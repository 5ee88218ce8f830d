"""Ranks spread over processes (comm/cluster.h, comm_tcp.c): `burst generate` and burstd as the
leader with `burst worker`s on loopback.
- greedy text of stories260K with G ranks over P processes (ring prefill in one shot and in
  chunks, sharded decode) equals one process with the same G, for (G, P) = (2, 2), (3, 2), (4, 3),
  and (3, 2) with a bf16 KV cache, which the worker takes from the leader (bf16 blocks on the ring);
- burstd with a worker serves the same text over HTTP, and the same prompt logprobs (echo, a prompt
  of two chunks spread over the ranks) as one process, also with --speculate (drafted segments
  and their cutting back run on the worker too), /health is ok; when the worker is killed,
  the next request fails with a clear error instead of hanging, /health turns 503, and burstd
  still stops cleanly on SIGTERM; the same when the worker hangs (SIGSTOP) instead, at
  --node-timeout;
- a worker exits 0 when its leader stops; a worker with another model is refused on both sides;
  a leader whose workers never come and a worker whose leader never comes give up at the join
  timeout with one-line errors; a stray connection to the coordinator is dropped and the real
  worker still joins; --nodes without --coordinator is a usage error;
- the cluster over IPv6 ([::1]:PORT), and an IPv6 coordinator without brackets is refused;
- BURST_CLUSTER_KEY: the same key on both sides forms the cluster, another key or none is
  refused by both (a wrong answer to the leader's challenge too), and the leader warns when it has
  none."""
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from burstd_util import BIN, ENV, STORIES, Burstd, Checks, need_stories

need_stories()
check = Checks()
BURST = os.path.join(BIN, "burst")
PROMPT = ("Once upon a time, there was a little boy named Tim. Tim had a big red ball. He liked to "
          "throw the ball high in the sky. One day, Tim saw a cat in the tree. The cat was scared.")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(coord, model=STORIES, *args, env=ENV):
    return subprocess.Popen([BURST, "worker", "--model", model, "--coordinator", coord, "--threads", "1", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def generate(*args, timeout=120):
    return subprocess.run([BURST, "generate", "--model", STORIES, "--prompt", PROMPT, "--max-tokens", "80",
                           "--threads", "1", *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def finish(p, timeout=30):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += "\n(killed: did not exit)"
    return p.returncode, err


# Same text as one process, with the ring crossing process boundaries; the workers say what they
# took from the leader (the KV dtype, quantized weights).
for G, P, batch, kv, quant in ((2, 2, 512, "f32", ""), (3, 2, 512, "f32", ""), (4, 3, 512, "f32", ""), (3, 2, 7, "f32", ""),
                               (3, 2, 7, "bf16", ""), (3, 2, 7, "f32", "q8"), (2, 2, 7, "f32", "q4")):
    quantize = ["--quantize", quant] if quant else []
    one = generate("--ranks", str(G), "--batch", str(batch), "--kv-dtype", kv, *quantize)
    coord = f"127.0.0.1:{free_port()}"
    workers = [worker(coord) for _ in range(P - 1)]
    many = generate("--ranks", str(G), "--batch", str(batch), "--kv-dtype", kv, *quantize, "--nodes", str(P),
                    "--coordinator", coord)
    name = f"G={G} over {P} processes, batch {batch}, KV {kv}" + (f", {quant} weights" if quant else "")
    check(f"{name}: leader exit 0", many.returncode == 0, many.stderr[-400:])
    check(f"{name}: same text as one process", many.stdout == one.stdout and len(one.stdout) > 100,
          f"{many.stdout!r} vs {one.stdout!r}")
    took = f"{G} rank(s) in all on cpu{f' ({quant} weights)' if quant else ''} (KV {kv.upper()})"
    for i, w in enumerate(workers):
        rc, err = finish(w)
        check(f"{name}: worker {i + 1} took the leader's options, exits 0 when the leader stops",
              rc == 0 and "leader has stopped" in err and took in err, err[-400:])

# The same over IPv6 loopback, where this machine has it; an IPv6 address without brackets is a
# clear error.
try:
    with socket.socket(socket.AF_INET6) as s6:
        s6.bind(("::1", 0))
        coord = f"[::1]:{s6.getsockname()[1]}"
except OSError:
    coord = None
if coord:
    one = generate("--ranks", "3")
    w = worker(coord)
    many = generate("--ranks", "3", "--nodes", "2", "--coordinator", coord)
    rc, err = finish(w)
    check(f"--coordinator {coord}: same text as one process, worker exit 0", many.returncode == 0 and rc == 0
          and many.stdout == one.stdout and "joined from ::1" in many.stderr, (many.stderr[-400:], err[-400:]))
r = generate("--ranks", "2", "--nodes", "2", "--coordinator", "::1:9000")
check("--coordinator ::1:9000: wants brackets", r.returncode != 0 and "[::1]:PORT" in r.stderr, r.stderr[-300:])

# Prompt logprobs of a ~300-token prompt (chunks of 256 and the rest, both split zigzag over the
# ranks, whose rows are gathered for the logits) from one process, for burstd with a worker below.
# Then a prompt that extends the first request's: the prefix cache cuts that slot (CMD_TRUNCATE to
# the workers) and prefills the rest.
ECHO = {"prompt": " ".join([PROMPT] * 6), "max_tokens": 0, "echo": True, "logprobs": 3, "temperature": 0}
body = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0}
FOLLOW = {"prompt": PROMPT + " Then the cat", "max_tokens": 20, "temperature": 0, "logprobs": 2}
# Both daemons speculate (--speculate 4): the workers run the drafted segments and cut them back.
with Burstd(STORIES, "--ranks", "3", "--speculate", "4") as d:
    d.request("POST", "/v1/completions", body)
    _, _, one_echo = d.request("POST", "/v1/completions", ECHO)
    _, _, one_follow = d.request("POST", "/v1/completions", FOLLOW)

# burstd as the leader; then the worker dies.
coord = f"127.0.0.1:{free_port()}"
w = worker(coord)
with Burstd(STORIES, "--ranks", "3", "--nodes", "2", "--coordinator", coord, "--speculate", "4") as d:
    want = generate("--ranks", "3", "--max-tokens", "40").stdout.rstrip("\n")
    status, _, r = d.request("POST", "/v1/completions", body)
    check("burstd over 2 processes: completion 200", status == 200, r)
    check("burstd over 2 processes: same text as burst generate", status == 200 and r["choices"][0]["text"] == want,
          f"{r} vs {want!r}")
    status, _, r = d.request("POST", "/v1/completions", ECHO)
    got, want = (x["choices"][0]["logprobs"] if "choices" in x else {} for x in (r, one_echo))
    # Each rank runs the same float32 arithmetic in both; only the transport differs: bit for bit.
    check("burstd over 2 processes: the prompt's logprobs (echo) = one process's",
          status == 200 and len(got.get("tokens", [])) > 256 and got == want, (status, str(got)[:300], str(want)[:300]))
    status, _, r = d.request("POST", "/v1/completions", FOLLOW)
    cached = r.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", 0)
    check(f"burstd over 2 processes: a prompt extending the first reuses its K/V ({cached} tokens) and answers "
          "as one process, logprobs bit for bit", status == 200 and cached > 20 and
          r["usage"] == {**one_follow["usage"], "time_to_first_token_s": r["usage"]["time_to_first_token_s"],
                         "queue_time_s": r["usage"]["queue_time_s"]} and r["choices"] == one_follow["choices"],
          (status, str(r)[:300], str(one_follow)[:300]))
    accepted = d.metric("spec_decode_num_accepted_tokens_total")
    check(f"burstd over 2 processes: speculative decoding ran ({accepted:.0f} drafted tokens accepted)", accepted > 0)
    status, _, h = d.request("GET", "/health")
    check("health ok with the worker up", status == 200 and h.get("status") == "ok", h)
    w.kill()
    w.wait()
    t0 = time.time()
    status, _, r = d.request("POST", "/v1/completions", body)
    check("a request after the worker died fails", status >= 500 and "error" in r, (status, r))
    check("... at once, not at a timeout", time.time() - t0 < 10, time.time() - t0)
    status, _, h = d.request("GET", "/health")
    check("health 503 with the reason", status == 503 and h.get("status") == "error" and "node" in h.get("error", ""),
          (status, h))
    status, _, r = d.request("POST", "/v1/completions", body)
    check("later requests fail too", status >= 500, (status, r))
    check("burstd stops cleanly on SIGTERM", d.stop() == 0, d.log()[-600:])
    check("the log says the model is out of service", "out of service" in d.log(), d.log()[-600:])

# A worker that hangs (stopped, so its kernel still answers keepalives): with --node-timeout 2 the
# next request fails at the timeout instead of waiting forever, and /health says why.
coord = f"127.0.0.1:{free_port()}"
w = worker(coord)
with Burstd(STORIES, "--ranks", "3", "--nodes", "2", "--coordinator", coord, "--node-timeout", "2") as d:
    status, _, r = d.request("POST", "/v1/completions", body)
    check("--node-timeout 2: a request with the worker running", status == 200, r)
    w.send_signal(signal.SIGSTOP)
    t0 = time.time()
    status, _, r = d.request("POST", "/v1/completions", {**body, "prompt": PROMPT + " The end."})
    took = time.time() - t0
    check(f"a request after the worker hung fails at the node timeout ({took:.1f} s)",
          status >= 500 and "timed out" in str(r) and 1.5 < took < 20, (status, r))
    status, _, h = d.request("GET", "/health")
    check("health 503, saying the transfer timed out", status == 503 and "timed out" in h.get("error", ""), (status, h))
    check("burstd stops cleanly on SIGTERM with the worker hung", d.stop() == 0, d.log()[-600:])
w.kill()
w.wait()

# A worker with another model: refused by the leader and by the worker itself.
with tempfile.TemporaryDirectory() as tmp:
    other = os.path.join(tmp, "other")
    subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "make_random_model.py"), other,
                    "--layers", "2", "--dim", "32", "--heads", "4", "--kv-heads", "2", "--hidden", "48",
                    "--vocab", "512"], check=True, capture_output=True)
    coord = f"127.0.0.1:{free_port()}"
    w = worker(coord, other)
    lead = generate("--ranks", "2", "--nodes", "2", "--coordinator", coord)
    rc, err = finish(w)
    check("leader refuses a worker with another model", lead.returncode == 1 and "another model" in lead.stderr,
          lead.stderr[-400:])
    check("the worker says so too", rc == 1 and "another model" in err, err[-400:])

# Nobody comes.
t0 = time.time()
r = generate("--ranks", "2", "--nodes", "2", "--coordinator", f"127.0.0.1:{free_port()}", "--join-timeout", "1")
check("leader without workers gives up at the join timeout",
      r.returncode == 1 and "0 of 1 worker(s) joined" in r.stderr and time.time() - t0 < 20, r.stderr[-400:])
t0 = time.time()
rc, err = finish(worker(f"127.0.0.1:{free_port()}", STORIES, "--join-timeout", "1"))
check("worker without a leader gives up at the join timeout", rc == 1 and "gave up" in err and time.time() - t0 < 20,
      err[-400:])

# A stray connection (not a worker) does not take a worker's place.
port = free_port()
coord = f"127.0.0.1:{port}"
lead = subprocess.Popen([BURST, "generate", "--model", STORIES, "--prompt", PROMPT, "--max-tokens", "20", "--threads",
                         "1", "--ranks", "2", "--nodes", "2", "--coordinator", coord], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, env=ENV)
for _ in range(100):
    try:
        stray = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        time.sleep(0.1)
stray.sendall(b"GET / HTTP/1.0\r\n\r\n")
stray.close()
w = worker(coord)
rc, err = finish(lead, 60)
wrc, werr = finish(w)
check("a stray connection is dropped and the worker still joins", rc == 0 and "dropped a connection" in err and wrc == 0,
      err[-400:] + werr[-200:])

# BURST_CLUSTER_KEY: with the same key on both sides the cluster forms (and the leader does not
# warn that anyone can join); a worker with another key, or none, is refused on both sides, and
# so is a client that answers the leader's challenge with a wrong proof; the right worker then joins.
KEYED = {**ENV, "BURST_CLUSTER_KEY": "s3cret"}


def keyed_leader(coord, timeout=None):
    return subprocess.Popen([BURST, "generate", "--model", STORIES, "--prompt", PROMPT, "--max-tokens", "20", "--threads",
                             "1", "--ranks", "2", "--nodes", "2", "--coordinator", coord]
                            + (["--join-timeout", str(timeout)] if timeout else []),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=KEYED)


one = generate("--ranks", "2", "--max-tokens", "20")
coord = f"127.0.0.1:{free_port()}"
lead, w = keyed_leader(coord), worker(coord, env=KEYED)
out, err = lead.communicate(timeout=60)
wrc, werr = finish(w)
check("same BURST_CLUSTER_KEY on both sides: the cluster forms, same text as one process, no warning",
      lead.returncode == 0 and wrc == 0 and out == one.stdout and "BURST_CLUSTER_KEY is not set" not in err,
      err[-400:] + werr[-200:])
check("without a key the leader warns that anyone can join", "BURST_CLUSTER_KEY is not set" in many.stderr,
      many.stderr[-400:])
for name, env in (("another key", {**ENV, "BURST_CLUSTER_KEY": "guess"}), ("no key", ENV)):
    port = free_port()
    coord = f"127.0.0.1:{port}"
    lead = keyed_leader(coord)
    rc, werr = finish(worker(coord, env=env), 60)
    check(f"a worker with {name}: refused, saying the leader has another cluster key",
          rc == 1 and "has another cluster key" in werr, werr[-400:])
    if name == "no key":  # a client that answers the challenge with a wrong proof
        fake = socket.create_connection(("127.0.0.1", port))
        fake.sendall(struct.pack("<4I", 0x54535242, 3, 0, 0) + os.urandom(32))  # magic, CLUSTER_VERSION
        got = b""
        while len(got) < 64:
            got += fake.recv(64 - len(got))
        fake.sendall(bytes(32))
        verdict = fake.recv(4)
        fake.close()
        check("a wrong proof: the leader answers 0 (refused)", verdict == bytes(4), verdict)
    w = worker(coord, env=KEYED)
    out, err = lead.communicate(timeout=60)
    wrc, werr = finish(w)
    check(f"... the leader dropped it ({name}) and the right worker still joined",
          lead.returncode == 0 and wrc == 0 and out == one.stdout and "dropped a connection from 127.0.0.1" in err
          and (name != "no key" or "another cluster key (BURST_CLUSTER_KEY)" in err), err[-600:] + werr[-200:])

r = subprocess.run([BURST, "generate", "--model", STORIES, "--prompt", "x", "--nodes", "2"], capture_output=True,
                   text=True, env=ENV)
check("--nodes without --coordinator is a usage error", r.returncode == 2 and "--coordinator" in r.stderr, r.stderr)
r = subprocess.run([BURST, "worker", "--model", STORIES], capture_output=True, text=True, env=ENV)
check("worker without --coordinator is a usage error", r.returncode == 2 and "--coordinator" in r.stderr, r.stderr)
check.exit()
