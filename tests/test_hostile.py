"""Regression tests for what a fuzz campaign broke ("Hostile input"): each reproducer must now give
exit 0 or 2 with a one-paragraph message, never a traceback, a hang or a crash."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import needs_durable
from hostile_server import HostileServer, answer, one_replica, trickled, vector

from kbopt import output
from kbopt.collectors.fleet import FAMILIES
from kbopt.engine.evaluators import durable_available
from kbopt.errors import MAX_MESSAGE, KboptError

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "capacity-a100-chat.json")
FACTS = {"kbopt": "facts/1", "model": {"num_layers": 32}, "workload": {"itl_p99_ms": 140, "engine": "vllm"}}


def write_pack(root: Path, when: str, because: str = "The inter-token latency is high for this deployment.",
               extra: str = "") -> Path:
    """A one-rule custom pack that lint passes apart from what the test puts in `when`."""
    folder = root / "pack" / "scheduling"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x-test.yaml").write_text(textwrap.dedent(f"""\
        id: X-TEST
        title: A test rule
        layer: scheduling
        when: {when}
        then:
          - warn: Something to say.
        because: {because}
        source: seed K2.8
        examples:
          - name: fires
            facts: {{workload: {{engine: vllm, itl_p99_ms: 140}}, model: {{num_layers: 32}}}}
            fires: true
          - name: does not
            facts: {{workload: {{engine: vllm, itl_p99_ms: 1}}, model: {{num_layers: 32}}}}
            fires: false
        """) + extra, encoding="utf-8")
    return root / "pack"


def write_facts(tmp_path: Path, text: str | bytes, name: str = "facts.json") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def assert_refused(code: int, err: str, *expected: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err) < MAX_MESSAGE + 200, len(err)
    for text in expected:
        assert text in err, err


def kbopt(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """kbopt in a process of its own: a crash of durable_rules' core fails the test, not pytest."""
    return subprocess.run([sys.executable, "-m", "kbopt", *args], capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())


# ---------------------------------------------------------------- the durable core's limits


@needs_durable
@pytest.mark.parametrize("count", [126, 127, 500])
def test_membership_lists_at_the_durable_limit(tmp_path, count):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100 and model.num_layers in ["
                      + ", ".join(str(i + 1) for i in range(count)) + "]")
    facts = write_facts(tmp_path, json.dumps(FACTS))
    lint = kbopt("rules", "lint", str(pack))
    advised = {engine: kbopt("advise", "--facts", facts, "--rules", str(pack), "--evaluator", engine, "--format", "json")
               for engine in ("durable", "reference")}
    if count <= 126:
        assert lint.returncode == 0, lint.stdout + lint.stderr
        assert advised["durable"].returncode == 0, advised["durable"].stderr
        assert advised["durable"].stdout == advised["reference"].stdout
        assert "X-TEST" in advised["durable"].stdout
    else:
        assert lint.returncode == 2 and "error[L007]" in lint.stdout and f"with {count} values" in lint.stdout
        for result in advised.values():
            assert_refused(result.returncode, result.stderr, "error[L007]", "x-test.yaml:4")


@needs_durable
def test_memory_stays_flat_over_many_packs():
    script = textwrap.dedent("""\
        import resource
        from kbopt.engine.evaluators import make_evaluator
        from kbopt.engine.pack.loader import build_pack, load_pack
        from kbopt.kb.facts import load_facts
        base = load_pack()
        values = load_facts(%r).engine_values(base.kb.vocabulary)
        for i in range(30):
            make_evaluator(build_pack(list(base.rules), f"v{i}"), "durable").run(values)
            if i == 15:
                first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(first, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        """) % EXAMPLE
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, last = map(int, done.stdout.split())
    # A copy of the built-in pack's rulesets holds about 22 MiB (with eviction off, 79 packs grew the
    # peak RSS by 1.7 GiB): kept past eviction (MAX_LIVE = 8), the 14 packs after the 16th would add
    # 300 MiB. (300 packs took 44 s of the suite; 30 prove it.)
    assert last - first < 40 * 1024, f"max RSS grew from {first} to {last} KiB over 14 packs"


@needs_durable
def test_an_evicted_pack_runs_again(pack):
    from kbopt.engine.evaluators import durable, make_evaluator
    from kbopt.engine.pack.loader import build_pack
    from kbopt.kb.facts import load_facts
    base = pack
    values = load_facts(EXAMPLE).engine_values(base.kb.vocabulary)
    first = make_evaluator(build_pack(list(base.rules), "evict-0"), "durable")
    expected = first.run(values)
    for i in range(durable.MAX_LIVE + 2):
        make_evaluator(build_pack(list(base.rules), f"evict-{i + 1}"), "durable").run(values)
    assert not first.rulesets            # deleted
    assert first.run(values) == expected  # and created again


# ---------------------------------------------------------------- YAML


BOMB = "kbopt: facts/1\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefg", "bcdefgh", strict=True))


@pytest.mark.parametrize("text, expected", [
    (BOMB, "anchors (&a) are not supported"),
    ("kbopt: facts/1\nhardware: &a [*a]\n", "anchors"),
    ("kbopt: facts/1\n? [a, b]\n: 1\n", "a key must be a plain name"),
    ("kbopt: facts/1\nhardware: !!set {a, b}\n", "the tag tag:yaml.org,2002:set is not supported"),
    ("kbopt: facts/1\nhardware: !!python/object/apply:os.system [echo]\n", "is not supported"),
    ("kbopt: facts/1\nhardware: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 levels deep"),
    ("kbopt: facts/1\n1: x\n", "the key 1 is not a name"),
])
def test_hostile_yaml_facts(tmp_path, run_cli, text, expected):
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, text, "facts.yaml"))
    assert_refused(code, err, expected)


