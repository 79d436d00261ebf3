"""The launch script is the whole deployment after the advice, and the engine would start it.

One test, parametrized over every bundled example x the four engines x each version their
profile covers: the script passes `bash -n`, repeats no flag, keeps the deployment's model and
TP/PP, every flag validates against the engine's profile at that version, nothing the engine
refuses there appears, and no batch cap sits below today's running batch without a reason. The
other tests pin the pieces: option injection, version handling, checkpoints, sizing, refusals.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import engine_runs_on

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.caps import CAP_PARAMS
from kbopt.engine.advice.launch import build_launch
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.engines import ENGINES, version_text
from kbopt.kb.facts import facts_from_document, load_facts
from kbopt.kb.knowledge import engine_catalog
from kbopt.reports.emit import render_launch

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent
# the bundled examples and the test deployments
EXAMPLES = sorted(p for p in [*(ROOT / "examples").iterdir(), *(HERE / "data" / "emit").iterdir()]
                  if p.suffix in (".json", ".yaml"))
CASES = [(example, engine, version_text(version)) for example in EXAMPLES for engine in ENGINES
         if engine_runs_on(engine, example) for version in engine_catalog().engines[engine].versions]
FACTS = HERE / "data" / "emit" / "vllm-8b-h100.json"


def _script_args(script: str, engine: str) -> list[tuple[str, str | None]]:
    """The arguments the script passes: the args=( ) array, the YAML file's keys (dotted), the
    exported variables; read back with shlex, so what is checked is what bash would pass."""
    lines = script.splitlines()
    start, end = lines.index("args=("), len(lines) - 1 - lines[::-1].index(")")
    words = shlex.split("\n".join(lines[start + 1:end]), comments=True)
    out: list[tuple[str, str | None]] = []
    for word in words:
        if word.startswith("--"):
            out.append((word, None))
        else:
            name, value = out[-1]
            assert value is None, (name, value, word)
            out[-1] = (name, word)
    if "<<'YAML'" in script:
        body = script.split("<<'YAML'\n", 1)[1].split("\nYAML\n", 1)[0]
        import yaml
        tree = yaml.safe_load(body)

        def walk(node: dict, prefix: str) -> None:
            for key, value in node.items():
                if isinstance(value, dict) and prefix + key not in ("speculative_config", "cuda_graph_config"):
                    walk(value, prefix + key + ".")
                else:
                    out.append((prefix + key, json.dumps(value) if isinstance(value, dict | list) or value is None
                                else ("true" if value is True else "false" if value is False else str(value))))
        walk(tree, "")
    for line in lines:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").split("  #")[0].partition("=")
            out.append((name, shlex.split(value)[0]))
    return out


def _command(script: str) -> list[str]:
    exec_line = next(line for line in script.splitlines() if line.startswith("exec "))
    return shlex.split(exec_line)


@pytest.mark.parametrize("example,engine,version", CASES, ids=[f"{e.name}-{g}-{v}" for e, g, v in CASES])
def test_every_example_emits_a_script_each_engine_starts(pack, example, engine, version):
    facts = load_facts(example, [f"workload.engine={engine}", f"serving.engine_version={version}"])
    advice = advise(facts, pack, available_evaluators()[0])
    if example.name == "vllm-70b-a10g-no-room.json":      # 70B in 16 bits on one 24 GB GPU: refused, never a cap of 1
        from kbopt.errors import KboptError
        with pytest.raises(KboptError, match="does not fit"):
            build_launch(advice, engine)
        return
    launch = build_launch(advice, engine)
    script = render_launch(launch, advice.bottleneck)
    facts = advice.facts
    spec = engine_catalog().engines[engine]
    target_version = launch.target.version
    assert version_text(target_version) == version
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    args = _script_args(script, engine)
    names = [name for name, _ in args]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    # every flag is the profile's at this version, typed right, and nothing it refuses is there,
    # the engine's default for a bounded cap the script leaves unset included (vLLM's max_num_seqs)
    for bound in spec.bounds:
        default = bound.default_on(str(facts.get("hardware.gpu_name") or ""), advice.derived.get("derived.gpu_memory_gib"))
        if bound.at_most in names and bound.flag not in names and default is not None:
            args.append((bound.flag, str(default)))
    assert spec.problems(target_version, args) == [], script
    for name, value in args:
        assert str(spec.by_name[name].problem(value) or "") == ""
    # no placeholder in a line that runs (a draft model the advice cannot name is a comment)
    assert not [line for line in script.splitlines() if "DRAFT_MODEL" in line.split("#")[0]], script
    # the deployment's model and layout are kept
    model = facts.get("model.name")
    if model:
        assert f"MODEL_DEFAULT={shlex.quote(str(model))}" in script
    command = _command(script)
    assert command[0] == "exec" and "$MODEL" in script.splitlines()[-1]
    layout = {"vllm": ("--tensor-parallel-size", "--pipeline-parallel-size"), "sglang": ("--tp-size", "--pp-size"),
              "trtllm": ("--tp_size", "--pp_size"), "tgi": ("--num-shard", None)}[engine]
    by_name = {arg.name: arg for arg in launch.args}
    for fact, flag in zip(("serving.tensor_parallel_size", "serving.pipeline_parallel_size"), layout, strict=True):
        if facts.get(fact) is not None and flag is not None:
            # today's layout, unless a strategy reshapes it (and then the rule is named, today's value shown)
            arg = by_name[flag]
            assert arg.value == str(facts.get(fact)) or (arg.today == str(facts.get(fact)) and arg.status == "change"
                                                         and not arg.rule.startswith("today")), (fact, script)
    # the config file of TensorRT-LLM is passed the way that version reads it
    if engine == "trtllm" and "<<'YAML'" in script:
        assert "--extra_llm_api_options" in command and "--config" not in command
    # no batch cap below today's running batch without the reason beside it
    cap = next((c.name for c in spec.deployment if c.fact == "serving.max_num_seqs"), None)
    running = max([float(facts[f]) for f in ("workload.requests_running_mean", "workload.concurrency_peak") if f in facts],
                  default=None)
    for line in script.splitlines():
        words = line.split("  #")[0].split()
        if cap and running is not None and words[:1] == [cap] and int(words[1]) < running:
            assert "below today's running batch" in line, line


@pytest.mark.parametrize("name", ["-trust-remote-code", "--config=/etc/passwd", "llama\nexec rm", "llama\x1b[31m", " -x"])
def test_a_model_name_that_would_be_an_option_is_refused(run_cli, tmp_path, name):
    document = json.loads(FACTS.read_text())
    document["model"]["name"] = name
    facts = tmp_path / "hostile.json"
    facts.write_text(json.dumps(document))
    for engine in ENGINES:
        code, out, err = run_cli("advise", "--facts", str(facts), "--emit", engine)
        assert code == 2 and out == "" and "model.name" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_the_70b_tp4_deployment_relaunches_on_tp4_with_its_model(run_cli):
    code, out, _ = run_cli("advise", "--facts", str(ROOT / "examples" / "vllm-70b-4xh100.json"), "--emit", "vllm")
    assert code == 0
    assert "MODEL_DEFAULT=llama-3-70b" in out
    assert "  --tensor-parallel-size 4 " in out and out.count("--tensor-parallel-size 4") == 1


def test_a_bad_value_from_todays_command_is_named_as_the_commands_not_set(run_cli):
    # set 7: a launch flag the profile takes but the facts cannot hold was reported "with --set"
    code, out, err = run_cli("advise", "--facts", str(FACTS), "--launch", "vllm serve m --tensor-parallel-size 2000000")
    assert code == 2 and out == ""
    assert "with today's launch command (--launch)" in err and "$.serving.tensor_parallel_size" in err
    assert "--set" not in err and len(err.strip().splitlines()) == 1


def test_a_launch_file_named_without_its_at_sign_is_told_how_to_read_it(run_cli, tmp_path):
    command = tmp_path / "today.launch"
    command.write_text("vllm serve m --tensor-parallel-size 2\n")
    code, out, err = run_cli("advise", "--facts", str(FACTS), "--launch", str(command))
    assert code == 2 and out == ""
    assert f"write --launch @{command}" in err and len(err.strip().splitlines()) == 1


def test_a_launch_word_no_path_can_be_is_still_a_clear_error(run_cli):
    # the hint above asks the file system whether the word is a file: a name too long is an answer, not a traceback
    code, out, err = run_cli("advise", "--facts", str(FACTS), "--launch", "a" * 5000)
    assert code == 2 and out == "" and err.startswith("kbopt: error: --launch:") and len(err.strip().splitlines()) == 1


def _advice(pack, **overrides):
    facts = load_facts(FACTS, [f"{k}={v}" for k, v in overrides.items()])
    return advise(facts, pack, available_evaluators()[0])


def test_an_unknown_version_uses_the_nearest_with_a_warning_and_one_below_the_floor_is_refused(pack):
    from kbopt.errors import KboptError
    script = render_launch(build_launch(advice := _advice(pack, **{"serving.engine_version": "0.14.1"}), "vllm"),
                           advice.bottleneck)
    assert "# warning: vLLM (V1 engine) 0.14.1 is not covered: written for 0.13.0" in script
    with pytest.raises(KboptError, match=r"serving.engine_version 0.8.0 is below .* \(0.10.0"):
        build_launch(_advice(pack, **{"serving.engine_version": "0.8.0"}), "vllm")
    with pytest.raises(KboptError, match="not an engine"):
        build_launch(_advice(pack), "llamacpp")


def test_the_deployment_is_carried_whole_and_each_value_once(pack):
    advice = _advice(pack, **{"serving.tensor_parallel_size": 2, "serving.pipeline_parallel_size": 2,
                              "serving.max_model_len": 32768, "serving.memory_fraction": 0.85,
                              "serving.kv_block_size": 32, "serving.quantization": "int4_awq",
                              "model.weight_dtype": "int4"})
    launch = build_launch(advice, "vllm")
    argv = dict(launch.argv())
    assert argv["--tensor-parallel-size"] == "2" and argv["--pipeline-parallel-size"] == "2"
    assert argv["--max-model-len"] == "32768"
    block = next(a for a in launch.args if a.name == "--block-size")   # today's 32, or a rule's value shown as a change
    assert block.today == "32" and (block.value == "32" or (block.status == "change" and not block.rule.startswith("today")))
    paged = next((s for s in advice.strategies if s.id == "paged_kv_cache"), None)
    if paged is not None and block.value != "32":
        assert paged.status == "change"       # in place, but its page size changes: not a keep
    assert argv["--quantization"] == "awq_marlin"          # the AWQ checkpoint deployed today
    other = dict(build_launch(advice, "sglang").argv())
    assert other["--context-length"] == "32768" and "--mem-fraction-static" not in other   # vLLM's denominator
    assert dict(build_launch(advice, "tgi").argv())["--max-total-tokens"] == "32768"


def test_a_change_that_needs_another_checkpoint_says_how_and_sets_no_method(pack):
    advice = _advice(pack, **{"constraints.allowed_precisions": '["int4"]'})
    for engine in ENGINES:
        launch = build_launch(advice, engine)
        argv = dict(launch.argv())
        assert argv.get("--quantization") not in ("awq_marlin", "gptq_marlin", "awq", "gptq"), engine
        assert argv.get("--quantize") not in ("awq", "gptq"), engine
        if any(s.key == "quantization[int4]" for s in advice.strategies):
            assert any("llm-compressor" in note and "MODEL" in note for note in launch.notes), engine


def test_online_fp8_only_over_a_16_bit_checkpoint(pack):
    sixteen = build_launch(_advice(pack), "vllm")
    if any(s.key == "quantization[fp8]" and s.status == "change" for s in _advice(pack).strategies):
        assert dict(sixteen.argv()).get("--quantization") == "fp8"
    awq = build_launch(_advice(pack, **{"serving.quantization": "int4_awq", "model.weight_dtype": "int4"}), "vllm")
    assert dict(awq.argv()).get("--quantization") != "fp8"


def test_refused_settings_never_reach_the_script():
    """The profile's refusals, each with a case it refuses and one it takes."""
    catalog = engine_catalog()
    vllm, sglang, trtllm = catalog.engines["vllm"], catalog.engines["sglang"], catalog.engines["trtllm"]
    assert vllm.problems((0, 11, 0), [("--max-num-partial-prefills", "2")])
    assert not vllm.problems((0, 11, 0), [("--max-num-partial-prefills", "1")])
    assert vllm.problems((0, 12, 0), [("--speculative-config", '{"method": "draft_model"}')])
    assert not vllm.problems((0, 12, 0), [("--speculative-config", '{"method": "ngram"}')])
    assert vllm.problems((0, 12, 0), [("--kv-offloading-size", "64")])
    assert not vllm.problems((0, 12, 0), [("--kv-offloading-size", "64"), ("--kv-offloading-backend", "lmcache")])
    # native leaves the OffloadingConnector 0 CPU blocks, and it raises at start (config/vllm.py@0.12.0:476-488)
    assert vllm.problems((0, 12, 0), [("--kv-offloading-size", "64"), ("--kv-offloading-backend", "native")])
    assert vllm.problems((0, 11, 0), [("--kv-offloading-size", "64"), ("--kv-offloading-backend", "lmcache")])
    assert vllm.problems((0, 12, 0), [("--enable-chunked-prefill", None)])
    assert vllm.problems((0, 12, 0), [("--max-num-batched-tokens", "256"), ("--max-num-seqs", "1024")])
    assert not vllm.problems((0, 12, 0), [("--max-num-batched-tokens", "256"), ("--max-num-seqs", "256")])
    assert sglang.problems((0, 5, 0), [("--hicache-ratio", "1.0")])
    assert not sglang.problems((0, 5, 0), [("--hicache-ratio", "1.5")])
    assert sglang.problems((0, 5, 0), [("--kv-cache-dtype", "fp8")])
    assert trtllm.problems((1, 1, 0), [("--config", "x.yaml")]) and trtllm.problems((1, 1, 0), [("--enable_chunked_prefill", None)])
    assert trtllm.problems((1, 1, 0), [("speculative_config", '{"decoding_type": "Draft_Target"}')])


