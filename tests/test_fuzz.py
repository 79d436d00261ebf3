"""Fuzzing the contract (docs/usage.md): whatever the input, kbopt exits 0 or 2 with a message, never
a traceback, a hang or a crash, and both evaluators give the same advice on valid input.

The default profile is short and deterministic (derandomized, a few hundred cases in all, well under 30 s);
KBOPT_FUZZ=long runs many more random cases, for releases (docs/fuzzing.md).
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import needs_durable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbopt.cli import main
from kbopt.engine.evaluators import durable_available
from kbopt.engine.lang.errors import ExprError
from kbopt.engine.lang.parse import parse_condition
from kbopt.engine.pack.loader import builtin_parameters
from kbopt.kb.vocabulary import load_vocabulary

# KBOPT_FUZZ: unset, an eighth of the short counts (the README's test command); `short` (CI's fuzz
# step); `long` (the release profile).
LEVEL = os.environ.get("KBOPT_FUZZ", "quick")
LONG = LEVEL == "long"
CASE_SECONDS = 60 if LONG else 20         # a case past this is a hang, and fails
settings.register_profile("short", derandomize=True, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = settings.get_profile("long" if LONG else "short")


def examples(short: int, long: int = 2000) -> settings:
    return settings(PROFILE, max_examples=long if LONG else short if LEVEL == "short" else max(2, short // 8))


VOCABULARY = load_vocabulary()
INPUT = {section: [spec.path.split(".", 1)[1] for spec in specs] for section, specs in VOCABULARY.input_sections().items()}
ENGINES = ("durable", "reference") if durable_available() is None else ("reference",)


@contextlib.contextmanager
def deadline(seconds: int = CASE_SECONDS) -> Iterator[None]:
    """A hang fails the case instead of stalling the suite."""
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"a case ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with deadline(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_contract(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err) < 8000, len(err)
    if code == 2:
        assert err.startswith("kbopt: "), err


def advise_everywhere(*args: str) -> tuple[int, str]:
    """advise on every evaluator: the same exit code, and the same JSON when it succeeds."""
    results = [cli("advise", "--format", "json", "--evaluator", engine, *args) for engine in ENGINES]
    for code, _, err in results:
        assert_contract(code, err)
    codes = {code for code, _, _ in results}
    assert len(codes) == 1, results
    if codes == {0}:
        assert len({out for _, out, _ in results}) == 1, "the evaluators disagree"
    return results[0][0], results[0][2]


# ---------------------------------------------------------------- facts

NUMBERS = st.one_of(st.integers(min_value=-(2 ** 70), max_value=2 ** 70), st.integers(min_value=0, max_value=10 ** 6),
                    st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=0, max_value=1),
                    st.sampled_from([0, 1, 2 ** 53, 2 ** 53 + 1, 2 ** 63, -1, 0.5, 1e-5, 8.9, 8.96, 1e300]))
SCALARS = st.one_of(NUMBERS, st.booleans(), st.none(), st.text(max_size=20),
                    st.sampled_from(["vllm", "fp8", "int8", "fp16", "8.9", "9.0", "NVIDIA A100-SXM4-80GB", "H100", "chat"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)


def valid_value(spec) -> st.SearchStrategy[object]:
    """Values the vocabulary accepts for one fact, often near the edges of its range."""
    if spec.type == "ratio":
        return st.one_of(st.floats(0, 1), st.sampled_from([0, 1, 0.9, 0.95]))
    if spec.type in ("number", "integer"):
        low = spec.min if spec.min is not None else -(2 ** 53)
        high = spec.max if spec.max is not None else 2 ** 53
        ints = st.integers(int(low) + (1 if spec.exclusive_min else 0), int(high))
        small = st.integers(max(int(low) + 1, 1), min(int(high), 100_000))
        return st.one_of(ints, small) if spec.type == "integer" else st.one_of(small, st.floats(max(low, 0.001), min(high, 1e6)))
    if spec.type == "bool":
        return st.booleans()
    if spec.type == "enum":
        return st.sampled_from(list(spec.values))
    if spec.type == "version":
        return st.sampled_from(["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", 8.9, 9])
    if spec.type == "list":
        return st.lists(st.sampled_from(list(spec.values)), unique=True)
    return st.one_of(st.text(max_size=20), st.sampled_from(["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla T4", "llama"]))


@st.composite
def facts_documents(draw: st.DrawFn) -> dict[str, object]:
    """Mostly valid documents (so that the evaluators are compared), some with a hostile value or key."""
    document: dict[str, object] = {"kbopt": draw(st.sampled_from(["facts/1"] * 9 + ["facts/2"]))}
    for section in draw(st.lists(st.sampled_from(list(INPUT)), max_size=6, unique=True)):
        names = draw(st.lists(st.sampled_from(INPUT[section]), max_size=8, unique=True))
        fields: dict[str, object] = {}
        for name in names:
            hostile = draw(st.integers(0, 19)) == 0
            fields[name] = draw(VALUES if hostile else valid_value(VOCABULARY.facts[f"{section}.{name}"]))
        if draw(st.integers(0, 19)) == 0:
            fields[draw(st.text(max_size=12))] = draw(SCALARS)
        document[section] = fields
    return document


@given(facts_documents(), st.sampled_from(["json", "yaml"]))
@examples(120, 10_000)      # the release profile: 10,000 facts documents
def test_facts_documents(document, form):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"facts.{form}"
        text = json.dumps(document) if form == "json" else yaml.safe_dump(document, allow_unicode=True)
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        advise_everywhere("--facts", str(path))


SET_PATHS = st.sampled_from(["telemetry.memory_used_ratio", "model.num_layers", "hardware.compute_capability",
                             "model.name", "constraints.allowed_precisions", "workload.engine", "derived.bottleneck",
                             "nothing.here", ""])


@given(SET_PATHS, st.one_of(st.text(max_size=40), st.sampled_from(
    ["0.95", "1e400", "nan", ".inf", "&a [*a]", "!!set {a}", "[fp8, int8]", "9" * 30, "8.96", "{a: 1}", "[" * 80])))
@examples(100)
def test_set_values(path, value):
    advise_everywhere("--facts", str(Path(__file__).parent.parent / "examples" / "capacity-a100-chat.json"),
                      "--set", f"{path}={value}")


# ---------------------------------------------------------------- rule files and expressions

NUMERIC = ["workload.itl_p99_ms", "telemetry.memory_used_ratio", "model.num_layers", "workload.seq_len_p99",
           "hardware.compute_capability"]
PARAMETERS = sorted(builtin_parameters())
LITERALS = st.one_of(st.integers(-10, 10 ** 4), st.floats(0, 1).map(lambda x: round(x, 3)),
                     st.sampled_from(["1e400", "9223372036854775808", "0.5", '"vllm"', "true", *PARAMETERS[:5]]))


def leaves() -> st.SearchStrategy[str]:
    comparison = st.builds(lambda f, op, v: f"{f} {op} {v}", st.sampled_from(NUMERIC), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
                           LITERALS)
    membership = st.builds(lambda f, neg, n: f"{f} {'not in' if neg else 'in'} [{', '.join(str(i + 1) for i in range(n))}]",
                           st.sampled_from(["model.num_layers", "serving.max_num_seqs"]), st.booleans(),
                           st.sampled_from([1, 3, 126, 127, 200]))
    other = st.sampled_from(['workload.engine == "vllm"', '"fp8" in constraints.allowed_precisions', "known(model.name)",
                             "missing(workload.engine)", 'quality(telemetry.compute_utilization) == "measured"',
                             "workload.memory_preallocated", "derived.bottleneck == \"memory_capacity\""])
    return st.one_of(comparison, membership, other)


CONDITIONS = st.recursive(leaves(), lambda inner: st.one_of(
    st.builds(lambda a, b, op: f"({a}) {op} ({b})", inner, inner, st.sampled_from(["and", "or"])),
    st.builds(lambda a, n: "not " * n + f"({a})", inner, st.integers(1, 3))), max_leaves=12)


@given(st.one_of(CONDITIONS, st.text(max_size=60), st.builds(lambda n: "not " * n + "workload.itl_p99_ms > 1", st.integers(0, 1500))))
@examples(300)
def test_expressions(text):
    with deadline():
        try:
            parse_condition(text, VOCABULARY, {name: p.value for name, p in builtin_parameters().items()})
        except ExprError:
            pass


BECAUSE = st.one_of(st.just("The inter-token latency is high for this deployment."),
                    st.builds(lambda spec: f"The latency is {{workload.itl_p99_ms:{spec}}} ms here, which is high.",
                              st.sampled_from([".0f", ">10", ">1500000000", ".100f", ".101f", "x", "%", ",.2f"])))


@given(CONDITIONS, BECAUSE, st.sampled_from(["", "1: one\n", "notes: &a [*a]\n", "parameters:\n  lim: {value: .nan, why: "
                                              "A threshold that nothing can ever reach at all.}\n"]))
@examples(30, 1_000)       # the release profile: 1,000 rule packs
def test_rule_files(when, because, extra):
    with tempfile.TemporaryDirectory() as folder:
        rules = Path(folder) / "pack" / "scheduling"
        rules.mkdir(parents=True)
        (rules / "x-fuzz.yaml").write_text(textwrap.dedent(f"""\
            id: X-FUZZ
            title: A fuzzed rule
            layer: scheduling
            when: {json.dumps(when)}
            then:
              - warn: Something to say.
            because: {json.dumps(because)}
            source: seed K2.8
            examples:
              - name: one
                facts: {{workload: {{engine: vllm, itl_p99_ms: 140}}}}
                fires: true
              - name: two
                facts: {{workload: {{engine: vllm, itl_p99_ms: 1}}}}
                fires: false
            """) + extra, encoding="utf-8")
        code, _, err = cli("rules", "lint", str(rules.parent))
        assert code in (0, 2) and "internal error" not in err, err
        facts = str(Path(__file__).parent.parent / "examples" / "capacity-a100-chat.json")
        advise_everywhere("--facts", facts, "--rules", str(rules.parent))


# ---------------------------------------------------------------- in processes of their own


@needs_durable
@given(facts_documents())
@examples(4, 50)
def test_facts_in_a_subprocess(document):
    """A crash of the durable core would kill pytest in process; here it fails the case."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "facts.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "kbopt", "advise", "--facts", str(path), "--format", "json"],
                              capture_output=True, text=True, timeout=CASE_SECONDS)
        assert_contract(done.returncode, done.stderr)


