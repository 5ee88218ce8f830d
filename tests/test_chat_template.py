"""Chat templates (model/chat_template.c, through tests/tokenizer_tool --chat) against references
written from their makers' code, on the LLaMA-2 tokenizer with SentencePiece's Python binding:
llama-2 as Meta's llama/generation.py chat_completion builds it, vicuna as FastChat's get_prompt
(vicuna_v1.1) writes it and Hugging Face's slow tokenizer encodes it (BOS, "</s>" as EOS, the text
between encoded alone). Fixed conversations for the edges (system messages, whitespace, empty
texts), fresh random ones, and conversations the templates refuse. zephyr as Hugging Face's
apply_chat_template renders TinyLlama-Chat's Jinja template (jinja2, trim_blocks and lstrip_blocks),
each eos_token EOS and the text between encoded alone, as its legacy tokenizer does."""
import random, sys

from burstd_util import ZEPHYR_JINJA
from tokenizer_reference import MODEL, TOOL, spm, tool_lines

try:
    import jinja2
except ImportError:  # zephyr's reference renders Jinja: the other templates are still checked
    jinja2 = None
    print("zephyr: not checked (python3-jinja2 missing)")

sp = spm.SentencePieceProcessor(model_file=MODEL)
BOS, EOS = sp.bos_id(), sp.eos_id()
VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's questions.")


def llama2_ref(dialog):
    """Meta's chat_completion (llama/generation.py), the ids of one dialog."""
    B_INST, E_INST, B_SYS, E_SYS = "[INST]", "[/INST]", "<<SYS>>\n", "\n<</SYS>>\n\n"
    if dialog[0]["role"] in ("system", "developer"):
        dialog = [{"role": dialog[1]["role"], "content": B_SYS + dialog[0]["content"] + E_SYS + dialog[1]["content"]}] \
                 + dialog[2:]
    ids = []
    for prompt, answer in zip(dialog[::2], dialog[1::2]):
        ids += [BOS] + sp.encode(f"{B_INST} {(prompt['content']).strip()} {E_INST} {(answer['content']).strip()} ") + [EOS]
    return ids + [BOS] + sp.encode(f"{B_INST} {(dialog[-1]['content']).strip()} {E_INST}")


def vicuna_ref(dialog):
    """FastChat's get_prompt (ADD_COLON_TWO, sep " ", sep2 "</s>"), then the slow tokenizer's ids."""
    system = VICUNA_SYSTEM
    if dialog[0]["role"] in ("system", "developer"):
        system, dialog = dialog[0]["content"], dialog[1:]
    seps, ret = [" ", "</s>"], system + " "
    for i, m in enumerate(dialog + [{"content": None}]):
        role = ("USER", "ASSISTANT")[i % 2]
        ret += role + ": " + m["content"] + seps[i % 2] if m["content"] else role + ":"
    ids = [BOS]
    for j, part in enumerate(ret.split("</s>")):
        ids += ([EOS] if j else []) + sp.encode(part)
    return ids


def zephyr_ref(dialog):
    """TinyLlama-Chat's Jinja template rendered with apply_chat_template's options, then its ids."""
    dialog = [{**m, "role": "system" if m["role"] == "developer" else m["role"]} for m in dialog]
    text = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(ZEPHYR_JINJA).render(
        messages=dialog, eos_token="\0", add_generation_prompt=True)
    ids = [BOS]
    for j, part in enumerate(text.split("\0")):
        ids += ([EOS] if j else []) + sp.encode(part)
    return ids


def run(template, dialogs):
    """The tool's line for each dialog."""
    data = b"".join(b"".join(m["role"].encode() + b"\0" + m["content"].encode() + b"\0" for m in d) + b"\0"
                    for d in dialogs)
    return tool_lines([TOOL, MODEL, "--chat", template], data, len(dialogs))


def S(c): return {"role": "system", "content": c}
def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}
def T(c): return {"role": "tool", "content": c}  # a function's result: a user turn


def as_users(dialog):
    """The dialog with its tool messages as user messages, those in a row one (their texts a line each): the
    rule burst's templates add to the references."""
    out = []
    for m, before in zip(dialog, [None] + dialog):
        if m["role"] == "tool" and before and before["role"] == "tool":
            out[-1] = U(out[-1]["content"] + "\n" + m["content"])
        else:
            out.append(U(m["content"]) if m["role"] == "tool" else m)
    return out