def test_strategy_settings_that_the_engine_refuses_are_not_written(pack):
    from kbopt.engine.advice.settings import settings_for, targets
    facts = {"workload.engine": "vllm", "serving.engine_version": "0.12.0", "serving.tensor_parallel_size": 4}
    target = targets(facts)[0]
    chunk = settings_for(target, "chunked_prefill", "chunked_prefill",
                         {"max_num_batched_tokens": 2048, "max_num_partial_prefills": 2}, facts, {})
    assert not any("--max-num-partial-prefills" in s.text or s.text == "--enable-chunked-prefill" for s in chunk)
    spec = settings_for(target, "speculative_decoding", "speculative_decoding",
                        {"method": "draft_model", "num_speculative_tokens": 3}, facts, {})
    assert [s.kind for s in spec] == ["note"]
    offload = settings_for(target, "kv_offload", "kv_offload", {"host_cache_gib": 16, "host_blocks": 8192}, facts, {})
    assert offload[0].name == "--kv-transfer-config" and json.loads(offload[0].value.strip("'")) == {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"num_cpu_blocks": 8192}}
    small = settings_for(targets({"workload.engine": "sglang"})[0], "kv_offload", "kv_offload", {"host_cache_gib": 8},
                         {}, {"derived.kv_pool_gib_per_gpu": 40.0})
    assert not any(s.name == "--hicache-size" for s in small) and any("larger than the GPU's" in s.text for s in small)
    # the host pool in GB, not as a ratio of a GPU pool the plan's other changes grow (set 41 F4)
    sized = settings_for(targets({"workload.engine": "sglang"})[0], "kv_offload", "kv_offload", {"host_cache_gib": 125},
                         {}, {"derived.kv_pool_gib_per_gpu": 71.1})
    assert [s.text for s in sized if s.name.startswith("--hicache")] == ["--hicache-size 134"]
    tgi = settings_for(targets({"workload.engine": "tgi"})[0], "memory_budget", "memory_budget", {"max_num_seqs": 64}, {}, {})
    assert tgi[0].text == "--max-batch-size 64"


