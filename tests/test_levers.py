"""The levers of issue 26 item 7 against hand arithmetic and the engines' own names: speculative
decoding chosen by the model (MTP, EAGLE-3, n-gram) with its gain from the acceptance rate,
prefill/decode disaggregation, engine migration, the TTFT levers, and one batch cap for the
action list and the launch script. Hand figures are written out from the formulas' sources."""
from __future__ import annotations

import json

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.launch import build_launch
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document
from kbopt.kb.knowledge import engine_catalog

H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
LLAMA3_8B = {"name": "meta-llama/Llama-3.1-8B-Instruct", "params_billion": 8.03, "weight_dtype": "bf16", "num_layers": 32,
             "num_kv_heads": 8, "head_dim": 128, "num_attention_heads": 32}
DEEPSEEK_R1 = {"name": "deepseek-ai/DeepSeek-R1", "params_billion": 671, "active_params_billion": 37, "weight_dtype": "fp8",
               "num_layers": 61, "num_experts": 256, "experts_per_token": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
               "num_attention_heads": 128, "hidden_size": 7168, "mtp_layers": 1}


def _advice(pack, document):
    return advise(facts_from_document({"kbopt": "facts/1", **document}, "levers"), pack, available_evaluators()[0])


def _deepseek(engine: str, version: str | None = None) -> dict:
    serving = {"tensor_parallel_size": 8, **({"engine_version": version} if version else {})}
    return {"hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8}, "model": DEEPSEEK_R1,
            "workload": {"task": "generation", "engine": engine, "prompt_len_mean": 1024, "output_len_mean": 512,
                         "requests_running_mean": 8},
            "serving": serving, "constraints": {"objective": "latency"}}


def test_expected_tokens_per_step_is_leviathans_sum(pack):
    # (1 - a^(k+1)) / (1 - a): n-gram, k = 3, a = 0.3 (assumed) -> 1 + .3 + .09 + .027
    d = _advice(pack, {"workload": {"task": "generation"}}).derived
    assert d["derived.spec_tokens_per_step"] == pytest.approx((1 - 0.3 ** 4) / (1 - 0.3))
    # MTP: k = 1, a = 0.85 (DeepSeek-V3's report) -> 1.85; a measured rate replaces the assumption
    d = _advice(pack, {"model": {"mtp_layers": 1}, "workload": {"task": "generation"},
                       "telemetry": {"spec_acceptance_rate": 0.6}}).derived
    assert d["derived.spec_method"] == "mtp" and d["derived.spec_tokens_per_step"] == pytest.approx(1.6)


def test_the_verify_step_pays_the_reads_once_and_the_math_k_plus_one_times(pack):
    d = _advice(pack, {"hardware": H100, "model": LLAMA3_8B, "workload": {
        "task": "generation", "prompt_len_mean": 512, "output_len_mean": 256, "requests_running_mean": 2},
        "constraints": {"objective": "latency"}}).derived
    k, g = 3, (1 - 0.3 ** 4) / (1 - 0.3)
    reads = d["derived.decode_bytes_ms"] / d["derived.bandwidth_efficiency"]
    math_ = (k + 1) * d["derived.decode_compute_ms"] / 0.55          # compute_efficiency
    hand_step = max(reads, math_) + d["derived.step_overhead_ms"] + 0.004 * 2      # request_fixed_ms x batch; n-gram: no drafter
    assert d["derived.spec_step_ms"] == pytest.approx(hand_step)
    assert d["derived.spec_itl_ms"] == pytest.approx(hand_step / g + d["derived.prefill_share_ms"])
    assert d["derived.spec_itl_ms"] < d["derived.itl_expected_ms"]      # bandwidth-bound at 2: a gain