# ---------------------------------------------------------------- collectors: mutated real files

REAL = Path(__file__).parent / "data" / "real"
HOSTILE_TOKENS = ["1e999", "NaN", "+Inf", "-Inf", "-1", "0", "1e300", "10" + "0" * 300, "abc", "", "true", "-0",
                  "1e-320", "99999999999999999999", '"', "{", "}", ",", "\x1b[2J", "le", 'le="x"', 'le="NaN"']


def _sample_lines(name: str, keep: int) -> list[str]:
    """The head of a real file (its header and a few dozen rows): mutations of it reach every parser branch."""
    lines = (REAL / name).read_text(encoding="utf-8").splitlines()
    if name.endswith(".prom"):      # the samples a collector reads, not only the HELP/TYPE lines
        lines = [line for line in lines if line.startswith("#") is False or "TYPE" in line]
    return lines[:keep]


@st.composite
def mutated(draw: st.DrawFn, names: tuple[str, ...], keep: int) -> tuple[str, str]:
    """A real exporter scrape or trace with a few lines changed: a value, a label or a field replaced
    by a hostile token, a line dropped or repeated, text inserted."""
    name = draw(st.sampled_from(names))
    lines = _sample_lines(name, keep)
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        line = lines[index]
        how = draw(st.sampled_from(["value", "token", "drop", "repeat", "insert"]))
        token = draw(st.one_of(st.sampled_from(HOSTILE_TOKENS), st.text(max_size=8)))
        if how == "value":                  # the last field: a sample's value, a trace's last column
            cut = max(line.rfind(" "), line.rfind(","), line.rfind(":"))
            lines[index] = line[:cut + 1] + token + ("}" if line.endswith("}") else "")
        elif how == "token":                # any number in the line
            numbers = [i for i, c in enumerate(line) if c.isdigit()]
            if numbers:
                at = draw(st.sampled_from(numbers))
                lines[index] = line[:at] + token + line[at + 1:]
        elif how == "drop" and len(lines) > 1:
            del lines[index]
        elif how == "repeat":
            lines.insert(index, line)
        else:
            at = draw(st.integers(0, len(line)))
            lines[index] = line[:at] + token + line[at:]
    return name, "\n".join(lines) + "\n"


