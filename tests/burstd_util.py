"""Helpers for the server tests: start a real burstd on a free port (--port 0; the port is read
from its "listening on" log line), send requests, read SSE streams, and run `burst generate`
for the reference text. Standard library only (Debian's /usr/bin/python3)."""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

BIN = os.environ["BURST_BIN"]
MODELS = os.environ["BURST_MODELS_DIR"]
# One OpenMP thread everywhere: these models are tiny and ctest runs tests side by side on a
# shared machine, where a pool of spinning OpenMP threads per daemon stalls the engine threads.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
STORIES = os.path.join(MODELS, "stories260K")
# TinyLlama-1.1B-Chat's tokenizer_config.json chat_template (the alignment handbook's Zephyr template).
ZEPHYR_JINJA = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
                "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}"
                "\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
                "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")


class Burstd:
    """A running burstd; use as a context manager. .log() is its stderr so far."""

    def __init__(self, model, *args, timeout=60, preexec_fn=None, env=None):
        self.proc = subprocess.Popen([os.path.join(BIN, "burstd"), "--model", model, "--port", "0", "--threads", "1",
                                      *args], stderr=subprocess.PIPE, text=True, env={**ENV, **(env or {})},
                                     preexec_fn=preexec_fn)
        self.lines, self.port = [], None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on https?://[^ ]*:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()
        threading.Thread(target=read, daemon=True).start()
        ready.wait(timeout)
        if self.port is None:
            self.stop()
            raise RuntimeError("burstd did not start:\n" + self.log())
        self.host, self.url = "127.0.0.1", f"http://127.0.0.1:{self.port}"

    def log(self):
        return "\n".join(self.lines)

    def wait_log(self, pattern, timeout=30):
        """The first match of pattern in the log, waiting for it to appear (None on timeout)."""
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(pattern, self.log())
            if m:
                return m
            time.sleep(0.02)
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def connect(self, timeout=120):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers, parsed JSON or text) of one request; body may be a dict or bytes."""
        c = self.connect(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        h = {"Content-Type": "application/json", **(headers or {})}
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read().decode("utf-8", "replace")
        c.close()
        try:
            data = json.loads(data)
        except ValueError:
            pass
        return r.status, dict(r.getheaders()), data

    def stream(self, path, body, headers=None):
        """The parsed `data:` payloads of a streamed completion, "[DONE]" included."""
        c = self.connect()
        c.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                  headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        events = []
        for line in r:
            line = line.decode().rstrip("\n")
            if line.startswith("data: "):
                payload = line[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        c.close()
        return r.status, events

    def metric(self, name):
        """The value of one series of /metrics ("burst:name{labels}" prefix match), as a float."""
        _, _, text = self.request("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith("burst:" + name):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)


def stream_text(events, kind="completion"):
    """Concatenated text of a stream's chunks."""
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("choices"):
            c = e["choices"][0]
            out.append(c.get("text", "") if kind == "completion" else c.get("delta", {}).get("content", ""))
    return "".join(out)


def check_shaped(check, srv, spec, fmt, bodies, max_tokens, is_whole, is_begun, what):
    """Completions of each body with fmt (a response_format) on srv: every choice whole (is_whole)
    where it ends at EOS and begun (is_begun) where max_tokens cuts it, a stream equal to the whole
    answer, greedy answers the same on spec (a --speculate server). Returns the choices that ended
    at EOS and each body's one-choice text."""
    stops, texts = 0, []
    for i, body in enumerate(bodies):
        st, _, r = srv.request("POST", "/v1/completions", {**body, **fmt, "max_tokens": max_tokens})
        for ch in r.get("choices", []):
            text, finish = ch["text"], ch["finish_reason"]
            stops += finish == "stop"
            ok = (finish == "stop" and is_whole(text)) or (finish == "length" and is_begun(text))
            check(f"completion {i} {what}, finish {finish}: whole, or begun", st == 200 and ok, (st, r))
        st, events = srv.stream("/v1/completions", {**body, **fmt, "max_tokens": max_tokens, "n": 1})
        whole = srv.request("POST", "/v1/completions", {**body, **fmt, "max_tokens": max_tokens, "n": 1})[2]
        whole = whole["choices"][0]["text"]
        check("... streamed = whole", stream_text(events) == whole, (stream_text(events), whole))
        if body["temperature"] == 0:
            st, _, r2 = spec.request("POST", "/v1/completions", {**body, **fmt, "max_tokens": max_tokens})
            check("... greedy: the same text with --speculate", st == 200 and r2["choices"][0]["text"] == whole, (r2, whole))
        texts.append(whole)
    return stops, texts


def logprob_diff(got, ref):
    """The largest difference between two choices' token logprobs, skipping the null entries (the
    prompt's first token); inf when they have not the same number of tokens."""
    a, b = got["logprobs"]["token_logprobs"], ref["logprobs"]["token_logprobs"]
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b) if x is not None and y is not None), default=float("nan"))


def generate(model, prompt, max_tokens, *options):
    """`burst generate` greedy text (its trailing newline removed), with further options (prompt None:
    they give it)."""
    r = subprocess.run([os.path.join(BIN, "burst"), "generate", "--model", model, *(["--prompt", prompt] if prompt else []),
                        "--max-tokens", str(max_tokens), "--temperature", "0", "--threads", "1", *options],
                       capture_output=True, text=True, timeout=120, env=ENV)
    if r.returncode:
        raise RuntimeError(f"burst generate failed: {r.stderr}")
    return r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout


class Checks:
    """Counts failures; the exit code is the verdict."""

    def __init__(self):
        self.failures = 0

    def __call__(self, name, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)[:600]), flush=True)
        self.failures += not ok
        return ok

    def exit(self):
        sys.exit(1 if self.failures else 0)


def need_stories():
    if not os.path.isdir(STORIES):
        print("skip: no", STORIES)
        sys.exit(77)
