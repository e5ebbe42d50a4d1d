"""The embedded sample corpus (data=sample), built offline from the running Python installation.

One source per phase, all real text and nothing downloaded:
- general:   English prose: the language reference topics that pydoc ships (pydoc_data) and the
             docstrings of the standard library's modules, classes and functions; interleaved with
             as many characters of Chinese encyclopedia-like and web-like articles, generated from
             jieba's dictionary (pretrain.data.chinese), as a Chinese-English corpus has.
- reasoning: code (standard-library functions, their real source) plus generated arithmetic,
             algebra and logic problems with worked solutions.
- anneal:    instruction/answer pairs made from the same material ("Explain what `json.dumps`
             does." -> its docstring; "Write `textwrap.dedent`..." -> its source; problems), and
             Chinese ones (worked problems, continuing a paragraph, titling an article).

Sources are parsed with `ast` (never imported: importing the whole stdlib is slow and has side
effects). Everything is deterministic for a given Python installation; the held-out split is
keyed by the stdlib object a document comes from, so "json.dumps" is held out in all three
sources at once and never leaks from one phase's training data into another's validation (a
generated Chinese document is keyed by its place in its stream).
"""
import ast
import functools
import itertools
import random
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

from pretrain.data import chinese
from pretrain.data.hashing import file_sha256, stable_int
from pretrain.data.documents import Doc

# lazy imports (pydoc_data): optional; some distributions strip it

BUILTINS = ("general", "reasoning", "anneal")
# Characters per source: enough for the tiny model's ~600k-token curriculum without repeats,
# small enough to prepare in well under a minute on two cores.
BUDGET = {"general": 2_500_000, "reasoning": 2_000_000, "anneal": 1_200_000}
# The Chinese share of a source's characters: half of a general-phase corpus is Chinese text.
CHINESE = {"general": 0.5, "anneal": 0.2}
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo",
              "ensurepip", "pydoc_data", "__pycache__"}


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def fingerprint(builtin: str) -> dict:
    """What the generated text depends on: this generator's code and the Python installation, and
    for the sources with Chinese text the Chinese generator's code and jieba's dictionary."""
    out = {"builtin": builtin, "generator": file_sha256(Path(__file__)), "python": sys.version,
           "stdlib": str(stdlib_dir())}
    if builtin in CHINESE:
        out["chinese"] = {"generator": file_sha256(Path(chinese.__file__)),
                          "dictionary": chinese.dictionary_sha256()}
    return out


def documents(builtin: str) -> Iterator[Doc]:
    return {"general": _general, "reasoning": _reasoning, "anneal": _anneal}[builtin]()


# ---------------------------------------------------------------- the stdlib as parsed entries

@dataclass(frozen=True)
class Entry:
    qualname: str            # json.dumps, json.JSONEncoder, json.JSONEncoder.encode, json
    kind: str                # module | class | function
    signature: str           # "(obj, *, skipkeys=False, ...)" for functions, "(bases)" for classes
    doc: str
    code: str                # dedented source of functions; "" for modules and classes

    @property
    def key(self) -> bytes:
        return self.qualname.encode()

    @property
    def public(self) -> bool:
        return not any(p.startswith("_") and not p.startswith("__") for p in self.qualname.split("."))


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _stdlib_files() -> List[Path]:
    root = stdlib_dir()
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if set(rel.parts[:-1]) & _SKIP_DIRS or rel.name.startswith(("test_", "_test")):
            continue
        if rel.parts[0].startswith("config-"):
            continue
        out.append(p)
    return out


@functools.lru_cache(maxsize=1)
def stdlib_entries() -> Tuple[Entry, ...]:
    """Every module, class and function of the stdlib with its docstring and source, in a
    stable order. Cached: the three sources share one parse (~2 s)."""
    root = stdlib_dir()
    entries: List[Entry] = []
    for path in _stdlib_files():
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        lines = source.splitlines()
        entries.extend(_entries_of(_module_name(path.relative_to(root)), tree, lines))
    return tuple(entries)


