"""Perplexity of texts under a running server, from its prompt logprobs: every paragraph (texts
apart by blank lines) of each FILE goes as one completions request with "echo": true,
"logprobs": 1 and "max_tokens": 0, and the log-probabilities of all its tokens but the first add
up. For comparing a model's settings (--quantize q8, --backend) on the same texts.

    python3 bench/perplexity.py URL FILE...     (e.g. http://127.0.0.1:8080 bench/stories.txt)
"""
import json, math, sys, urllib.request

if len(sys.argv) < 3:
    sys.exit(__doc__)
url, nll, n = sys.argv[1].rstrip("/") + "/v1/completions", 0.0, 0
for path in sys.argv[2:]:
    for text in filter(None, (p.strip() for p in open(path, encoding="utf-8").read().split("\n\n"))):
        body = json.dumps({"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1}).encode()
        req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        lps = json.load(urllib.request.urlopen(req))["choices"][0]["logprobs"]["token_logprobs"]
        lps = [lp for lp in lps if lp is not None]  # the first token has none
        nll, n = nll - sum(lps), n + len(lps)
print(f"perplexity {math.exp(nll / n):.4f} over {n} tokens")
