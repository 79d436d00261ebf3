"""What to collect (issue 29): the facts the undecided rules wait on, without those that cannot apply
to this deployment, heaviest first (engine/advice/wanted.py)."""
from __future__ import annotations

import json

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.wanted import ADVICE_WEIGHT
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document

LLAMA = {"params_billion": 8.03, "weight_dtype": "bf16", "num_layers": 32, "num_kv_heads": 8, "head_dim": 128}


def _wanted(pack, document):
    advice = advise(facts_from_document({"kbopt": "facts/1", **document}, "wanted"), pack, available_evaluators()[0])
    return advice, {w.fact: w for w in advice.to_collect}


def test_facts_that_cannot_apply_are_not_asked_for(pack):
    # A GQA model on a whole GPU with prompt and output means: no MLA latent rank, no MIG slice, no mean sequence length
    document = {"hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1, "mig_enabled": False}, "model": LLAMA,
                "telemetry": {"compute_utilization": 0.3, "bandwidth_utilization": 0.7, "memory_used_ratio": 0.5},
                "workload": {"prompt_len_mean": 1000, "output_len_mean": 200}}
    _, wanted = _wanted(pack, document)
    assert not {"model.kv_lora_rank", "model.qk_rope_head_dim", "hardware.mig_compute_slices",
                "hardware.mig_memory_gib", "workload.seq_len_mean"} & set(wanted)
    # the same facts are asked for where they apply: a MIG slice of unknown size, no lengths at all
    mig = {**document, "hardware": {**document["hardware"], "mig_enabled": True},
           "workload": {"concurrency_mean": 4}}
    _, wanted = _wanted(pack, mig)
    assert {"hardware.mig_memory_gib", "workload.seq_len_mean"} <= set(wanted)


def test_the_facts_that_could_change_the_advice_come_first(pack):
    advice, _ = _wanted(pack, {"hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1}})
    weights = [w.weight for w in advice.to_collect]
    assert weights == sorted(weights, reverse=True)
    first = advice.to_collect[0]
    assert first.weight >= ADVICE_WEIGHT * 5          # several strategy rules wait on it
    # a fact only the diagnosis waits on weighs one a rule
    assert all(w.weight >= w.rules for w in advice.to_collect)
    assert json.loads(advice.to_json())["to_collect"][0] == {"fact": first.fact, "rules": first.rules, "weight": first.weight}


def test_a_missing_gpu_or_gpu_count_is_a_warning_on_the_first_screen(run_cli, tmp_path):
    no_gpu = tmp_path / "no-gpu.json"
    no_gpu.write_text(json.dumps({"kbopt": "facts/1", "model": LLAMA,
                                  "telemetry": {"compute_utilization": 0.3, "bandwidth_utilization": 0.7, "memory_used_ratio": 0.5}}))
    code, out, _ = run_cli("advise", "--facts", str(no_gpu))
    assert code == 0 and "warning [W-NO-GPU]" in "\n".join(out.splitlines()[:12])
    no_count = tmp_path / "no-count.json"
    no_count.write_text(json.dumps({"kbopt": "facts/1", "hardware": {"gpu_name": "NVIDIA H100 80GB HBM3"}, "model": LLAMA}))
    code, out, _ = run_cli("advise", "--facts", str(no_count))
    assert code == 0 and "warning [W-NO-GPU-COUNT]" in "\n".join(out.splitlines()[:12])


def test_a_rule_that_any_one_of_several_facts_decides_says_so(pack, run_cli, tmp_path):
    # S-KV-CACHE-FP8 fires on a full KV gauge, on preemptions or on a long-sequence mix: any one
    # reading decides it, so it needs one of them, not all; a rule needing two facts together
    # still lists both.
    document = {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}, "model": LLAMA,
                "telemetry": {"compute_utilization": 0.5, "bandwidth_utilization": 0.7, "memory_used_ratio": 0.9},
                "workload": {"task": "generation", "engine": "vllm", "prompt_len_mean": 1000, "output_len_mean": 200,
                             "requests_running_mean": 32}}
    advice, _ = _wanted(pack, document)
    waiting = {item.rule: item for item in advice.not_evaluated}
    kv = waiting["S-KV-CACHE-FP8"]
    assert ("workload.preemption_ratio",) in kv.one_of and ("workload.long_seq_fraction",) in kv.one_of
    assert set(kv.missing) >= {"workload.preemption_ratio", "workload.long_seq_fraction"}
    both = waiting["D-SEQ-LEN-CV"]
    assert both.one_of == () and set(both.missing) == {"workload.seq_len_mean", "workload.seq_len_std"}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"kbopt": "facts/1", **document}))
    text = run_cli("advise", "--facts", str(path), "--explain")[1]
    line = " ".join(text.split("S-KV-CACHE-FP8 (", 1)[1].split("\n  - ", 1)[0].split())
    assert "needs telemetry.kv_cache_usage_ratio or workload.long_seq_fraction or workload.preemption_ratio" in line
    rows = {row["rule"]: row for row in json.loads(run_cli("advise", "--facts", str(path), "--format", "json")[1])["not_evaluated"]}
    assert ["workload.preemption_ratio"] in rows["S-KV-CACHE-FP8"]["one_of"] and "one_of" not in rows["D-SEQ-LEN-CV"]
    markdown = run_cli("advise", "--facts", str(path), "--format", "md", "--explain")[1]
    assert "`workload.long_seq_fraction` or `workload.preemption_ratio`" in markdown
    html_path = tmp_path / "report.html"
    assert run_cli("advise", "--facts", str(path), "--format", "html", "-o", str(html_path))[0] == 0
    assert "<code>workload.long_seq_fraction</code> or <code>workload.preemption_ratio</code>" in html_path.read_text()
