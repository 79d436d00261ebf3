"""Facts v1: what is accepted, and the one-paragraph errors for what is not."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbopt.errors import FactsError
from kbopt.kb.facts import facts_from_document, load_facts, parse_document


def _error(document, overrides=()):
    with pytest.raises(FactsError) as caught:
        facts_from_document(document, "run.json", list(overrides))
    return str(caught.value)


def test_percentage_for_a_ratio_names_the_path_and_the_fix():
    message = _error({"telemetry": {"memory_used_ratio": 93}})
    assert "$.telemetry.memory_used_ratio" in message
    assert "ratio in 0..1" in message and "write 0.93" in message


def test_unknown_key_suggests_the_right_name():
    message = _error({"workload": {"seq_len_stdev": 700}})
    assert "$.workload.seq_len_stdev: unknown key" in message
    assert "did you mean 'workload.seq_len_std'" in message


def test_fact_in_the_wrong_section_is_pointed_to_its_section():
    message = _error({"hardware": {"memory_used_ratio": 0.5}})
    assert "did you mean 'telemetry.memory_used_ratio'" in message


def test_unknown_section():
    assert "did you mean 'telemetry'" in _error({"telemetri": {}})


def test_wrong_types_name_the_path():
    assert "$.hardware.gpu_count: expected an integer, got \"4\"" in _error({"hardware": {"gpu_count": "4"}})
    assert "$.constraints.needs_debug_breakpoints: expected true or false" in _error(
        {"constraints": {"needs_debug_breakpoints": "yes"}})
    assert "is not one of fp32, bf16" in _error({"model": {"weight_dtype": "float16"}})
    assert "\"major.minor\"" in _error({"hardware": {"compute_capability": "8.9.1"}})
    assert "$.telemetry: expected an object" in _error({"telemetry": 0.5})


def test_a_boolean_is_not_a_number():
    assert "expected a number, got true" in _error({"telemetry": {"compute_utilization": True}})


def test_several_errors_are_reported_together():
    message = _error({"telemetry": {"memory_used_ratio": 93, "compute_utilization": -1}})
    assert "memory_used_ratio" in message and "compute_utilization" in message


def test_format_marker():
    assert "facts/1" in _error({"kbopt": "facts/2"})


def test_not_an_object():
    assert "a facts document is a JSON object" in _error([1, 2])


def test_empty_and_malformed_files(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(FactsError, match="empty"):
        load_facts(empty)
    broken = tmp_path / "broken.json"
    broken.write_text('{"telemetry": {"memory_used_ratio": 0.9,}}')
    with pytest.raises(FactsError, match=r"line 1 column \d+"):
        load_facts(broken)
    with pytest.raises(FactsError, match="NaN is not a number"):
        parse_document('{"telemetry": {"memory_used_ratio": NaN}}', "x.json")
    with pytest.raises(FactsError, match="no such facts file"):
        load_facts(tmp_path / "absent.json")


def test_yaml_facts(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("telemetry:\n  memory_used_ratio: 0.95\n")
    assert load_facts(path).values == {"telemetry.memory_used_ratio": 0.95}


def test_null_means_not_known():
    assert facts_from_document({"telemetry": {"memory_used_ratio": None}}, "x").values == {}


def test_catalog_fills_compute_capability_and_memory_with_their_origin():
    facts = facts_from_document({"hardware": {"gpu_name": "NVIDIA L40S"}}, "x")
    assert facts.values["hardware.compute_capability"] == "8.9"
    assert facts.values["hardware.memory_total_gib"] == 45
    assert facts.provenance["hardware.compute_capability"].source == "catalog:L40S"
    assert facts.provenance["hardware.compute_capability"].quality == "catalog"


def test_given_values_win_over_the_catalog():
    facts = facts_from_document({"hardware": {"gpu_name": "NVIDIA A100-SXM4-80GB", "memory_total_gib": 79.2}}, "x")
    assert facts.values["hardware.memory_total_gib"] == 79.2
    assert facts.provenance["hardware.memory_total_gib"].source == "input"


def test_versions_compare_as_numbers():
    facts = facts_from_document({"hardware": {"compute_capability": "10.0"}}, "x")
    assert facts.engine_values()["hardware.compute_capability"] > 8.9


def test_set_overrides_a_fact_and_is_validated():
    facts = facts_from_document({"telemetry": {"memory_used_ratio": 0.5}}, "x",
                                ["telemetry.memory_used_ratio=0.95", "constraints.allowed_precisions=[int8, fp16]"])
    assert facts.values["telemetry.memory_used_ratio"] == 0.95
    assert facts.values["constraints.allowed_precisions"] == ["int8", "fp16"]
    assert facts.provenance["telemetry.memory_used_ratio"].source == "set"
    assert "write 0.95" in _error({}, ["telemetry.memory_used_ratio=95"])
    assert "did you mean 'telemetry.memory_used_ratio'" in _error({}, ["telemetry.memory_use_ratio=0.9"])
    assert "derived by rules" in _error({}, ["derived.bottleneck=compute_capacity"])
    assert "expected PATH=VALUE" in _error({}, ["telemetry.memory_used_ratio"])


def test_schema_matches_the_bundled_examples(tmp_path):
    from pathlib import Path

    import jsonschema

    from kbopt.kb.schema import facts_schema
    schema = facts_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in (Path(__file__).resolve().parents[1] / "examples").glob("*.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)


def test_an_unquoted_version_is_read_as_text():
    facts = facts_from_document({"hardware": {"compute_capability": 9}}, "x")
    assert facts.values["hardware.compute_capability"] == "9.0"


def test_inconsistent_facts_are_refused_with_both_paths():
    message = _error({"workload": {"concurrency_mean": 32, "concurrency_peak": 1}})
    assert "$.workload.concurrency_peak: 1 is below workload.concurrency_mean (32)" in message
    message = _error({"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "8.0"}})
    assert "$.hardware.compute_capability: 8.0 contradicts hardware.gpu_name" in message and "9.0" in message


def test_yaml_oddities_are_clean_errors(tmp_path):
    dated = tmp_path / "dated.yaml"
    dated.write_text("model:\n  name: 2024-01-01\n  params_billion: 8\n")
    assert load_facts(dated).values["model.name"] == "2024-01-01"
    numbered = tmp_path / "numbered.yaml"
    numbered.write_text("2:\n  a: 1\n")
    with pytest.raises(FactsError, match="the key 2 is not a name"):
        load_facts(numbered)


def test_set_reads_exponent_numbers():
    facts = facts_from_document({}, "x", ["workload.queue_timeout_ratio=1e-5"])
    assert facts.values["workload.queue_timeout_ratio"] == 1e-5


def test_gpu_catalog_matches_names_and_agrees_with_the_fp8_rule():
    from kbopt.kb.catalog import gpus
    from kbopt.kb.knowledge import match_gpu
    expected = {"Tesla V100-SXM2-16GB": "V100-16GB", "Tesla V100-SXM2-32GB": "V100-32GB", "Tesla T4": "T4",
                "NVIDIA A10G": "A10G", "NVIDIA A10": "A10", "NVIDIA A100-SXM4-40GB": "A100-40GB",
                "NVIDIA A100-SXM4-80GB": "A100-80GB", "NVIDIA A100 80GB PCIe": "A100-80GB", "NVIDIA L4": "L4",
                "NVIDIA L40S": "L40S", "NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA H100 PCIe": "H100-PCIe",
                "NVIDIA H100 NVL": "H100-NVL", "NVIDIA GH200 480GB": "GH200", "NVIDIA H200": "H200",
                "NVIDIA B200": "B200"}
    assert {name: match_gpu(name).id for name in expected} == expected
    for gpu in gpus():
        if gpu.vendor == "amd":       # no compute capability: D-FP8-MATRIX-CORES-AMD reads the FP8 column
            assert gpu.compute_capability is None and gpu.fp8_tensor_cores == (gpu.fp8_tflops > 0), gpu.id
            continue
        assert gpu.compute_capability is not None, gpu.id
        major, minor = map(int, gpu.compute_capability.split("."))
        assert gpu.fp8_tensor_cores == ((major, minor) >= (8, 9)), gpu.id


def test_every_dtype_has_a_size():
    from kbopt.kb.vocabulary import load_vocabulary
    vocabulary = load_vocabulary()
    dtypes = set(vocabulary.get("model.weight_dtype").values) | set(vocabulary.get("model.kv_cache_dtype").values)
    assert dtypes <= set(vocabulary.dtype_bytes)


def test_the_fast_facts_check_never_accepts_what_the_schema_refuses():
    """plainly_valid() spares a cold start jsonschema's import; it may only be stricter than the schema."""
    import copy
    import random

    import jsonschema

    from kbopt.kb.schema import facts_schema, plainly_valid
    from kbopt.kb.vocabulary import load_vocabulary

    vocabulary = load_vocabulary()
    validator = jsonschema.Draft202012Validator(facts_schema())
    examples = [json.loads(p.read_text()) for p in sorted((Path(__file__).parent.parent / "examples").glob("*.json"))]
    assert examples and all(plainly_valid(d, vocabulary) for d in examples)      # the fast path is the usual one
    oddities = [None, True, False, 0, -1, 1, 0.5, 1.5, 2, 4.0, -0.0, 1e308, float("nan"), float("inf"), "", "x", "8.9",
                "8.96", "10.0", [], ["fp8"], ["fp8", "fp8"], ["bogus"], {}, {"a": 1}, "generation", "vllm", 2**70]
    rng = random.Random(11)
    paths = [s.path for s in vocabulary.facts.values() if not s.derived and not s.quality_of]
    fast = 0
    for _ in range(3000):
        document = copy.deepcopy(rng.choice(examples))
        for _ in range(rng.randint(1, 3)):
            section, name = rng.choice(paths).split(".")
            document.setdefault(section, {})[name] = rng.choice(oddities)
        if rng.random() < 0.1:
            document["provenance"] = {rng.choice(paths): rng.choice(
                [{"source": "dcgm", "quality": "measured"}, {"source": "x", "quality": "bogus"}, {"source": 1, "quality": "user"},
                 {"source": "nvml", "quality": "proxy", "samples": -1}, {"source": "nvml", "quality": "proxy", "window_s": 2.5}])}
        if rng.random() < 0.05:
            document[rng.choice(["kbopt", "extra", "hardware"])] = rng.choice(oddities)
        if plainly_valid(document, vocabulary):
            fast += 1
            assert not list(validator.iter_errors(document)), document
    assert fast > 150          # enough documents took the fast path for the check to mean something


