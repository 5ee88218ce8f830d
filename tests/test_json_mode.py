"""JSON mode (response_format json_object; model/json_grammar.c) against a recursive-descent reference
written here: on strings (valid objects of fresh random shapes, their prefixes, random edits, and
edge cases) json_feed must take exactly the bytes the reference takes and call the same strings
whole; on the LLaMA-2 vocabulary json_mask must leave exactly the tokens whose text the reference
takes after a prefix. Then burstd: completions and chats in JSON mode are objects when they end at
EOS and objects' beginnings when cut by max_tokens, streamed as whole, the same with --speculate,
and the refusals."""
import json, os, random

from burstd_util import STORIES, Burstd, Checks, check_shaped, need_stories
from tokenizer_reference import MODEL, one_byte_edits, spm, tool_lines, vocab_texts

TOOL = os.path.join(os.environ["BURST_BIN"], "tests", "json_tool")
MAX_INDENT, MAX_DEPTH = 20, 64  # json_grammar.h's limits


class Invalid(Exception):
    pass


# UTF-8 as Python encodes it: each lead byte's sequence length, and the first two bytes of each
# character (surrogates have none).
UTF8_LEN, UTF8_PAIRS = {}, set()
for cp in range(0x80, 0x110000):
    if not 0xd800 <= cp < 0xe000:
        e = chr(cp).encode()
        UTF8_LEN[e[0]] = len(e)
        UTF8_PAIRS.add(e[:2])


def reference(text):
    """(bytes taken, whole object): a recursive-descent parse of one object (RFC 8259, its strings
    UTF-8) that stops at the first byte nothing valid can follow, with the limits on whitespace runs and
    depth."""
    pos, depth = 0, 0

    def peek():
        return text[pos] if pos < len(text) else None  # None: the text ends here, still a prefix

    def take(c):
        nonlocal pos
        if peek() is None:
            raise EOFError
        if peek() != c:
            raise Invalid
        pos += 1

    def spaces():
        """Nothing, one space, or a newline and up to MAX_INDENT spaces or tabs."""
        nonlocal pos
        if peek() == ord(" "):
            pos += 1
        elif peek() == ord("\n"):
            pos += 1
            for _ in range(MAX_INDENT):
                if peek() is None or peek() not in b" \t":
                    break
                pos += 1
        if peek() is not None and peek() in b" \t\n\r":
            raise Invalid

    def digits(at_least_one):
        nonlocal pos
        if at_least_one and peek() is None:
            raise EOFError
        if at_least_one and not (peek() is not None and 48 <= peek() <= 57):
            raise Invalid
        while peek() is not None and 48 <= peek() <= 57:
            pos += 1

    def number():
        nonlocal pos
        if peek() == ord("-"):
            pos += 1
        if peek() is None:
            raise EOFError
        if peek() == ord("0"):
            pos += 1
        else:
            digits(True)
        if peek() == ord("."):
            pos += 1
            digits(True)
        if peek() is not None and peek() in b"eE":
            pos += 1
            if peek() is not None and peek() in b"+-":
                pos += 1
            digits(True)
        if peek() is None:
            raise EOFError  # more digits, or a delimiter, may follow

    def string():
        nonlocal pos
        take(ord('"'))
        while True:
            c = peek()
            if c is None:
                raise EOFError
            pos += 1
            if c == ord('"'):
                return
            if c < 0x20 or (c >= 0x80 and c not in UTF8_LEN):
                pos -= 1
                raise Invalid
            if c >= 0x80:  # the rest of a UTF-8 character: its second byte as some character has it, then any
                for k in range(1, UTF8_LEN[c]):
                    d = peek()
                    if d is None:
                        raise EOFError
                    if not (bytes([c, d]) in UTF8_PAIRS if k == 1 else 0x80 <= d < 0xc0):
                        raise Invalid
                    pos += 1
            if c == ord("\\"):
                e = peek()
                if e is None:
                    raise EOFError
                if e == ord("u"):
                    pos += 1
                    for _ in range(4):
                        h = peek()
                        if h is None:
                            raise EOFError
                        if h not in b"0123456789abcdefABCDEF":
                            raise Invalid
                        pos += 1
                elif e in b'"\\/bfnrt':
                    pos += 1
                else:
                    raise Invalid

    def container(close, item):
        nonlocal pos, depth
        if depth == MAX_DEPTH:
            raise Invalid
        depth += 1
        pos += 1
        spaces()
        if peek() == close:
            pos += 1
        else:
            while True:
                item()
                spaces()
                if peek() is None:
                    raise EOFError
                if peek() == close:
                    pos += 1
                    break
                take(ord(","))
                spaces()
        depth -= 1

    def member():
        if peek() is None:
            raise EOFError
        string()
        spaces()
        take(ord(":"))
        spaces()
        value()

    def value():
        nonlocal pos
        c = peek()
        if c is None:
            raise EOFError
        if c == ord("{"):
            container(ord("}"), member)
        elif c == ord("["):
            container(ord("]"), lambda: (spaces(), value()))
        elif c == ord('"'):
            string()
        elif c == ord("-") or 48 <= c <= 57:
            number()
        else:
            for word in (b"true", b"false", b"null"):
                if c == word[0]:
                    for w in word:
                        take(w)
                    return
            raise Invalid

    try:
        spaces()
        if peek() is None:
            raise EOFError
        if peek() != ord("{"):
            raise Invalid
        value()
        return pos, pos == len(text)  # (bytes after the object are refused: pos stops there)
    except EOFError:
        return len(text), False
    except Invalid:
        return pos, False