FIXED = [
    [U("Tell me a story")],
    [S("Be brief."), U("Hi")],
    [S(" Be brief. "), U("Hi"), A("Hello!"), U("Story?")],  # the system text as it is, inside the block
    [{"role": "developer", "content": "Answer in French."}, U("Hello")],
    [U("  leading and trailing  \n"), A("\tanswer "), U("\nnext ")],
    [S("sys"), U("  kept after the block, stripped at the end  "), A("ok"), U("more")],
    [S("sys"), U(" \n\t ")],  # all whitespace: Meta's strip takes the block's "\n\n" too
    [U(""), A(""), U("empty texts")],
    [U("first"), A(""), U("an empty answer: no EOS in vicuna")],
    [U("naïve café — “quotes” 日本語 🦙"), A("line one\nline two"), U("x² ≥ 0")],
    [S(""), U("an empty system message")],
    [S("sys"), U("Weather in Paris?"), A('{"city": "Paris"}'), T("18 C, sunny"), A("Sunny."), T(" 19 C ")],
    [U("Weather and time?"), A('{"city": "Paris"}\n{"zone": "CET"}'), T("18 C"), T(""), T(" 14:00 "), A("ok"), U("thanks")],
]


def random_dialog(rng):
    words = ["the", "a", "Lily", "ball", "3.14", "x=1;", "é", "中", "🦙", "Hello", "world", "?", "[INST]", "USER:"]
    seps = [" "] * 8 + ["  ", "\n", " \n", "\t", ". "]
    def results():  # one or more in a row: parallel calls
        return [T(text()) for _ in range(rng.choice([1, 1, 2, 3]))]
    def text():
        return "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(0, 12))).strip(" ") \
            if rng.random() < 0.5 else " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
    turns = rng.randint(0, 3)
    dialog = [S(text())] if rng.random() < 0.5 else []
    for _ in range(turns):
        dialog += [U(text())] if rng.random() < 0.67 else results()
        dialog.append(A(text()))
    return dialog + ([U(text())] if rng.random() < 0.67 else results())


seed = random.randrange(1 << 30)
print("random dialogs from seed", seed)
rng = random.Random(seed)
dialogs = FIXED + [random_dialog(rng) for _ in range(200)]
failures = 0
for template, ref in (("llama-2", llama2_ref), ("vicuna", vicuna_ref), ("zephyr", zephyr_ref))[:3 if jinja2 else 2]:
    for i, (d, line) in enumerate(zip(dialogs, run(template, dialogs))):
        want = ref(as_users(d))
        got = [int(x) for x in line[4:].split()] if line.startswith("ids:") else line
        ok = got == want
        failures += not ok
        if i < len(FIXED) or not ok:
            print(("ok   " if ok else "FAIL ") + f"{template} dialog {i} ({len(d)} messages, {len(want)} ids)" +
                  ("" if ok else f": {got} want {want} for {d}"))
    print(f"{template}: {len(dialogs) - len(FIXED)} random dialogs checked")

# All refuse what is not an optional system message, then user and assistant alternating,
# ending with user, saying which message.
BAD = [([], "messages: 0 turns after the system message"),
       ([S("only a system message")], "messages: 0 turns after the system message"),
       ([U("a"), A("b")], "messages: 2 turns after the system message"),
       ([A("answer first")], "messages[0]: role 'assistant' (want 'user'"),
       ([S("s"), U("a"), U("b"), U("c")], "messages[2]: role 'user' (want 'assistant'"),
       ([U("a"), A("b"), S("late system")], "messages[2]: role 'system' (want 'user'"),
       ([U("a"), {"role": "tool", "content": "x"}, U("c")], "messages[1]: role 'tool' (want 'assistant'"),
       ([U("a"), A("b"), T("r"), T("s"), U("c")], "messages: 4 turns after the system message"),
       ([U("a"), A("b"), T("r"), T("s"), A("c"), A("d")], "messages[5]: role 'assistant' (want 'user'")]
for template in ("llama-2", "vicuna", "zephyr"):
    for (d, want), line in zip(BAD, run(template, [d for d, _ in BAD])):
        ok = line.startswith("E ") and want in line
        failures += not ok
        print(("ok   " if ok else "FAIL ") + f"{template} refuses {[m['role'] for m in d]}: {line}")
print(f"{failures} failures")
sys.exit(1 if failures else 0)