@pytest.mark.parametrize("value, expected", [
    ("&a [*a]", "anchors"),
    ("!!python/name:os.system", "is not supported"),
    ("x" * 20_000, "at most 10,000 characters"),
    ("\udcff", "UTF-8"),
])
def test_hostile_set_values(run_cli, value, expected):
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--set", f"model.name={value}")
    assert_refused(code, err, expected)


def test_alias_bomb_in_a_rule_file(tmp_path, run_cli):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100", extra="notes: " + BOMB.replace("\n", "\n  ")[14:] + "\n")
    code, out, _ = run_cli("rules", "lint", str(pack))
    assert code == 2 and "error[L003]" in out and "not supported" in out


# ---------------------------------------------------------------- facts


@pytest.mark.parametrize("text, expected", [
    ('{"kbopt": "facts/1", "model": {"num_layers": 1' + "0" * 200 + "}}", "$.model.num_layers: 1.000e+200 is beyond ±2^53"),
    ('{"kbopt": "facts/1", "model": {"num_layers": 9223372036854775808}}', "beyond ±2^53"),
    ('{"kbopt": "facts/1", "model": {"hidden_size": 18446744073709551616}}', "$.model.hidden_size"),
    ('{"kbopt": "facts/1", "hardware": {"compute_capability": 1e400}}', "$.hardware.compute_capability: inf is not a finite"),
    ('{"kbopt": "facts/1", "hardware": {"compute_capability": 8.96}}', "8.96 is not a compute capability"),
    ('{"kbopt": "facts/1", "hardware": ' + "[" * 1000 + "]" * 1000 + "}", "nested more than 16 levels deep"),
    ('{"kbopt": "facts/1", "hardware": {"gpu_name": "\\ud800"}}', "$.hardware.gpu_name: '\\ud800' holds a lone surrogate"),
    ('{"kbopt": "facts/1", "hardware": {"gpu_name": "' + "x" * 20_000 + '"}}', "a string of 20,000 characters"),
    ('{"kbopt": "facts/1", "hardware": {"gpu_name": "' + "x" * 2_000_000 + '"}}', "kbopt reads at most 1,048,576"),
])
def test_hostile_facts(tmp_path, run_cli, text, expected):
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, text))
    assert_refused(code, err, expected)


def test_non_utf8_facts(tmp_path, run_cli):
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, b'{"kbopt": "facts/1", "model": {"name": "\xff"}}'))
    assert_refused(code, err, "cannot read the facts file")


def test_forty_thousand_unknown_keys_are_summarized(tmp_path, run_cli):
    document = {"kbopt": "facts/1", "hardware": {f"k{i}": 1 for i in range(40_000)}}
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, json.dumps(document)))
    assert_refused(code, err, "(and 39,995 more unknown keys)")
    assert len(err) < 2000


def test_compute_capability_keeps_one_digit(tmp_path, run_cli):
    code, out, err = run_cli("advise", "--facts", write_facts(tmp_path, "kbopt: facts/1\nhardware: {compute_capability: 8.9}\n",
                                                              "facts.yaml"), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["facts"]["hardware.compute_capability"]["value"] == "8.9"


# ---------------------------------------------------------------- rule packs


def _lint_and_advise(run_cli, pack: Path) -> list[tuple[int, str]]:
    code, out, err = run_cli("rules", "lint", str(pack))
    results = [(code, out + err)]
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--rules", str(pack))
    return results + [(code, err)]


@pytest.mark.parametrize("when, expected", [
    ("not " * 900 + "workload.itl_p99_ms > 100", "nested more than 32 levels deep"),
    ("not " * 2000 + "workload.itl_p99_ms > 100", "characters long; at most 4,000"),
    ("(" * 300 + "workload.itl_p99_ms > 100" + ")" * 300, "too many nested parentheses"),
    (" and ".join(f"(workload.itl_p99_ms > {i} or model.num_layers > {i})" for i in range(1, 10)), "more than 64 alternatives"),
    (" or ".join(f"model.num_layers > {i}" for i in range(1, 80)), "more than 64 alternatives"),
    ("model.num_layers > 100000000000000000000", "beyond ±2^53"),
    ("workload.itl_p99_ms > 1e400", "not a finite number"),
])
def test_hostile_conditions(tmp_path, run_cli, when, expected):
    pack = write_pack(tmp_path, when)
    for code, text in _lint_and_advise(run_cli, pack):
        assert_refused(code, text, expected)


def test_nan_threshold(tmp_path, run_cli):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > limit_ms",
                      extra="parameters:\n  limit_ms: {value: .nan, why: A threshold that no latency can ever pass.}\n")
    for code, text in _lint_and_advise(run_cli, pack):
        assert_refused(code, text, "error[L007]", "the parameter limit_ms is nan")


def test_unbounded_format_spec(tmp_path, run_cli):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100", because="The latency is {workload.itl_p99_ms:>1500000000} here.")
    for code, text in _lint_and_advise(run_cli, pack):
        assert_refused(code, text, "error[L007]", "width or precision over 100")