def random_value(rng, depth):
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice([True, False, None])
    if kind == 1:
        return rng.choice([0, -1, 7, 12345678901234, -0.5, 3.25e-7, 1e300, 0.0, rng.uniform(-1e6, 1e6)])
    if kind in (2, 3):
        return "".join(rng.choice(["a", "Lily", " ", "\"", "\\", "/", "\n", "\t", "é", "🦙", "\u0001", "}", "]", ",:"])
                       for _ in range(rng.randrange(8)))
    if kind in (4, 5):
        return {random_key(rng): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def random_key(rng):
    return rng.choice(["name", "a b", "", "ключ", "x\"y", "\\", "n1"]) + str(rng.randrange(100))


def random_object(rng):
    obj = {random_key(rng): random_value(rng, 1) for _ in range(rng.randrange(5))}
    indent = rng.choice([None, None, 0, 1, 2])
    seps = rng.choice([(",", ":"), (", ", ": "), (" ,", " : ")]) if indent is None else (",", ": ")  # (", \n": two)
    text = json.dumps(obj, indent=indent, separators=seps, ensure_ascii=rng.random() < 0.5)
    return (rng.choice(["", " ", "\n", "\n  "]) + text).encode()


EDIT_BYTES = b'{}[]":,\\ \n\t0123456789-+.eEtrufalsn\x00\x1f\x7f\xc3\x80\xa0\xed\xf0'  # edits' bytes: those JSON reads


EDGES = [b"", b" ", b"{", b"{}", b" {}", b"{} ", b"{}{}", b"[]", b'"a"', b"1", b"true", b'{"a":1}', b'{"a":01}',
         b'{"a":-}', b'{"a":-0}', b'{"a":1.}', b'{"a":1.5e}', b'{"a":1e+5}', b'{"a":1E-05}', b'{"a":.5}', b'{"a":+1}',
         b'{"a":tru}', b'{"a":true}', b'{"a":nul', b'{"a":nulL}', b'{"a":"\\u00zz"}', b'{"a":"\\u00e9"}',
         b'{"a":"\\x"}', b'{"a":"\x01"}', b'{"a":"\x7f\xc3\xa9"}', b'{"a":"\xc3"}', b'{"a":"\xc3\xa9',
         b'{"a":"\xe0\x80\x80"}', b'{"a":"\xe0\xa0\x80"}',
         b'{"a":"\xed\xa0\x80"}', b'{"a":"\xed\x9f\xbf"}', b'{"a":"\xf4\x90\x80\x80"}', b'{"a":"\xf4\x8f\xbf\xbf"}',
         b'{"a":"\xf0\x9f\xa6\x99"}', b'{"a":"\xf0\x8f\xbf\xbf"}', b'{"a":"\xc0\xaf"}', b'{"a":"\x80"}', b'{"a":"\xf5"}',
         b'{"\xff":1}', b'{"a"}', b'{"a":}', b'{"a":1,}', b'{,}',
         b'{"a":[1,]}', b'{"a":[,1]}', b'{"a":[]}', b'{"a":{}}', b'{1:2}', b'{"a" : 1 , "b" : [ true , null ] }',
         b"{\n" + b" " * MAX_INDENT + b"}", b"{\n" + b"\t " * (MAX_INDENT // 2) + b" }", b"{  }", b"{\n\n}", b"{ \n}",
         b"{\t}", b"{\r\n}", b"\n  {}", b"  {}",
         b'{"a":' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}",
         b'{"a":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}", b'{"a":"\\', b'{"a":"\\u12', b'{"a":1', b'{"a":-']


def run(args, strings):
    return tool_lines([TOOL, *args], b"\0".join(strings) + b"\0", len(strings))


check = Checks()
seed = random.randrange(1 << 30)
print("random objects from seed", seed)
rng = random.Random(seed)
objects = [random_object(rng) for _ in range(300)]
strings = EDGES + objects + [o[:rng.randrange(len(o) + 1)] for o in objects] + \
    [e for o in objects[:150] for e in one_byte_edits(rng, o, EDIT_BYTES, 6)]
strings = [s for s in strings if b"\0" not in s]  # (the tool's separator; NUL bytes come from the edits' alphabet)
bad = []
for s, line in zip(strings, run(["feed"], strings)):
    got = tuple(int(x) for x in line.split()[:2])
    want = reference(s)
    if got != (want[0], int(want[1])):
        bad.append((s, got, want))
check(f"json_feed takes the reference's bytes and wholes on {len(strings)} strings ({len(EDGES)} edge cases, "
        f"{len(objects)} random objects, their prefixes and edits)", not bad, bad[:5])
whole = sum(reference(o)[1] for o in objects)
check("... every random object is whole (json.dumps wrote them)", whole == len(objects), whole)

# The mask on LLaMA-2's vocabulary: the tokens whose text the reference takes whole after each prefix.
sp = spm.SentencePieceProcessor(model_file=MODEL)
texts = vocab_texts(sp)
prefixes = [b"", b" {", b'{"na', b'{"a": ', b'{"a": 1', b'{"a": "x\\', b'{"a": [tr', b'{"a": {"b": [1, 2]}', b'{"a": 1}']
for prefix, line in zip(prefixes, run(["mask", MODEL], prefixes)):
    got = {int(x) for x in line.split()}
    whole = reference(prefix)[1]
    want = {i for i, t in enumerate(texts) if t and not whole and reference(prefix + t) == (len(prefix + t), reference(prefix + t)[1])}
    if whole:
        want = {sp.eos_id()}
    check(f"json_mask after {prefix!r}: {len(got)} tokens left, the reference's", got == want,
            (sorted(got - want)[:10], sorted(want - got)[:10]))

# burstd: JSON mode on stories260K. A bias toward '"' and "}" (a byte token of its vocabulary)
# ends some objects early; the others are cut by max_tokens and must still begin an object.
need_stories()
stories_sp = spm.SentencePieceProcessor(model_file=os.path.join(STORIES, "tokenizer.model"))
quote, close = stories_sp.piece_to_id('"'), stories_sp.piece_to_id("<0x7D>")
ends = {str(quote): 10, str(close): 30}
with Burstd(STORIES) as srv, Burstd(STORIES, "--speculate", "4") as spec:
    fmt = {"response_format": {"type": "json_object"}}
    bodies = [{"prompt": "Once upon a time", "temperature": 0}, {"prompt": "Once upon a time", "temperature": 1, "seed": 5},
              {"prompt": "Lily", "temperature": 0.8, "seed": 9, "logit_bias": ends},
              {"prompt": "Tom", "temperature": 0, "logit_bias": ends},
              {"prompt": "A", "temperature": 1.2, "seed": 3, "top_p": 0.9, "n": 2, "logit_bias": ends}]
    stops, _ = check_shaped(check, srv, spec, fmt, bodies, 120, lambda t: isinstance(json.loads(t), dict),
                            lambda t: reference(t.encode()) == (len(t.encode()), False), "in JSON mode")
    check("some completions ended their object at EOS", stops >= 2, stops)
    chat = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 60, "temperature": 0,
            "logit_bias": ends, **fmt}
    st, _, r = srv.request("POST", "/v1/chat/completions", chat)
    msg = r["choices"][0]["message"]["content"] if st == 200 else ""
    check("chat in JSON mode: an object", st == 200 and r["choices"][0]["finish_reason"] == "stop"
            and isinstance(json.loads(msg), dict), r)
    for body, want in [({"response_format": {"type": "json_object"}, "ignore_eos": True}, "not with 'ignore_eos'"),
                       ({"response_format": {"type": "json_schema", "json_schema": {}}}, "holding the 'schema'"),
                       ({"response_format": {"type": "xml"}}, "'response_format' must be"),
                       ({"response_format": "json_object"}, "'response_format' must be")]:
        st, _, r = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, **body})
        check(f"{body}: 400", st == 400 and want in r["error"]["message"], (st, r))
check.exit()