PROM_FILES = tuple(sorted(p.name for p in REAL.glob("*.prom")))
TRACE_FILES = ("mooncake_fast25_conversation_first610.jsonl", "azure_llm_2023_code_first2000.csv",
               "azure_llm_2023_conv_first2000.csv", "vllm_bench_serve_result_qwen25vl3b.json")


@given(mutated(PROM_FILES, 400))
@examples(120, 2000)
def test_mutated_exporter_files(case):
    name, text = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        code, _, err = cli("collect", "--metrics", str(path), "--no-nvml")
        assert_contract(code, err)


@given(mutated(TRACE_FILES, 40), st.sampled_from(["60", "1", "0", "-5", "nan", "inf", "1e-300", "1e300"]))
@examples(120, 2000)
def test_mutated_traces(case, window):
    name, text = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        code, _, err = cli("collect", "--workload", str(path), "--no-nvml", "--window", window)
        assert_contract(code, err)


# ---------------------------------------------------------------- rendered outputs: input strings stay inert

CONTROLS = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u2028\u2029]"
HOSTILE_TEXT = st.lists(st.one_of(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4),
                                  st.sampled_from(["\x1b", "\r", "\x07", "\x9b", "\u202e", "<", ">", "![", "](", "`", "|",
                                                   "&", "*", "\\", "[", "]", "<img src=x>", "\x1b]8;;http://e\x07"])),
                        min_size=1, max_size=8).map("".join)