def test_a_cap_below_todays_running_batch_is_raised_or_says_why(pack):
    facts = load_facts(ROOT / "examples" / "capacity-a100-chat.json", ["workload.requests_running_mean=400"])
    advice = advise(facts, pack, available_evaluators()[0])
    seen = 0
    for engine in ENGINES:
        launch = build_launch(advice, engine)
        cap = next(c.name for c in launch.spec.deployment if c.fact == "serving.max_num_seqs")
        for arg in launch.args:
            if arg.name == cap:
                seen += 1
                assert int(arg.value or 0) >= 400 or "below today's running batch" in arg.why, (engine, arg)
                assert arg.why, arg          # raised or kept below: either way the script says why
    assert seen >= 3


def test_caps_are_sized_on_the_pool_after_the_plan(pack):
    """FP8 weights and FP8 KV grow the L4's KV pool: the cap follows the pool after the plan, not today's."""
    advice = advise(load_facts(ROOT / "examples" / "l4-8b-bf16-vllm.json"), pack, available_evaluators()[0])
    before, after = next((g.before, g.after) for g in advice.plan.expected if g.metric == "kv_pool_sequences")
    assert after > before
    cap = dict(build_launch(advice, "vllm").argv())["--max-num-seqs"]
    assert int(cap) == int(after)


def test_the_trtllm_yaml_goes_through_extra_llm_api_options_before_1_2(pack):
    advice = _advice(pack, **{"workload.engine": "trtllm", "serving.engine_version": "1.1.0", "serving.chunked_prefill": True})
    script = render_launch(build_launch(advice, "trtllm"), advice.bottleneck)
    assert "--extra_llm_api_options" in _command(script) and "--config" not in _command(script)
    assert "enable_chunked_prefill: true" in script and "--enable_chunked_prefill" not in script


def test_the_profile_flags_are_the_flags_read_from_each_engines_source():
    """tests/data/engine_flags/<engine>-<version>.txt list the arguments read from each engine's
    source: the profile's flags at that version are exactly those."""
    for engine in engine_catalog().engines.values():
        for version in engine.versions:
            path = HERE / "data" / "engine_flags" / f"{engine.id}-{version_text(version)}.txt"
            listed = {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}
            profiled = {flag.name for flag in engine.flags if flag.holds_at(version)}
            assert profiled == listed, (engine.id, version, profiled ^ listed)


def test_the_advice_shows_each_setting_today_and_proposed_with_its_rule(run_cli):
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--format", "json")
    launch = json.loads(out)["launch"]
    assert code == 0 and launch["engine"] == "vllm" and launch["version"] == "0.11.0"
    by_name = {s["setting"]: s for s in launch["settings"]}
    assert by_name["--max-num-seqs"]["today"] == "128" and by_name["--max-num-seqs"]["rule"] == "today: serving.max_num_seqs"
    assert by_name["--quantization"] == {"setting": "--quantization", "kind": "cli", "today": None, "proposed": "fp8",
                                         "status": "new", "rule": "S-QUANT-FP8 (quantization[fp8])"}
    code, text, _ = run_cli("advise", "--facts", str(FACTS))
    assert "Launch (vllm 0.11.0):" in text and "--quantization: (not set) -> fp8  [S-QUANT-FP8 (quantization[fp8])]" in text