def test_integer_key_in_a_rule_file(tmp_path, run_cli):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100", extra="1: one\n")
    for code, text in _lint_and_advise(run_cli, pack):
        assert_refused(code, text, "error[L004]", "the key '1' is not a name")


@pytest.mark.parametrize("retired", ["- X-OLD\n", "retired: 5\n", "retired: [[a]]\n", "retired: {1: x}\n"])
def test_malformed_retired_yaml(tmp_path, run_cli, retired):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100")
    (pack / "retired.yaml").write_text(retired, encoding="utf-8")
    for code, text in _lint_and_advise(run_cli, pack):
        assert_refused(code, text, "retired.yaml:1")


# ---------------------------------------------------------------- outputs


def test_output_to_a_symlink_loop(tmp_path, run_cli):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "-o", str(tmp_path / "a"))
    assert_refused(code, err, "cannot write there")


def test_output_name_of_250_bytes(tmp_path, run_cli):
    target = tmp_path / ("a" * 250)
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "-o", str(target))
    assert code == 0, err
    assert target.read_text(encoding="utf-8") and os.listdir(tmp_path) == [target.name]


def test_lone_surrogates_are_written_as_valid_utf8(tmp_path, capsysbinary):
    output.write_output("x\udc80y\n", str(tmp_path / "out.txt"))
    assert (tmp_path / "out.txt").read_bytes() == b"x\\udc80y\n"
    output.write_output("x\ud800y\n", None)
    assert capsysbinary.readouterr().out == b"x\\ud800y\n"


def test_sigterm_during_output_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_replace = os.replace

    def killed(source, target):
        os.kill(os.getpid(), signal.SIGTERM)
        real_replace(source, target)       # not reached: the handler raises first

    monkeypatch.setattr(output.os, "replace", killed)
    with pytest.raises(SystemExit):
        output.write_output("text\n", str(tmp_path / "out.txt"))
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_error_messages_are_bounded(tmp_path, run_cli):
    document = {"kbopt": "facts/1", "hardware": {"gpu_name": "x" * 9000, "gpu_count": "y" * 9000}}
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, json.dumps(document)))
    assert code == 2 and len(err) < MAX_MESSAGE + 200


def test_pack_file_size_is_bounded(tmp_path, run_cli):
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100", extra="notes: " + "x" * (1024 * 1024) + "\n")
    for code, text in _lint_and_advise(run_cli, pack):
        assert_refused(code, text, "error[L002]", "a pack file may hold at most 1,048,576")
    # past what a million characters can take in UTF-8 it is refused without being read whole,
    # by the loader and by the cache's key, which reads every file first
    huge = write_pack(tmp_path / "huge", "workload.itl_p99_ms > 100", extra="notes: " + "x" * (5 * 1024 * 1024) + "\n")
    for code, text in _lint_and_advise(run_cli, huge):
        assert_refused(code, text, "error[L002]", "over 4,194,304 bytes long")


@pytest.mark.parametrize("fact", ["hardware.memory_total_gib=1e300", "hardware.memory_total_gib=1.7e308",
                                  "model.params_billion=1e300", "model.num_layers=9007199254740992"])
def test_extreme_numbers_give_the_same_advice_on_both_evaluators(run_cli, fact):
    results = []
    for engine in ("durable", "reference") if durable_available() is None else ("reference",):
        code, out, err = run_cli("advise", "--facts", EXAMPLE, "--set", fact, "--format", "json", "--evaluator", engine)
        assert code in (0, 2) and "internal error" not in err, err
        results.append((code, out))
    assert len(set(results)) == 1


# ---------------------------------------------------------------- renderers: input strings stay inert

# What an exporter's label can carry (a CR or NUL would end the exposition line: see the facts test).
HOSTILE = "A100\x1b[2J\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07OK\u202eevil\x9b31m\x7f"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u2028\u2029]")


def write_dcgm(tmp_path: Path, model_name: str) -> str:
    """A dcgm-exporter scrape whose `modelName` label (what the exporter says the GPU is) is hostile."""
    labels = 'gpu="0",UUID="GPU-1",modelName="' + model_name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    path = tmp_path / "dcgm.prom"
    path.write_text("".join(f"{name}{{{labels}}} {value}\n" for name, value in (
        ("DCGM_FI_DEV_GPU_UTIL", 95), ("DCGM_FI_DEV_FB_USED", 70000), ("DCGM_FI_DEV_FB_FREE", 10000))),
        encoding="utf-8")
    return str(path)


def test_terminal_escapes_from_an_exporter_label_are_inert_in_text(tmp_path, run_cli):
    """dcgm-exporter's modelName → advise --collect: no screen clear, OSC 8 link, CR, bidi or C1
    control reaches the terminal; each is shown as <U+XXXX>."""
    code, out, err = run_cli("advise", "--collect", "--no-nvml", "--metrics", write_dcgm(tmp_path, HOSTILE), "--explain")
    assert code == 0, err
    assert not CONTROLS.search(out.replace("\n", "")), ascii(out)
    assert "<U+001B>[2J" in out and "<U+202E>" in out and "<U+009B>" in out