@given(HOSTILE_TEXT, HOSTILE_TEXT, HOSTILE_TEXT, st.sampled_from(["text", "md"]))
@examples(60, 1000)
def test_rendered_outputs_keep_input_strings_inert(name, source, metric, form):
    """A hostile model name and provenance in the text (terminal) and Markdown reports: no raw
    control character, and in Markdown no raw `<` or image from them."""
    import re
    document = json.loads((Path(__file__).parent.parent / "examples" / "capacity-a100-chat.json").read_text())
    document["model"]["name"] = name
    document["provenance"] = {"model.name": {"source": source, "quality": "measured", "metric": metric, "note": name}}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "facts.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        code, out, err = cli("advise", "--facts", str(path), "--format", form, *(["--explain"] if form == "text" else []))
    assert_contract(code, err)
    if code == 0:
        assert not re.search(CONTROLS, out.replace("\n", "")), ascii(out)
        if form == "text":
            assert "\t" not in out
        else:
            assert not re.search(r"<(?!U\+[0-9A-F]{4,6}>)", out) and "![" not in out, out


@pytest.mark.skipif(not LONG, reason="KBOPT_FUZZ=long only")
def test_long_profile_is_selected():
    assert PROFILE.derandomize is False


# ---------------------------------------------------------------- a hostile HTTP server: kbopt fleet, collect --metrics URL