def test_a_strategy_in_place_whose_parameters_change_is_a_change(pack):
    same = {s.id: s.status for s in _advice(pack).strategies}
    assert same.get("paged_kv_cache") == "keep"                     # paged, 16-token blocks, as today
    other = {s.id: s for s in _advice(pack, **{"serving.kv_block_size": 64}).strategies}
    assert other["paged_kv_cache"].status == "change"              # paged today, but with 64-token blocks


def test_a_setting_the_engine_refuses_is_left_out_with_its_reason():
    """The last guard: whatever the settings and the carried deployment hold, an argument the
    profile refuses at the version is left out, and so is one a left-out argument made refused."""
    from kbopt.engine.advice.launch import Arg, _checked
    from kbopt.engine.advice.settings import Target
    spec = engine_catalog().engines["vllm"]
    args = [Arg("--tensor-parallel-size", "cli", "4", "4", "today", set_today=True),
            Arg("--max-num-partial-prefills", "cli", "2", None, "R-ONE (chunked_prefill)"),
            Arg("--kv-offloading-backend", "cli", "lmcache", None, "R-TWO (kv_offload)"),
            Arg("--kv-offloading-size", "cli", "64", None, "R-TWO (kv_offload)")]
    kept, dropped = _checked(spec, Target("vllm", (0, 11, 0), True, True), args)
    assert [a.name for a in kept] == ["--tensor-parallel-size"]
    assert any(d.startswith("--max-num-partial-prefills 2 (R-ONE (chunked_prefill))") and "the V1 engine refuses" in d
               for d in dropped)
    assert any(d.startswith("--kv-offloading-size 64") and ">= 0.12.0" in d for d in dropped)
    kept, dropped = _checked(spec, Target("vllm", (0, 12, 0), True, True), args[:1] + args[2:])
    assert [a.name for a in kept] == ["--tensor-parallel-size", "--kv-offloading-backend", "--kv-offloading-size"] and not dropped


COMMANDS = {
    "vllm": "vllm serve org/model-7b --tensor-parallel-size 2 --max-model-len 8192 --enable-lora --max-loras 4 "
            "--gpu-memory-utilization 0.9 --served-model-name api --enable-expert-parallel "
            "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'",
    "sglang": "python -m sglang.launch_server --model-path org/model-7b --tp-size 2 --context-length 8192 "
              "--mem-fraction-static 0.85 --disable-radix-cache --grammar-backend xgrammar --speculative-algorithm EAGLE3 "
              "--speculative-draft-model-path org/eagle3-head --speculative-num-steps 3 --speculative-eagle-topk 1 "
              "--speculative-num-draft-tokens 4",
    "trtllm": "trtllm-serve org/model-7b --tp_size 2 --max_batch_size 64 --backend pytorch --host 0.0.0.0",
    "tgi": "PREFIX_CACHING=0 text-generation-launcher --model-id org/model-7b --num-shard 2 --max-total-tokens 8192 "
           "--max-batch-size 32 --lora-adapters a,b --speculate 2",
}


def _relaunched(script: str) -> str:
    """The command the script runs, as one line: its exports, the engine, the model and the args."""
    lines = script.splitlines()
    exports = [line.removeprefix("export ").split("  #")[0].strip() for line in lines if line.startswith("export ")]
    model = shlex.split(next(line for line in lines if line.startswith("MODEL_DEFAULT=")).split("=", 1)[1])[0]
    exec_words = shlex.split(next(line for line in lines if line.startswith("exec ")))[1:]
    words = [model if w == "$MODEL" else w for w in exec_words if w != "${args[@]}"]
    start, end = lines.index("args=("), len(lines) - 1 - lines[::-1].index(")")
    words += shlex.split("\n".join(lines[start + 1:end]), comments=True)
    return " ".join([*exports, *map(shlex.quote, words)])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_launch_command_read_in_and_emitted_back_unchanged_is_the_same_command(pack, engine):
    from dataclasses import replace

    from kbopt.engine.advice.command import read_command
    command = read_command(COMMANDS[engine])
    assert command.engine == engine and command.model == "org/model-7b"
    latest = version_text(engine_catalog().engines[engine].latest)
    facts = load_facts(FACTS, [*command.overrides(), f"serving.engine_version={latest}"])
    advice = replace(advise(facts, pack, available_evaluators()[0]), strategies=())     # no change to apply
    script = render_launch(build_launch(advice, engine, command), advice.bottleneck)
    assert "# changes: none" in script
    again = read_command(_relaunched(script))
    assert (again.engine, again.model, again.args) == (command.engine, command.model, command.args)
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_a_launch_command_states_the_serving_facts_and_carries_what_kbopt_does_not_model(run_cli):
    from kbopt.engine.advice.command import read_command
    command = read_command("vllm serve org/m --tensor-parallel-size=4 --quantization awq_marlin --kv-cache-dtype fp8 "
                           "--max-model-len 32768 --no-enable-prefix-caching --enable-lora --max-loras 4 --max-lora-rank 32 "
                           "--max-logprobs 40 --enforce-eager")
    assert dict(command.facts) == {"workload.engine": "vllm", "workload.batching": "continuous", "model.name": "org/m",
                                   "serving.tensor_parallel_size": 4,
                                   "serving.quantization": "int4_awq", "model.kv_cache_dtype": "fp8",
                                   "serving.max_model_len": 32768, "serving.prefix_caching": False,
                                   "serving.cuda_graphs": False, "serving.lora": True, "serving.max_loras_per_batch": 4,
                                   "serving.max_lora_rank": 32}
    assert command.unmodelled == ("--max-logprobs",)
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--launch", "vllm serve org/m --tensor-parallel-size 4 "
                           "--enable-lora --max-loras 4 --max-logprobs 40", "--emit", "vllm")
    assert code == 0 and "MODEL_DEFAULT=org/m" in out
    assert "  --max-logprobs 40 " in out and "not modelled: carried as given" in out and "  --max-loras 4 " in out
    assert "carried as given from today's command, not checked by kbopt's profile: --max-logprobs" in out


