"""Expert review set 15: deployments a reviewer wrote (tests/data/review15, each with today's launch
command), and what the advice must now read for the defects it found."""
from __future__ import annotations

import subprocess

from conftest import migrated_script, review_deployment, script_flags, strategy_of

DATA = "review15"


def _checkpoint_block(script: str) -> str:
    """The lines the script runs only while MODEL is today's checkpoint."""
    if 'if [ "$MODEL" = "$MODEL_DEFAULT" ]' not in script:
        return ""
    return script.split('if [ "$MODEL" = "$MODEL_DEFAULT" ]', 1)[1].split("\nfi\n", 1)[0]


def _argv_with(script: str, model: str | None) -> str:
    """What the script would exec, with MODEL set (None: today's checkpoint): bash runs it with
    `exec` replaced by echo."""
    env = {"PATH": "/usr/bin:/bin", **({"MODEL": model} if model else {})}
    done = subprocess.run(["bash", "-c", script.replace("exec ", "echo ", 1)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_d1_a_new_checkpoint_leaves_todays_quantization_flag_behind(pack):
    # Qwen2.5-32B AWQ on vLLM 0.10.2, INT8 W8A8 advised: the script kept --quantization awq_marlin
    # for the new checkpoint, which vLLM refuses (config/__init__.py@0.10.2:1202-1207).
    advice, script = review_deployment(pack, DATA, "d1")
    quantization = strategy_of(advice, "quantization")
    assert quantization is not None and quantization.status == "change" and quantization.key != "quantization[int4]"
    assert "--quantization awq_marlin" in _checkpoint_block(script)
    assert "--quantization awq_marlin" in _argv_with(script, None)
    assert "--quantization" not in _argv_with(script, "org/Qwen2.5-32B-Instruct-W8A8")
    for engine, flag in (("sglang", "--quantization awq_marlin"), ("tgi", "--quantize awq")):
        migrated = migrated_script(advice, DATA, "d1", engine)
        assert flag in _checkpoint_block(migrated), engine
        assert flag.split()[0] not in _argv_with(migrated, "org/Qwen2.5-32B-Instruct-W8A8"), engine


def test_sglang_runs_an_awq_checkpoint_with_marlin_on_nvidia_and_without_on_rocm(pack):
    # --quantization awq forces the dequantize-then-matmul kernels (awq.py@0.5.0rc2:248-254); ROCm has no Marlin.
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    advice, _ = review_deployment(pack, DATA, "d1")
    assert "awq_marlin" in script_flags(migrated_script(advice, DATA, "d1", "sglang"))
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d1-*.json"))
    for gpu, expected in (("NVIDIA A100-SXM4-80GB", "awq_marlin"), ("AMD Instinct MI300X", "awq")):
        advice = advise(load_facts(facts, [f'hardware.gpu_name="{gpu}"', 'serving.quantization="int4_awq"',
                                           'constraints.allowed_precisions=["int4"]']), pack, available_evaluators()[0])
        assert dict(build_launch(advice, "sglang").argv()).get("--quantization") == expected, gpu
