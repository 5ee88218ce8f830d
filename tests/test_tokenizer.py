"""Tokenizer ids, decode and streaming decode of burst's SentencePiece wrapper against
SentencePiece's own Python binding (Debian python3-sentencepiece), on the LLaMA-2 tokenizer; and
long texts (which burst encodes in pieces, in parallel) on it and on stories260K's: fresh random
mixes of words, spacing, code, non-ASCII around spaces, and a text with no space at all; and on
two tokenizers trained here that pieces would get wrong, so burst must encode them whole."""
import os, random, sys, tempfile

from tokenizer_reference import MODEL, TOOL, spm, tool_lines

STRINGS = [
    "Hello world", " Hello world", "  two leading spaces", "trailing space ",
    "line one\nline two\n\nblank", "tab\tseparated\tvalues", "naïve café, Zürich — “quotes”",
    "日本語のテキスト", "emoji 🦙🔥 and 👩‍👩‍👧", "mixed 中文 and English", "123 4567 3.14159",
    "<s> is not special in text", "a", "🦙", "   ", "x\r\ny",
    "def f(x):\n    return x ** 2\n", "Ünïcödé ÀÉÎÕÜ ñ ß ø å", "☃️❄️🌨", "∀x ∈ ℝ: x² ≥ 0",
]
def long_texts(rng):
    """Texts of 16 KB and more: burst cuts them at spaces after printable ASCII."""
    words = [w for s in STRINGS for w in s.split(" ") if w] + ["the", "a", "Lily", "ball", "3.14", "x=1;", "é", "中"]
    seps = [" "] * 12 + ["  ", "\n", " \n", "\n    ", "\t", "   ", ". ", ", "]
    def mix(n):
        return "".join(rng.choice(words) + rng.choice(seps) for _ in range(n))
    prose = " ".join(rng.choice(["Once", "upon", "a", "time,", "there", "was", "little", "girl", "named", "Lily."])
                     for _ in range(30000))
    code = "".join(f"def f{i}(x):\n    return x ** {i}  # {rng.choice(words)}\n\n" for i in range(800))
    spaced = "".join(rng.choice(words) + " " * rng.randint(3, 9) for _ in range(5000))  # a cut after a space is wrong
    return [mix(6000), mix(3000) + " ", " " + mix(3000), spaced, prose, code, "中文" * 9000,
            " ".join(rng.choice(["é", "a", "🦙", "b"]) for _ in range(12000)), "ab " * 6000]


def run(model, strings, label):
    """Failures of the tool's ids, decode and streaming decode against the binding's."""
    sp = spm.SentencePieceProcessor(model_file=model)
    lines = tool_lines([TOOL, model], b"\0".join(s.encode() for s in strings), 3 * len(strings))
    failures = 0
    for i, s in enumerate(strings):
        ids = [int(x) for x in lines[3 * i][4:].split()]
        dec = bytes.fromhex(lines[3 * i + 1][4:]).decode()
        stream = bytes.fromhex(lines[3 * i + 2][7:]).decode()
        want = sp.encode(s)
        ok = ids == want and dec == sp.decode(want) and stream == sp.decode(want)
        failures += not ok
        first_diff = next((j for j, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
        print(("ok   " if ok else "FAIL ") + f"{label} {len(s)} bytes {s[:40]!r}" +
              ("" if ok else f": {len(ids)} ids, want {len(want)}; first difference at {first_diff}: "
               f"{ids[first_diff:first_diff + 5]} want {want[first_diff:first_diff + 5]}; decode ok {dec == sp.decode(want)}, "
               f"stream ok {stream == sp.decode(want)}"))
    return failures


assert spm.SentencePieceProcessor(model_file=MODEL).encode("Hello world") == [15043, 3186], \
    "reference binding disagrees with README"
seed = random.randrange(1 << 30)
print("long texts from seed", seed)
failures = run(MODEL, STRINGS + long_texts(random.Random(seed)), "llama2")
failures += run(os.path.join(os.environ["BURST_MODELS_DIR"], "stories260K", "tokenizer.model"),
                long_texts(random.Random(seed + 1)), "stories260K")
# Tokenizers that cuts would break, trained here: one with pieces across spaces ("the▁ball"), one
# without the dummy prefix. burst must see it and encode their long texts whole.
rng = random.Random(seed + 2)
phrases = ["the ball", "Lily and Tom", "x = 1;", "return x", "she said"]  # not the words of burst's own check
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "train.txt"), "w") as f:
        f.write("\n".join(" ".join(rng.choice(phrases) for _ in range(6)) for _ in range(3000)))
    for name, opts in (("across spaces", {"split_by_whitespace": False}), ("no dummy prefix", {"add_dummy_prefix": False})):
        prefix = os.path.join(tmp, name.replace(" ", "_"))
        spm.SentencePieceTrainer.train(input=os.path.join(tmp, "train.txt"), model_prefix=prefix, vocab_size=120,
                                       hard_vocab_limit=False, model_type="bpe", minloglevel=2, **opts)
        failures += run(prefix + ".model", [" ".join(rng.choice(phrases) for _ in range(4000))], name)
sys.exit(1 if failures else 0)