@pytest.mark.parametrize("text,facts", [
    ("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 --speculative-draft-model-path org/eagle3 "
     "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
     {"serving.speculative_method": "eagle3", "serving.num_speculative_tokens": 3, "model.draft_model": "org/eagle3"}),
    # SGLang reads EAGLE with no draft path (and NEXTN) as the checkpoint's MTP layers
    ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --speculative-algorithm EAGLE --speculative-num-steps 1",
     {"serving.speculative_method": "mtp", "serving.num_speculative_tokens": 1}),
    ("vllm serve m --speculative-config '{\"method\": \"eagle3\", \"model\": \"org/eagle3\", \"num_speculative_tokens\": 2}'",
     {"serving.speculative_method": "eagle3", "serving.num_speculative_tokens": 2, "model.draft_model": "org/eagle3"}),
    ("vllm serve m --speculative-config '{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": 1}'",
     {"serving.speculative_method": "mtp", "serving.num_speculative_tokens": 1}),
    ("vllm serve m --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}'",
     {"serving.speculative_method": "ngram", "serving.num_speculative_tokens": 4}),
    ("text-generation-launcher --model-id m --speculate 2", {"serving.speculative_method": "ngram", "serving.num_speculative_tokens": 2}),
])
def test_todays_speculative_decoding_is_read_from_the_launch_command(text, facts):
    # Without these facts, a server already speculating was advised to speculate, at the gain of
    # turning it on (review set 8, D4), and its measured ITL calibrated a step without speculation.
    from kbopt.engine.advice.command import read_command
    stated = dict(read_command(text).facts)
    assert {path: stated.get(path) for path in facts} == facts
    assert "model.draft_model" in facts or "model.draft_model" not in stated


