"""Structured outputs (response_format json_schema; model/json_schema.c, json_pattern.c,
json_grammar.c) against jsonschema (Debian python3-jsonschema) as the reference, with Python's own
parsers for formats (fromisoformat, uuid.UUID) and its re for patterns, on fresh random schemas
(bounds, formats, patterns, alternatives that begin alike or not, tagged unions, $refs among
them): every text the grammar takes whole
(random walks through it, which must never reach a text no byte continues, and one-byte edits of
instances) is an instance; instances written in the grammar's one form (properties in the schema's
order, whitespace as JSON mode allows) are taken whole and each prefix is taken; violations of each
keyword are refused, bounds at the first digit no number in range begins with; schemas beyond the
subset are refused, naming why; json_mask leaves exactly the LLaMA-2 tokens json_feed takes. Then
burstd: completions and chats with a schema are instances when they end at EOS and an instance's
beginning when cut by max_tokens, streamed as whole, the same under --speculate and from burst
generate --json-schema; named function calls carry the schema's answer as their arguments; the 400s."""
import datetime, email.errors, email.headerregistry, ipaddress, json, math, os, random, re, string, subprocess, sys
import tempfile, urllib.parse, uuid

from burstd_util import BIN, STORIES, Burstd, Checks, check_shaped, generate, need_stories
from tokenizer_reference import MODEL, one_byte_edits, spm, tool_lines, vocab_texts

try:
    import jsonschema
except ImportError:
    print("skip: python3-jsonschema missing")
    sys.exit(77)

TOOL = os.path.join(os.environ["BURST_BIN"], "tests", "json_tool")
MAX_INDENT = 20  # json_grammar.h's

NAMES = ["name", "age", "a b", "ключ", 'x"y', "\\", "", "tags", "n1", "é", "nam"]
VALUES = ["a", "b", "ab", 'q"', "é", "x\ny", "", 1, 12, -3, 0, 1.5, True, False, None, {"k": [1, 2]}, [], {}]
CHARS = ["a", "L", " ", '"', "\\", "/", "\n", "é", "🦙", "\u0001", "}", ","]
SCALARS = ["string", "integer", "number", "boolean", "null"]
NODE = {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                                     {"type": "null"}]}},
        "required": ["v"], "additionalProperties": False}
LABEL = "[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?"  # a host name's label as json_schema.c writes it


def is_email(text):
    """RFC 5321's length and Python's parse of an address (addr-spec)."""
    try:
        return len(text) <= 254 and email.headerregistry.Address(addr_spec=text) is not None
    except (ValueError, email.errors.MessageError):
        return False


def is_hostname(text):
    """RFC 1123: labels of 1 to 63 letters, digits and inner hyphens; at most 253 characters."""
    return len(text) <= 253 and all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", label)
                                    for label in text.split("."))


def is_uri(text):
    """An http(s) URI as Python splits it: a host name, a port if any, at most 2083 characters (Pydantic's HttpUrl)."""
    parts = urllib.parse.urlsplit(text)
    return len(text) <= 2083 and parts.scheme in ("http", "https") and is_hostname(parts.hostname or "-") \
        and (parts.port is None or 0 < parts.port < 65536) and text.isprintable() and " " not in text


FORMATS = {  # format: the form json_schema.h gives it, then Python's own parser as the judge
    "date": (r"\d{4}-\d{2}-\d{2}", datetime.date.fromisoformat),
    "time": (r"\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})",
             lambda t: datetime.time.fromisoformat(t.replace("Z", "+00:00"))),
    "date-time": (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})",
                  lambda t: datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))),
    "uuid": (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid.UUID),
    "email": (r"[a-z0-9]+([._+-][a-z0-9]+)*@" + LABEL + r"(\." + LABEL + ")+", is_email),
    "hostname": (LABEL + r"(\." + LABEL + ")*", is_hostname),
    "ipv4": (r"(\d+\.){3}\d+", ipaddress.IPv4Address),
    "uri": (r"https?://" + LABEL + r"(\." + LABEL + r")*(:\d+)?[^#\s]*", is_uri)}


def format_holds(form, parse):
    """A format checker: whether a string is in the form json_schema.h gives the format and Python's
    own parser takes it (jsonschema has no date-time checker here)."""
    def holds(value):
        try:
            return not isinstance(value, str) or (re.fullmatch(form, value) is not None and bool(parse(value)))
        except ValueError:
            return False
    return holds


FORMAT_CHECKER = jsonschema.FormatChecker(())
for name, (form, parse) in FORMATS.items():
    FORMAT_CHECKER.checks(name)(format_holds(form, parse))


