"""What the tokenizer tests share: SentencePiece's own Python binding (Debian python3-sentencepiece) as
the reference, the test skipped (77) where it is missing; burst's side through tests/tokenizer_tool;
the LLaMA-2 tokenizer."""
import os, sys

try:
    import sentencepiece as spm
except ImportError:
    print("skip: python3-sentencepiece missing")
    sys.exit(77)

TOOL = os.path.join(os.environ["BURST_BIN"], "tests", "tokenizer_tool")
MODEL = os.path.join(os.environ["BURST_MODELS_DIR"], "llama2-tokenizer", "tokenizer.model")
