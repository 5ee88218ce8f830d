"""What the tokenizer tests share: SentencePiece's own Python binding (Debian python3-sentencepiece) as
the reference, the test skipped (77) where it is missing; burst's side through tests/tokenizer_tool
(and tests/json_tool), run on a file of their input by tool_lines; the LLaMA-2 tokenizer."""
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
