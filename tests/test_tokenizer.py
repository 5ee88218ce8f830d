"""Tokenizer ids, decode and streaming decode of burst's SentencePiece wrapper against
SentencePiece's own Python binding (Debian python3-sentencepiece), on the LLaMA-2 tokenizer."""
import os, subprocess, sys, tempfile

try:
    import sentencepiece as spm
except ImportError:
    print("skip: python3-sentencepiece missing")
    sys.exit(77)

TOOL = os.path.join(os.environ["BURST_BIN"], "tests", "tokenizer_tool")
MODEL = os.path.join(os.environ["BURST_MODELS_DIR"], "llama2-tokenizer", "tokenizer.model")
STRINGS = [
    "Hello world", " Hello world", "  two leading spaces", "trailing space ",
    "line one\nline two\n\nblank", "tab\tseparated\tvalues", "naïve café, Zürich — “quotes”",
    "日本語のテキスト", "emoji 🦙🔥 and 👩‍👩‍👧", "mixed 中文 and English", "123 4567 3.14159",
    "<s> is not special in text", "a", "🦙", "   ", "x\r\ny",
    "def f(x):\n    return x ** 2\n", "Ünïcödé ÀÉÎÕÜ ñ ß ø å", "☃️❄️🌨", "∀x ∈ ℝ: x² ≥ 0",
]
sp = spm.SentencePieceProcessor(model_file=MODEL)
assert sp.encode("Hello world") == [15043, 3186], "reference binding disagrees with README"
strings = STRINGS
with tempfile.NamedTemporaryFile(delete=False) as f:
    f.write(b"\0".join(s.encode() for s in strings))
out = subprocess.run([TOOL, MODEL, f.name], capture_output=True, text=True, timeout=60)
os.unlink(f.name)
if out.returncode != 0:
    print("FAIL tool:", out.stderr)
    sys.exit(1)
lines = out.stdout.splitlines()
failures = 0
for i, s in enumerate(strings):
    ids = [int(x) for x in lines[3 * i][4:].split()]
    dec = bytes.fromhex(lines[3 * i + 1][4:]).decode()
    stream = bytes.fromhex(lines[3 * i + 2][7:]).decode()
    want = sp.encode(s)
    ok = ids == want and dec == sp.decode(want) and stream == sp.decode(want)
    failures += not ok
    print(("ok   " if ok else "FAIL ") + repr(s) + ("" if ok else
          f": ids {ids} want {want}; decode {dec!r} stream {stream!r} want {sp.decode(want)!r}"))
sys.exit(1 if failures else 0)