TIMEOUT = 0.4          # --timeout of these cases: a trickled answer meets it
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 400), 10 ** 400), st.floats(),
                                     st.text(max_size=12), st.sampled_from(["3", "NaN", "+Inf", "1e999", "", "abc"])),
                           lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner,
                                                                                               max_size=3)), max_leaves=6)


@st.composite
def prometheus_bodies(draw: st.DrawFn) -> bytes:
    """What a server may send as a query's answer: Prometheus' own, with fields of any type, or not."""
    kind = draw(st.sampled_from(["vector", "vector", "typed", "nested", "error", "junk"]))
    if kind == "vector":              # well-formed, with labels and values Prometheus would never send
        rows = draw(st.lists(st.tuples(st.dictionaries(st.sampled_from(["instance", "model_name", "pod", "namespace",
                                                                        "le", "gpu", "x"]),
                                                       st.one_of(st.text(max_size=8), st.none(), st.booleans(),
                                                                 st.integers())), JSON_VALUES), max_size=3))
        extra = {"warnings": draw(JSON_VALUES)} if draw(st.booleans()) else {}
        return json.dumps({"status": "success", **extra, "data": {"resultType": "vector", "result": [
            {"metric": {"instance": "10.0.0.1:8000", "model_name": "m", **m}, "value": [0, v]} for m, v in rows]}}).encode()
    if kind == "typed":               # any shape at any level
        return json.dumps({"status": draw(st.sampled_from(["success", "error", None])), "data": draw(JSON_VALUES),
                           "warnings": draw(JSON_VALUES), "error": draw(JSON_VALUES)}).encode()
    if kind == "nested":
        depth = draw(st.sampled_from([10, 999, 5000, 100_000]))
        return b'{"status": "success", "data": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "error":
        return json.dumps({"status": "error", "errorType": "bad_data", "error": draw(st.text(max_size=40))}).encode()
    return draw(st.binary(max_size=64))


STATUS_LINES = st.one_of(st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK", b"HTTP/1.1 500 Oops", b"HTTP/1.1 429 Slow",
                                          b"HTTP/1.1 404 Not Found", b"HTTP/1.1 422 Bad", b"HTTP/1.1 204 No Content",
                                          b"HTTP/1.1 302 Found", b"HTTP/1.1 307 Again", b"HTTP/1.1 100 Continue",
                                          b"HTTP/1.1 abc OK", b"HTTP/9.9 200 OK", b"SSH-2.0-OpenSSH", b"",
                                          b"HTTP/1.1 200 " + b"x" * 70_000]),
                         st.binary(max_size=20).filter(lambda b: b"\n" not in b))
LOCATIONS = st.sampled_from([b"/api/v1/query", b"/prometheus/api/v1/query", b"http://127.0.0.1:1/x", b"ftp://127.0.0.1/x",
                             b"javascript:alert(1)", b"", b"//example.invalid/x", b"http://[::1", b"/\x1b[2J"])
HEADER_LINES = st.one_of(st.builds(lambda loc: b"Location: " + loc, LOCATIONS),
                         st.sampled_from([b"Content-Type: application/json", b"Content-Length: abc", b"Content-Length: -5",
                                          b"Content-Length: 99999999999999", b"Transfer-Encoding: gzip", b"X: \x00\x1b",
                                          b"no colon here", b" folded: line", b"X-A: " + b"b" * 70_000]),
                         st.builds(lambda n: b"\r\n".join([b"X-A: b"] * n), st.sampled_from([99, 101, 500])),
                         st.binary(max_size=16).filter(lambda b: b"\n" not in b and b"\r" not in b))