def test_deepseek_mtp_is_proposed_with_each_engines_own_name(pack):
    expected = {("vllm", "0.10.2"): '"method": "deepseek_mtp"', ("vllm", "0.11.0"): '"method": "mtp"',
                ("vllm", "0.12.0"): '"method": "mtp"', ("sglang", "0.5.1"): "--speculative-algorithm EAGLE",
                ("trtllm", "1.1.0"): '"decoding_type": "MTP"'}
    for (engine, version), text in expected.items():
        advice = _advice(pack, _deepseek(engine, version))
        chosen = {s.key: s for s in advice.strategies}
        assert "speculative_decoding[mtp]" in chosen, (engine, [s.key for s in advice.strategies])
        launch = build_launch(advice, engine)
        line = " ".join(f"{a.name} {a.value or ''}" for a in launch.args)
        assert text in line, (engine, version, line)
        assert not engine_catalog().engines[engine].problems(launch.target.version, launch.argv())
        assert "DRAFT_MODEL" not in line and "--speculative-draft-model-path" not in line


def test_mtp_before_vllm_0_11_is_refused_by_the_profile():
    vllm = engine_catalog().engines["vllm"]
    assert vllm.problems((0, 10, 2), [("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1}))])
    assert not vllm.problems((0, 11, 0), [("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1}))])
    trtllm = engine_catalog().engines["trtllm"]
    assert trtllm.problems((1, 1, 0), [("speculative_config", json.dumps({"decoding_type": "Eagle3"}))])


def test_an_eagle3_head_named_in_the_facts_is_the_draft(pack):
    model = {**LLAMA3_8B, "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    advice = _advice(pack, {"hardware": H100, "model": model, "workload": {
        "task": "generation", "engine": "vllm", "prompt_len_mean": 512, "output_len_mean": 256, "requests_running_mean": 2},
        "constraints": {"objective": "latency"}})
    assert "speculative_decoding[eagle3]" in {s.key for s in advice.strategies}
    spec = dict(build_launch(advice, "vllm").argv())["--speculative-config"]
    assert json.loads(spec or "") == {"method": "eagle3", "num_speculative_tokens": 3,
                                      "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    sglang = dict(build_launch(advice, "sglang").argv())
    assert sglang["--speculative-algorithm"] == "EAGLE3"
    assert sglang["--speculative-draft-model-path"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_no_speculation_where_the_verify_step_costs_more_than_it_yields(pack):
    advice = _advice(pack, {"hardware": H100, "model": LLAMA3_8B, "workload": {
        "task": "generation", "prompt_len_mean": 512, "output_len_mean": 256, "requests_running_mean": 256},
        "constraints": {"objective": "latency"}})
    assert advice.derived["derived.spec_itl_ms"] >= advice.derived["derived.itl_expected_ms"]
    assert not [s for s in advice.strategies if s.id == "speculative_decoding"]


LLAMA3_70B_TP8 = {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8},
                  "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "params_billion": 70.6, "weight_dtype": "bf16",
                            "num_layers": 80, "num_kv_heads": 8, "head_dim": 128},
                  "workload": {"task": "generation", "requests_running_mean": 16, "prompt_len_mean": 2048, "output_len_mean": 256},
                  "serving": {"tensor_parallel_size": 8}, "constraints": {"itl_slo_ms": 12, "ttft_slo_ms": 500}}


def _with(document: dict, **sections) -> dict:
    return {**document, **{name: {**document.get(name, {}), **values} for name, values in sections.items()}}


def test_disaggregation_where_no_chunk_budget_meets_both_objectives_is_a_note_not_a_flag(pack):
    for engine in ("vllm", "sglang", "trtllm"):
        advice = _advice(pack, _with(LLAMA3_70B_TP8, workload={"engine": engine}))
        chosen = {s.key: s for s in advice.strategies}
        assert "disaggregation" in chosen, engine
        # the KV handed over: 2,048 tokens x 2 x 80 layers x 8 heads x 128 x 2 bytes, at 50 GB/s
        assert advice.derived["derived.kv_transfer_mb"] == pytest.approx(2048 * 2 * 80 * 8 * 128 * 2 / 1e6)
        assert advice.derived["derived.kv_transfer_ms"] == pytest.approx(2048 * 2 * 80 * 8 * 128 * 2 / 50e6)
        lines = chosen["disaggregation"].settings[engine]
        assert lines and all(line.startswith("# ") and "multi-process" in line for line in lines), lines
        launch = build_launch(advice, engine)
        assert not any("disaggregation" in a.name or a.name == "--kv-transfer-config" for a in launch.args)
        assert any("multi-process" in note for note in launch.notes)
    relaxed = _advice(pack, _with(LLAMA3_70B_TP8, workload={"engine": "vllm"}, constraints={"itl_slo_ms": 60}))
    assert "disaggregation" not in {s.key for s in relaxed.strategies}


def test_tgi_missing_a_lever_is_advised_to_migrate_with_the_lever_named(pack):
    advice = _advice(pack, _deepseek("tgi"))
    migration = next(s for s in advice.strategies if s.id == "engine_migration")
    assert migration.params["to"] == "sglang"
    assert {"S-MIGRATE-TGI-SPECULATIVE", "S-MIGRATE-TGI-DP-ATTENTION"} <= set(migration.recommended_by)
    assert "maintenance mode" in migration.settings["tgi"][0]
    disagg = _advice(pack, _with(LLAMA3_70B_TP8, workload={"engine": "tgi"}))
    migration = next(s for s in disagg.strategies if s.id == "engine_migration")
    assert migration.params == {"to": "vllm", "lever": "disaggregation"}
    assert not [s for s in _advice(pack, _deepseek("sglang")).strategies if s.id == "engine_migration"]


def test_a_missed_ttft_objective_gets_its_levers(pack):
    # expert review: constraints with a TTFT objective missed, nothing else wrong, got no TTFT lever
    document = {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 4},
                "model": {"params_billion": 70.6, "weight_dtype": "bf16", "num_layers": 80, "num_kv_heads": 8,
                          "head_dim": 128, "num_attention_heads": 64},
                "workload": {"task": "generation", "engine": "vllm", "requests_running_mean": 16, "prompt_len_mean": 8192,
                             "output_len_mean": 256, "arrival_rate_per_s": 4, "ttft_p99_ms": 3000},
                "serving": {"tensor_parallel_size": 4, "chunked_prefill": True}, "constraints": {"ttft_slo_ms": 1000}}
    advice = _advice(pack, document)
    keys = {s.key: s for s in advice.strategies}
    assert "prefix_caching" in keys and keys["prefix_caching"].status == "keep"       # on by default in vLLM V1: shown kept
    assert "scale_out" in keys and keys["scale_out"].params["replicas"] >= 2
    # the M/D/1 reason: prefills keep the math at least half busy
    assert advice.derived["derived.prefill_load"] >= 0.5


def test_the_cap_in_the_action_list_is_the_cap_in_the_script(pack):
    from pathlib import Path

    from kbopt.kb.facts import load_facts
    root = Path(__file__).resolve().parents[1]
    seen = 0
    for example in sorted((root / "examples").glob("*.json")):
        advice = advise(load_facts(example), pack, available_evaluators()[0])
        for engine in ("vllm", "sglang", "trtllm", "tgi"):
            try:
                launch = build_launch(advice, engine)
            except Exception:       # refused deployments (no KV room, version floors) have no script
                continue
            cap_flag = next((c.name for c in launch.spec.deployment if c.fact == "serving.max_num_seqs"), None)
            args = {a.name: a for a in launch.args}
            for strategy in advice.strategies:
                for (sid, param) in (("continuous_batching", "max_batch_size"), ("memory_budget", "max_num_seqs")):
                    if strategy.id == sid and strategy.status == "change" and param in strategy.params \
                            and cap_flag in args and args[cap_flag].rule.startswith(tuple(strategy.recommended_by)):
                        # until MODEL names the checkpoint a quantization needs, the script runs today's
                        # weights, and the cap they hold (the action list's is beside it, in a note)
                        waits = any("MODEL set to that checkpoint" in note for note in launch.notes)
                        expected = dict(strategy.before_plan).get(param, strategy.params[param]) if waits \
                            else strategy.params[param]
                        assert args[cap_flag].value == str(expected), (example.name, engine, sid)
                        if waits and expected != strategy.params[param]:
                            assert any(f"it is {strategy.params[param]}" in note for note in launch.notes)
                        seen += 1
    assert seen >= 4


def test_collectors_read_the_engines_speculation_metrics():
    from kbopt.collectors.prometheus import facts_from_scrapes, parse
    before = ("# TYPE vllm:spec_decode_num_drafts_total counter\nvllm:spec_decode_num_drafts_total{engine=\"0\"} 100\n"
              "# TYPE vllm:spec_decode_num_draft_tokens_total counter\nvllm:spec_decode_num_draft_tokens_total{engine=\"0\"} 300\n"
              "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
              "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\"} 150\n")
    after = before.replace("} 100\n", "} 1100\n").replace("} 300\n", "} 3300\n").replace("} 150\n", "} 2150\n")
    facts = {path: value for path, (value, _) in facts_from_scrapes(parse(before, "a"), parse(after, "b")).facts.items()}
    assert facts["telemetry.spec_acceptance_rate"] == pytest.approx(2000 / 3000)     # accepted / drafted in the window
    assert facts["telemetry.spec_accept_length"] == pytest.approx(1 + 2000 / 1000)   # 1 + accepted / drafts
    # vLLM observes one inter-token gap a verify step for each request: over the 3 tokens a step
    # yields, 30 ms gaps are 10 ms an output token, at the mean and at p99 (v1/metrics/stats.py)
    def itl(counts: tuple[int, int, int], total: float) -> str:
        return ("# TYPE vllm:inter_token_latency_seconds histogram\n"
                + "".join(f'vllm:inter_token_latency_seconds_bucket{{le="{le}"}} {n}\n'
                          for le, n in zip(("0.02", "0.04", "+Inf"), counts, strict=True))
                + f"vllm:inter_token_latency_seconds_sum {total}\nvllm:inter_token_latency_seconds_count {counts[-1]}\n")
    scraped = facts_from_scrapes(parse(before + itl((0, 0, 0), 0), "a"), parse(after + itl((0, 1000, 1000), 30.0), "b"))
    facts = {path: value for path, (value, _) in scraped.facts.items()}
    assert facts["workload.itl_mean_ms"] == pytest.approx(30 / 3)
    assert 30 / 3 < facts["workload.itl_p99_ms"] <= 40 / 3
    assert "tokens a verify step" in scraped.facts["workload.itl_mean_ms"][1].metric
    sglang = "# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name=\"m\"} 2.4\n"
    facts = {path: value for path, (value, _) in facts_from_scrapes(parse(sglang, "s")).facts.items()}
    assert facts["telemetry.spec_accept_length"] == pytest.approx(2.4)


LLAMA_70B_FP8 = {"name": "nvidia/Llama-3.1-70B-Instruct-FP8", "params_billion": 70.6, "num_layers": 80, "num_kv_heads": 8,
                 "head_dim": 128, "num_attention_heads": 64, "hidden_size": 8192, "vocab_size": 128256,
                 "weight_dtype": "fp8", "kv_cache_dtype": "bf16"}


def test_a_missed_itl_objective_caps_the_batch_below_today_and_says_why_and_where_it_leaves_it(pack):
    """70B FP8 on 2 H100s at 64 running against a 25 ms objective: the step alone is about 31 ms, so
    the cap is the largest batch that meets it (M-MAX-BATCH-ITL), below today's 64 on purpose, the
    rest go to a second replica, and the first screen says where the plan leaves the objective."""
    document = {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "interconnect": "nvlink"},
                "model": LLAMA_70B_FP8,
                "workload": {"task": "generation", "engine": "vllm", "prompt_len_mean": 1200, "output_len_mean": 500,
                             "requests_running_mean": 64, "requests_waiting_mean": 2, "itl_mean_ms": 31},
                "serving": {"engine_version": "0.12.0", "tensor_parallel_size": 2, "quantization": "fp8", "max_num_seqs": 128},
                "constraints": {"objective": "latency", "itl_slo_ms": 25}}
    advice = _advice(pack, document)
    chosen = {s.key: s for s in advice.strategies}
    cap = chosen["batch_cap"].params["max_num_seqs"]
    max_batch_itl = advice.derived["derived.max_batch_itl"]
    assert 1 <= cap < 64 and abs(cap - max_batch_itl) <= max(2, 0.2 * max_batch_itl)     # sized after the plan
    assert any("below today's running batch (64) on purpose" in why for _, why in chosen["batch_cap"].sized)
    assert chosen["scale_out"].params["replicas"] >= 2
    arg = next(a for a in build_launch(advice, "vllm").args if a.name == "--max-num-seqs")
    assert arg.value == str(cap) and "on purpose" in arg.why
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.after is not None and itl.after < itl.value and itl.after_basis == "derived.itl_expected_ms"
    # the plan's mean ITL meets the objective within the model's band
    move = next(g for g in advice.plan.expected if g.metric == "itl_expected_ms")
    assert move.after <= 25 * 1.05


def test_dp_attention_multiplies_the_mla_pool_by_the_ranks_in_its_what_if(pack):
    # DeepSeek-R1 on 8 H200s at TP 8: every GPU keeps the whole 576-value latent of each token
    # (M-KV-BYTES-PER-GPU-MLA); with attention data-parallel over the 8 ranks each keeps its own
    # requests' latents, so the replica's pool holds 8x the tokens from the memory left, less the
    # attention each rank now keeps whole (M-ATTENTION-PARAMS: 11.4 billion parameters, 7/8 of
    # them 10.0 GB more a GPU in FP8; set 18 d5: 7.2x, not 8x).
    document = {"hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8, "interconnect": "nvlink"},
                "telemetry": {"compute_utilization": 0.45, "bandwidth_utilization": 0.5, "kv_cache_usage_ratio": 0.96},
                "model": {**DEEPSEEK_R1, "kv_cache_dtype": "bf16"},
                "workload": {"task": "generation", "engine": "sglang", "prompt_len_mean": 1500, "output_len_mean": 3500,
                             "requests_running_mean": 96, "requests_waiting_mean": 60, "preemption_ratio": 0.02,
                             "itl_mean_ms": 45, "memory_preallocated": True},
                "serving": {"engine_version": "0.5.2", "tensor_parallel_size": 8, "memory_fraction": 0.85},
                "constraints": {"objective": "throughput"}}
    advice = _advice(pack, document)
    parallelism = next(s for s in advice.strategies if s.id == "parallelism")
    assert parallelism.params.get("dp_attention") is True
    moved = {gain.metric: gain for gain in parallelism.expected}
    pool, memory = moved["kv_pool_tokens"], moved["kv_pool_gib_per_gpu"]
    assert memory.before - memory.after == pytest.approx(11.413e9 * 7 / 8 / 2**30, rel=0.01)   # FP8: a byte a parameter
    assert pool.after == pytest.approx(8 * pool.before * memory.after / memory.before, rel=0.001)
    assert 6 * pool.before < pool.after < 8 * pool.before
    # the step reads a rank's share of the cache: shorter, so more tokens a second at today's batch
    assert moved["decode_tokens_per_s"].after > moved["decode_tokens_per_s"].before


def test_a_prefill_heavy_replica_is_compute_bound_not_decode_roofline(pack):
    # 6,000-token prompts at 4 a second into an 8B on one H100: ~4 x 6,000 x 2 x 8.03e9 FLOP a
    # second is 0.39 PFLOP/s, 39% of the 989 TFLOP/s peak at full efficiency; at the model's
    # compute efficiency prefills take over half the GPU's math, although a decode step at 14
    # running is far under the ridge.
    document = {"hardware": H100, "telemetry": {"compute_utilization": 0.62, "bandwidth_utilization": 0.55,
                                                "kv_cache_usage_ratio": 0.35},
                "model": {**LLAMA3_8B, "kv_cache_dtype": "bf16"},
                "workload": {"task": "generation", "engine": "vllm", "prompt_len_mean": 6000, "output_len_mean": 250,
                             "arrival_rate_per_s": 4.0, "requests_running_mean": 14, "requests_waiting_mean": 3,
                             "itl_mean_ms": 14}}
    advice = _advice(pack, document)
    d = advice.derived
    assert d["derived.prefill_load"] >= 0.5
    assert d["derived.arithmetic_intensity"] < d["derived.ridge_point"]
    assert d["derived.bottleneck"] == "compute_capacity"
    assert "D-BOTTLENECK-PREFILL" in {f.rule for f in advice.fired}
    # a quarter of the arrivals leaves the decode roofline in charge
    document["workload"]["arrival_rate_per_s"] = 1.0
    assert _advice(pack, document).derived["derived.bottleneck"] == "memory_bandwidth"


def test_a_step_held_back_by_reads_at_an_ordinary_efficiency_is_not_overhead_bound(pack):
    # DeepSeek-V3 on 8 B200s, 28 ms between tokens at 128 running: the step reaches under 60% of
    # its bandwidth floor, but the fixed costs are a quarter of it and the bytes are read at about
    # 65% of peak once they are taken out: memory-bandwidth-bound, so fewer bytes (NVFP4) pay.
    document = {"hardware": {"gpu_name": "NVIDIA B200", "gpu_count": 8, "interconnect": "nvlink"},
                "telemetry": {"compute_utilization": 0.35, "bandwidth_utilization": 0.4, "kv_cache_usage_ratio": 0.3},
                "model": {**DEEPSEEK_R1, "kv_cache_dtype": "bf16"},
                "workload": {"task": "generation", "engine": "trtllm", "prompt_len_mean": 2000, "output_len_mean": 800,
                             "requests_running_mean": 128, "requests_waiting_mean": 0, "itl_mean_ms": 28},
                "serving": {"tensor_parallel_size": 8}, "constraints": {"objective": "throughput",
                                                                        "allowed_precisions": ["bf16", "fp8", "fp4"]}}
    advice = _advice(pack, document)
    d = advice.derived
    assert d["derived.achieved_bandwidth_ratio"] < 0.6
    # each request: 4 us of bookkeeping and its share of the all-reduces, 2 x 61 layers x 2 x 7/8 x 7,168 x 2 B at 300 GB/s
    hand_share = (d["derived.step_overhead_ms"] + (0.004 + 2 * 61 * 2 * 7 / 8 * 7168 * 2 / 300e9 * 1000) * 128) / 28
    assert d["derived.fixed_cost_share"] == pytest.approx(hand_share) and hand_share < 0.5
    assert d["derived.bandwidth_efficiency"] >= 0.4
    assert d["derived.bottleneck"] == "memory_bandwidth"
    assert any(s.id == "quantization" and s.params.get("scheme") == "nvfp4" and s.status != "keep"
               for s in advice.strategies)


def test_speculation_is_in_the_model_its_what_if_and_its_calibration(pack):
    # DeepSeek-R1 on 8 H200s at 8 running, latency: MTP's what-if moves the ITL to the verify step
    # over the tokens it yields (M-SPEC-STEP), the plan counts it, and the action shows it.
    advice = _advice(pack, _deepseek("sglang"))
    d = advice.derived
    mtp = next(s for s in advice.strategies if s.id == "speculative_decoding")
    moved = {gain.metric: gain for gain in mtp.expected}
    assert moved["itl_expected_ms"].before == pytest.approx(d["derived.itl_plain_ms"])
    assert moved["itl_expected_ms"].after == pytest.approx(d["derived.spec_itl_ms"], rel=0.01)
    hand = d["derived.itl_plain_ms"] / d["derived.spec_itl_ms"]      # same batch: tokens/s scale as 1/ITL
    assert moved["decode_tokens_per_s"].after / moved["decode_tokens_per_s"].before == pytest.approx(hand, rel=0.01)
    # Speculating today: the client's ITL is the verify step's, and a measured ITL (of the verify
    # step) does not calibrate the plain step's efficiency: the default is used, and MTP is kept.
    today = _deepseek("sglang")
    today["serving"] = {**today["serving"], "speculative_method": "mtp"}
    today["workload"] = {**today["workload"], "itl_mean_ms": 9.0}
    advice = _advice(pack, today)
    d = advice.derived
    assert d["derived.itl_expected_ms"] == pytest.approx(d["derived.spec_itl_ms"])
    assert d["derived.itl_expected_ms"] < d["derived.itl_plain_ms"]
    assert "derived.achieved_bandwidth_ratio" not in d
    assert {f.rule for f in advice.fired} >= {"M-BANDWIDTH-EFFICIENCY-DEFAULT"}
    kept = next(s for s in advice.strategies if s.id == "speculative_decoding")
    assert kept.status == "keep"