def validator_of(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


PRINTABLE = [chr(c) for c in range(0x20, 0x7f) if chr(c) not in '"\\']  # what a pattern's text may hold
ATOMS = {"a": "a", "b": "b", "-": "-", r"\.": ".", r"\d": "0123456789", r"\w": string.ascii_letters + string.digits + "_",
         "[a-c]": "abc", "[x-z0-2]": "xyz012", "[^a-z]": [c for c in PRINTABLE if not c.islower()],
         ".": PRINTABLE + ["é", "🦙"],
         r"\s": " ", "[_%+]": "_%+"}
QUANTIFIERS = {"": (1, 1), "*": (0, 3), "+": (1, 3), "?": (0, 1), "{2}": (2, 2), "{1,3}": (1, 3), "{0,2}": (0, 2), "{2,}": (2, 4),
               "*?": (0, 2)}
PATTERNS = {}  # an anchored pattern: a function drawing a random match of it


def random_pattern(rng, depth=0):
    """(a regular expression, a function drawing a random match of it) of atoms, groups and quantifiers."""
    parts = []
    for _ in range(rng.randint(1, 3)):
        if depth == 0 and rng.random() < 0.3:
            alts = [random_pattern(rng, 1) for _ in range(rng.randint(1, 3))]
            regex, draw = "(" + ("?:" if rng.random() < 0.5 else "") + "|".join(a[0] for a in alts) + ")", \
                (lambda alts: lambda r: r.choice(alts)[1](r))(alts)
        else:
            regex = rng.choice(sorted(ATOMS))
            draw = (lambda chars: lambda r: r.choice(chars))(ATOMS[regex])
        q = rng.choice(sorted(QUANTIFIERS))
        parts.append((regex + q, (lambda draw, lo, hi: lambda r: "".join(draw(r) for _ in range(r.randint(lo, hi))))(
            draw, *QUANTIFIERS[q])))
    return "".join(p[0] for p in parts), lambda r: "".join(p[1](r) for p in parts)


def dump(v):
    """v as cJSON prints it unformatted (the form enum values take)."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def random_schema(rng, depth, refs):
    kinds = SCALARS + ["string", "enum", "const", "nullable"] + (["object"] * 3 + ["array", "anyof", "alike", "tagged"]
                                                               if depth < 3 else [])
    kind = rng.choice(kinds + (["ref"] if refs else []))
    if kind == "string":
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["minLength"] = rng.randrange(4)
        if rng.random() < 0.5:
            s["maxLength"] = s.get("minLength", 0) + rng.randrange(6)
        return s
    if kind == "number" and rng.random() < 0.5:
        lo = rng.choice([0, -1, 0.1, -50.5, 1e-6, 1000])
        return {"type": "number", "minimum": lo, rng.choice(["maximum", "exclusiveMaximum"]): lo + rng.choice([0.5, 1, 3.25, 1e6])}
    if kind == "integer" and rng.random() < 0.2:
        # (small: a walk draws digits until the number is a multiple)
        return {"type": rng.choice(["integer", ["integer", "null"]]), "multipleOf": rng.choice([1, 2, 3, 7, 10, 12])}
    if kind == "integer" and rng.random() < 0.5:
        s = {"type": "integer"}
        lo = rng.choice([0, -3, 7, -1000, 12345, 2.5, -0.5])
        for key in rng.sample(["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"], rng.randrange(1, 3)):
            s[key] = lo if key.lower().endswith("minimum") else lo + rng.choice([0, 1, 2, 9, 10, 99, 1000, 10 ** 9])
        return s if integer_bounds(s)[0] <= integer_bounds(s)[1] else {"type": "integer", "minimum": lo}
    if kind == "string" and rng.random() < 0.3:
        return {"type": "string", "format": rng.choice(sorted(FORMATS))}
    if kind == "string" and rng.random() < 0.3:
        regex, draw = random_pattern(rng)
        PATTERNS["^" + regex + "$"] = draw
        s = {"type": "string", "pattern": "^" + regex + "$"}
        if rng.random() < 0.5:  # lengths beside it, around a match's (an example: one string of them)
            example = draw(rng)
            s.update(minLength=max(0, len(example) - rng.randrange(3)), maxLength=len(example) + rng.randrange(3),
                     examples=[example])
        return s
    if kind in SCALARS:
        return {"type": kind}
    if kind == "enum":
        s = {"enum": rng.sample(VALUES, rng.randrange(1, 6))}
        if rng.random() < 0.3 and any(isinstance(v, str) for v in s["enum"]):
            s["type"] = "string"
        return s
    if kind == "const":
        return {"const": rng.choice(VALUES), "description": "one value"}
    if kind == "nullable":
        return {"type": [rng.choice(SCALARS[:4]), "null"]}
    if kind == "ref":
        return {"$ref": "#/$defs/node"}
    if kind == "array" and rng.random() < 0.3:  # a tuple (Pydantic's tuple[int, str]: minItems = maxItems = its length)
        s = {"type": "array", "prefixItems": [random_schema(rng, depth + 1, refs) for _ in range(rng.randrange(4))]}
        s["items"] = rng.choice([False, {"type": "integer"}, True])
        if rng.random() < 0.5:
            s["minItems"] = s["maxItems"] = len(s["prefixItems"])
        return s
    if kind == "array":
        s = {"type": "array", "items": random_schema(rng, depth + 1, refs)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randrange(3)
        if rng.random() < 0.5:
            s["maxItems"] = s.get("minItems", 0) + rng.randrange(4)
        return s
    if kind == "anyof":
        alts = [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"},
                {"type": "array", "items": {"type": "integer"}}, random_object(rng, depth + 1, refs)]
        return {rng.choice(["anyOf", "oneOf"]): rng.sample(alts, rng.randrange(1, 4)), "title": "alternatives"}
    if kind == "alike":  # alternatives that begin alike: the grammar follows each
        alts = [{"type": "string", "maxLength": 2}, {"enum": ["a", "abc", 12, None]}, {"type": "string", "format": "date"},
                {"type": "integer", "maximum": 5}, {"type": "number", "minimum": 0.5, "maximum": 100},
                {"type": ["integer", "null"]}, {"type": "array", "items": {"type": "string"}, "minItems": 1},
                {"type": "array", "items": {"type": "integer"}}, random_object(rng, depth + 1, refs),
                random_object(rng, depth + 1, refs)]
        return {"anyOf": rng.sample(alts, rng.randrange(2, 5))}
    if kind == "tagged":
        return tagged_union(rng, depth, refs)
    return random_object(rng, depth, refs)


def tagged_union(rng, depth, refs):
    """oneOf objects told apart by a constant string each requires (Pydantic's discriminated union)."""
    alts = []
    for tag in rng.sample(["cat", "dog", "c", "", "é"], rng.randrange(2, 4)):
        o = random_object(rng, depth + 1, refs)
        props = list(o.get("properties", {}).items())
        props.insert(rng.randrange(len(props) + 1), ("kind", rng.choice([{"const": tag, "type": "string"},
                                                                         {"enum": [tag, tag + "s"]}])))
        o.update(type="object", properties=dict(props), required=o.get("required", []) + ["kind"])
        alts.append(o)
    return {"oneOf": alts, "discriminator": {"propertyName": "kind"}}


def integer_bounds(s):
    """An integer schema's range, inclusive."""
    lo = max(math.ceil(s.get("minimum", -2 ** 53)), math.floor(s.get("exclusiveMinimum", -2 ** 53 - 1)) + 1)
    hi = min(math.floor(s.get("maximum", 2 ** 53)), math.ceil(s.get("exclusiveMaximum", 2 ** 53 + 1)) - 1)
    return lo, hi


def random_object(rng, depth, refs):
    names = rng.sample(NAMES, rng.randrange(0 if depth else 1, 6))
    s = {"type": "object", "properties": {n: random_schema(rng, depth + 1, refs) for n in names}}
    s["required"] = rng.sample(names, rng.randrange(len(names) + 1))
    if rng.random() < 0.7:
        s["additionalProperties"] = False
    if not names and rng.random() < 0.5:
        del s["properties"], s["required"]
        s["additionalProperties"] = rng.choice([False, True, {"type": "integer"}])
    return s


def top_schema(rng):
    refs = rng.random() < 0.3
    s = random_object(rng, 0, refs)
    if refs:
        s["$defs"] = {"node": NODE}
    return s


def ws(rng):
    """Whitespace between tokens as the grammar allows it."""
    return rng.choice([b"", b"", b" ", b"\n" + bytes(rng.choice(b" \t") for _ in range(rng.randrange(MAX_INDENT + 1)))])


def container(rng, open_, close, items):
    if not items:
        return open_ + ws(rng) + close
    return open_ + ws(rng) + (ws(rng) + b"," + ws(rng)).join(items) + ws(rng) + close


def instance(rng, s, top, depth=0):
    """A random instance of schema s, as the grammar writes it."""
    if s is True or s == {}:
        return dump(rng.choice([1, "a", None, [True]]))
    if "$ref" in s:
        return instance(rng, top["$defs"][s["$ref"].split("/")[-1]], top, depth + 1)
    if "enum" in s or "const" in s:
        values = s["enum"] if "enum" in s else [s["const"]]
        return dump(rng.choice([v for v in values if "type" not in s or isinstance(v, str)]))
    alts = s.get("anyOf", s.get("oneOf"))
    if alts:
        nulls = [a for a in alts if a.get("type") == "null"]
        return instance(rng, nulls[0] if nulls and depth > 5 else rng.choice(alts), top, depth + 1)
    t = rng.choice(s["type"]) if isinstance(s["type"], list) else s["type"]
    if t == "object":
        props, req = s.get("properties", {}), s.get("required", [])
        parts = [dump(n) + ws(rng) + b":" + ws(rng) + instance(rng, p, top, depth + 1)
                 for n, p in props.items() if n in req or (depth < 5 and rng.random() < 0.5)]
        extra = s.get("additionalProperties", True)
        if not props and extra is not False:
            parts = [dump(k) + b":" + ws(rng) + instance(rng, extra, top, depth + 1) for k in rng.sample(NAMES, rng.randrange(3))]
        return container(rng, b"{", b"}", parts)
    if t == "array":
        lo, prefix = s.get("minItems", 0), s.get("prefixItems", [])
        hi = min(s.get("maxItems", lo + 3), len(prefix) if s.get("items", True) is False else lo + 3)
        n = rng.randint(lo, hi)
        return container(rng, b"[", b"]", [instance(rng, prefix[i] if i < len(prefix) else s.get("items", True), top, depth + 1)
                                           for i in range(n)])
    if t == "string" and "pattern" in s:
        lo, hi = s.get("minLength", 0), s.get("maxLength", 1 << 30)
        return dump(next((t for t in (PATTERNS[s["pattern"]](rng) for _ in range(100)) if lo <= len(t) <= hi),
                         s.get("examples", [""])[0]))
    if t == "string" and "format" in s:
        when = datetime.datetime(1, 1, 1) + datetime.timedelta(seconds=rng.randrange(315537897600))
        if rng.random() < 0.2:
            when = datetime.datetime(rng.choice([2000, 2024, 1904]), 2, 29, 23, 59, 59)
        frac = rng.choice(["", "." + str(rng.randrange(10 ** 6)).zfill(rng.randint(1, 6))[:rng.randint(1, 6)]])
        zone = rng.choice(["Z", "+05:30", "-00:00", "+23:59", "-12:00"])
        date, time = f"{when.year:04d}-{when.month:02d}-{when.day:02d}", when.strftime("%H:%M:%S") + frac + zone
        def label():
            return "".join(rng.choice(string.ascii_lowercase + string.digits + "-" * (0 < i < 15)) for i in range(
                rng.randint(1, 16))).strip("-") or "x"
        host = ".".join(label() for _ in range(rng.randint(1, 3)))
        return dump({"date": date, "time": time, "date-time": date + "T" + time,
                     "uuid": str(uuid.UUID(int=rng.randrange(1 << 128))),
                     "email": rng.choice(["a", "b.c", "d_e+f"]) + "@" + host + "." + label(), "hostname": host,
                     "ipv4": ".".join(str(rng.randrange(256)) for _ in range(4)),
                     "uri": rng.choice(["http", "https"]) + "://" + host + rng.choice(["", ":8080"]) +
                            rng.choice(["", "/", "/a/b.html", "/x?q=1&r=s"])}[s["format"]])
    if t == "string":
        lo = s.get("minLength", 0)
        return dump("".join(rng.choice(CHARS) for _ in range(rng.randint(lo, s.get("maxLength", lo + 6)))))
    if t == "integer" and "multipleOf" in s:
        return dump(s["multipleOf"] * rng.choice([0, 1, -3, rng.randrange(-10 ** 6, 10 ** 12)]))
    if t == "integer":
        lo, hi = integer_bounds(s)
        return dump(rng.choice([max(lo, min(hi, v)) for v in (0, -7, 10, rng.randrange(-10**6, 10**12))] +
                               [rng.randint(lo, min(hi, lo + 10**6)), rng.randint(max(lo, hi - 10**6), hi)]))
    if t == "number" and "minimum" in s:  # (random_schema's bounds: a minimum and a maximum; well inside them)
        k = rng.randint(math.ceil(s["minimum"] * 1e6) + 1, math.floor(s.get("maximum", s.get("exclusiveMaximum")) * 1e6) - 1)
        text = f"{'-' if k < 0 else ''}{abs(k) // 10 ** 6}.{abs(k) % 10 ** 6:06d}".rstrip("0").rstrip(".")
        return text.encode()
    if t == "number":
        return dump(rng.choice([0, -2, 3.25, -0.5, 1e-07, 6.02e23, rng.uniform(-100, 100)]))
    return dump(rng.choice([True, False]) if t == "boolean" else None)


EDIT_BYTES = b'{}[]":,\\ \n0123456789-.etrufalsn'  # edits' bytes: those JSON reads


def schema_file(schema):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(schema, f)
    f.close()
    return f.name


def feed(schema_path, strings, alive=False):
    """(bytes taken, whole) of each string; alive: and the grammar's branches alive after them."""
    lines = tool_lines([TOOL, "feed", schema_path], b"\0".join(strings) + b"\0", len(strings))
    return [tuple(int(x) for x in line.split()[:3 if alive else 2]) for line in lines]


def is_instance(validator, text):
    """Whether text is an instance of the validator's schema, its formats held."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return validator.is_valid(value)


check = Checks()
seed = int(os.environ.get("SEED", random.randrange(1 << 30)))  # SEED=n reruns a run
print("random schemas from seed", seed)
rng = random.Random(seed)
n_walks = n_instances = n_edits = 0
bad_walks, bad_instances, bad_prefixes, bad_edits = [], [], [], []
n_too_large = 0
for _ in range(60):
    schema = top_schema(rng)
    path = schema_file(schema)
    while "'pattern' has more than" in subprocess.run([TOOL, "schema", path], capture_output=True, text=True).stdout:
        os.unlink(path)
        n_too_large += 1  # (unrolled quantifiers past its 63 places: refused, as the refusals below check)
        schema = top_schema(rng)
        path = schema_file(schema)
    validator = validator_of(schema)
    walks = subprocess.run([TOOL, "walk", path, str(rng.randrange(1 << 30)), "12"], capture_output=True, timeout=120)
    texts = walks.stdout.split(b"\0")[:-1]
    n_walks += len(texts)
    bad_walks += [(schema, walks.stderr, t) for t in texts if not is_instance(validator, t)] + \
                 ([(schema, walks.returncode, walks.stderr)] if walks.returncode or len(texts) != 12 else [])
    instances = [instance(rng, schema, schema) for _ in range(8)]
    n_instances += len(instances)
    bad_instances += [(schema, t) for t in instances if not is_instance(validator, t)]  # (the writer's own check)
    prefixes = [t[:rng.randrange(len(t) + 1)] for t in instances]
    changed = [e for t in instances for e in one_byte_edits(rng, t, EDIT_BYTES, 4) if b"\0" not in e]
    n_edits += len(changed)
    got = feed(path, instances + prefixes + changed)
    bad_instances += [(schema, t, g) for t, g in zip(instances, got) if g != (len(t), 1)]
    bad_prefixes += [(schema, p, g) for p, g in zip(prefixes, got[len(instances):]) if g[0] != len(p)]
    bad_edits += [(schema, e, g) for e, g in zip(changed, got[2 * len(instances):]) if g[1] and not is_instance(validator, e)]
    os.unlink(path)
print(f"({n_too_large} schemas drawn again: a pattern too large)")
check(f"{n_walks} random walks through 60 random schemas' grammars: each an instance (jsonschema)", not bad_walks,
      [b[-1] for b in bad_walks[:3]])
check(f"{n_instances} random instances in the grammar's form: each taken whole", not bad_instances, bad_instances[:3])
check("... and a random prefix of each taken", not bad_prefixes, bad_prefixes[:3])
check(f"{n_edits} one-byte edits of them: those taken whole are instances", not bad_edits, bad_edits[:3])

# Violations of each kind of constraint, refused (not whole), beside their fixes, taken whole.
PERSON = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 3},
                                           "age": {"type": "integer"}, "kind": {"enum": ["cat", "dog", 7]},
                                           "tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
                                           "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
          "required": ["name", "kind"]}
V = {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"]}
CASES = [(PERSON, b'{"name":"ab","kind":"cat"}', 1), (PERSON, b'{"kind":"cat"}', 0), (PERSON, b'{"name":"ab"}', 0),
         (PERSON, b'{"name":"","kind":"cat"}', 0), (PERSON, b'{"name":"abcd","kind":"cat"}', 0),
         (PERSON, b'{"name":"\xc3\xa9\xc3\xa9\\n","kind":"cat"}', 1), (PERSON, b'{"name":"ab","kind":"cow"}', 0),
         (PERSON, b'{"name":"ab","kind":7}', 1), (PERSON, b'{"name":"ab","kind":70}', 0),
         (PERSON, b'{"name":"ab","kind":"ca"}', 0), (PERSON, b'{"name":"ab","age":1.5,"kind":"dog"}', 0),
         (PERSON, b'{"name":"ab","age":-15,"kind":"dog"}', 1), (PERSON, b'{"name":"ab","age":1e3,"kind":"dog"}', 0),
         (PERSON, b'{"kind":"dog","name":"ab"}', 0), (PERSON, b'{"name":"ab","kind":"dog","extra":1}', 0),
         (PERSON, b'{"name":"ab","name":"cd","kind":"dog"}', 0),
         (PERSON, b'{"name":"ab","kind":"dog","tags":[]}', 0), (PERSON, b'{"name":"ab","kind":"dog","tags":[true]}', 1),
         (PERSON, b'{"name":"ab","kind":"dog","tags":[true,false,true]}', 0),
         (PERSON, b'{"name":"ab","kind":"dog","tags":[1]}', 0), (PERSON, b'{"name":"ab","kind":"dog","note":null}', 1),
         (PERSON, b'{"name":"ab","kind":"dog","note":"x"}', 1), (PERSON, b'{"name":"ab","kind":"dog","note":3}', 0),
         (PERSON, b'{"name":"ab","kind":"dog","note":null} ', 0),
         ({"type": "object", "additionalProperties": False}, b"{}", 1),
         ({"type": "object", "additionalProperties": False}, b'{"a":1}', 0),
         ({"type": "object", "additionalProperties": {"type": "integer"}}, b'{"a":1,"b":2}', 1),
         ({"type": "object", "additionalProperties": {"type": "integer"}}, b'{"a":"x"}', 0),
         ({"type": "object", "properties": {"x": {"const": {"k": [1, 2]}}}}, b'{"x":{"k":[1,2]}}', 1),
         ({"type": "object", "properties": {"x": {"const": {"k": [1, 2]}}}}, b'{"x":{"k": [1,2]}}', 0),
         ({"$defs": {"node": NODE}, "$ref": "#/$defs/node"}, b'{"v":1,"next":{"v":2,"next":null}}', 1),
         ({"$defs": {"node": NODE}, "$ref": "#/$defs/node"}, b'{"v":1,"next":{"next":null}}', 0),
         ({}, b'{"x":[1,{"y":null}]}', 1), ({"type": ["object", "null"]}, b"null", 0),
         ({"enum": [{"a": 1}, {}]}, b'{"a":1}', 1), ({"enum": [{"a": 1}, {}]}, b'{}', 1), ({"enum": [{"a": 1}]}, b'{}', 0),
         ({"anyOf": [{"type": "null"}, V]}, b'{"v":1}', 1), ({"anyOf": [{"type": "null"}, V]}, b'{"v":"1"}', 0)]
CAT = {"type": "object", "properties": {"kind": {"const": "cat", "type": "string"}, "lives": {"type": "integer"}},
       "required": ["kind", "lives"], "additionalProperties": False}
DOG = {"type": "object", "properties": {"kind": {"enum": ["dog", "puppy"]}, "bark": {"type": "string"}}, "required": ["kind"]}
PET = {"type": "object", "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}],
                                                "discriminator": {"propertyName": "kind"}}},
       "required": ["pet"], "$defs": {"cat": CAT, "dog": DOG}}
SIZE = {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "number", "minimum": 100},
                                                         {"enum": ["x", "xyz"]}, {"type": "string", "maxLength": 2}]}}}
TWO = {"type": "object", "properties": {"a": {"anyOf": [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "null"}}, "required": ["b"]}]}}}
TUPLE = {"type": "object", "properties": {
    "t": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
    "u": {"prefixItems": [{"type": "boolean"}], "items": {"type": "null"}}, "v": {"prefixItems": [{"type": "boolean"}], "items": False}}}
CASES += [(PET, b'{"pet":{"kind":"cat","lives":9}}', 1), (PET, b'{"pet":{"kind":"dog","bark":"w"}}', 1),
          (PET, b'{"pet":{"kind":"puppy"}}', 1), (PET, b'{"pet":{"kind":"cat"}}', 0),
          (PET, b'{"pet":{"kind":"cat","bark":"w"}}', 0), (PET, b'{"pet":{"kind":"cow"}}', 0),
          (PET, b'{"pet":{"lives":9,"kind":"cat"}}', 0), (PET, b'{"pet":{"kind":"dog","lives":9}}', 0),
          (SIZE, b'{"a":3}', 1), (SIZE, b'{"a":-2}', 1), (SIZE, b'{"a":6}', 0), (SIZE, b'{"a":100.5}', 1),
          (SIZE, b'{"a":5.5}', 0), (SIZE, b'{"a":99}', 0), (SIZE, b'{"a":"xy"}', 1), (SIZE, b'{"a":"xyz"}', 1),
          (SIZE, b'{"a":"xya"}', 0), (TWO, b'{"a":{"a":1}}', 1), (TWO, b'{"a":{"a":"x","b":null}}', 1),
          (TWO, b'{"a":{"a":"x"}}', 0), (TWO, b'{"a":{"a":1,"b":null}}', 0), (TWO, b'{"a":{"b":null}}', 1),
          (TUPLE, b'{"t":[1,"a"]}', 1), (TUPLE, b'{"t":[1]}', 0), (TUPLE, b'{"t":["a",1]}', 0), (TUPLE, b'{"t":[1,"a",2]}', 0),
          (TUPLE, b'{"u":[true,null,null]}', 1), (TUPLE, b'{"u":[]}', 1), (TUPLE, b'{"u":[null]}', 0),
          (TUPLE, b'{"v":[true]}', 1), (TUPLE, b'{"v":[true,null]}', 0), (TUPLE, b'{"v":[]}', 1),
          # (items of alternatives that begin alike, one after another)
          ({"type": "object", "properties": {"a": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}}},
           b'{"a":[1,2,3,4,5,6.5,7,8.5]}', 1),
          ({"type": "object", "properties": {"a": {"type": "array", "items": SIZE["properties"]["a"]}}},
           b'{"a":["x","x","x","x","x",1,"x","xyz"]}', 1)]
SEVENS = {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 7}}}
CASES += [(SEVENS, b'{"a":%s}' % t, w) for t, w in [(b"7", 1), (b"14", 1), (b"15", 0), (b"-21", 1), (b"0", 1), (b"-0", 1), (b"7.0", 0),
                                                    (b"7e0", 0), (b"999999999999994", 1), (b"1000000000000001", 0), (b"1" * 6, 1),
                                                    (b"1" * 5, 0)]]
CASES.append(({"type": "object", "additionalProperties": SEVENS["properties"]["a"]}, b'{"abcdefghij":999999999999994}', 1))
AGE = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "exclusiveMaximum": 120}}}
NEG = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -2000, "maximum": -1000}}}
for v, whole in [(0, 1), (-5, 1), (-6, 0), (119, 1), (120, 0), (7, 1), (1000, 0), ("-0", 1), ("00", 0), ("1.0", 0)]:
    CASES.append((AGE, b'{"a":%s}' % str(v).encode(), whole))
for v, whole in [(-1000, 1), (-2000, 1), (-1500, 1), (-999, 0), (-2001, 0), (-20000, 0), ("-0", 0), (5, 0)]:
    CASES.append((NEG, b'{"a":%s}' % str(v).encode(), whole))
WHEN = {"type": "object", "properties": {f: {"type": "string", "format": f} for f in FORMATS}}
for f, v, whole in [("date", "2024-02-29", 1), ("date", "2023-02-29", 0), ("date", "1900-02-29", 0), ("date", "2000-02-29", 1),
                    ("date", "0000-01-01", 0), ("date", "0001-01-01", 1), ("date", "9999-12-31", 1), ("date", "2024-13-01", 0),
                    ("date", "2024-00-10", 0), ("date", "2024-04-31", 0), ("date", "2024-04-30", 1), ("date", "2024-1-01", 0),
                    ("date", "2024-01-00", 0), ("date", "2024-01-01T", 0), ("time", "23:59:59Z", 1), ("time", "24:00:00Z", 0),
                    ("time", "23:60:00Z", 0), ("time", "23:59:60Z", 0), ("time", "12:00:00", 0), ("time", "12:00:00.Z", 0),
                    ("time", "12:00:00.123456-23:59", 1), ("time", "12:00:00.1234567Z", 0), ("time", "12:00:00+24:00", 0),
                    ("time", "12:00:00z", 0), ("date-time", "2024-02-29T23:59:59.5+01:00", 1),
                    ("date-time", "2024-02-29 23:59:59Z", 0), ("date-time", "2024-02-29t23:59:59Z", 0),
                    ("date-time", "2024-02-30T00:00:00Z", 0), ("uuid", "123e4567-e89b-12d3-a456-426614174000", 1),
                    ("uuid", "123E4567-e89b-12d3-a456-426614174000", 0), ("uuid", "123e4567e89b12d3a456426614174000", 0),
                    ("uuid", "123e4567-e89b-12d3-a456-4266141740000", 0), ("uuid", "123e4567-e89b-12d3-a456-42661417400", 0),
                    ("email", "a.b@c.de", 1), ("email", "a..b@c.de", 0), ("email", "a@b", 0), ("email", "A@b.cd", 0),
                    ("email", "x+y_z@mail.example.org", 1), ("ipv4", "255.255.255.255", 1), ("ipv4", "256.0.0.1", 0),
                    ("ipv4", "01.2.3.4", 0), ("ipv4", "1.2.3", 0), ("hostname", "a-b.c", 1), ("hostname", "-a.b", 0),
                    ("hostname", "a" * 16, 1), ("hostname", "a" * 17, 0), ("uri", "https://example.com/a/b?x=1", 1),
                    ("uri", "http://a.b:8080", 1), ("uri", "ftp://x.y", 0), ("uri", "http://", 0),
                    ("uri", "http://a.b/%20", 0)]:
    CASES.append((WHEN, dump({f: v}), whole))
def whole_calls(text):
    """The calls whole in a text of {"tool_calls": [{"name", "arguments"}, ...]} (cut anywhere): (name, arguments)."""
    i, calls = text.index("[") + 1, []
    while True:
        i = len(text) - len(text[i:].lstrip(" \t\r\n,"))
        try:
            call, i = json.JSONDecoder().raw_decode(text, i)
        except ValueError:
            return calls
        calls.append((call["name"], call["arguments"]))


def pattern_schema(pattern, **lengths):
    return {"type": "object", "properties": {"p": {"type": "string", "pattern": pattern, **lengths}}}
def text_of(pattern, texts, **lengths):
    return [(pattern_schema(pattern, **lengths), dump({"p": t}), w) for t, w in texts]
CASES += text_of(r"^\d{3}-\d{4}$", [("123-4567", 1), ("123-45678", 0), ("12-4567", 0), ("abc-defg", 0), ("", 0)])
CASES += text_of("ab+c", [("abc", 1), ("xxabbbcyy", 1), ("é abc é", 1), ("ac", 0), ("ab", 0), ("", 0), ("a\"bc", 0)])
CASES += text_of("^(cat|dog)s?$", [("cat", 1), ("dogs", 1), ("cats!", 0), ("ca", 0), ("catdog", 0)])
CASES += text_of("^$", [("", 1), (" ", 0)])
CASES += text_of("^[^@ ]+@[a-z]+\\.[a-z]{2,3}$", [("a.b@mail.com", 1), ("a@b.c", 0), ("a b@c.de", 0), ("@c.de", 0)])
CASES += text_of("^.{2,3}$", [("éé", 1), ("ab🦙", 1), ("abcd", 0), ("a", 0)])
CASES += text_of("^[^a]$", [("b", 1), ("é", 0), ("a", 0)])  # (classes take ASCII only: a narrowing)
CASES += text_of("^a*?b+?$", [("aab", 1), ("b", 1), ("a", 0)])
CASES += text_of("^\\w\\s\\W$", [("a !", 1), ("a\t!", 0), ("a a", 0)])
CASES += text_of("^[a-c]+x*$", [("abc", 1), ("ab", 0), ("abcxxx", 0), ("axxxx", 1), ("aaaaa", 1)], minLength=3, maxLength=5)
CASES += text_of("^(ab)*$", [("abab", 1), ("ab", 0), ("aba", 0), ("ab" * 50, 1), ("ab" * 51, 0)], minLength=3, maxLength=100)
CASES += text_of("z", [("z", 1), ("az", 1), ("za", 1), ("aa", 0), ("azz", 0)], minLength=0, maxLength=2)
CASES += text_of("^.*b$", [("éb", 1), ("b", 0), ("🦙b", 1), ("ééb", 0)], minLength=2, maxLength=2)  # (lengths in characters)
# (where a match could no longer end at a length within the bounds, or a multiple within 15 digits:
# refused at that character)
TAKEN_BOUNDED = [(pattern_schema("^a+b$", minLength=0, maxLength=3), b'{"p":"aaa"}', 8),
                 (pattern_schema("^(ab)*$", minLength=3, maxLength=5), b'{"p":"ababa"}', 10),
                 (SEVENS, b'{"a":-5000000000000000000}', 20)]  # (a multiple's 15th digit: the last)
NUM = {"type": "object", "properties": {"a": {"type": ["number", "null"], "minimum": 0, "maximum": 1}}}
EXC = {"type": "object", "properties": {"a": {"type": "number", "exclusiveMinimum": 0.1, "exclusiveMaximum": 0.3}}}
DEC = {"type": "object", "properties": {"a": {"type": "number", "minimum": 0.1, "maximum": 0.3}}}
BIG = {"type": "object", "properties": {"a": {"type": "number", "minimum": -1e6}}}
for schema, texts in [(NUM, ["0.5", "1", "1.0", "1.000000", "-0", "0", "0.000001", "null", "-1.000001x", "1.000001", "-0.1",
                             "0.1234567", "0.0000001", "1e-3", "2", "0.", ".5"]),
                      (EXC, ["0.100001", "0.299999", "0.2", "0.1", "0.3", "0.30", "0.0999999"]),
                      (DEC, ["0.1", "0.3", "0.30", "0.300000", "0.300001", "0.09", "0.099999", "0.2999999"]),
                      (BIG, ["-1000000", "-999999.999999", "123456789.5", "-1000000.000001", "-1000001",
                             "9007199254.740991"])]:
    for t in texts:  # (whole where the reference, jsonschema, takes it and the grammar's form has it)
        text = b'{"a":%s}' % t.encode()
        CASES.append((schema, text, int(is_instance(validator_of(schema), text) and "e" not in t
                                        and not re.search(r"\.\d{7}", t))))
CASES += [(BIG, b'{"a":9007199254.740992}', 0), (BIG, b'{"a":10000000000}', 0)]  # (instances, past the range's limit)
# Where a bound refuses: at the digit that no integer in range begins with, else at the end.
HUNDREDS = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 100, "maximum": 500}}}
TAKEN = [(AGE, b'{"a":120}', 7), (AGE, b'{"a":119}', 9), (AGE, b'{"a":-6}', 6), (AGE, b'{"a":-0}', 8),
         (HUNDREDS, b'{"a":1}', 6), (HUNDREDS, b'{"a":50}', 7), (HUNDREDS, b'{"a":501}', 7), (HUNDREDS, b'{"a":6', 5),
         (HUNDREDS, b'{"a":-', 5), (HUNDREDS, b'{"a":0', 5), (NEG, b'{"a":-1', 7), (NEG, b'{"a":-1}', 7),
         (NEG, b'{"a":-3', 6), (NEG, b'{"a":-10000', 10), (NUM, b'{"a":1.000001}', 12), (NUM, b'{"a":2', 5),
         (NUM, b'{"a":0.1234567}', 13), (NUM, b'{"a":1e', 6), (NUM, b'{"a":0.9}', 9), (DEC, b'{"a":0.3000001', 13),
         (DEC, b'{"a":0.09', 7), (DEC, b'{"a":1', 5), (PET, b'{"pet":{"kind":"cow"}}', 17), (SIZE, b'{"a":6}', 6),
         (SIZE, b'{"a":"xya"}', 8), (TWO, b'{"a":{"a":1,"b"', 11)] + TAKEN_BOUNDED
bad = []
for i, (schema, text, whole) in enumerate(CASES):
    path = schema_file(schema)
    got = feed(path, [text])[0]
    os.unlink(path)
    reference = is_instance(validator_of(schema), text)
    if got[1] != whole or (whole and not reference):
        bad.append((i, text, got, reference))
check(f"{len(CASES)} instances and violations of each constraint: taken whole or not", not bad, bad)
bad = []
for schema, text, taken in TAKEN:
    path = schema_file(schema)
    got = feed(path, [text])[0][0]
    os.unlink(path)
    if got != taken:
        bad.append((text, got, taken))
check(f"{len(TAKEN)} numbers near their bounds and the like: refused at the first byte no instance continues", not bad, bad)
# Branches that meet again are one: an item of alternatives that begin alike leaves one alive.
ITEMS = {"type": "object", "properties": {"a": {"type": "array", "items": {"anyOf": [
    {"type": "boolean"}, {"const": True}, {"type": "integer", "minimum": 0}, {"enum": [1, 2]}, {"type": "number"},
    {"type": "string", "pattern": "^x+$"}, {"type": "string", "maxLength": 3}, {"enum": ["x", "xy"]},
    {"type": "string", "format": "date"}]}}}}
path = schema_file(ITEMS)
got = feed(path, [b'{"a":[tru', b'{"a":[true,', b'{"a":[1', b'{"a":[true,1,"xx",2,"x",3.5,"y",false,"2024-01-01",'],
           alive=True)
os.unlink(path)
check("branches: one for each alternative a value begins as, and one again after it", got == [
    (9, 0, 2), (11, 0, 1), (7, 0, 3), (51, 0, 1)], got)
# A schema with an $id is a resource: its "#" and "#/$defs/..." name it and its $defs, not the top's.
INNER = {"$id": "inner", "type": "object", "properties": {"self": {"$ref": "#"}, "n": {"$ref": "#/$defs/n"}},
         "additionalProperties": False, "$defs": {"n": {"type": "integer"}}}
path = schema_file({"type": "object", "properties": {"inner": INNER, "outer": {"type": "integer"}},
                    "$defs": {"n": {"type": "string"}}})
got = feed(path, [b'{"inner":{"self":{"n":1}}}', b'{"inner":{"self":{"outer":1}}}', b'{"inner":{"n":"x"}}'])
os.unlink(path)
check("$ref within a schema with an $id: its own", got == [(26, 1), (19, 0), (14, 0)], got)

ONE_OF = "'oneOf' alternatives that begin alike (two objects, an integer and a number, ...) must be objects told apart"
REFUSED = [({"type": "string"}, "the top must allow an object"), ({"enum": [[], 1]}, "the top must allow an object"),
           ({"type": ["object", "null"]}, None), ({"enum": [{}]}, None), ({}, None),
           ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, "properties.a: 'uniqueItems' is not"),
           ({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 2}}},
            "properties.a: 'multipleOf' of numbers is not supported (of integers it is)"),
           ({"type": "object", "properties": {"a": {"multipleOf": 2}}}, "'multipleOf' of numbers is not supported"),
           ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2, "minimum": 0}}},
            "'multipleOf' beside bounds is not supported"),
           ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2.5}}}, "'multipleOf' must be a whole number"),
           ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 0}}}, "'multipleOf' must be a whole number"),
           ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2 ** 31 + 1}}},
            "'multipleOf' must be a whole number from 1 to 2147483648"),
           ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2 ** 31}}}, None),
           ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3, "enum": [3]}}},
            "'multipleOf' beside 'enum'"),
           ({"type": "object", "properties": {"a": {"pattern": 3}}}, "'pattern' must be a string"),
           ({"type": "object", "properties": {"a": {"pattern": "(?=a)"}}}, "'(?' in 'pattern' is not supported but as (?:...)"),
           ({"type": "object", "properties": {"a": {"pattern": "(a)\\1"}}}, "'\\1' in 'pattern' is not supported"),
           ({"type": "object", "properties": {"a": {"pattern": "\\bx"}}}, "'\\b' in 'pattern' is not supported"),
           ({"type": "object", "properties": {"a": {"pattern": "a**"}}}, "'pattern' repeats a repeat"),
           ({"type": "object", "properties": {"a": {"pattern": "[é]"}}}, "'pattern' must be ASCII"),
           ({"type": "object", "properties": {"a": {"pattern": "é"}}}, "'pattern' must be ASCII"),
           ({"type": "object", "properties": {"a": {"pattern": "a{101}"}}}, "quantifiers above 100"),
           ({"type": "object", "properties": {"a": {"pattern": "^a{70}$"}}}, "more than 63 characters' places"),
           ({"type": "object", "properties": {"a": {"pattern": "^[\"\\\\]+$"}}}, "matches no text but with a quote"),
           ({"type": "object", "properties": {"a": {"pattern": "x[\"]"}}}, "matches no text but with a quote"),
           ({"type": "object", "properties": {"a": {"pattern": "^a\\n$"}}}, "'\\n' in 'pattern' is not supported"),
           ({"type": "object", "properties": {"a": {"pattern": "(a"}}}, "a '(' without its ')'"),
           ({"type": "object", "properties": {"a": {"pattern": "a)"}}}, "a ')' without its '('"),
           ({"type": "object", "properties": {"a": {"pattern": "[a"}}}, "a '[' without its ']'"),
           ({"type": "object", "properties": {"a": {"pattern": "[z-a]"}}}, "a range 'z-a'"),
           ({"type": "object", "properties": {"a": {"pattern": "a^b"}}}, "'^' in 'pattern' is not supported where it stands"),
           ({"type": "object", "properties": {"a": {"pattern": "a{x}"}}}, "must begin a quantifier"),
           ({"type": "object", "properties": {"a": {"pattern": "^a{5}$", "maxLength": 4}}}, "no string of its 'pattern' has a length"),
           ({"type": "object", "properties": {"a": {"pattern": "^(ab)+$", "minLength": 3, "maxLength": 3}}},
            "no string of its 'pattern' has a length"),
           ({"type": "object", "properties": {"a": {"pattern": "^(ab)+$", "minLength": 3, "maxLength": 4}}}, None),
           ({"type": "object", "properties": {"a": {"pattern": "a", "minLength": 1025}}}, "'minLength' above 1024 beside 'pattern'"),
           ({"type": "object", "properties": {"a": {"pattern": "a", "minLength": 1024}}}, None),
           ({"type": "object", "properties": {"a": {"pattern": "^a$", "format": "date"}}}, "'pattern' beside 'format'"),
           ({"type": "object", "properties": {"a": {"type": "integer", "pattern": "^a$"}}}, None),
           ({"type": "object", "properties": {"a": {"pattern": "^(?:[a-z]+|\\d{2,}?)\\.$"}}}, None),
           ({"type": "object", "properties": {"a": {"type": "string", "format": "ipv6"}}},
            "'format' \"ipv6\" is not supported (date, time, date-time, uuid, email, hostname, ipv4 and uri are)"),
           ({"type": "object", "properties": {"a": {"format": "date", "maxLength": 4}}}, "'maxLength' beside 'format' \"date\""),
           ({"type": "object", "properties": {"a": {"format": "uri", "minLength": 1, "maxLength": 2083}}}, None),
           ({"type": "object", "properties": {"a": {"format": "ipv4", "minLength": 16}}},
            "'minLength' is above 'maxLength' or the format's most"),
           ({"type": "object", "properties": {"a": {"format": "hostname", "minLength": 254}}}, "or the format's most"),
           ({"type": "object", "properties": {"a": {"format": "email", "minLength": 255}}}, "or the format's most"),
           ({"type": "object", "properties": {"a": {"format": "uri", "minLength": 2084}}}, "or the format's most"),
           ({"type": "object", "properties": {"a": {"format": "hostname", "minLength": 253}}}, None),
           ({"type": "object", "properties": {"a": {"format": "email", "maxLength": 4}}}, "no string of its 'format' has a length"),
           ({"type": "object", "properties": {"a": {"format": "email", "pattern": "a"}}}, "'pattern' beside 'format'"),
           ({"type": "object", "properties": {"a": {"type": "integer", "format": "int32"}}}, None),
           ({"type": "object", "properties": {"a": {"type": "number", "minimum": 0}}}, None),
           ({"type": "object", "properties": {"a": {"maximum": 0}}}, None),
           ({"type": "object", "properties": {"a": {"type": "number", "minimum": 1e10}}}, "bounds beyond +-9007199254.740991 are not"),
           ({"type": "object", "properties": {"a": {"type": "number", "minimum": 0.1, "exclusiveMaximum": 0.1}}},
            "no number lies within its bounds"),
           ({"type": "object", "properties": {"a": {"type": "integer", "exclusiveMinimum": True}}},
            "'exclusiveMinimum' must be a number"),
           ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1e300}}}, "bounds beyond"),
           ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 2.5, "maximum": 2.9}}},
            "no integer lies within its bounds"),
           ({"type": "object", "properties": {"a": {"enum": ["a", "bbb"], "maxLength": 2}}}, "'maxLength' beside 'enum'"),
           ({"type": "object", "properties": {"a": {"type": "strin"}}}, "'type' must name"),
           ({"type": "object", "required": ["b"], "properties": {"a": {}}},
            "'required' names 'b', which 'properties' does not give"),
           ({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"enum": ["x"]}]}}}, ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}, ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}}, None),
           ({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}}, None),
           ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"enum": ["x"]}]}}}, None),
           ({"type": "object", "properties": {"a": {"oneOf": [CAT, DOG]}}}, None),
           ({"type": "object", "properties": {"a": {"oneOf": [CAT, {**DOG, "required": []}]}}}, ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [{**DOG, "required": []}, CAT]}}}, ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [CAT, {**DOG, "properties": {"kind": {"enum": ["dog", "cat"]}}}]}}},
            ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [CAT, {**DOG, "properties": {"kind": {"enum": ["dog", 1]}}}]}}},
            ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [CAT, {"type": "object"}]}}}, ONE_OF),
           ({"type": "object", "properties": {"a": {"oneOf": [CAT, {"anyOf": [DOG]}]}}}, ONE_OF),
           ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "'$ref' must be"),
           ({"type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}, "$defs": {"b": {"$ref": "#/$defs/b"}}},
            "refers to itself"),
           ({"type": "object", "properties": {"a": {"$ref": "#/$defs/b", "type": "string"}}}, "'type' beside '$ref'"),
           ({"type": "object", "properties": {"a": {"allOf": [{}, {}]}}}, "'allOf' is supported with one schema only"),
           ({"type": "object", "properties": {"a": {"type": "string", "enum": [1]}}}, "no value of 'enum'"),
           ({"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 2}}}, "'minItems' is above"),
           ({"type": "object", "properties": {"a": {"type": "array", "items": [{}]}}}, "draft 7's tuple) is not supported: use 'prefixItems'"),
           ({"type": "object", "properties": {"a": {"prefixItems": {}}}}, "'prefixItems' must be a list of schemas"),
           ({"type": "object", "properties": {"a": {"prefixItems": [{}], "items": False, "minItems": 2}}},
            "'minItems' is above the items of 'prefixItems' ('items' is false)"),
           ({"type": "object", "properties": {"a": {"prefixItems": [{"type": "string", "format": "ipv6"}]}}},
            "properties.a.prefixItems[0]: 'format' \"ipv6\""),
           ({"type": "object", "properties": {"a": False}}, "false (no value) cannot be generated"),
           ({"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}}, "'maxLength' must be an integer"),
           ({"type": "object", "properties": {"a": {"not": {}}}}, "'not' is not supported"),
           ({"type": "object", "properties": {"a": {"anyOf": []}}}, "'anyOf' must be a list"),
           ({"$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "type": "object",
             "properties": {"a": {"$ref": "#/$defs/n"}}}, "lead back to themselves"),
           ({"type": "object", "properties": {"a": {"items": {"items": {"items": {"items": {}}}}}}}, None)]
deep = {"type": "object"}
for _ in range(70):
    deep = {"type": "object", "properties": {"a": deep}}
REFUSED.append((deep, "nest more than 64 deep"))
bad = []
for schema, want in REFUSED:
    path = schema_file(schema)
    out = subprocess.run([TOOL, "schema", path], capture_output=True, text=True, timeout=60).stdout.strip()
    os.unlink(path)
    if (want is None and out != "ok") or (want is not None and (want not in out or not out.startswith("schema"))):
        bad.append((schema, want, out))
check(f"{len(REFUSED)} schemas refused (or not), naming why and where", not bad, bad)

# The mask on LLaMA-2's vocabulary: exactly the tokens whose text json_feed takes after each prefix.
sp = spm.SentencePieceProcessor(model_file=MODEL)
texts = vocab_texts(sp)
ids = [i for i, t in enumerate(texts) if t and b"\0" not in t]
for schema, prefixes in [(PERSON, [b"", b'{"na', b'{"name": "a', b'{"name": "ab', b'{"name":"x","kind":',
                                   b'{"name":"x","kind": "d', b'{"name":"x","kind":7', b'{"name":"x","kind":7,"tags":[',
                                   b'{"name":"x","kind":7,"tags":[true', b'{"name":"x","kind":7,"note":',
                                   b'{"name":"x","kind":"cat"}']),
                         ({**SIZE, "properties": {**SIZE["properties"], **PET["properties"]}, "$defs": PET["$defs"]},
                          [b'{"a":', b'{"a":1', b'{"a":"x', b'{"a":"xy', b'{"pet":{"kind":"', b'{"pet":{"kind":"dog"'])]:
    path = schema_file(schema)
    masks = tool_lines([TOOL, "mask", MODEL, path], b"\0".join(prefixes) + b"\0", len(prefixes))
    for prefix, line in zip(prefixes, masks):
        got = {int(x) for x in line.split()}
        fed = feed(path, [prefix + texts[i] for i in ids] + [prefix])
        want = {sp.eos_id()} if fed[-1][1] else {i for i, g in zip(ids, fed) if g[0] == len(prefix + texts[i])}
        check(f"json_mask after {prefix!r}: {len(got)} tokens left, those json_feed takes", got == want,
              (sorted(got - want)[:10], sorted(want - got)[:10]))
    os.unlink(path)

# burstd on stories260K. A bias toward '"' and '}' ends strings and objects early.
need_stories()
stories_sp = spm.SentencePieceProcessor(model_file=os.path.join(STORIES, "tokenizer.model"))
ends = {str(stories_sp.piece_to_id('"')): 8, str(stories_sp.piece_to_id("<0x7D>")): 30}
STORY = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "mood": {"enum": ["happy", "sad"]},
                                          "age": {"type": "integer"},
                                          "friends": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                      "maxItems": 3},
                                          "pet": {"anyOf": [{"type": "null"},  # (two objects: the grammar follows both)
                                                            {"type": "object", "properties": {"kind": {"const": "dog"}}},
                                                            {"type": "object", "properties": {"kind": {"const": "cat"},
                                                                                              "lives": {"type": "integer"}}}]}},
         "required": ["name", "mood", "friends"], "additionalProperties": False}
validator = validator_of(STORY)
fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "story", "schema": STORY, "strict": True}}}
story_path = schema_file(STORY)
with Burstd(STORIES) as srv, Burstd(STORIES, "--speculate", "4") as spec:
    bodies = [{"prompt": "Once upon a time", "temperature": 0},
              {"prompt": "Lily", "temperature": 0.8, "seed": 9, "logit_bias": ends},
              {"prompt": "Tom", "temperature": 0, "logit_bias": ends},
              {"prompt": "A", "temperature": 1.2, "seed": 3, "top_p": 0.9, "n": 2, "logit_bias": ends}]
    stops, texts = check_shaped(check, srv, spec, fmt, bodies, 150, lambda t: is_instance(validator, t),
                                lambda t: feed(story_path, [t.encode()])[0] == (len(t.encode()), 0), "with a schema")
    cli = generate(STORIES, bodies[0]["prompt"], 150, "--json-schema", story_path)
    check("completion 0 (greedy) from burst generate --json-schema: the same", cli == texts[0], (cli, texts[0]))
    check("some completions ended their instance at EOS", stops >= 2, stops)
    chat = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 150, "temperature": 0,
            "logit_bias": ends, **fmt}
    st, _, r = srv.request("POST", "/v1/chat/completions", chat)
    msg = r["choices"][0]["message"]["content"] if st == 200 else ""
    check("chat with a schema: an instance", st == 200 and r["choices"][0]["finish_reason"] == "stop"
          and is_instance(validator, msg), r)
    for body, want in [({**fmt, "ignore_eos": True}, "json_schema ends at EOS: not with 'ignore_eos'"),
                       ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "holding the 'schema'"),
                       ({"response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}},
                        "json_schema.name' must be a string"),
                       ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {
                           "a": {"type": "array", "uniqueItems": True}}}}}},
                        "response_format.json_schema.schema.properties.a: 'uniqueItems' is not supported")]:
        st, _, r = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, **body})
        check(f"{str(body)[:90]}: 400", st == 400 and want in r["error"]["message"], (st, r))

    # Named function calls: the answer is a call whose arguments are the text the same schema gives.
    tools = [{"type": "function", "function": {"name": "tell", "description": "a story's facts", "parameters": STORY}},
             {"type": "function", "function": {"name": "noop"}}]
    named = {"type": "function", "function": {"name": "tell"}}
    chat = {k: v for k, v in chat.items() if k != "response_format"}
    st, _, r = srv.request("POST", "/v1/chat/completions", {**chat, "tools": tools, "tool_choice": named})
    calls = r["choices"][0]["message"].get("tool_calls") if st == 200 else None
    check("a named function call: one call of it, its arguments the text response_format gives",
          st == 200 and r["choices"][0]["message"]["content"] is None and len(calls) == 1 and calls[0]["type"] == "function"
          and calls[0]["id"].startswith("call_") and calls[0]["function"] == {"name": "tell", "arguments": msg}
          and r["choices"][0]["finish_reason"] == "stop", r)
    st, events = srv.stream("/v1/chat/completions", {**chat, "tools": tools, "tool_choice": named})
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e.get("choices")]
    parts = [d.get("tool_calls", [{}])[0] for d in deltas]
    check("... streamed: the first chunk names the call, the rest carry its arguments",
          st == 200 and parts[0].get("id", "").startswith("call_") and parts[0]["function"]["name"] == "tell"
          and all("id" not in p and "name" not in p.get("function", {}) for p in parts[1:])
          and "".join(p.get("function", {}).get("arguments", "") for p in parts) == msg
          and not any("content" in d for d in deltas), deltas[:3])
    # "required": calls of any of the tools, the text {"tool_calls": [{"name", "arguments"}, ...]}. A
    # Pydantic-style tool refers to its own $defs and to itself ("#") inside that list.
    TREE = {"type": "object", "properties": {"pet": {"$ref": "#/$defs/Pet"}, "kids": {"type": "array", "items": {"$ref": "#"},
                                                                                        "maxItems": 2},
                                             "tag": {"const": "a\"}\\"}},
            "required": ["pet", "tag"], "additionalProperties": False,
            "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}}, "required": ["kind"],
                              "additionalProperties": False}}}
    several = tools + [{"type": "function", "function": {"name": "tree", "parameters": TREE}}]
    params = {t["function"]["name"]: t["function"].get("parameters", {"type": "object", "additionalProperties": False})
              for t in several}
    for called, body in [(several, {**chat, "max_tokens": 300}),
                         (several, {**chat, "max_tokens": 300, "temperature": 1, "seed": 5, "logit_bias": ends}),
                         (several, {**chat, "max_tokens": 300, "temperature": 0.9, "seed": 2, "logit_bias": ends,
                                    "parallel_tool_calls": False}),
                         (several[-1:], {**chat, "max_tokens": 300})]:
        one = body.get("parallel_tool_calls") is False
        schema = {"type": "object", "properties": {"tool_calls": {
            "type": "array", "minItems": 1, **({"maxItems": 1} if one else {}), "items": {"anyOf": [
                {"type": "object", "properties": {"name": {"const": k}, "arguments": {**params[k], "$id": f"tools/{i}"}},
                 "required": ["name", "arguments"], "additionalProperties": False}
                for i, k in enumerate(t["function"]["name"] for t in called)]}}},
            "required": ["tool_calls"], "additionalProperties": False}
        body = {**body, "tools": called, "tool_choice": "required"}
        st, _, r = srv.request("POST", "/v1/chat/completions", body)
        st2, _, text = srv.request("POST", "/v1/chat/completions", {**body, "tool_choice": "none", "response_format": {
            "type": "json_schema", "json_schema": {"name": "calls", "schema": schema}}})
        st3, events = srv.stream("/v1/chat/completions", body)
        text = text["choices"][0]["message"]["content"] if st2 == 200 else ""
        finish = text and r["choices"][0]["finish_reason"]
        whole = whole_calls(text) if text else []
        got = r["choices"][0]["message"].get("tool_calls", []) if st == 200 else []
        parts = [c for e in events if isinstance(e, dict) and e.get("choices")
                 for c in e["choices"][0]["delta"].get("tool_calls", [])]
        streamed = []  # the parts joined as a client joins them: a call's first part names it, the rest add arguments
        for part in parts:
            if part["index"] == len(streamed) and "id" in part:
                streamed.append({k: part[k] for k in ("id", "type")} | {"function": dict(part["function"])})
            elif part["index"] == len(streamed) - 1 and set(part) == {"index", "function"} and set(part["function"]) == {"arguments"}:
                streamed[-1]["function"]["arguments"] += part["function"]["arguments"]
            else:
                streamed.append("a part out of place: " + str(part))
        complete, cut = got[:len(whole)], got[len(whole):]
        check(f"'required' of {len(called)} ({str(body)[60:150]}): calls of its tools, their arguments the text's as written",
              st == 200 and st2 == 200 and r["choices"][0]["message"]["content"] is None and finish in ("tool_calls", "length")
              and len(got) >= 1 and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in complete] == whole
              and all(c["type"] == "function" and c["function"]["arguments"] in text for c in got)
              and all(is_instance(validator_of(params[c["function"]["name"]]), c["function"]["arguments"]) for c in complete)
              and len(cut) <= 1 and (not cut or finish == "length") and len({c["id"] for c in got}) == len(got)
              and (not one or len(got) == 1 and finish == "tool_calls"), (st, r, text))
        check("... streamed: the same calls, each named in its first part and its arguments in pieces after",
              st3 == 200 and [(c["id"][:5], c["type"], c["function"]) for c in streamed]
              == [("call_", "function", c["function"]) for c in got] and len(parts) > len(got), (parts[:6], got))
    # Results of parallel calls in a row: one user turn, a line each.
    pair = [{"id": "a", "type": "function", "function": {"name": "tell", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "noop", "arguments": "{ }"}}]
    history = chat["messages"] + [{"role": "assistant", "content": None, "tool_calls": pair},
                                  {"role": "tool", "tool_call_id": "a", "content": "Lily is 3."},
                                  {"role": "tool", "tool_call_id": "b", "content": "done"}]
    plain = chat["messages"] + [{"role": "assistant", "content": "{}\n{ }"}, {"role": "user", "content": "Lily is 3.\ndone"}]
    answers = [srv.request("POST", "/v1/chat/completions", {**chat, "messages": m, "max_tokens": 20})[2]
               for m in (history, plain)]
    check("two results in a row: one user turn, a line each",
          "usage" in answers[0] and answers[0]["usage"]["prompt_tokens"] == answers[1]["usage"]["prompt_tokens"]
          and answers[0]["choices"][0]["message"] == answers[1]["choices"][0]["message"], answers)
    st, _, r = srv.request("POST", "/v1/chat/completions", {**chat, "tools": tools, "n": 2, "temperature": 1, "seed": 4,
                                                            "tool_choice": {"type": "function", "function": {"name": "noop"}}})
    args = [c["message"]["tool_calls"][0]["function"]["arguments"] for c in r.get("choices", [])]
    check("... a function without parameters: '{}' in each of n choices", st == 200 and len(args) == 2
          and all(json.loads(a) == {} for a in args), r)
    st, _, r = srv.request("POST", "/v1/chat/completions", {**chat, "tools": tools, "tool_choice": "none"})
    check("... tool_choice none: a text answer", st == 200 and isinstance(r["choices"][0]["message"]["content"], str)
          and "tool_calls" not in r["choices"][0]["message"], r)
    # A conversation that carries the call and its result: prompted as the call's arguments in the
    # assistant's turn and the result in a user turn.
    history = chat["messages"] + [{"role": "assistant", "content": None, "tool_calls": calls},
                                  {"role": "tool", "tool_call_id": calls[0]["id"], "content": "Lily is 3."}]
    plain = chat["messages"] + [{"role": "assistant", "content": calls[0]["function"]["arguments"]},
                                {"role": "user", "content": "Lily is 3."}]
    answers = [srv.request("POST", "/v1/chat/completions", {**chat, "messages": m, "max_tokens": 20})[2]
               for m in (history, plain)]
    check("a conversation carrying the call and its result: prompted as the arguments and a user turn",
          "usage" in answers[0] and answers[0]["usage"]["prompt_tokens"] == answers[1]["usage"]["prompt_tokens"]
          and answers[0]["choices"][0]["message"] == answers[1]["choices"][0]["message"], answers)
    user, result = chat["messages"][0], {"role": "tool", "content": "r"}
    bad_tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "array", "uniqueItems": True}}}}}]
    for path, body, want in [
            ("/v1/chat/completions", {"tools": tools}, "'tool_choice' \"auto\" (the default with 'tools') is not supported"),
            ("/v1/chat/completions", {"tools": tools * 9, "tool_choice": "required"}, "'tools'[0] and 'tools'[2] are both named 'tell'"),
            ("/v1/chat/completions", {"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(17)],
                                      "tool_choice": "required"}, "'tool_choice' \"required\" takes at most 16 tools"),
            ("/v1/chat/completions", {"tools": tools, "tool_choice": "required", "parallel_tool_calls": "yes"},
             "'parallel_tool_calls' must be"),
            ("/v1/chat/completions", {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "x"}}},
             "names a function 'tools' does not hold"),
            ("/v1/chat/completions", {"tool_choice": named}, "'tool_choice' function needs 'tools'"),
            ("/v1/chat/completions", {"tools": [{"type": "retrieval"}], "tool_choice": "required"}, "'tools'[0] must be"),
            ("/v1/chat/completions", {"tools": bad_tool, "tool_choice": "required"},
             "tools[0].function.parameters.properties.a: 'uniqueItems' is not supported"),
            ("/v1/chat/completions", {"tools": tools, "tool_choice": named, **fmt}, "cannot both shape the answer"),
            ("/v1/chat/completions", {"tools": tools, "tool_choice": named, "ignore_eos": True}, "not with 'ignore_eos'"),
            ("/v1/completions", {"prompt": "x", "tools": tools, "tool_choice": named}, "'tools' are for chat completions"),
            ("/v1/chat/completions", {"messages": [{**user, "tool_calls": calls}]}, "only assistant messages carry 'tool_calls'"),
            ("/v1/chat/completions", {"messages": [user, {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
                                                   result]}, "'messages'[1].tool_calls must be a list of"),
            ("/v1/chat/completions", {"messages": [user, {"role": "assistant", "tool_calls": calls}, result, result, user]},
             "messages: 4 turns after the system message"),
            ("/v1/chat/completions", {"messages": [user, result, user]}, "messages[1]: role 'tool' (want 'assistant'")]:
        st, _, r = srv.request("POST", path, {"messages": chat["messages"], **body})
        check(f"tools: {str(body)[:80]}: 400", st == 400 and want in r["error"]["message"], (st, r))
bad_path = schema_file({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}})
r = subprocess.run([os.path.join(BIN, "burst"), "generate", "--model", STORIES, "--prompt", "x", "--json-schema", bad_path],
                   capture_output=True, text=True, timeout=60)
check("burst generate --json-schema refuses what the API refuses, in one line",
      r.returncode == 1 and r.stderr == f"burst: --json-schema {bad_path}: schema.properties.a: 'uniqueItems' is not supported\n",
      (r.returncode, r.stderr))
os.unlink(story_path)
os.unlink(bad_path)
check.exit()
