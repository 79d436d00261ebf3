"""Engine settings (kb/engines/<engine>.yaml): names checked against each engine's known arguments per
version, the memory fraction converted per engine, version ranges, --emit per engine, and strings
from the facts kept inert."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kbopt.engine.advice.settings import Target, memory_fraction, settings_for, settings_map, targets
from kbopt.kb.engines import ENGINES, parse_version, version_text
from kbopt.kb.knowledge import engine_catalog

HERE = Path(__file__).parent
FLAGS = HERE / "data" / "engine_flags"
FACTS = HERE / "data" / "emit" / "vllm-8b-h100.json"


def known(engine: str, version: tuple[int, ...]) -> set[str]:
    lines = (FLAGS / f"{engine}-{version_text(version)}.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_setting_names_an_argument_the_engine_has_at_each_covered_version():
    catalog = engine_catalog()
    for engine in catalog.engines.values():
        for version in engine.versions:
            names = known(engine.id, version)
            for entry in catalog.entries:
                if entry.engine == engine.id and entry.kind != "note" and entry.holds_at(version):
                    assert entry.name in names, (engine.id, version_text(version), entry.name)


def test_every_setting_cites_a_listed_source():
    from kbopt.kb.knowledge import source_catalog as catalog
    ids = {source.id for source in catalog().references.values()}
    catalog_ = engine_catalog()
    assert {e.source for e in catalog_.entries} | {e.source for e in catalog_.engines.values()} <= ids


# The estimates of one deployment: 80 GiB GPU, 15 GiB of weights, TP1, default token budget.
DERIVED = {"derived.gpu_memory_gib": 80.0, "derived.weights_gib_per_gpu": 15.0, "derived.tensor_parallel": 1}


def test_the_memory_fraction_is_converted_per_engine_to_the_same_kv_pool():
    values = {engine: memory_fraction(engine, 0.9, {}, DERIVED)[0] for engine in ENGINES}
    activations, nontorch = 0.65 * 8192 / 1024, 0.13
    kv = 0.9 * 80 - 15 - activations - nontorch
    assert values["vllm"] == pytest.approx(0.9, abs=1e-3)
    # Each engine's own rule (rules/diagnosis/m-kv-headroom-*.yaml) gives back the same KV pool.
    assert 80 * values["sglang"] - 15 == pytest.approx(kv, abs=0.1)
    assert values["trtllm"] * (80 - 15 - activations) * (1 - 0.015) == pytest.approx(kv, abs=0.1)
    assert 80 * values["tgi"] - 15 - activations == pytest.approx(kv, abs=0.1)
    assert len(set(values.values())) == 4          # never one engine's value copied to another


def test_a_fraction_the_estimates_cannot_convert_is_not_set_and_says_why():
    value, why = memory_fraction("sglang", 0.9, {}, {})
    assert value is None and "derived.weights_gib_per_gpu" in why
    value, why = memory_fraction("trtllm", 0.2, {}, DERIVED)
    assert value is None and "no KV cache" in why


def test_settings_per_version_and_outside_a_flags_range():
    facts = {"workload.engine": "vllm", "serving.engine_version": "0.11.0"}
    old = settings_for(targets(facts)[0], "op_fusion", "op_fusion", {}, facts, {})
    assert "enable_fusion" in old[0].text
    new = settings_for(targets({"workload.engine": "vllm"})[0], "op_fusion", "op_fusion", {}, {}, {})
    assert "fuse_norm_quant" in new[0].text
    offload = settings_for(targets({**facts, "serving.engine_version": "0.10.2"})[0], "kv_offload", "kv_offload",
                           {"host_cache_gib": 64, "host_blocks": 8192}, facts, {})
    assert offload[0].kind == "note" and "LMCache" in offload[0].text
    # A version older than any entry: the setting is left out with a note naming its range.
    too_old = Target("trtllm", (0, 20, 0), True, True)
    lines = settings_for(too_old, "debug_mode", "debug_mode", {}, {}, {})
    assert lines[0].kind == "note" and ">= 1.0.0" in lines[0].text
    assert "outside the versions" in too_old.describe()


def test_unknown_engine_gives_all_four_at_their_latest_version():
    found = targets({"workload.engine": "other", "serving.engine_version": "9.9"})
    assert [t.engine for t in found] == list(ENGINES) and not any(t.stated for t in found)
    assert [t.version for t in found] == [engine_catalog().engines[e].latest for e in ENGINES]
    assert set(settings_map("debug_mode", "debug_mode", {}, {}, {})) == set(ENGINES)
    assert parse_version("v3.3.4-rocm") == (3, 3, 4) and parse_version("$(reboot)") is None


EXPECTED = {
    "vllm": ["--quantization fp8", "# unchanged; today: serving.kv_block_size"],
    # Fusion is advised only where the engine exposes the passes (vLLM): not here.
    "sglang": ["--quantization fp8", "--kv-cache-dtype fp8_e4m3", "--page-size 16"],
    "trtllm": ["cat > kbopt-trtllm.yaml <<'YAML'", "  dtype: fp8", "  tokens_per_block: 16",
               "trtllm-serve \"$MODEL\" --extra_llm_api_options kbopt-trtllm.yaml"],
    "tgi": ["--quantize fp8", "TGI is in maintenance mode"],
}


def _emitted_names(text: str, engine: str) -> set[str]:
    names = set()
    inside = False
    for line in text.splitlines():
        bare = line.split("  #")[0].strip()
        if line == "args=(" or line.endswith("<<'YAML'"):
            inside = True
        elif line in (")", "YAML"):
            inside = False
        elif inside and bare.startswith("--"):
            names.add(bare.split()[0])
        elif inside and engine == "trtllm" and bare and not bare.startswith("#"):
            names.add(bare.split(":")[0])
        elif line.startswith("export "):
            names.add(bare.removeprefix("export ").split("=")[0])
    return names


VERSIONS = {"vllm": "0.11.0", "sglang": "0.5.0", "trtllm": "1.1.0", "tgi": "3.3.0"}


@pytest.mark.parametrize("engine", ENGINES)
def test_emit_prints_a_ready_script_for_each_engine(run_cli, engine):
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--set", f"workload.engine={engine}",
                           "--set", f"serving.engine_version={VERSIONS[engine]}", "--emit", engine)
    assert code == 0
    for expected in EXPECTED[engine]:
        assert expected in out, (engine, expected)
    target = targets({"workload.engine": engine, "serving.engine_version": VERSIONS[engine]})[0]
    yaml_keys = known(engine, target.version)
    for name in _emitted_names(out, engine):
        # a nested YAML key is checked by its leaf's parent chain in the known table
        assert name in yaml_keys or any(k.startswith(name + ".") or k.endswith("." + name) for k in yaml_keys), name
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0


def test_emit_for_another_engine_carries_the_deployment_but_not_the_memory_fraction(run_cli):
    """Moving engines keeps the layout and caps; a memory fraction is in the deployed engine's own
    denominator, so it is not copied (the advice's memory_budget converts one where it sets it)."""
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--set", "serving.memory_fraction=0.9", "--emit", "sglang")
    assert code == 0 and "SGLang 0.5.1 (serving.engine_version not given" in out
    assert "--max-running-requests 128" in out and "--mem-fraction-static" not in out
    assert "left with today's engine (its own settings): serving.engine_version = 0.11.0 (vllm's), serving.memory_fraction = 0.9 (vllm's)" in out


def test_strings_from_the_facts_stay_inert(run_cli, tmp_path):
    """A model id with shell syntax is one quoted word (control characters are refused:
    tests/test_launch.py); run, the script's MODEL is exactly the id."""
    document = json.loads(FACTS.read_text())
    name = "x'; touch /tmp/kbopt-pwned; echo '}YAML $(reboot) `id`"
    document["model"]["name"] = name
    facts = tmp_path / "hostile.json"
    facts.write_text(json.dumps(document))
    for engine in ENGINES:
        code, out, _ = run_cli("advise", "--facts", str(facts), "--emit", engine)
        assert code == 0
        if shutil.which("bash"):
            assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0
            prologue = "\n".join(line for line in out.splitlines() if line.startswith("MODEL"))
            shown = subprocess.run(["bash", "-c", prologue + '\nprintf %s "$MODEL"'], text=True, capture_output=True,
                                   env={"PATH": "/usr/bin:/bin"})
            assert shown.stdout == name
    hostile = settings_map("parallelism", "parallelism", {"tensor": "4; rm -rf /", "pattern": "tensor"},
                           {"workload.engine": "vllm"}, {})
    assert hostile["vllm"] == ("--tensor-parallel-size '4; rm -rf /'",)


def test_advice_json_carries_settings_for_the_deployments_engine(run_cli):
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--format", "json")
    strategies = json.loads(out)["strategies"]
    assert code == 0 and all(set(s["settings"]) == {"vllm"} for s in strategies)


def test_kept_settings_are_those_made_afresh_when_a_fact_they_read_changes():
    """settings_map keeps each strategy's lines with the facts their computation read: asked
    again with the same values it takes them; with a fact it read changed, given or dropped it
    makes them again (a memory fraction follows the GPU's memory and the batched tokens, an
    `unchanged` mark the deployed setting). Each answer is the one made afresh."""
    from kbopt.engine.advice.settings import _settings_map
    sglang, vllm = {"workload.engine": "sglang"}, {"workload.engine": "vllm"}
    cases = [
        ("memory_budget", "memory_budget", {"memory_fraction": 0.9}, sglang, DERIVED),
        ("memory_budget", "memory_budget", {"memory_fraction": 0.9}, sglang, {**DERIVED, "derived.gpu_memory_gib": 141.0}),
        ("memory_budget", "memory_budget", {"memory_fraction": 0.9}, {**sglang, "serving.max_num_batched_tokens": 2048},
         DERIVED),
        ("memory_budget", "memory_budget", {"memory_fraction": 0.9}, sglang, {**DERIVED, "derived.tensor_parallel": 2}),
        ("memory_budget", "memory_budget", {"memory_fraction": 0.9}, sglang, {}),
        ("memory_budget", "memory_budget", {"memory_fraction": 0.8}, vllm, DERIVED),
        ("memory_budget", "memory_budget", {"memory_fraction": 1}, vllm, DERIVED),
        ("memory_budget", "memory_budget", {"memory_fraction": True}, vllm, DERIVED),
        ("quantization", "quantization[fp8]", {"method": "fp8"}, vllm, DERIVED),
        ("mixed_precision", "mixed_precision", {"keep_high_precision": ["softmax", "lm_head"]}, vllm, DERIVED),
        ("mixed_precision", "mixed_precision", {"keep_high_precision": ["softmax"]}, vllm, DERIVED),
        ("mixed_precision", "mixed_precision", {"keep_high_precision": ("softmax",)}, vllm, DERIVED),
        ("quantization", "quantization[fp8]", {"method": "fp8"}, {**vllm, "serving.quantization": "fp8"}, DERIVED),
        ("quantization", "quantization[fp8]", {"method": "fp8"}, {**vllm, "serving.quantization": "int8"}, DERIVED),
    ]
    answers = set()
    for _ in range(3):       # kept from a key's second sighting on: the third round takes kept lines
        for strategy, key, params, facts, derived in cases:
            on = targets(facts)
            got = settings_map(strategy, key, params, facts, derived, on)
            assert got == _settings_map(strategy, key, params, facts, derived, on), (key, params, facts, derived)
            answers.add(json.dumps(got))
    assert len(answers) >= 9


def test_a_pack_that_retunes_a_memory_parameter_sizes_the_settings_on_it(tmp_path, pack):
    # The settings' memory rule reads the same parameters as the model's KV-pool rules: a pack that
    # retunes one (a deployment's measured activations, say) must size the engines' memory fractions
    # on it too, not on the built-in value (issue 27: a custom pack's parameters reach the settings).
    from kbopt.engine.advice.settings import pack_constants
    from kbopt.engine.pack.loader import load_pack
    (tmp_path / "parameters.yaml").write_text(
        "parameters:\n  activation_gib_per_1k_tokens: {value: 0.2, why: measured on our engine build, overrides: true}\n")
    retuned = load_pack([str(tmp_path)])
    assert dict(pack_constants(retuned))["activation_gib_per_1k_tokens"] == 0.2
    assert dict(pack_constants(pack))["activation_gib_per_1k_tokens"] == 0.65
    # SGLang's fraction holds the weights and the KV cache (80 x f = weights + KV), and the KV pool a
    # 0.9 share of the whole device leaves is 0.9 x 80 - weights - activations - non-torch: 5.2 GiB of
    # activations at the built-in 0.65 GiB per 1k tokens of an 8,192-token budget, 1.6 GiB at 0.2.
    builtin = memory_fraction("sglang", 0.9, {}, DERIVED, pack_constants(pack))[0]
    ours = memory_fraction("sglang", 0.9, {}, DERIVED, pack_constants(retuned))[0]
    assert 80 * builtin - 15 == pytest.approx(0.9 * 80 - 15 - 0.65 * 8 - 0.13, abs=0.05)
    assert 80 * ours - 15 == pytest.approx(0.9 * 80 - 15 - 0.2 * 8 - 0.13, abs=0.05)
    assert ours > builtin
    assert (targets({}, "vllm", pack_constants(retuned))[0].constants) == pack_constants(retuned)
