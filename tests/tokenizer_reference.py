"""What the tokenizer and JSON tests share: SentencePiece's own Python binding (Debian
python3-sentencepiece) as the reference, the test skipped (77) where it is missing; burst's side
through tests/tokenizer_tool (and tests/json_tool), run on a file of their input by tool_lines; the
LLaMA-2 tokenizer and its tokens' texts; random one-byte edits."""
import os, subprocess, sys, tempfile

try:
    import sentencepiece as spm
except ImportError:
    print("skip: python3-sentencepiece missing")
    sys.exit(77)

TOOL = os.path.join(os.environ["BURST_BIN"], "tests", "tokenizer_tool")
MODEL = os.path.join(os.environ["BURST_MODELS_DIR"], "llama2-tokenizer", "tokenizer.model")


def tool_lines(args, data, n_lines):
    """The lines a test tool prints when run as args and a file holding data (bytes): n_lines of
    them, or the test fails here, saying why."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
    out = subprocess.run([*args, f.name], capture_output=True, text=True, timeout=300)
    os.unlink(f.name)
    lines = out.stdout.splitlines()
    if out.returncode or len(lines) != n_lines:
        sys.exit(f"FAIL {os.path.basename(args[0])}: rc {out.returncode}, {len(lines)} lines for {n_lines}: "
                 f"{out.stderr[-800:]}")
    return lines


def vocab_texts(sp):
    """Each token's text as decoded output holds it (bytes; None for control, unknown and unused
    pieces), as json_vocab_new reads the vocabulary."""
    def text(i):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i):
            return None
        p = sp.id_to_piece(i)
        return bytes([int(p[3:5], 16)]) if sp.is_byte(i) else p.replace("\u2581", " ").encode()
    return [text(i) for i in range(sp.get_piece_size())]


def one_byte_edits(rng, text, alphabet, n):
    """n random one-byte edits of text (bytes): an insertion, a replacement or a deletion, from alphabet."""
    out = []
    for _ in range(n):
        i = rng.randrange(len(text) + 1)
        c = bytes([rng.choice(alphabet)])
        out.append(rng.choice([text[:i] + c + text[i:], text[:i] + c + text[i + 1:], text[:i] + text[i + 1:]]))
    return out