def _entries_of(module: str, tree: ast.Module, lines: List[str]) -> Iterator[Entry]:
    yield Entry(module, "module", "", ast.get_docstring(tree) or "", "")

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = f"{prefix}.{node.name}"
                bases = ", ".join(ast.unparse(b) for b in node.bases)
                yield Entry(name, "class", f"({bases})" if bases else "", ast.get_docstring(node) or "", "")
                yield from visit(node.body, name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
                code = textwrap.dedent("\n".join(lines[start:node.end_lineno]))
                yield Entry(f"{prefix}.{node.name}", "function", f"({ast.unparse(node.args)})",
                            ast.get_docstring(node) or "", code)
    yield from visit(tree.body, module)


def _hash_order(entries, salt: str):
    """A stable pseudo-random order, so a budget takes a spread of the stdlib, not 'a*' modules."""
    return sorted(entries, key=lambda e: stable_int(salt + e.qualname, 64))


def _take(docs: Iterator[Doc], budget: int) -> Iterator[Doc]:
    used = 0
    for d in docs:
        if used >= budget:
            return
        used += len(d.text)
        yield d


def _interleave(*streams: Iterator[Doc]) -> Iterator[Doc]:
    """The documents of all streams, each next one from the stream that has given the fewest
    characters so far: the languages stay mixed throughout the source (and in any part of it that
    the tokenizer's sample or a short run reads), not one after the other."""
    live = [[0, i, s] for i, s in enumerate(streams)]
    while live:
        entry = min(live)
        d = next(entry[2], None)
        if d is None:
            live.remove(entry)
            continue
        entry[0] += len(d.text)
        yield d


# ---------------------------------------------------------------- the three sources

def _general() -> Iterator[Doc]:
    def gen():
        try:
            from pydoc_data.topics import topics
        except ImportError:       # some distributions strip pydoc_data
            topics = {}
        for name in sorted(topics):
            yield Doc(topics[name].strip(), key=f"topic:{name}".encode())
        for e in stdlib_entries():
            if not e.doc:
                continue
            head = {"module": f"Module {e.qualname}",
                    "class": f"class {e.qualname}{e.signature}",
                    "function": f"{e.qualname}{e.signature}"}[e.kind]
            yield Doc(f"{head}\n\n{e.doc}", key=e.key)
    zh = int(BUDGET["general"] * CHINESE["general"])
    return _interleave(_take(gen(), BUDGET["general"] - zh), _take(zh_articles(random.Random(3)), zh))


def _reasoning() -> Iterator[Doc]:
    code_budget = int(BUDGET["reasoning"] * 0.65)

    def code():
        for e in _hash_order(stdlib_entries(), "code:"):
            if e.kind == "function" and 100 <= len(e.code) <= 4000:
                module = e.qualname.rsplit(".", 1)[0]
                yield Doc(f"# from {module}\n{e.code}", key=e.key)
    yield from _take(code(), code_budget)
    yield from _take(problem_sets(random.Random(1), most=4), BUDGET["reasoning"] - code_budget)


def pair(instruction: str, response: str) -> str:
    return f"### Instruction\n{instruction}\n\n### Response\n{response}"


def _anneal() -> Iterator[Doc]:
    def from_stdlib():
        for i, e in enumerate(_hash_order(stdlib_entries(), "anneal:")):
            if not (e.public and e.doc):
                continue
            first = e.doc.strip().split("\n\n")[0].replace("\n", " ")
            if e.kind == "module":
                yield Doc(pair(f"Summarize what the Python module `{e.qualname}` is for.", first), key=e.key)
            elif e.kind == "function" and e.code and len(e.code) <= 2500 and i % 3 == 0:
                name = e.qualname.rsplit(".", 1)[1]
                yield Doc(pair(f"Write the Python function `{name}{e.signature}` from `{e.qualname}`. "
                               f"It should do the following: {first}", e.code), key=e.key)
            elif e.kind == "function" and i % 3 == 1:
                yield Doc(pair(f"What is the signature of `{e.qualname}`, and what does it return "
                               f"or do?", f"`{e.qualname}{e.signature}`: {first}"), key=e.key)
            else:
                yield Doc(pair(f"Explain what `{e.qualname}` does.", e.doc), key=e.key)

    zh = int(BUDGET["anneal"] * CHINESE["anneal"])
    stdlib_budget = int(BUDGET["anneal"] * 0.75) - zh

    def solved():
        for p in problems(random.Random(2)):
            yield Doc(pair(f"Solve the following problem and show your work.\n{p.question}",
                           f"{p.solution}\nAnswer: {p.answer}"))
    english = itertools.chain(_take(from_stdlib(), stdlib_budget),
                              _take(solved(), BUDGET["anneal"] - zh - stdlib_budget))
    yield from _interleave(english, _take(zh_pairs(random.Random(4)), zh))


# ---------------------------------------------------------------- Chinese documents

_SECTIONS = ("概述", "历史", "发展", "特点", "分布", "结构", "影响", "现状", "研究", "评价")


def _year(rng: random.Random) -> str:
    return f"{rng.randint(1840, 2023)}年"


def _paragraph(rng: random.Random, least: int, most: int) -> str:
    """A paragraph of least..most sentences, some dated (digits in Chinese text, as in real articles)."""
    p = chinese.prose()
    return "".join((f"{_year(rng)}，" if rng.random() < 0.1 else "") + p.sentence(rng)
                   for _ in range(rng.randint(least, most)))


def _encyclopedia(rng: random.Random) -> str:
    p = chinese.prose()
    title = p.noun(rng)
    lead = f"{title}是{p.noun(rng)}的{p.noun(rng)}。" + _paragraph(rng, 1, 3)
    sections = rng.sample(_SECTIONS, rng.randint(2, 4))
    return "\n\n".join([title, lead] + [f"{h}\n{_paragraph(rng, 2, 6)}" for h in sections])


def _web_page(rng: random.Random) -> str:
    p = chinese.prose()
    headline = p.sentence(rng, most=10)[:-1]
    date = f"{rng.randint(2005, 2023)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    byline = f"发布时间：{date}　来源：{p.noun(rng)}网"
    body = [_paragraph(rng, 1, 5) for _ in range(rng.randint(2, 7))]
    return "\n".join([headline, byline, *body] + (["（完）"] if rng.random() < 0.3 else []))


def zh_articles(rng: random.Random) -> Iterator[Doc]:
    """Chinese encyclopedia-like and web-like articles, endlessly; each keyed by its number."""
    for i in itertools.count():
        make = _encyclopedia if rng.random() < 0.5 else _web_page
        yield Doc(make(rng), key=f"zh-article:{i}".encode())


def _zh_multiply(rng: random.Random) -> Tuple[str, str]:
    a, b = rng.randint(12, 999), rng.randint(12, 99)
    tens, ones = b - b % 10, b % 10
    return (f"计算 {a} × {b}。",
            f"把 {b} 拆成 {tens} + {ones}。{a} × {tens} = {a * tens}，{a} × {ones} = {a * ones}。"
            f"两部分相加：{a * tens} + {a * ones} = {a * b}。\n答案：{a * b}")


def _zh_divide(rng: random.Random) -> Tuple[str, str]:
    d, n = rng.randint(3, 19), rng.randint(100, 9999)
    q, m = divmod(n, d)
    return (f"求 {n} 除以 {d} 的商和余数。",
            f"{d} × {q} = {d * q}，{n} − {d * q} = {m}，{m} 小于 {d}。所以 {n} = {d} × {q} + {m}。"
            f"\n答案：商 {q}，余数 {m}")


def _zh_linear(rng: random.Random) -> Tuple[str, str]:
    a, x, b = rng.randint(2, 12), rng.randint(1, 30), rng.randint(1, 50)   # no negatives: no "× -15"
    c = a * x + b
    return (f"解方程：{a}x + {b} = {c}。",
            f"两边同时减去 {b}：{a}x = {c - b}。两边同时除以 {a}：x = {x}。"
            f"检验：{a} × {x} + {b} = {c}。\n答案：x = {x}")


def _zh_percent(rng: random.Random) -> Tuple[str, str]:
    p, n = rng.choice([5, 10, 15, 20, 25, 40, 50, 75]), rng.randint(2, 500) * 20
    return (f"{n} 的 {p}% 是多少？",
            f"{p}% 就是 {p}/100。{n} × {p} = {n * p}，{n * p} ÷ 100 = {n * p / 100:g}。"
            f"\n答案：{n * p / 100:g}")


def _zh_continue(rng: random.Random) -> Tuple[str, str]:
    return f"请续写下面这段文字：\n{_paragraph(rng, 2, 3)}", _paragraph(rng, 2, 4)


def _zh_introduce(rng: random.Random) -> Tuple[str, str]:
    p = chinese.prose()
    title = p.noun(rng)
    return f"请简要介绍“{title}”。", f"{title}是{p.noun(rng)}的{p.noun(rng)}。" + _paragraph(rng, 2, 4)


def _zh_title(rng: random.Random) -> Tuple[str, str]:
    article = _web_page(rng).split("\n")
    return "为下面的文章拟一个标题：\n" + "\n".join(article[2:]), article[0]


_ZH_TASKS = (_zh_multiply, _zh_divide, _zh_linear, _zh_percent, _zh_continue, _zh_introduce, _zh_title)


def zh_pairs(rng: random.Random) -> Iterator[Doc]:
    """Chinese instruction/answer pairs, endlessly: worked problems and writing tasks."""
    for i in itertools.count():
        instruction, response = rng.choice(_ZH_TASKS)(rng)
        yield Doc(pair(instruction, response), key=f"zh-pair:{i}".encode())


# ---------------------------------------------------------------- generated problems

@dataclass(frozen=True)
class Problem:
    family: str
    question: str
    solution: str
    answer: str


def problem_sets(rng: random.Random, most: int) -> Iterator[Doc]:
    """Worked problems grouped 1..most to a document (an 'exercise set'); the varied lengths
    also give the packer short documents to fill rows with."""
    stream = problems(rng)
    while True:
        ps = [next(stream) for _ in range(rng.randint(1, most))]
        yield Doc("\n\n".join(f"Problem: {p.question}\nSolution: {p.solution}\nAnswer: {p.answer}"
                              for p in ps))


def problems(rng: random.Random) -> Iterator[Problem]:
    while True:
        name, fn = rng.choice(FAMILIES)
        q, s, a = fn(rng)
        yield Problem(name, q, s, a)


def _multiply(r):
    a, b = r.randint(12, 999), r.randint(12, 99)
    tens, ones = b - b % 10, b % 10
    return (f"Compute {a} × {b}.",
            f"Split {b} into {tens} + {ones}. {a} × {tens} = {a * tens} and {a} × {ones} = {a * ones}. "
            f"Adding the partial products: {a * tens} + {a * ones} = {a * b}.", str(a * b))


def _add(r):
    a, b = r.randint(1000, 99999), r.randint(1000, 99999)
    steps, total, place = [], a, 1
    while place <= b:
        digit = (b // place) % 10
        if digit:
            steps.append(f"{total} + {digit * place} = {total + digit * place}")
            total += digit * place
        place *= 10
    return (f"Compute {a} + {b}.", f"Add {b} one place value at a time: " + "; ".join(steps) + ".",
            str(a + b))


def _subtract(r):
    a, b = sorted((r.randint(100, 9999), r.randint(100, 9999)), reverse=True)
    hundreds = b - b % 100
    return (f"Compute {a} − {b}.",
            f"Subtract {hundreds} first: {a} − {hundreds} = {a - hundreds}. "
            f"Then subtract the remaining {b % 100}: {a - hundreds} − {b % 100} = {a - b}.", str(a - b))


def _divide(r):
    d = r.randint(3, 19)
    n = r.randint(100, 9999)
    q, m = divmod(n, d)
    return (f"Divide {n} by {d} and give the quotient and remainder.",
            f"{d} × {q} = {d * q}, and {n} − {d * q} = {m}, which is less than {d}. "
            f"So {n} = {d} × {q} + {m}.", f"quotient {q}, remainder {m}")


def _linear(r):
    a, x, b = r.randint(2, 12), r.randint(-20, 30), r.randint(-50, 50)
    c = a * x + b
    sign = "+" if b >= 0 else "−"
    return (f"Solve for x: {a}x {sign} {abs(b)} = {c}.",
            f"{'Subtract' if b >= 0 else 'Add'} {abs(b)} {'from' if b >= 0 else 'to'} both sides: "
            f"{a}x = {c - b}. Divide both sides by {a}: x = {(c - b) // a}. "
            f"Check: {a} × {x} {sign} {abs(b)} = {c}.", f"x = {x}")


def _gcd(r):
    g = r.randint(2, 30)
    a, b = g * r.randint(5, 60), g * r.randint(2, 40)
    a, b = max(a, b), min(a, b)
    steps, x, y = [], a, b
    while y:
        steps.append(f"{x} = {x // y} × {y} + {x % y}")
        x, y = y, x % y
    return (f"Find the greatest common divisor of {a} and {b}.",
            "Use the Euclidean algorithm: " + "; ".join(steps) + f". The last non-zero remainder is {x}.",
            str(x))


def _fractions(r):
    a, b, c, d = r.randint(1, 9), r.randint(2, 12), r.randint(1, 9), r.randint(2, 12)
    den = b * d // gcd(b, d)
    num = a * den // b + c * den // d
    g = gcd(num, den)
    reduced = f"{num // g}/{den // g}" if den // g != 1 else str(num // g)
    tail = f" Dividing by the common factor {g} gives {reduced}." if g > 1 else ""
    return (f"Add the fractions {a}/{b} and {c}/{d}.",
            f"The least common denominator is {den}. {a}/{b} = {a * den // b}/{den} and {c}/{d} = "
            f"{c * den // d}/{den}. Their sum is {num}/{den}.{tail}", reduced)


def _percent(r):
    p, n = r.choice([5, 10, 12, 15, 20, 25, 30, 40, 50, 75]), r.randint(2, 80) * 20
    return (f"What is {p}% of {n}?",
            f"{p}% means {p}/100. {n} × {p} = {n * p}, and {n * p} / 100 = {n * p / 100:g}.",
            f"{n * p / 100:g}")


def _sequence(r):
    if r.random() < 0.5:
        start, step = r.randint(-20, 50), r.randint(2, 15)
        seq = [start + i * step for i in range(5)]
        nxt = seq[-1] + step
        why = f"Each term is {step} more than the one before, so the next term is {seq[-1]} + {step} = {nxt}."
    else:
        start, ratio = r.randint(1, 6), r.randint(2, 4)
        seq = [start * ratio ** i for i in range(5)]
        nxt = seq[-1] * ratio
        why = f"Each term is {ratio} times the one before, so the next term is {seq[-1]} × {ratio} = {nxt}."
    return (f"What number comes next: {', '.join(map(str, seq))}, ...?", why, str(nxt))


_NAMES = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kemal", "Lena"]
_ATTRS = [("taller", "tallest"), ("older", "oldest"), ("faster", "fastest"), ("heavier", "heaviest")]


def _ordering(r):
    people = r.sample(_NAMES, r.randint(3, 5))          # people[0] has the most of the attribute
    comp, sup = r.choice(_ATTRS)
    facts = [f"{people[i]} is {comp} than {people[i + 1]}." for i in range(len(people) - 1)]
    r.shuffle(facts)
    chain = " > ".join(people)
    return (" ".join(facts) + f" Who is the {sup}?",
            f"Chaining the comparisons gives the order {chain}. Nobody is {comp} than {people[0]}.",
            people[0])


_NONSENSE = ["blickets", "daxes", "wugs", "florps", "zorbs", "tulvers", "greebles", "snarks", "mimsies"]


def _syllogism(r):
    a, b, c = r.sample(_NONSENSE, 3)
    if r.random() < 0.5:
        return (f"All {a} are {b}. All {b} are {c}. Must every one of the {a} be one of the {c}?",
                f"Every one of the {a} is one of the {b}, and every one of the {b} is one of the {c}; "
                f"the inclusion is transitive, so every one of the {a} is one of the {c}.", "yes")
    return (f"All {a} are {b}. Some {b} are {c}. Must some of the {a} be {c}?",
            f"The {b} that are {c} might all lie outside the {a}: the {a} are only some of the {b}. "
            f"Nothing forces an overlap between the {a} and the {c}.", "no, not necessarily")


def _boolean(r):
    vals = [r.choice([True, False]) for _ in range(3)]
    op1, op2 = r.choice(["and", "or"]), r.choice(["and", "or"])
    neg = r.choice(["", "not "])
    x, y, z = vals
    inner = (x and y) if op1 == "and" else (x or y)
    left = (not inner) if neg else inner
    result = (left and z) if op2 == "and" else (left or z)
    return (f"Evaluate the Python expression ({neg}({x} {op1} {y})) {op2} {z}.",
            f"{x} {op1} {y} is {inner}." + (f" not {inner} is {left}." if neg else "") +
            f" {left} {op2} {z} is {result}.", str(result))


def _count_multiples(r):
    k, n = r.randint(3, 17), r.randint(50, 1000)
    return (f"How many multiples of {k} are there from 1 to {n}?",
            f"The multiples are {k}, {2 * k}, ..., {k * (n // k)}, which is {k} × 1 up to {k} × {n // k}. "
            f"{n} divided by {k} is {n / k:.2f}, and we keep the whole part.", str(n // k))


FAMILIES: List[Tuple[str, Callable]] = [
    ("multiply", _multiply), ("add", _add), ("subtract", _subtract), ("divide", _divide),
    ("linear", _linear), ("gcd", _gcd), ("fractions", _fractions), ("percent", _percent),
    ("sequence", _sequence), ("ordering", _ordering), ("syllogism", _syllogism),
    ("boolean", _boolean), ("count_multiples", _count_multiples),
]