@st.composite
def hostile_answers(draw: st.DrawFn) -> tuple[bytes, float]:
    """An answer's bytes (status line, headers, framing, body) and the pause between its pieces:
    zero, or a trickle that meets the deadline."""
    status = draw(STATUS_LINES)
    headers = draw(st.lists(HEADER_LINES, max_size=3))
    body = draw(prometheus_bodies())
    framing = draw(st.sampled_from(["length", "length", "chunked", "bad chunk", "close", "short", "long"]))
    if framing == "chunked":
        pieces = [body[i:i + 7] for i in range(0, len(body), 7)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        headers.append(b"Transfer-Encoding: chunked")
    elif framing == "bad chunk":
        body = draw(st.sampled_from([b"zz\r\n", b"-1\r\n", b"5\r\nab", b"ffffffffffffffff\r\n", b"7;ext\r\n"])) + body
        headers.append(b"Transfer-Encoding: chunked")
    elif framing in ("length", "short", "long"):
        headers.append(b"Content-Length: %d" % (len(body) + {"length": 0, "short": -1, "long": 10}[framing]))
    data = b"\r\n".join([status, *headers]) + b"\r\n\r\n" + body
    trickle = draw(st.sampled_from([0.0] * 9 + [0.02]))
    return data, trickle


def _served(case: tuple[bytes, float]):
    from hostile_server import HostileServer
    data, trickle = case
    if trickle:      # the pieces' pauses add up past the deadline
        pieces = [(data[i:i + max(1, len(data) // 40)], trickle) for i in range(0, len(data), max(1, len(data) // 40))]
        return HostileServer(lambda request: pieces)
    return HostileServer(lambda request: [(data, 0.0)])


@given(hostile_answers(), st.sampled_from(["0", "0", "1"]))
@examples(25, 10_000)         # the release profile: 10,000 answers
def test_fleet_against_a_hostile_server(case, retries):
    import time
    server = _served(case)
    try:
        started = time.monotonic()
        code, _, err = cli("fleet", "--prometheus", server.url, "--timeout", str(TIMEOUT), "--retries", retries)
        took = time.monotonic() - started
    finally:
        server.close()
    assert_contract(code, err)
    # Each query attempt ends at the deadline, the first failed query ends the read, a retry waits
    # 0.5 s; advising the one replica a well-formed answer names takes the rest. The slack is for a
    # loaded machine (3.4-5.1 s were seen on 2 shared cores): what this catches is a read that does
    # not stop at its deadline (a trickling server would hold it for minutes), not a slow advice.
    assert took < (int(retries) + 1) * TIMEOUT + 0.5 * int(retries) + 10.0, took


@given(hostile_answers())
@examples(15, 10_000)
def test_collect_from_a_hostile_exporter(case):
    server = _served(case)
    try:
        code, _, err = cli("collect", "--no-nvml", "--metrics", server.url + "/metrics", "--duration", "0.01")
    finally:
        server.close()
    assert_contract(code, err)


# ---------------------------------------------------------------- planted and corrupted pack cache entries

@given(st.data())
@examples(15, 10_000)
def test_a_corrupted_cache_entry_at_worst_costs_a_rebuild(data):
    """Bytes flipped, cut or inserted, a class name, a tag or a field replaced: loading either
    gives a pack checked field by field or rebuilds it; nothing the entry names is ever called."""
    from kbopt.engine.pack import cache
    from kbopt.engine.pack.rule import Pack
    entry = _cache_entry()
    how = data.draw(st.sampled_from(["flip", "cut", "insert", "class", "tag", "field"]))
    if how == "flip":
        at = data.draw(st.integers(0, len(entry) - 1))
        entry = entry[:at] + bytes([entry[at] ^ data.draw(st.integers(1, 255))]) + entry[at + 1:]
    elif how == "cut":
        entry = entry[:data.draw(st.integers(0, len(entry) - 1))]
    elif how == "insert":
        at = data.draw(st.integers(0, len(entry)))
        inserted = data.draw(st.sampled_from([b"[", b'["R",999999],', b'"x",', b"1e999,", b"9" * 5000 + b","]))
        entry = entry[:at] + inserted + entry[at:]
    elif how == "class":
        entry = entry.replace(b'"kbopt.engine.lang.nodes.Fact"', b'"' + data.draw(st.sampled_from(
            [b"os.system", b"builtins.eval", b"kbopt.engine.pack.cache.io.FileIO", b"kbopt.engine.pack.rule.Pack",
             b"subprocess.Popen"])) + b'"', 1)
    elif how == "tag":
        entry = entry.replace(b'["T",', b"[" + data.draw(st.sampled_from([b'"X",', b"-1,", b"99999,", b'"R",', b"true,"])), 1)
    else:
        entry = entry.replace(b'["rules",', b'["' + data.draw(
            st.sampled_from([b"__class__", b"__dict__", b"__reduce__", b"rules2"])) + b'",', 1)
    with tempfile.TemporaryDirectory() as folder, _cache_in(folder):
        key = cache.pack_key(())
        Path(folder, f"pack-{key}.json").write_bytes(entry)
        os.chmod(folder, 0o700)
        built = []
        pack = cache.cached_pack((), lambda: built.append(1) or _built_pack())
        assert isinstance(pack, Pack) and pack.rules


@contextlib.contextmanager
def _cache_in(folder: str) -> Iterator[None]:
    previous = os.environ.get("KBOPT_CACHE_DIR")
    os.environ["KBOPT_CACHE_DIR"] = folder
    try:
        yield
    finally:
        if previous is None:
            del os.environ["KBOPT_CACHE_DIR"]
        else:
            os.environ["KBOPT_CACHE_DIR"] = previous


@functools.cache
def _built_pack():
    from kbopt.engine.pack.loader import load_pack
    return load_pack()


@functools.cache
def _cache_entry() -> bytes:
    from kbopt.engine.pack import cache
    return cache.encode(_built_pack())


# ---------------------------------------------------------------- big numbers in YAML facts and in exposition text

BIG_INTEGERS = st.one_of(st.integers(4290, 4310), st.integers(5000, 5002), st.integers(300, 400)).map(
    lambda n: "9" * n) | st.builds(lambda n, sign: sign + "1" + "0" * n, st.integers(15, 5000), st.sampled_from(["", "-", "+"]))


@given(BIG_INTEGERS, st.sampled_from(["model.num_layers", "workload.itl_p99_ms", "telemetry.memory_used_ratio",
                                      "hardware.gpu_count", "workload.x"]), st.sampled_from(["yaml", "json", "set"]))
@examples(20, 10_000)
def test_big_integers_in_facts(number, path, form):
    section, name = path.split(".")
    with tempfile.TemporaryDirectory() as folder:
        if form == "set":
            code, _, err = cli("advise", "--facts", str(Path(__file__).parent.parent / "examples" / "capacity-a100-chat.json"),
                               "--set", f"{path}={number}")
        else:
            file = Path(folder) / f"facts.{form}"
            file.write_text(f"kbopt: facts/1\n{section}:\n  {name}: {number}\n" if form == "yaml"
                            else f'{{"kbopt": "facts/1", "{section}": {{"{name}": {number}}}}}', encoding="utf-8")
            code, _, err = cli("advise", "--facts", str(file))
    assert_contract(code, err)
    assert code == 2 and (path in err or "--set" in err or (form == "json" and number.startswith("+"))), err


@given(BIG_INTEGERS, st.sampled_from(['DCGM_FI_DEV_GPU_UTIL{gpu="0"}', 'vllm:num_requests_running{model_name="m"}',
                                      'vllm:num_preemptions_total{model_name="m"}', 'DCGM_FI_DEV_FB_USED{gpu="0"}']))
@examples(20, 10_000)
def test_big_integers_in_exposition_text(number, sample):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.prom"
        path.write_text(f'{sample} {number}\nDCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 250\n', encoding="utf-8")
        code, _, err = cli("collect", "--metrics", str(path), "--no-nvml")
    assert_contract(code, err)