def test_carriage_returns_and_separators_in_facts_are_inert_in_text(tmp_path, run_cli):
    facts = json.loads(Path(EXAMPLE).read_text())
    facts["model"]["name"] = "llama\rREWRITTEN\x00\u2028\t\nnext line\u2066"
    code, out, err = run_cli("advise", "--facts", write_facts(tmp_path, json.dumps(facts)), "--explain")
    assert code == 0, err
    assert not CONTROLS.search(out.replace("\n", "")), ascii(out)
    assert "\t" not in out and "llama<U+000D>REWRITTEN<U+0000><U+2028><U+0009><U+000A>next line<U+2066>" in out


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_terminal_escapes_are_inert_in_markdown_and_html(tmp_path, run_cli, fmt):
    code, out, err = run_cli("advise", "--collect", "--no-nvml", "--metrics", write_dcgm(tmp_path, HOSTILE), "--format", fmt, "--explain")
    assert code == 0, err
    assert not CONTROLS.search(out), ascii(out)


def test_markdown_escapes_images_and_html_in_facts_and_the_whatif_heading(tmp_path, run_cli):
    facts = json.loads(Path(EXAMPLE).read_text())
    facts["model"]["name"] = "![x](http://evil.example/a.png) <img src=x onerror=alert(1)> `code` *b* [l](http://e)"
    path = tmp_path / "<b>![i](http:x)`.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    code, out, err = run_cli("advise", "--facts", str(path), "--format", "md", "--explain", "--set", "serving.max_num_seqs=64")
    assert code == 0, err
    assert "![" not in out and "<img" not in out and "<b>" not in out, out
    assert "\\!\\[x\\](http://evil.example/a.png) &lt;img" in out or "!\\[x\\]" in out


def test_markdown_escapes_provenance_source_and_metric(tmp_path, run_cli):
    facts = json.loads(Path(EXAMPLE).read_text())
    facts["provenance"] = {"telemetry.memory_used_ratio": {
        "source": "<script>alert(1)</script>![i](http://evil.example/i.png)", "quality": "measured",
        "metric": "<img src=x>|`x`", "note": "[n](javascript:alert(1))"}}
    code, out, err = run_cli("advise", "--facts", write_facts(tmp_path, json.dumps(facts)), "--format", "md", "--explain")
    assert code == 0, err
    assert "<script" not in out and "<img" not in out and "![" not in out, out
    assert not re.search(r"(?<!\\)\]\(javascript", out), out         # `\]` is no link


def test_a_packs_texts_and_the_values_they_fill_in_are_inert(tmp_path, run_cli):
    """A pack's title, warn and because texts (and a fact value filled into them) in md and text."""
    facts = {**FACTS, "workload": {**FACTS["workload"], "engine": "vllm"},
             "model": {"num_layers": 32, "name": "<img src=x>![a](http://evil.example/a)\x1b[2J"}}
    pack = write_pack(tmp_path, "workload.itl_p99_ms > 100",
                      because="'<b>bold</b> ![img](http://evil.example/i.png) {model.name} `x`'")
    text = (pack / "scheduling" / "x-test.yaml").read_text()
    (pack / "scheduling" / "x-test.yaml").write_text(
        text.replace("title: A test rule", "title: '<i>A</i> ![t](http://evil.example/t) rule'")
            .replace("warn: Something to say.", "warn: '<u>warn</u> ![w](http://evil.example/w) {model.name}'"))
    path = write_facts(tmp_path, json.dumps(facts))
    code, out, err = run_cli("advise", "--facts", path, "--rules", str(pack), "--format", "md", "--explain")
    assert code == 0, err
    assert "<b>" not in out and "<i>" not in out and "<u>" not in out and "<img" not in out and "![" not in out, out
    assert not CONTROLS.search(out), ascii(out)
    code, out, err = run_cli("advise", "--facts", path, "--rules", str(pack), "--explain")
    assert code == 0, err
    assert not CONTROLS.search(out.replace("\n", "")), ascii(out)


# ---------------------------------------------------------------- collectors: hostile exporter files and traces

def collect(tmp_path: Path, name: str, text: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    option = "--metrics" if name.endswith(".prom") else "--model" if name == "config.json" else "--workload"
    return subprocess_free_cli(option, str(path), *args)


def subprocess_free_cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from kbopt.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["collect", "--no-nvml", *args])
    return code, out.getvalue(), err.getvalue()


VLLM_HISTOGRAM = """# TYPE vllm:time_to_first_token_seconds histogram
{buckets}vllm:time_to_first_token_seconds_count{{model_name="m"}} 10
vllm:time_to_first_token_seconds_sum{{model_name="m"}} 3
vllm:num_requests_running{{model_name="m"}} 1
"""