def test_sizes_past_physics_are_refused_naming_the_field(tmp_path, run_cli):
    # issue 28: params_billion 1e15 passed the schema and emitted a tensor-parallel size of 7x10^13
    path = tmp_path / "big.json"
    path.write_text('{"kbopt": "facts/1", "model": {"params_billion": 1e15, "weight_dtype": "bf16"},'
                    ' "hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8}}')
    code, out, err = run_cli("advise", "--facts", str(path), "--emit", "vllm")
    assert code == 2 and out == "" and "$.model.params_billion" in err and "Traceback" not in err


def test_the_observed_longest_sequence_is_seq_len_max_and_the_old_name_still_reads_with_a_note(tmp_path):
    # workload.max_seq_len read as the observed longest or as the configured limit (serving.max_model_len);
    # it is workload.seq_len_max now, and a document written with the old name still reads
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"kbopt": "facts/1", "workload": {"max_seq_len": 4096, "seq_len_mean": 900}}))
    facts = load_facts(path)
    assert facts.values["workload.seq_len_max"] == 4096 and "workload.max_seq_len" not in facts.values
    assert "given as workload.max_seq_len" in (facts.provenance["workload.seq_len_max"].note or "")
    # a recorded provenance moves with it; the current name wins where both are given
    facts = facts_from_document({"kbopt": "facts/1", "workload": {"max_seq_len": 9000},
                                 "provenance": {"workload.max_seq_len": {"source": "trace:azure", "quality": "measured"}}}, "doc")
    assert facts.provenance["workload.seq_len_max"].source == "trace:azure"
    both = facts_from_document({"kbopt": "facts/1", "workload": {"max_seq_len": 9000, "seq_len_max": 4096}}, "doc")
    assert both.values["workload.seq_len_max"] == 4096
    # the consistency check reads it under its new name
    with pytest.raises(FactsError, match="seq_len_max"):
        facts_from_document({"kbopt": "facts/1", "workload": {"max_seq_len": 100, "seq_len_mean": 900}}, "doc")


def test_each_problem_of_a_facts_file_names_its_line_and_path(tmp_path, run_cli):
    # a newcomer found three problems run together on one line, with no line to go to
    for suffix, text in ((".json", '{\n "kbopt": "facts/1",\n "hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 0},\n'
                                   ' "workload": {"prompt_len_mean": -5, "engine": "vllm"},\n'
                                   ' "telemetry": {"compute_utilization": 1.5}\n}\n'),
                         (".yaml", "kbopt: facts/1\nhardware:\n  gpu_count: 0\nworkload:\n  prompt_len_mean: -5\n"
                                   "telemetry:\n  compute_utilization: 1.5\n")):
        path = tmp_path / f"bad{suffix}"
        path.write_text(text)
        code, out, err = run_cli("advise", "--facts", str(path))
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "invalid facts (3 problems): " in err
        expected = {".json": (3, 4, 5), ".yaml": (3, 5, 7)}[suffix]
        problems = err.split(": invalid facts (3 problems): ", 1)[1].strip().split("; ")
        lines = {p.split(":", 1)[0]: p for p in problems}
        assert {f"line {n}" for n in expected} == set(lines), problems
        assert "$.hardware.gpu_count" in lines[f"line {expected[0]}"]