@pytest.mark.parametrize("command,message", [
    ("vllm serve m --tensor-paralel-size 4",
     "vllm serve: error: unrecognized arguments: --tensor-paralel-size (did you mean --tensor-parallel-size?)"),
    ("trtllm-serve m --tp-size 4", "Error: No such option: --tp-size (did you mean --tp_size?)"),
    ("text-generation-launcher --model-id m --num-shards 2", "error: unexpected argument '--num-shards' found"),
    ("python -m sglang.launch_server --model-path m --tp-sizes 2", "unrecognized arguments: --tp-sizes"),
    ("vllm serve m --tensor-parallel-size four", "--tensor-parallel-size takes an integer, not 'four'"),
    ("text-generation-launcher --model-id m --num-shard 2 --num-shard 4", "given more than once"),
    ("llama-server -m x", "not the launch command of an engine"),
    ("trtllm-serve m --tp_size 2", "--launch is a trtllm command, but the facts say workload.engine = vllm"),
    ("vllm serve 'm", "not a shell command line"),
])
def test_a_launch_command_the_engine_would_refuse_is_named_as_the_engine_would(run_cli, command, message):
    code, out, err = run_cli("advise", "--facts", str(FACTS), "--launch", command, "--emit", "vllm")
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_a_launch_command_from_a_file(run_cli, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/sh\nexec vllm serve org/m \\\n  --tensor-parallel-size 2 \\\n  --max-model-len 4096\n")
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--launch", f"@{path}", "--emit", "vllm")
    assert code == 0 and "  --tensor-parallel-size 2 " in out and "  --max-model-len 4096 " in out


def test_a_deployment_that_leaves_no_kv_cache_is_refused_not_given_a_cap_of_one(run_cli):
    """70B in 16 bits on one 24 GB GPU: the weights alone overflow it, whatever the model's figures."""
    code, out, err = run_cli("advise", "--facts", str(HERE / "data" / "emit" / "vllm-70b-a10g-no-room.json"), "--emit", "vllm")
    assert code == 2 and out == "" and "does not fit" in err and "derived.kv_pool" in err and "Traceback" not in err


@pytest.mark.parametrize("fmt,marker", [("md", "## Launch (`vllm` 0.11.0): today → proposed"), ("html", 'id="launch"')])
def test_markdown_and_html_show_the_launch_changes(run_cli, fmt, marker):
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--format", fmt)
    assert code == 0 and marker in out
    assert "--quantization" in out and "S-QUANT-FP8" in out and "(not set)" in out


def test_every_report_reads_the_launch_command_too(run_cli):
    command = "vllm serve org/m --tensor-parallel-size 1 --max-logprobs 40"
    code, out, _ = run_cli("advise", "--facts", str(FACTS), "--launch", command, "--format", "json")
    settings = {s["setting"]: s for s in json.loads(out)["launch"]["settings"]}
    assert code == 0 and settings["--max-logprobs"]["rule"] == "today: --launch (not modelled: carried as given)"
    for fmt in ("text", "md", "html"):
        code, out, _ = run_cli("advise", "--facts", str(FACTS), "--launch", command, "--format", fmt)
        assert code == 0 and "--max-logprobs" in out, fmt


@pytest.mark.parametrize("engine,flag", [("vllm", "--no-enable-prefix-caching"), ("sglang", "--disable-radix-cache")])
def test_turning_prefix_caching_on_removes_the_flag_that_turned_it_off(pack, engine, flag):
    advice = _advice(pack, **{"workload.engine": engine, "serving.engine_version": version_text(
        engine_catalog().engines[engine].latest), "serving.prefix_caching": False, "workload.prefix_cache_hit_ratio": 0.0})
    launch = build_launch(advice, engine)
    names = [a.name for a in launch.args]
    if any(s.id == "prefix_caching" and s.status == "change" for s in advice.strategies):
        assert flag not in names and [a.name for a in launch.removed] == [flag]
        assert launch.removed[0].status == "removed" and launch.removed[0].today_text == "(on)"
        script = render_launch(launch, advice.bottleneck)
        assert f"#   {flag}: (on) -> (removed)" in script
    else:
        assert flag in names
    assert not engine_catalog().engines[engine].problems(launch.target.version, launch.argv())


# Properties over hostile input (issue 28, item 1): whatever the model id or today's command, the
# script is either refused with exit 2 or passes `bash -n` with no value of the facts read as an
# option or a command.
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# The release fuzz profile (KBOPT_FUZZ=long, docs/fuzzing.md) tries 10,000 random cases of each.
_RELEASE = os.environ.get("KBOPT_FUZZ") == "long"
PROPERTY = settings(derandomize=not _RELEASE, deadline=None, database=None, max_examples=10_000 if _RELEASE else 120,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_BASE: dict = {}


def _base_advice(pack):
    if "advice" not in _BASE:
        _BASE["advice"] = _advice(pack)
    return _BASE["advice"]


@PROPERTY
@example(name="0\x850", engine="vllm")      # the release fuzz run's find: U+0085 (NEL), a C1 control
@given(name=st.text(st.characters(codec="utf-8"), min_size=1, max_size=40), engine=st.sampled_from(ENGINES))
def test_any_model_id_is_refused_or_stays_one_inert_word(pack, name, engine):
    from dataclasses import replace

    from kbopt.errors import KboptError
    advice = _base_advice(pack)
    advice = replace(advice, facts={**advice.facts, "model.name": name})
    try:
        script = render_launch(build_launch(advice, engine), advice.bottleneck)
    except KboptError as error:
        assert "model.name" in str(error) and (name.startswith("-") or name != name.strip()
                                               or any(ord(c) < 32 or 127 <= ord(c) <= 159 or c in "\u2028\u2029" for c in name))
        return
    assert not name.startswith("-")
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
        prologue = "\n".join(line for line in script.splitlines() if line.startswith("MODEL"))
        shown = subprocess.run(["bash", "-c", prologue + '\nprintf %s "$MODEL"'], text=True, capture_output=True,
                               env={"PATH": "/usr/bin:/bin"})
        assert shown.stdout == name


_WORDS = st.sampled_from(["--tensor-parallel-size", "--tp-size", "--tp_size", "--num-shard", "--max-model-len", "4",
                          "--enable-lora", "--served-model-name", "x;y", "$(id)", "'q'", "--quantization", "fp8",
                          "--kv-cache-dtype=fp8", "--enforce-eager", "-x", "a b", "--max-num-seqs", "0", "--foo"])


@PROPERTY
@given(start=st.sampled_from(["vllm serve org/m", "python -m sglang.launch_server --model-path org/m",
                              "trtllm-serve org/m", "text-generation-launcher --model-id org/m"]),
       words=st.lists(_WORDS, max_size=8))
def test_any_launch_command_is_refused_or_relaunched_flag_for_flag(pack, start, words):
    from dataclasses import replace

    from kbopt.engine.advice.command import read_command
    from kbopt.errors import KboptError
    text = start + " " + " ".join(shlex.quote(w) for w in words)
    try:
        command = read_command(text)
        facts = load_facts(FACTS, [*command.overrides(), "serving.engine_version="
                                   + version_text(engine_catalog().engines[command.engine].latest)])
    except KboptError:
        return
    advice = replace(advise(facts, pack, available_evaluators()[0]), strategies=())
    try:
        script = render_launch(build_launch(advice, command.engine, command), advice.bottleneck)
    except KboptError as error:
        assert "does not fit" in str(error) or "model.name" in str(error)
        return
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    again = read_command(_relaunched(script))
    assert again.args == command.args


@pytest.mark.parametrize("option", [["--emit", "vllm"], ["--launch", "vllm serve m"]])
def test_one_deployments_options_are_refused_with_facts_jsonl(run_cli, tmp_path, option):
    lines = tmp_path / "facts.jsonl"
    lines.write_text(json.dumps(json.loads(FACTS.read_text())) + "\n")
    code, out, err = run_cli("advise", "--facts-jsonl", str(lines), *option)
    assert code == 2 and out == "" and option[0] in err and "--facts-jsonl" in err


def test_an_fp4_checkpoint_is_served_without_a_quantization_flag(pack):
    """gpt-oss ships MXFP4, ModelOpt NVFP4: the engine reads which from the checkpoint, and a flag
    naming the other is refused (vllm/config/model.py@0.12.0:1045), so today's FP4 sets none."""
    advice = _advice(pack, **{"serving.quantization": "fp4", "model.weight_dtype": "fp4", "model.name": "openai/gpt-oss-120b"})
    for engine in ("vllm", "sglang"):
        launch = build_launch(advice, engine)
        assert "--quantization" not in dict(launch.argv()), engine
        assert any("FP4 checkpoint" in note for note in launch.notes), engine


def test_sglang_caps_under_dp_attention_are_the_total_it_divides_among_ranks(pack):
    """SGLang hands each DP-attention rank --max-running-requests // --dp-size
    (tp_worker.py@0.5.1:128-136); kbopt's serving.max_num_seqs is per GPU there."""
    from kbopt.engine.advice.command import read_command
    command = read_command("python -m sglang.launch_server --model-path org/moe --tp-size 8 --dp-size 8 "
                           "--enable-dp-attention --max-running-requests 2048")
    assert dict(command.facts)["serving.max_num_seqs"] == 256 and dict(command.facts)["serving.dp_attention"] is True
    advice = _advice(pack, **{"serving.tensor_parallel_size": 8, "serving.data_parallel_size": 8,
                              "serving.dp_attention": "true", "serving.max_num_seqs": 256, "hardware.gpu_count": 8})
    launch = build_launch(advice, "sglang")
    argv = dict(launch.argv())
    assert "--enable-dp-attention" in argv and argv["--dp-size"] == "8"
    cap = next(a for a in launch.args if a.name == "--max-running-requests")
    per_gpu = next(value for s in advice.strategies for (sid, name), value in
                   (((s.id, n), v) for n, v in s.params.items()) if (sid, name) in CAP_PARAMS)
    assert int(cap.value) == 8 * per_gpu and cap.today == "2048", cap
    assert any("per GPU x 8 data-parallel attention ranks" in note for note in launch.notes)


def test_a_cap_the_model_sizes_for_the_replica_is_divided_among_the_dp_attention_ranks(pack):
    """The model's caps count the replica's requests (its KV pool, its running batch); with DP
    attention, which the plan turns on here, the engine's cap is a rank's, and SGLang's flag the
    ranks' total again: the flag is the replica's cap, not 8 times it."""
    facts = facts_from_document({"kbopt": "facts/1",
        "hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8, "interconnect": "nvlink"},
        "telemetry": {"compute_utilization": 0.45, "bandwidth_utilization": 0.5, "kv_cache_usage_ratio": 0.96},
        "model": {"name": "deepseek-ai/DeepSeek-R1-0528", "params_billion": 671, "active_params_billion": 37,
                  "num_layers": 61, "num_attention_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512,
                  "qk_rope_head_dim": 64, "num_experts": 256, "experts_per_token": 8, "weight_dtype": "fp8",
                  "kv_cache_dtype": "bf16"},
        "workload": {"task": "generation", "engine": "sglang", "prompt_len_mean": 1500, "output_len_mean": 3500,
                     "requests_running_mean": 96, "requests_waiting_mean": 60, "preemption_ratio": 0.02, "itl_mean_ms": 45,
                     "memory_preallocated": True},
        "serving": {"engine_version": "0.5.0", "tensor_parallel_size": 8, "memory_fraction": 0.85},
        "constraints": {"objective": "throughput"}}, "dp")
    advice = advise(facts, pack, available_evaluators()[0])
    parallelism = next(s for s in advice.strategies if s.id == "parallelism")
    assert parallelism.params.get("dp_attention") is True
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    replica = next(g.after for g in advice.plan.expected if g.metric == "max_batch_kv")
    assert budget.params["max_num_seqs"] == math.ceil(math.floor(replica) / 8)
    assert any("data-parallel attention ranks" in why for name, why in budget.sized if name == "max_num_seqs")
    cap = next(a for a in build_launch(advice, "sglang").args if a.name == "--max-running-requests")
    assert int(cap.value) == 8 * budget.params["max_num_seqs"] and int(cap.value) - math.floor(replica) < 8


TRTLLM_OPTIONS = """\
kv_cache_config:
  free_gpu_memory_fraction: 0.85
  enable_block_reuse: false
  dtype: fp8
cuda_graph_config:
  enable_padding: true
  max_batch_size: 128
speculative_config:
  decoding_type: MTP
  num_nextn_predict_layers: 1
print_iter_log: true
"""


def _options_yaml(script: str) -> dict:
    import yaml
    return yaml.safe_load(script.split("<<'YAML'\n", 1)[1].split("\nYAML\n", 1)[0])


def test_todays_trtllm_options_file_is_read_and_written_back_key_for_key(pack, tmp_path):
    # TensorRT-LLM takes most settings from the YAML of --extra_llm_api_options: a script that
    # dropped it (and said "copy its keys") was not today's deployment.
    from dataclasses import replace

    from kbopt.engine.advice.command import read_command
    (tmp_path / "extra.yaml").write_text(TRTLLM_OPTIONS)
    (tmp_path / "serve.sh").write_text("trtllm-serve org/model-7b --backend pytorch --tp_size 2 "
                                       "--extra_llm_api_options extra.yaml --port 8000\n")
    command = read_command(f"@{tmp_path / 'serve.sh'}")      # the file's folder first, for a relative path
    facts = dict(command.facts)
    assert facts["serving.memory_fraction"] == 0.85 and facts["serving.prefix_caching"] is False
    assert facts["model.kv_cache_dtype"] == "fp8"
    assert (facts["serving.speculative_method"], facts["serving.num_speculative_tokens"]) == ("mtp", 1)
    assert command.unmodelled == ("print_iter_log",) and facts["serving.port"] == 8000
    advice = replace(advise(load_facts(FACTS, [*command.overrides(), "serving.engine_version=1.1.0"]), pack,
                            available_evaluators()[0]), strategies=())
    script = render_launch(build_launch(advice, "trtllm", command), advice.bottleneck)
    import yaml
    assert _options_yaml(script) == yaml.safe_load(TRTLLM_OPTIONS)
    assert "--extra_llm_api_options kbopt-trtllm.yaml" in script and "extra.yaml" not in script


@pytest.mark.parametrize("options,message", [
    ("- a list\n", "a mapping of option names, not a list"),
    ("kv_cache_config:\n  dtype: [fp8\n", "extra.yaml:3: not valid YAML"),
    ("kv_cache_config:\n  free_gpu_memory_fraction: 1.5\n", "kv_cache_config.free_gpu_memory_fraction takes a value >= 0.01 and <= 1"),
    ("'bad key: x': 1\n", "is not an option name"),
    ("a: " + "{b: " * 20000 + "1" + "}" * 20000 + "\n", "nested too deep"),
    ("a:\n" + "".join("  " * (i + 1) + "b:\n" for i in range(12)) + "  " * 13 + "c: 1\n", "nested deeper than any TensorRT-LLM option"),
    # YAML anchors: seven lines that name 10 million keys (the walk stopped at none before)
    ("l0: &l0 {" + ", ".join(f"k{i}: 1" for i in range(10)) + "}\n"
     + "".join(f"l{n}: &l{n} {{" + ", ".join(f"k{i}: *l{n - 1}" for i in range(10)) + "}\n" for n in range(1, 7)),
     "more than 2,000 keys is not TensorRT-LLM's options file"),
])
def test_a_trtllm_options_file_the_engine_would_refuse_is_named_with_its_file(run_cli, tmp_path, options, message):
    (tmp_path / "extra.yaml").write_text(options)
    code, _, err = run_cli("advise", "--facts", str(FACTS), "--launch",
                           f"trtllm-serve m --extra_llm_api_options {tmp_path / 'extra.yaml'}", "--set", "workload.engine=trtllm")
    assert code == 2 and message in err and "Traceback" not in err


def test_a_string_in_the_options_file_stays_one_inert_yaml_value(pack, tmp_path):
    from dataclasses import replace

    from kbopt.engine.advice.command import read_command
    (tmp_path / "extra.yaml").write_text('served_note: "x\\nenable_chunked_prefill: true\\nYAML\\nrm -rf /"\n')
    command = read_command(f"trtllm-serve m --extra_llm_api_options {tmp_path / 'extra.yaml'}")
    advice = replace(advise(load_facts(FACTS, [*command.overrides(), "serving.engine_version=1.1.0"]), pack,
                            available_evaluators()[0]), strategies=())
    script = render_launch(build_launch(advice, "trtllm", command), advice.bottleneck)
    assert _options_yaml(script) == {"served_note": "x\nenable_chunked_prefill: true\nYAML\nrm -rf /"}
    assert "\nrm -rf" not in script


@pytest.mark.parametrize("text", [
    "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --lora-paths sql=/loras/sql chat=/loras/chat "
    "'odd name=/loras/a b' --max-loras-per-batch 3 --tp-size 1",
    "vllm serve Qwen/Qwen2.5-7B-Instruct --enable-lora --lora-modules sql=/loras/sql chat=/loras/chat --max-loras 2",
])
def test_a_flag_of_several_values_keeps_all_of_them(pack, text):
    # Review set 9: SGLang's --lora-paths and vLLM's --lora-modules take several values (nargs); the
    # second was read as a second model and a command that starts was refused. Both are profile
    # flags now (set 20: their count is serving.lora_adapters), and still carried word for word.
    from dataclasses import replace

    from kbopt.engine.advice.command import read_command
    command = read_command(text)
    assert command.model == "Qwen/Qwen2.5-7B-Instruct"
    advice = replace(advise(load_facts(FACTS, [*command.overrides(), f"serving.engine_version="
                                             f"{version_text(engine_catalog().engines[command.engine].latest)}"]),
                            pack, available_evaluators()[0]), strategies=())
    script = render_launch(build_launch(advice, command.engine, command), advice.bottleneck)
    again = read_command(_relaunched(script))
    assert again.args == command.args
    flag = "--lora-paths" if command.engine == "sglang" else "--lora-modules"
    assert shlex.split(dict(command.args)[flag])[:2] == ["sql=/loras/sql", "chat=/loras/chat"]
    assert dict(command.facts)["serving.lora_adapters"] == (3 if command.engine == "sglang" else 2)
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_a_flag_of_several_values_given_none_is_named_and_its_words_are_counted_as_given():
    from kbopt.engine.advice.command import read_command
    from kbopt.errors import KboptError
    with pytest.raises(KboptError, match="--lora-paths needs a value"):
        read_command("python -m sglang.launch_server --model-path m --lora-paths --max-loras-per-batch 4")
    # one quoted word is one adapter, whatever it holds (a stray quote once ended in a traceback)
    start = "python -m sglang.launch_server --model-path m --lora-paths"
    for tail, adapters in (("=\"a'b\"", 1), (" 'odd name=/a b'", 1), (" a=1 'b c=2' d=3", 3)):
        assert dict(read_command(start + tail).facts)["serving.lora_adapters"] == adapters, tail


@pytest.mark.parametrize(("command", "facts"), [
    # vLLM's short spellings (engine/arg_utils.py@0.10.2:528,642-649; @0.12.0:640,743-772)
    ("vllm serve m -tp 2 -dp 2 -q fp8", {"serving.tensor_parallel_size": 2, "serving.data_parallel_size": 2, "serving.quantization": "fp8"}),
    # SGLang's long and short ones (server_args.py@0.5.0rc2:982-990, 1230-1231, 1439-1441)
    ("python3 -m sglang.launch_server --model-path m --tensor-parallel-size 8 --ep-size 8",
     {"serving.tensor_parallel_size": 8, "serving.expert_parallel": True}),
    ("python3 -m sglang.launch_server --model-path m --tp-size 8 --ep 8", {"serving.tensor_parallel_size": 8, "serving.expert_parallel": True}),
])
def test_a_flags_aliases_are_read_as_the_flag_and_relaunched_once(pack, command, facts):
    # set 10: SGLang --ep-size was refused as a misspelt --tp-size, and vLLM -tp 2 was carried as an
    # unmodelled flag, so a 70B on -tp 2 -dp 2 was modelled at TP4.
    from kbopt.engine.advice.command import read_command
    read = read_command(command)
    assert {path: value for path, value in read.facts if path in facts} == facts
    assert not read.unmodelled
    names = [name for name, _ in read.args]
    assert len(names) == len(set(names)) and all(not name.startswith("-") or name.startswith("--") for name in names)


def test_a_flag_given_under_two_of_its_spellings_is_given_twice():
    from kbopt.engine.advice.command import read_command
    from kbopt.errors import KboptError
    with pytest.raises(KboptError, match="--tp-size is given more than once"):
        read_command("python3 -m sglang.launch_server --model-path m --tp-size 8 --tensor-parallel-size 8")


def test_a_launch_command_states_continuous_batching_over_a_static_facts_file():
    # The bundled example says batching "static" (engine unknown); given a vLLM command it read as
    # underfed static batching, where vLLM always batches continuously (a newcomer's walkthrough).
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.engine.pack.packs import load_checked_pack
    from kbopt.kb.facts import load_facts
    example = HERE.parent / "examples" / "capacity-a100-chat.json"
    command = read_command("vllm serve meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 8192 --max-num-seqs 64")
    facts = load_facts(example, command.overrides())
    assert facts.values["workload.batching"] == "continuous"
    advice = advise(facts, load_checked_pack([]), available_evaluators()[0])
    assert advice.bottleneck != "underfed" and "D-BOTTLENECK-UNDERFED" not in {f.rule for f in advice.fired}



def test_a_setting_todays_command_leaves_out_runs_at_the_engines_default(run_cli):
    # A newcomer's try: the facts file says serving.memory_fraction 0.95 and a 2,048-token budget, but
    # today's command gives neither flag, so vLLM runs at its defaults; the advice sized the pool on
    # 0.95 and its script dropped the budget, without a word. The facts' values are set aside, said once.
    facts = ROOT / "examples" / "l4-8b-bf16-vllm.json"
    code, out, err = run_cli("advise", "--facts", str(facts), "--format", "json",
                             "--launch", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192")
    advice = json.loads(out)
    assert code == 0 and "serving.memory_fraction" not in advice["facts"] and "serving.max_num_batched_tokens" not in advice["facts"]
    assert err.count("kbopt: note: today's command (--launch) does not give") == 1
    assert "--gpu-memory-utilization" in err and "serving.memory_fraction" in err
    code, out, err = run_cli("advise", "--facts", str(facts), "--format", "json", "--launch",
                             "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.95 "
                             "--max-num-batched-tokens 2048")
    assert code == 0 and json.loads(out)["facts"]["serving.memory_fraction"]["value"] == 0.95 and "does not give" not in err


def test_a_logged_block_size_stays_beside_its_block_count_under_a_command_without_the_flag(run_cli, tmp_path):
    # A startup log gives the pool as blocks of a size (M-KV-POOL-MEASURED reads both); a command
    # without --block-size runs that same default size, so the fact is not set aside with the others.
    document = json.loads((ROOT / "examples" / "l4-8b-bf16-vllm.json").read_text())
    document.setdefault("serving", {}).update({"num_gpu_blocks": 2000, "kv_block_size": 16})
    facts = tmp_path / "logged.json"
    facts.write_text(json.dumps(document))
    code, out, err = run_cli("advise", "--facts", str(facts), "--format", "json",
                             "--launch", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192")
    advice = json.loads(out)
    assert code == 0 and advice["facts"]["serving.kv_block_size"]["value"] == 16
    assert advice["facts"]["serving.num_gpu_blocks"]["value"] == 2000 and "serving.kv_block_size" not in err