@pytest.mark.parametrize("value", ["1e999", "NaN", "+Inf", "-Inf"])
def test_non_finite_exporter_readings_are_left_out_with_a_note(tmp_path, value):
    code, _, err = collect(tmp_path, "x.prom", f'DCGM_FI_DEV_GPU_UTIL{{gpu="0"}} {value}\n'
                                               f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 250\n')
    assert code == 0 and "not a finite number" in err and "kernel_time_ratio left out" in err, err


def test_exporter_readings_of_1e300_give_exit_0_or_2(tmp_path):
    code, _, err = collect(tmp_path, "x.prom", 'DCGM_FI_DEV_POWER_USAGE{gpu="0"} 1e300\n'
                                               'DCGM_FI_DEV_FB_USED{gpu="0"} 1e300\nDCGM_FI_DEV_FB_FREE{gpu="0"} 1e300\n')
    assert code in (0, 2) and "Traceback" not in err and "internal error" not in err, err


@pytest.mark.parametrize("le", ['', ',le="abc"', ',le="NaN"'])
def test_a_histogram_bucket_without_a_numeric_le_is_refused(tmp_path, le):
    code, _, err = collect(tmp_path, "x.prom", VLLM_HISTOGRAM.format(
        buckets=f'vllm:time_to_first_token_seconds_bucket{{model_name="m"{le}}} 3\n'))
    assert_refused(code, err, "x.prom", "vllm:time_to_first_token_seconds_bucket", "le")


@pytest.mark.parametrize("counts", [(10, 5, 10), (-1, 5, 10), (1, 5, float("inf")), (1, 5, float("nan"))])
def test_broken_histogram_buckets_give_no_p99(tmp_path, counts):
    """Cumulative buckets never decrease: an interpolated p99 in broken ones is left out, with a note."""
    buckets = "".join(f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="{le}"}} {count}\n'
                      for le, count in zip(("0.1", "1", "+Inf"), counts, strict=True))
    code, out, err = collect(tmp_path, "x.prom", VLLM_HISTOGRAM.format(buckets=buckets))
    assert code == 0 and "ttft_p99_ms left out" in err and "ttft_p99_ms" not in out, err


@pytest.mark.parametrize("used, free", [(0, 0), (-5000, 80000), (5000, float("nan"))])
def test_a_broken_frame_buffer_costs_the_memory_facts(tmp_path, used, free):
    code, out, err = collect(tmp_path, "x.prom", f'DCGM_FI_DEV_GPU_UTIL{{gpu="0"}} 50\n'
                                                 f'DCGM_FI_DEV_FB_USED{{gpu="0"}} {used}\nDCGM_FI_DEV_FB_FREE{{gpu="0"}} {free}\n')
    assert code == 0 and "memory_used_ratio and hardware.memory_total_gib left out" in err, err
    assert "memory_used_ratio" not in out and "kernel_time_ratio" in out


def test_a_non_numeric_exporter_value_is_refused(tmp_path):
    code, _, err = collect(tmp_path, "x.prom", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} abc\n')
    assert_refused(code, err, "x.prom", "not Prometheus text exposition")


@pytest.mark.parametrize("name, option", [("bench.json", "--workload"), ("rows.jsonl", "--workload"),
                                          ("config.json", "--model")])
def test_deeply_nested_json_is_refused(tmp_path, name, option):
    deep = "[" * 100_000 + "]" * 100_000
    text = ('{"timestamp": 0, "input_length": 1, "output_length": 1}\n{"x": ' + deep + "}\n") if name.endswith(".jsonl") \
        else '{"completed": ' + deep + "}"
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code, _, err = subprocess_free_cli(option, str(path),
                                       *(["--trace-format", "mooncake"] if name.endswith(".jsonl") else []))
    assert_refused(code, err, name, "nested too deeply")


@pytest.mark.parametrize("window", ["0", "-1", "nan", "inf"])
def test_a_window_that_is_not_a_positive_number_is_refused(window):
    trace = str(Path(__file__).parent / "data" / "real" / "mooncake_fast25_conversation_first610.jsonl")
    code, _, err = subprocess_free_cli("--workload", trace, "--window", window)
    assert_refused(code, err, "--window")


MOONCAKE_ROW = '{{"timestamp": {t}, "input_length": {prompt}, "output_length": {output}}}\n'


@pytest.mark.parametrize("t, prompt, output", [
    (1000, -5, 3), (1000, 5, -3),                        # negative token counts
    ("NaN", 5, 3), ("Infinity", 5, 3), ("1e400", 5, 3),   # a timestamp that is not finite
    (1000, 10**29, 3), (1000, "1e300", 3),                # beyond any context
    (1000, "true", 3), (1000, 2.5, 3), ("true", 5, 3),    # not whole numbers
])
def test_hostile_mooncake_rows_name_the_line(tmp_path, t, prompt, output):
    code, _, err = collect(tmp_path, "t.jsonl", MOONCAKE_ROW.format(t=0, prompt=5, output=3)
                           + MOONCAKE_ROW.format(t=t, prompt=prompt, output=output))
    assert_refused(code, err, "t.jsonl:2")


@pytest.mark.parametrize("row", ["0,m,-5,3", "inf,m,5,3", "nan,m,5,3", "0,m,99999999999999999999,3"])
def test_hostile_burstgpt_rows_name_the_line(tmp_path, row):
    code, _, err = collect(tmp_path, "b.csv", f"Timestamp,Model,Request tokens,Response tokens\n0,m,5,3\n{row}\n")
    assert_refused(code, err, "b.csv:3")


