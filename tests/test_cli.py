"""The command line as a user meets it: outputs, exit codes, no tracebacks, no half-written files."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_durable

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "capacity-a100-chat.json")


def test_text_advice_shows_evidence_chain_rejections(run_cli):
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--explain")
    assert code == 0 and (err == "" or "using the reference evaluator" in err)
    assert "bottleneck: memory_capacity" in out
    assert "evidence: telemetry.memory_used_ratio = 0.93 > 0.9 (capacity_threshold)  (input; D-CAPACITY-MEMORY-FULL)" in out
    assert "paged_kv_cache [storage]  page_size=16 max_pages=64634" in out      # sized after the plan
    assert "<- D-BOTTLENECK-CAPACITY" in out
    assert "quantization (scheme=int8)" in out and "excluded by quantization[fp8]" in out


def test_json_advice_follows_advice_v2(run_cli):
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json")
    assert code == 0
    advice = json.loads(out)
    assert advice["kbopt"] == "advice/2"
    assert list(advice)[:7] == ["kbopt", "bottleneck", "strategies", "rejected", "fired", "not_evaluated", "warnings"]
    assert {"estimates", "plan"} <= set(advice)      # advice/2 adds them; every advice/1 key stays
    paged = next(s for s in advice["strategies"] if s["id"] == "paged_kv_cache")
    assert paged["layer"] == "storage" and "S-PAGED-KV-CAPACITY" in paged["because"]
    capacity = next(f for f in advice["fired"] if f["rule"] == "D-CAPACITY-MEMORY-FULL")
    assert capacity["facts"] == {"telemetry.memory_used_ratio": 0.93, "derived.preallocated": False}
    assert capacity["derived"] == {"derived.capacity_binding": True}
    assert advice["facts"]["hardware.gpu_name"] == {"value": "NVIDIA A100-SXM4-80GB", "origin": "input", "quality": "user"}


def test_markdown_advice(run_cli):
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "md")
    assert code == 0
    assert out.startswith("# kbopt advice: memory capacity")
    # The rank and the number of rejections depend on what else the pack recommends and rejects.
    assert re.search(r"\| \d+ \| `paged_kv_cache` \| change \| storage \| page_size=16 max_pages=64634 \|", out)
    assert re.search(r"^## Rejected \(\d+\)$", out, re.M)


@needs_durable
def test_same_input_gives_byte_identical_json(run_cli):
    runs = {run_cli("advise", "--facts", EXAMPLE, "--format", "json", "--evaluator", engine)[1]
            for engine in ("durable", "reference", "durable", "auto")}
    assert len(runs) == 1


def test_set_changes_the_advice(run_cli):
    _, out, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json",
                        "--set", "telemetry.memory_used_ratio=0.5", "--set", "hardware.gpu_name=NVIDIA H100 PCIe",
                        "--set", "hardware.compute_capability=9.0")
    advice = json.loads(out)
    # Capacity no longer binds. A static batcher keeps about a third of its 32 slots generating
    # (mean over p99 length), a handful of sequences on an H100 whose KV cache holds hundreds:
    # not enough work reaches the GPU.
    assert advice["bottleneck"] == "underfed"
    assert advice["derived"]["derived.running_batch"] < 0.025 * advice["estimates"]["kv_pool_sequences"]["value"]
    assert advice["facts"]["telemetry.memory_used_ratio"]["origin"] == "set"


def test_output_file_is_written_whole(run_cli, tmp_path):
    target = tmp_path / "advice.json"
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json", "-o", str(target))
    assert code == 0 and out == ""
    assert json.loads(target.read_text())["bottleneck"] == "memory_capacity"
    assert [p.name for p in tmp_path.iterdir()] == ["advice.json"]
    assert target.stat().st_mode & 0o044, "an output file must be readable as umask allows, not 0600"


def test_bad_input_exits_2_with_one_paragraph_and_writes_nothing(run_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"telemetry": {"memory_used_ratio": 93}}')
    target = tmp_path / "advice.json"
    code, out, err = run_cli("advise", "--facts", str(bad), "-o", str(target))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "$.telemetry.memory_used_ratio" in err
    assert not target.exists()


def test_unwritable_output_is_a_clean_error(run_cli, tmp_path):
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "-o", str(tmp_path / "missing-dir" / "a.json"))
    assert code == 2 and "cannot write there" in err


@pytest.mark.parametrize("content", ["", "{", "[]", '{"hardware": {"gpu_count": 0}}', "null"])
def test_malformed_documents_exit_2(run_cli, tmp_path, content):
    path = tmp_path / "facts.json"
    path.write_text(content)
    code, out, err = run_cli("advise", "--facts", str(path))
    assert code == 2 and out == "" and err.startswith("kbopt: error: ")


def test_empty_object_gives_unknown_advice(run_cli, tmp_path):
    path = tmp_path / "facts.json"
    path.write_text("{}")
    code, out, _ = run_cli("advise", "--facts", str(path), "--format", "json")
    advice = json.loads(out)
    assert code == 0 and advice["bottleneck"] == "unknown" and advice["strategies"] == []
    assert len(advice["not_evaluated"]) > 10


def test_schema_facts_is_printed(run_cli):
    code, out, _ = run_cli("schema", "facts")
    schema = json.loads(out)
    assert code == 0
    assert schema["properties"]["telemetry"]["properties"]["memory_used_ratio"]["anyOf"][0] == \
        {"type": "number", "minimum": 0, "maximum": 1}


def test_rules_list_and_test(run_cli):
    code, out, _ = run_cli("rules", "list", "--layer", "storage")
    assert code == 0 and "S-PAGED-KV-CAPACITY" in out and "D-BOTTLENECK" not in out
    # the built-in rules' examples run in tests/test_rule_examples.py; the command on a pack's own
    code, out, _ = run_cli("rules", "test", str(Path(EXAMPLE).parent / "packs" / "vllm-tuning"))
    assert code == 0 and ", 0 failed" in out and "testing the 3 rule(s)" in out


def test_python_dash_m_and_console_script():
    result = subprocess.run([sys.executable, "-m", "kbopt", "advise", "--facts", EXAMPLE, "--format", "json"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bottleneck"] == "memory_capacity"


def test_the_command_exits_at_once_with_main_s_code_and_all_of_its_output(tmp_path, run_cli):
    """`python -m kbopt` (kbopt.cli.run) skips tearing the interpreter down, after main(): its
    exit code stays main's, every byte it wrote is there (on standard output, and in a file
    written with -o), and a reader that goes away early is no error."""
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}   # as a user's shell has it
    command = [sys.executable, "-m", "kbopt", "advise", "--facts"]
    bad = subprocess.run([*command, str(tmp_path / "none.json")], capture_output=True, text=True, check=False, env=buffered)
    assert bad.returncode == 2 and bad.stderr.startswith("kbopt: error:") and "Traceback" not in bad.stderr
    whole = subprocess.run([*command, EXAMPLE, "--format", "html"], capture_output=True, check=False, env=buffered)
    assert whole.returncode == 0 and whole.stdout.endswith(b"</html>\n"), whole.stdout[-200:]
    written = subprocess.run([*command, EXAMPLE, "--format", "md", "-o", str(tmp_path / "advice.md")],
                             capture_output=True, check=False, env=buffered)
    assert written.returncode == 0 and (tmp_path / "advice.md").read_text().count("\n") > 20
    # printed line by line, block-buffered in a pipe: the last block too
    listed = subprocess.run([sys.executable, "-m", "kbopt", "rules", "list"], capture_output=True, text=True, check=False,
                            env=buffered)
    assert listed.returncode == 0 and listed.stdout == run_cli("rules", "list")[1]
    piped = subprocess.run(["bash", "-c", f"'{sys.executable}' -m kbopt advise --facts '{EXAMPLE}' --explain | head -c 10"],
                           capture_output=True, text=True, check=False, env=buffered)
    assert piped.stdout == "kbopt advi" and piped.stderr == "", piped.stderr


def test_without_durable_rules_auto_falls_back_to_the_reference(run_cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "durable_rules_engine", None)     # as on Python 3.13
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--format", "json")
    assert code == 0 and json.loads(out)["bottleneck"] == "memory_capacity"
    assert "using the reference evaluator" in err
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--evaluator", "durable")
    assert code == 2 and "--evaluator reference" in err


def test_the_evaluator_option_is_evaluator_and_the_old_engine_spelling_still_works_with_a_note(run_cli, capsys):
    # `--engine` read as the serving engine beside `--emit ENGINE`; it stays as an alias
    code, new_out, new_err = run_cli("advise", "--facts", EXAMPLE, "--format", "json", "--evaluator", "reference")
    assert code == 0 and new_err == ""
    code, old_out, old_err = run_cli("advise", "--facts", EXAMPLE, "--format", "json", "--engine", "reference")
    assert code == 0 and old_out == new_out and "--engine is now --evaluator" in old_err
    with pytest.raises(SystemExit):
        run_cli("advise", "--help")
    help_text = capsys.readouterr().out
    assert "--evaluator" in help_text and "--engine" not in help_text


def test_output_to_a_directory_or_empty_name_is_exit_2(run_cli, tmp_path):
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "-o", str(tmp_path))
    assert code == 2 and "is a directory" in err
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "-o", "")
    assert code == 2 and "file name is empty" in err


def test_output_through_a_symlink_keeps_the_link(run_cli, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    code, _, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json", "-o", str(link))
    assert code == 0 and link.is_symlink()
    assert json.loads(real.read_text())["kbopt"] == "advice/2"


def test_output_through_a_fifo_is_written_not_replaced(run_cli, tmp_path):
    import os
    import threading
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    # A daemon: should kbopt never open the FIFO, the reader stays blocked, and the test fails
    # instead of keeping pytest from exiting.
    reader = threading.Thread(target=lambda: received.append(Path(fifo).read_text()), daemon=True)
    reader.start()
    code, _, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json", "-o", str(fifo))
    reader.join(timeout=10)
    assert code == 0 and json.loads(received[0])["kbopt"] == "advice/2"
    assert not fifo.is_file()


@pytest.mark.parametrize("engine", ["reference", pytest.param("durable", marks=needs_durable)])
def test_absurd_numbers_are_exit_2_with_the_same_message_on_both_engines(run_cli, tmp_path, engine):
    # a prompt length past any context is refused by the schema's physical ceiling, before a rule's
    # value could overflow, with the same message whichever evaluator was asked for
    path = tmp_path / "facts.json"
    path.write_text('{"model": {"params_billion": 8, "weight_dtype": "fp16", "num_layers": 32, "num_attention_heads": 32,'
                    ' "head_dim": 128}, "hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1}, "workload": {"prompt_len_mean": 1e300}}')
    code, out, err = run_cli("advise", "--facts", str(path), "--evaluator", engine)
    assert code == 2 and out == ""
    assert err == f"kbopt: error: {path}: invalid facts: line 1: $.workload.prompt_len_mean: 1e+300 is out of range (>=0 <=1e+09)\n"


def test_weights_that_do_not_fit_warn_and_leave_sizes_out(run_cli):
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json",
                           "--set", "model.params_billion=70", "--set", "model.num_layers=80")
    advice = json.loads(out)
    assert code == 0 and "W-WEIGHTS-DO-NOT-FIT" in {w["rule"] for w in advice["warnings"]}
    paged = next(s for s in advice["strategies"] if s["id"] == "paged_kv_cache")
    assert "max_pages" not in paged["params"]
    assert any("max_pages not given" in c["text"] and "below 1" in c["text"] for c in paged["caveats"])


def test_duplicate_keys_are_refused(run_cli, tmp_path):
    path = tmp_path / "facts.json"
    path.write_text('{"telemetry": {"memory_used_ratio": 0.5, "memory_used_ratio": 0.95}}')
    code, _, err = run_cli("advise", "--facts", str(path))
    assert code == 2 and "duplicate key 'memory_used_ratio'" in err
    path = tmp_path / "facts.yaml"
    path.write_text("telemetry:\n  memory_used_ratio: 0.5\n  memory_used_ratio: 0.95\n")
    code, _, err = run_cli("advise", "--facts", str(path))
    assert code == 2 and "line 3: duplicate key 'memory_used_ratio'" in err


def test_text_summary_then_strategies_and_proofs_only_with_explain(run_cli):
    # The default text is the summary (bottleneck, numbers, actions with gains, what is kept) and
    # the strategy list; proof chains and the rest of the record only with --explain.
    code, out, _ = run_cli("advise", "--facts", "examples/bandwidth-l40s-decode.json")
    assert code == 0
    summary = out.split("\nStrategies (")[0]
    assert len(summary.splitlines()) <= 22
    assert "Actions — " in summary and "Keep (already in place): " in summary
    assert "continuous_batching" in summary.split("Keep (already in place): ")[1]
    assert "<- " not in out and "Rules fired" not in out and "--explain adds" in out
    code, explained, _ = run_cli("advise", "--facts", "examples/bandwidth-l40s-decode.json", "--explain")
    assert code == 0 and "<- D-" in explained and "Rules fired (" in explained
    code, plain, _ = run_cli("advise", "--facts", "examples/bandwidth-l40s-decode.json", "--format", "json")
    code, also, _ = run_cli("advise", "--facts", "examples/bandwidth-l40s-decode.json", "--format", "json", "--explain")
    assert plain == also                     # JSON holds everything either way


@pytest.mark.parametrize("args", [("collect", "--duration", "nan"), ("collect", "--interval", "inf"),
                                  ("fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "nan")])
def test_a_number_of_seconds_that_is_not_finite_is_refused_naming_its_option(capsys, args):
    """`nan` and `inf` parse as floats: a sampling loop would never reach a NaN duration, and a
    socket refuses a NaN timeout deep inside (an internal error before)."""
    from kbopt.cli import main
    with pytest.raises(SystemExit) as refused:       # argparse's own exit, as for any bad option
        main(list(args))
    err = capsys.readouterr().err
    assert refused.value.code == 2 and f"argument {args[-2]}: '{args[-1]}': give a finite number of seconds" in err