@pytest.mark.parametrize("row", [
    "2023-11-16 18:15:46.6805900,-5,3", "2023-11-16 18:15:46.6805900,5,-3",          # negative token counts
    "2023-11-16 18:15:46.6805900,5,99999999999999999999", f"2023-11-16 18:15:46.6805900,{2**40 + 1},3",   # beyond any context
    "2023-11-16 18:15:46.6805900,2.5,3", "2023-11-16 18:15:46.6805900,1e3,3",         # not whole numbers
    "2023-11-16 18:15:46.6805900,nan,3", "2023-11-16 18:15:46.6805900,true,3",
    "2023-11-16 18:15:inf,5,3", "2023-11-16 18:15:nan,5,3",             # a timestamp that is not finite
    "2023-11-16 18:15:46.6805900,5", "2023-11-16 18:15:46.6805900,5,3,1",             # columns missing or extra
])
def test_hostile_azure_rows_name_the_line(tmp_path, row):
    """The Azure reader (its own loop, for speed) refuses what the other readers refuse."""
    code, _, err = collect(tmp_path, "a.csv", f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:40.5,5,3\n{row}\n")
    assert_refused(code, err, "a.csv:3")


def test_azure_rows_at_the_limits_are_read(tmp_path):
    # up to the facts' physical ceiling (10^9 tokens) a row is read; past it the collected facts are
    # refused naming the fact, exit 2
    code, out, err = collect(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:40.5,0,0\n"
                             f"2023-11-16 18:15:41.5, 12 ,{10**8}\n")
    assert code == 0, err
    assert str(10**8 + 12) in out
    code, _, err = collect(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:40.5,0,0\n"
                           f"2023-11-16 18:15:41.5, 12 ,{2**40}\n")
    assert code == 2 and "$.workload.output_len_p99" in err and "Traceback" not in err, err


@pytest.mark.parametrize("row", ["1,5,3,inf", "1,5,3,nan", "inf,5,3,1", "1,5,3,-1", "1,1e300,3,1"])
def test_hostile_generic_rows_name_the_line(tmp_path, row):
    code, _, err = collect(tmp_path, "g.csv", f"t,p,o,d\n0,5,3,1\n{row}\n",
                           "--columns", "timestamp=t,prompt=p,output=o,duration=d")
    assert_refused(code, err, "g.csv:3")


def test_timestamps_far_apart_do_not_overflow(tmp_path):
    code, _, err = collect(tmp_path, "t.jsonl", MOONCAKE_ROW.format(t="-1e308", prompt=5, output=3)
                           + MOONCAKE_ROW.format(t="1e308", prompt=5, output=3), "--window", "1e-300")
    assert code in (0, 2) and "Traceback" not in err and "internal error" not in err, err


def test_a_boolean_layer_count_is_not_one(tmp_path):
    code, _, err = collect(tmp_path, "config.json", json.dumps(
        {"num_hidden_layers": True, "hidden_size": 4096, "num_attention_heads": 32}))
    assert_refused(code, err, "config.json", "num_hidden_layers")


# ---------------------------------------------------------------- a hostile HTTP server (fleet, collect --metrics URL)

@pytest.fixture
def hostile():
    """Start HostileServer(script) on loopback; every one started is closed after the test."""
    servers = []

    def start(script):
        servers.append(HostileServer(script))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def fleet_cli(url: str, *args: str) -> tuple[int, str, str, float]:
    import contextlib
    import io
    import time

    from kbopt.cli import main
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fleet", "--prometheus", url, "--retries", "0", *args])
    return code, out.getvalue(), err.getvalue(), time.monotonic() - started


def test_a_trickling_server_is_cut_off_at_the_deadline(hostile):
    server = hostile(lambda request: trickled(answer(body=one_replica(request)), 0.1))
    code, _, err, took = fleet_cli(server.url, "--timeout", "0.5")
    assert code == 2 and "no answer within 0.5 s (--timeout)" in err, err
    # One deadline, not one per byte (the answer would take 20 s), nor one per query after the first
    # failure; the rest is loading the pack, with room for a loaded machine.
    assert took < 3.0, took


def test_a_trickling_exporter_is_cut_off_at_the_deadline(hostile):
    import time

    from kbopt.collectors.prometheus import read_exposition
    server = hostile(lambda request: trickled(answer(body=b"tgi_queue_size 1\n" * 10), 0.05))
    started = time.monotonic()
    with pytest.raises(KboptError, match=r"no answer within 0\.3 s"):
        read_exposition(server.url + "/metrics", timeout_s=0.3)
    assert time.monotonic() - started < 2.0          # trickled whole, the answer would take 11 s


@pytest.mark.parametrize("location", ["http://example.invalid:9090/api/v1/query", "ftp://127.0.0.1/x",
                                      "https://127.0.0.1:{port}/x", "http://127.0.0.1:1/x", "javascript:alert(1)",
                                      "file:///etc/passwd"])
def test_redirects_off_the_origin_are_refused(hostile, location):
    server = hostile(lambda request: [(answer(b"HTTP/1.1 302 Found", [b"Location: " + location.format(
        port=server.port).encode()]), 0)])
    code, _, err, _ = fleet_cli(server.url, "--timeout", "2")
    assert code == 2 and "off the address given" in err and server.url in err, err
    # Not followed (every request asks the query path), and not retried (each query asked once;
    # how many were under way when the first failed depends on the threads).
    assert all(r.startswith(b"POST /api/v1/query ") for r in server.requests), server.requests
    queries = [r.rpartition(b"\r\n\r\n")[2] for r in server.requests]
    assert len(queries) == len(set(queries)) < len(FAMILIES)


def test_a_redirect_to_a_location_that_is_not_a_url_is_a_clear_error(hostile):
    # urljoin raises on an IPv6 host left open (found by the long fuzz run)
    server = hostile(lambda request: [(answer(b"HTTP/1.1 302 Found", [b"Location: http://[::1"]), 0)])
    code, _, err, _ = fleet_cli(server.url, "--timeout", "2")
    assert code == 2 and "which is not a URL" in err and "internal error" not in err, err


def test_redirects_within_the_origin_are_followed_and_bounded(hostile):
    moved = hostile(lambda request: [(answer(b"HTTP/1.1 308 Moved", [b"Location: /prometheus/api/v1/query"]), 0)]
                    if request.startswith(b"POST /api/") else [(answer(body=one_replica(request)), 0)])
    code, out, err, _ = fleet_cli(moved.url, "--timeout", "5")
    assert code == 0 and json.loads(out)["kbopt"] == "fleet/1", err
    looping = hostile(lambda request: [(answer(b"HTTP/1.1 307 Again", [b"Location: /api/v1/query"]), 0)])
    code, _, err, _ = fleet_cli(looping.url, "--timeout", "5")
    assert code == 2 and "more than 5 redirects" in err, err


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


MALFORMED_HTTP = {
    "cut-short body": (lambda: answer(body=b'{"status": "success"}')[:-5],
                       "cut short"),
    "not HTTP": (lambda: b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not HTTP"),
    "no answer at all": (lambda: b"", "closed the connection without answering"),
    "too many headers": (lambda: answer(headers=[b"X-A: b"] * 150, body=b"{}"),
                         "more than 100 headers"),
    "an over-long header": (lambda: answer(headers=[b"X-A: " + b"b" * 70_000], body=b"{}"),
                            "over-long line"),
    "a chunk size that is not hexadecimal": (lambda: answer(
        headers=[b"Transfer-Encoding: chunked"], body=b"zz\r\n{}\r\n0\r\n\r\n", length=False), "chunked encoding"),
    "a chunk cut short": (lambda: answer(
        headers=[b"Transfer-Encoding: chunked"], body=_chunked(b"{}" * 50)[:30], length=False), "chunked encoding"),
    "a negative chunk size": (lambda: answer(
        headers=[b"Transfer-Encoding: chunked"], body=b"-5\r\n{}\r\n0\r\n\r\n", length=False), "malformed HTTP answer"),
    "deeply nested JSON": (lambda: answer(body=b"[" * 100_000 + b"]" * 100_000),
                           "nested too deeply"),
    "warnings is a number": (lambda: answer(
        body=vector([], warnings=5)), "`warnings` field is int"),
    "warnings is a string": (lambda: answer(
        body=vector([], warnings="remote read failed")), "`warnings` field is str"),
    "a value that is true": (lambda: answer(
        body=vector([({"model_name": "m"}, True)])), "its value is bool"),
    "a label that is a number": (lambda: answer(
        body=vector([({"model_name": 5}, "1")])), "label 'model_name' is int"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_HTTP))
def test_a_malformed_answer_is_exit_2_naming_the_server(hostile, case):
    make, expected = MALFORMED_HTTP[case]
    data = make()
    server = hostile(lambda request: [(data, 0)])
    code, _, err, _ = fleet_cli(server.url, "--timeout", "5")
    assert code == 2 and expected in err and server.url in err, err
    assert err.startswith("kbopt: error: ") and err.count("\n") == 1, err


def test_an_answer_over_the_cap_is_refused(hostile):
    from kbopt.collectors.web import HttpProblem, exchange
    for length in (True, False):
        server = hostile(lambda request, length=length: [(answer(body=b"x" * 5000, length=length), 0)])
        with pytest.raises(HttpProblem, match="more than"):
            exchange(server.url, 5, max_body=1000)


def test_a_null_label_stays_missing_and_a_huge_integer_value_is_left_out(hostile):
    def respond(request):
        if b"num_requests_running" in request:
            return [(answer(body=vector([({"instance": "10.0.0.1:8000", "model_name": "m", "pod": None}, "3")])), 0)]
        if b"num_requests_waiting" in request:
            return [(answer(body=b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": '
                                  b'{"instance": "10.0.0.1:8000", "model_name": "m"}, "value": [0, 1' + b"0" * 400
                              + b"]}]}}"), 0)]
        return [(answer(body=vector([])), 0)]
    server = hostile(respond)
    code, out, err, _ = fleet_cli(server.url, "--timeout", "5")
    assert code == 0, err
    (replica,) = json.loads(out)["replicas"]
    assert replica["id"] == "10.0.0.1:8000" and "pod" not in replica and "None" not in out
    assert "workload.requests_waiting_mean" not in replica["facts"]


def test_collect_scrapes_through_the_same_client(hostile):
    server = hostile(lambda request: [(answer(b"HTTP/1.1 301 Moved", [b"Location: ftp://127.0.0.1/metrics"]), 0)])
    code, _, err = subprocess_free_cli("--metrics", server.url + "/metrics", "--duration", "0.01")
    assert code == 2 and "off the address given" in err, err


FORGING = "\x1b]0;owned\x07\x1b[2J\u202e\r\nkbopt: done, nothing wrong\x9b31m"


@pytest.mark.parametrize("status", [b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 200 OK"])
def test_a_prometheus_error_message_reaches_the_terminal_inert(hostile, status):
    """Issue 28: Prometheus' error text went to the terminal raw: escape codes, a title, a forged
    `kbopt:` line. Every message passes one terminal escaper on its way out."""
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": FORGING}).encode()
    server = hostile(lambda request: [(answer(status, body=body), 0)])
    code, _, err, _ = fleet_cli(server.url, "--timeout", "5")
    assert code == 2 and "<U+001B>]0;owned<U+0007>" in err and "<U+000A>kbopt: done" in err, err
    assert not CONTROLS.search(err.rstrip("\n")) and err.count("\n") == 1 and err.startswith("kbopt: error: "), ascii(err)


def test_prometheus_warnings_and_labels_reach_the_terminal_inert(hostile):
    def respond(request):
        rows = [({"instance": "10.0.0.1:8000", "model_name": "m" + FORGING}, "3")] if b"num_requests_running" in request else []
        return [(answer(body=vector(rows, warnings=[FORGING])), 0)]
    server = hostile(respond)
    code, out, err, _ = fleet_cli(server.url, "--timeout", "5")
    assert code == 0, err
    assert not CONTROLS.search(err.replace("\n", "")), ascii(err)
    lines = err.splitlines()
    assert lines[0].startswith("kbopt fleet: ") and all(
        line.startswith(("  ", "kbopt: warning: Prometheus answered in part: ")) for line in lines[1:]), lines
    assert json.loads(out)["model"] == "m" + FORGING          # the data stays as it was sent


def test_a_message_laid_out_in_lines_cannot_forge_a_line_of_kbopts():
    from kbopt.reports.escape import terminal_message, terminal_text
    text = terminal_message("error[L001]: bad\n --> x.yaml:3\nkbopt: error: forged\n\x1b[2J")
    assert text.splitlines() == ["error[L001]: bad", " --> x.yaml:3", "  kbopt: error: forged", "<U+001B>[2J"]
    assert terminal_text("a\nkbopt: b") == "a<U+000A>kbopt: b"


def test_every_renderer_escapes_through_one_module():
    """One terminal escaper and one Markdown escaper (reports/escape.py): no renderer, nor the CLI
    or the fleet summary, keeps a pattern of control characters of its own."""
    import kbopt
    root = Path(kbopt.__file__).resolve().parent.parent
    for path in [*root.glob("reports/*.py"), *root.glob("kbopt/*.py")]:
        if path.name != "escape.py":
            assert "\\x1f" not in path.read_text(encoding="utf-8"), path


# ---------------------------------------------------------------- outputs that cannot be written, numbers past every bound

@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [("--facts", EXAMPLE), ("--facts-jsonl", "LINES", "--jobs", "1"),
                                  ("--facts-jsonl", "LINES", "--jobs", "2")])
@pytest.mark.parametrize("to", ["-o", "stdout"])
def test_a_full_device_is_exit_2_as_for_one_advice(tmp_path, args, to):
    """Issue 28: `--facts-jsonl -o /dev/full` was an internal error where one advice gave exit 2;
    standard output on a full device was one for both."""
    lines = tmp_path / "facts.jsonl"
    lines.write_text(json.dumps(json.loads(Path(EXAMPLE).read_text())) + "\n")
    command = [sys.executable, "-m", "kbopt", "advise", *(str(lines) if a == "LINES" else a for a in args)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(command + (["-o", "/dev/full"] if to == "-o" else []), stdout=full if to == "stdout" else None,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    where = "-o /dev/full" if to == "-o" else "standard output"
    assert done.returncode == 2 and f"kbopt: error: {where}: cannot write there: No space left on device" in done.stderr, \
        done.stderr


DIGITS = "9" * 5001


@pytest.mark.parametrize("name,text,where", [
    ("facts.yaml", f"kbopt: facts/1\nmodel:\n  num_layers: {DIGITS}\n", "line 3: $.model.num_layers: an integer of 5,001 digits"),
    ("facts.yaml", f"kbopt: facts/1\nworkload:\n  x: [1, {{a: -{DIGITS}}}]\n", "$.workload.x[1].a: an integer of 5,001 digits"),
    ("facts.json", f'{{"kbopt": "facts/1", "model": {{"num_layers": {DIGITS}}}}}', "$.model.num_layers: an integer of 5,001 digits"),
])
def test_an_integer_of_5001_digits_is_refused_naming_its_field(tmp_path, run_cli, name, text, where):
    """Python refuses to convert an integer of more than 4,300 digits: an internal error, before."""
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, text, name))
    assert_refused(code, err, where)


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_an_integer_past_a_floats_range_is_refused_naming_its_field(tmp_path, run_cli, form):
    """Found by the fuzz suite's big numbers: the message formatted a 309-digit integer as a float."""
    text = (f"kbopt: facts/1\nmodel:\n  num_layers: {'9' * 309}\n" if form == "yaml"
            else f'{{"kbopt": "facts/1", "model": {{"num_layers": {"9" * 309}}}}}')
    code, _, err = run_cli("advise", "--facts", write_facts(tmp_path, text, f"facts.{form}"))
    assert_refused(code, err, "$.model.num_layers: an integer of 309 digits is beyond ±2^53")


def test_an_integer_of_5001_digits_in_a_set_value_is_refused_naming_its_path(run_cli):
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--set", f"model.num_layers={DIGITS}")
    assert_refused(code, err, "--set model.num_layers:", "an integer of 5,001 digits")


@pytest.mark.parametrize("value", ["9" * 400, "-" + "9" * 400, "9" * 5000])
def test_a_huge_integer_exporter_reading_is_left_out_like_1e999(tmp_path, value):
    code, _, err = collect(tmp_path, "x.prom", f'DCGM_FI_DEV_GPU_UTIL{{gpu="0"}} {value}\nDCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 250\n')
    assert code == 0 and "not a finite number" in err and "kernel_time_ratio left out" in err, err
