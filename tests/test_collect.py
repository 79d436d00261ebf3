"""`kbopt collect` on real public data, a loopback /metrics server, and a fake NVML."""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
from fake_nvml import FakeClock, FakeNVML

from kbopt.collectors.nvml import Progress, sample_nvml
from kbopt.collectors.prometheus import facts_from_scrapes, histogram_quantile, parse, scrape
from kbopt.collectors.run import CollectOptions, collect
from kbopt.collectors.traces import TraceOptions, summarize_trace
from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.errors import KboptError
from kbopt.kb.facts import facts_from_document, load_facts

REAL = Path(__file__).resolve().parent / "data" / "real"


def _facts(collected):
    return {path: value for path, (value, _) in collected.facts.items()}


def _advise(collected):
    return advise(facts_from_document(collected.document(), "collected"), _pack(), available_evaluators()[0])


def _pack():
    from kbopt.engine.pack.loader import load_pack
    return load_pack()


# ------------------------------------------------------------------ dcgm-exporter


def test_t4_under_load_kernels_busy_but_tensor_cores_idle():
    collected = facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_T4_ericsson_ccd.prom")))
    facts = _facts(collected)
    assert facts["telemetry.kernel_time_ratio"] == 0.91
    assert facts["telemetry.compute_utilization"] == pytest.approx(0.156205)
    assert facts["telemetry.tensor_active_ratio"] == pytest.approx(0.005822)
    assert facts["telemetry.bandwidth_utilization"] == pytest.approx(0.092781)
    assert facts["hardware.gpu_name"] == "Tesla T4"
    compute = collected.facts["telemetry.compute_utilization"][1]
    assert (compute.source, compute.quality, compute.metric) == ("dcgm", "proxy", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    advice = _advise(collected)
    assert advice.derived["derived.launch_bound"] is True
    fusion = next(s for s in advice.strategies if s.id == "op_fusion")
    assert "S-FUSION-LAUNCH-BOUND" in fusion.because
    assert {"W-GPU-MOSTLY-IDLE", "W-PROXY-TELEMETRY"} <= {w.rule for w in advice.warnings}


def test_a100_in_mig_mode_reads_its_one_instance_as_the_mig_facts_describe_it():
    # One 1g.5gb instance exported beside the whole GPU: the work runs in it, so its readings
    # (DRAM_ACTIVE 0.80, not the card's 0.69) and its memory (4,845 MiB in use of its 4.75 GiB, not
    # of the card's 40) are the deployment's; a newcomer found the slice's facts beside the card's.
    collected = facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_A100_loaded_mig_nvdocs.prom")))
    facts = _facts(collected)
    assert facts["telemetry.compute_utilization"] == pytest.approx(0.995687)
    assert facts["telemetry.bandwidth_utilization"] == pytest.approx(0.800339)
    assert facts["hardware.mig_enabled"] is True and facts["hardware.mig_memory_gib"] == 4.75
    assert facts["telemetry.memory_used_ratio"] == pytest.approx(4845 / 1024 / 4.75, abs=1e-4)
    assert "from a MIG instance" in (collected.facts["telemetry.bandwidth_utilization"][1].note or "")
    assert any("no modelName label" in note and "hardware.gpu_name" in note for note in collected.notes)


def test_idle_l4_is_named_and_enriched_from_the_catalog():
    collected = facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_L4_kops.prom")))
    facts = facts_from_document(collected.document(), "collected")
    assert facts.values["hardware.gpu_name"] == "NVIDIA L4"
    assert facts.values["hardware.compute_capability"] == "8.9"
    assert facts.provenance["hardware.compute_capability"].source == "catalog:L4"
    assert facts.values["hardware.memory_total_gib"] == pytest.approx(22.49, abs=0.01)   # measured beats the catalog


# ------------------------------------------------------------------ engines


def test_vllm_v1_dump():
    collected = facts_from_scrapes(scrape(str(REAL / "vllm_v1_metrics_qwen05b_kops.prom")))
    facts = _facts(collected)
    assert facts["workload.engine"] == "vllm" and facts["workload.memory_preallocated"] is True
    assert facts["telemetry.kv_cache_usage_ratio"] == 0.0 and facts["workload.kv_cache"] == "paged"
    assert "workload.ttft_p99_ms" not in facts          # no request finished yet: no quantile to give


def test_preallocating_engine_is_judged_by_its_kv_cache_not_device_memory():
    collected = facts_from_scrapes(scrape(str(REAL / "vllm_v1_metrics_qwen05b_kops.prom")))
    document = collected.document()
    document["telemetry"].update(memory_used_ratio=0.92, compute_utilization=0.3, bandwidth_utilization=0.6, kv_cache_usage_ratio=0.2)
    document["workload"].update(requests_running_mean=8)      # the scrape itself is of an idle engine (no_load)
    advice = advise(facts_from_document(document, "x"), _pack(), "reference")
    assert advice.bottleneck == "memory_bandwidth"                       # not memory_capacity
    assert "W-MEMORY-PREALLOCATED" in {w.rule for w in advice.warnings}
    assert "D-CAPACITY-KV-FREE" in {f.rule for f in advice.fired}


def test_overloaded_sglang():
    collected = facts_from_scrapes(scrape(str(REAL / "sglang_metrics_llama31_8b_overloaded_docs.prom")))
    facts = _facts(collected)
    assert facts["telemetry.kv_cache_usage_ratio"] == 0.28
    assert (facts["workload.requests_running_mean"], facts["workload.requests_waiting_mean"]) == (162, 2826)
    ttft = collected.facts["workload.ttft_p99_ms"]
    assert ttft[0] >= 20000 and "at least" in ttft[1].note
    advice = _advise(collected)
    assert "W-QUEUE-BACKLOG-WITH-KV-ROOM" in {w.rule for w in advice.warnings}


def test_triton_trtllm_kv_blocks():
    facts = _facts(facts_from_scrapes(scrape(str(REAL / "triton_trtllm_backend_metrics_docs.prom"))))
    assert facts["workload.engine"] == "trtllm"
    assert facts["telemetry.kv_cache_usage_ratio"] == pytest.approx(1 / 6239, abs=1e-6)


VLLM_BEFORE = """# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0"} 10
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop"} 100
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1"} 90
vllm:time_to_first_token_seconds_bucket{le="0.5"} 100
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 100
vllm:time_to_first_token_seconds_count 100
vllm:time_to_first_token_seconds_sum 5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.5
"""
VLLM_AFTER = VLLM_BEFORE.replace(" 10\n", " 30\n").replace("} 100\n", "} 300\n", 1) \
    .replace('le="0.1"} 90', 'le="0.1"} 100').replace('le="0.5"} 100', 'le="0.5"} 300') \
    .replace('le="+Inf"} 100', 'le="+Inf"} 300').replace("0.5\n", "0.9\n")


def test_two_scrapes_give_rates_and_quantiles_over_the_window():
    first, second = parse(VLLM_BEFORE, "before"), parse(VLLM_AFTER, "after")
    facts = _facts(facts_from_scrapes(first, second))
    assert facts["workload.preemption_ratio"] == pytest.approx(20 / 200)     # the window's increase only
    # In the window: 10 requests under 0.1 s, 190 between 0.1 and 0.5 s: p99 interpolates near 0.5 s.
    assert facts["workload.ttft_p99_ms"] == pytest.approx((0.1 + 0.4 * (198 - 10) / 190) * 1000)
    assert facts["telemetry.kv_cache_usage_ratio"] == pytest.approx(0.7)     # gauges: the mean of both
    one = _facts(facts_from_scrapes(first))
    assert one["workload.preemption_ratio"] == pytest.approx(0.1)


def test_histogram_quantile_edges():
    assert histogram_quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None
    assert histogram_quantile(0.99, [(1.0, 10.0), (float("inf"), 100.0)]) == (1.0, False)


def test_bad_metrics_sources_are_clean_errors(tmp_path):
    with pytest.raises(KboptError, match="cannot read"):
        scrape(str(tmp_path / "absent.prom"))
    junk = tmp_path / "junk.prom"
    junk.write_text("this is not { exposition\n")
    with pytest.raises(KboptError, match=r"not Prometheus text exposition|no metrics"):
        scrape(str(junk))
    other = tmp_path / "other.prom"
    other.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    with pytest.raises(KboptError, match="no dcgm-exporter, vLLM, SGLang, TGI or Triton metrics"):
        facts_from_scrapes(scrape(str(other)))
    with pytest.raises(KboptError, match="cannot scrape it"):
        scrape("http://127.0.0.1:9/metrics")


@pytest.fixture
def metrics_server():
    """A loopback HTTP server serving the overloaded SGLang dump at /metrics."""
    body = (REAL / "sglang_metrics_llama31_8b_overloaded_docs.prom").read_bytes()
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body if self.path == "/metrics" else b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", hits
    server.shutdown()
    server.server_close()


def test_collect_scrapes_a_url_twice_over_the_window(metrics_server):
    url, hits = metrics_server
    collected = collect(CollectOptions(metrics=(url,), nvml=False, duration_s=0.2, interval_s=0.05))
    assert hits == ["/metrics", "/metrics"]
    waiting = collected.facts["workload.requests_waiting_mean"]
    assert waiting[0] == 2826 and waiting[1].samples == 2 and waiting[1].window_s >= 0.2
    # The two scrapes are identical: no request finished in the window, so no TTFT quantile.
    assert "workload.ttft_p99_ms" not in collected.facts


# ------------------------------------------------------------------ traces


def test_azure_code_trace():
    collected = summarize_trace(str(REAL / "azure_llm_2023_code_first2000.csv"), TraceOptions())
    facts = _facts(collected)
    assert facts["workload.seq_len_max"] == 7574
    assert facts["workload.seq_len_mean"] == pytest.approx(2016.0905)
    assert facts["workload.long_seq_fraction"] == pytest.approx(0.3835)
    assert facts["workload.seq_len_p99"] == 7449
    assert facts["workload.arrival_rate_peak_per_s"] > 3 * facts["workload.arrival_rate_per_s"]
    provenance = collected.facts["workload.seq_len_mean"][1]
    assert (provenance.source, provenance.samples, provenance.metric) == \
        ("trace:azure_llm_2023_code_first2000.csv", 2000, "ContextTokens+GeneratedTokens")
    advice = _advise(collected)
    # 38% long requests on one replica: chunked prefill, which supersedes length bucketing there.
    assert {"continuous_batching", "chunked_prefill", "paged_kv_cache"} <= {s.id for s in advice.strategies}


def test_long_threshold_is_an_option():
    low = _facts(summarize_trace(str(REAL / "azure_llm_2023_conv_first2000.csv"), TraceOptions(long_threshold=512)))
    high = _facts(summarize_trace(str(REAL / "azure_llm_2023_conv_first2000.csv"), TraceOptions(long_threshold=4096)))
    assert low["workload.long_seq_fraction"] > 0.5 > high["workload.long_seq_fraction"]


def test_mooncake_trace():
    facts = _facts(summarize_trace(str(REAL / "mooncake_fast25_conversation_first610.jsonl"), TraceOptions()))
    assert facts["workload.seq_len_max"] == 121912
    assert facts["workload.arrival_rate_per_s"] == pytest.approx(610 / 204, rel=0.01)


def test_vllm_bench_result_aggregates():
    collected = summarize_trace(str(REAL / "vllm_bench_serve_result_qwen25vl3b.json"), TraceOptions())
    facts = _facts(collected)
    assert facts["workload.seq_len_mean"] == pytest.approx((39800 + 25472) / 199)
    assert facts["workload.ttft_p99_ms"] == pytest.approx(113.886, abs=0.01)
    assert facts["workload.concurrency_peak"] == 14
    assert any("aggregates only" in n for n in collected.notes)


def test_vllm_bench_per_request_arrays(tmp_path):
    path = tmp_path / "detailed.json"
    path.write_text(json.dumps({"completed": 4, "duration": 2.0, "input_lens": [100, 200, 300, 4000],
                                "output_lens": [10, 20, 30, 400], "p99_ttft_ms": 50.0}))
    facts = _facts(summarize_trace(str(path), TraceOptions()))
    assert facts["workload.seq_len_max"] == 4400 and facts["workload.long_seq_fraction"] == 0.25


def test_generic_csv_with_durations_gives_concurrency(tmp_path):
    path = tmp_path / "requests.csv"
    path.write_text("start_ms,in,out,latency_ms\n0,100,10,1000\n100,200,20,1000\n200,50,5,100\n1500,80,8,100\n")
    options = TraceOptions(format="csv", columns={"timestamp": "start_ms", "prompt": "in", "output": "out",
                                                  "duration": "latency_ms"}, time_unit="ms")
    facts = _facts(summarize_trace(str(path), options))
    assert facts["workload.concurrency_peak"] == 3
    assert facts["workload.concurrency_mean"] == pytest.approx((1 + 2 + 3 + 1) / 4)
    assert facts["workload.seq_len_max"] == 220


def test_burstgpt_trace(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "0,ChatGPT,100,50,150,Conversation log\n1.5,GPT-4,3000,200,3200,API log\n")
    facts = _facts(summarize_trace(str(path), TraceOptions()))
    assert facts["workload.seq_len_max"] == 3200 and facts["workload.long_seq_fraction"] == 0.5


def test_trace_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,x,1\n")
    with pytest.raises(KboptError, match=r"bad.csv:3: cannot read"):
        summarize_trace(str(bad), TraceOptions())
    generic = tmp_path / "generic.csv"
    generic.write_text("a,b\n1,2\n")
    with pytest.raises(KboptError, match="say which columns hold the lengths"):
        summarize_trace(str(generic), TraceOptions())
    with pytest.raises(KboptError, match="no column 'c'"):
        summarize_trace(str(generic), TraceOptions(columns={"total": "c"}))


# ------------------------------------------------------------------ NVML


def _sample(fake, **kw):
    clock = FakeClock()
    return sample_nvml(fake, 0, kw.pop("duration_s", 2.0), kw.pop("interval_s", 0.5), clock=clock, sleep=clock.sleep,
                       progress=Progress(2.0, stream=open("/dev/null", "w")))


def test_nvml_samples_are_summarized_and_marked_as_proxies():
    fake = FakeNVML(readings=[(40, 20, 60.0), (60, 40, 64.0), (80, 60, 68.0), (60, 40, 64.0), (60, 40, 64.0)])
    collected = _sample(fake)
    facts = _facts(collected)
    assert facts["telemetry.compute_utilization"] == pytest.approx(0.6)
    assert facts["telemetry.bandwidth_utilization"] == pytest.approx(0.4)
    assert facts["telemetry.memory_used_ratio"] == pytest.approx(64.0 / 80)
    assert facts["hardware.compute_capability"] == "8.0" and facts["hardware.gpu_count"] == 1
    compute = collected.facts["telemetry.compute_utilization"][1]
    assert (compute.source, compute.quality, compute.samples) == ("nvml", "proxy", 5)
    assert "p95 0.8" in compute.note and "not SM activity" in compute.note
    assert collected.facts["telemetry.kernel_time_ratio"][1].quality == "measured"
    assert fake.shut_down
    advice = _advise(collected)
    assert "W-PROXY-TELEMETRY" in {w.rule for w in advice.warnings}


def test_measured_dcgm_readings_win_over_nvml_proxies():
    nvml = _sample(FakeNVML(readings=[(91, 73, 5.0)], name="Tesla T4", capability=(7, 5), total_gib=15.0))
    dcgm = facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_T4_ericsson_ccd.prom")))
    merged = nvml.merge(dcgm)
    assert merged.facts["telemetry.compute_utilization"][1].source == "dcgm"
    assert merged.facts["telemetry.compute_utilization"][0] == pytest.approx(0.156205)


@pytest.mark.parametrize("code,message", [(12, "NVML is not available here"), (9, "driver is not loaded")])
def test_nvml_start_failures_say_what_to_do(code, message):
    with pytest.raises(KboptError) as caught:
        _sample(FakeNVML(fail_init=code))
    assert message in str(caught.value) and "--metrics" in str(caught.value)


def test_unsupported_fields_are_skipped_with_a_note():
    collected = _sample(FakeNVML(power_supported=False))
    assert "telemetry.power_watts" not in collected.facts
    assert any("power draw is not supported" in n for n in collected.notes)
    assert any("MIG mode is not supported" in n for n in collected.notes)


def test_a_lost_gpu_keeps_what_was_sampled():
    collected = _sample(FakeNVML(lose_after=2))
    assert collected.facts["telemetry.compute_utilization"][1].samples == 2
    assert any("lost after 2 samples" in n and "partial" in n for n in collected.notes)


def test_ctrl_c_keeps_what_was_sampled():
    collected = _sample(FakeNVML(interrupt_after=3))
    assert collected.facts["telemetry.compute_utilization"][1].samples == 3
    assert any("interrupted after 3 samples" in n for n in collected.notes)


def test_progress_bar_only_on_a_terminal(capsys):
    import io
    quiet = io.StringIO()
    bar = Progress(1.0, stream=quiet)
    bar.update(0.5, 1)
    bar.close()
    assert quiet.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    shown = Terminal()
    bar = Progress(1.0, stream=shown)
    bar.update(0.5, 1)
    assert "sampling NVML [###############" in shown.getvalue()


# ------------------------------------------------------------------ the command


def test_collect_then_advise_shows_provenance(run_cli, tmp_path):
    out = tmp_path / "run.json"
    code, _, err = run_cli("collect", "--no-nvml", "--metrics", str(REAL / "dcgm_exporter_T4_ericsson_ccd.prom"),
                           "--workload", str(REAL / "azure_llm_2023_conv_first2000.csv"), "--model", "llama-3-8b",
                           "-o", str(out))
    assert code == 0, err
    facts = load_facts(out)
    assert facts.provenance["telemetry.compute_utilization"].metric == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert facts.provenance["model.num_layers"].source == "catalog:llama-3-8b"
    code, text, _ = run_cli("advise", "--facts", str(out), "--explain")
    assert code == 0
    assert "(dcgm DCGM_FI_PROF_GR_ENGINE_ACTIVE, proxy, 1 sample" in text
    assert "trace:azure_llm_2023_conv_first2000.csv" in text


def test_advise_collect_in_one_step(run_cli):
    code, out, _ = run_cli("advise", "--collect", "--no-nvml", "--format", "json",
                           "--metrics", str(REAL / "dcgm_exporter_A100_loaded_mig_nvdocs.prom"))
    advice = json.loads(out)
    # the 1g.5gb instance that serves holds 4,845 MiB of its 4.75 GiB: memory binds before the math
    assert code == 0 and advice["bottleneck"] == "memory_capacity"
    assert advice["facts"]["telemetry.compute_utilization"]["origin"] == "dcgm"


def test_collect_without_any_usable_source_is_exit_2(run_cli, monkeypatch):
    from kbopt.collectors import nvml
    monkeypatch.setattr(nvml, "load_pynvml", lambda: FakeNVML(fail_init=12))
    code, out, err = run_cli("collect")
    assert code == 2 and out == ""
    assert "NVML is not available here" in err and "--metrics" in err and "--workload" in err


def test_collect_skips_nvml_with_a_note_when_other_sources_exist(run_cli, monkeypatch, tmp_path):
    from kbopt.collectors import nvml
    monkeypatch.setattr(nvml, "load_pynvml", lambda: FakeNVML(fail_init=12))
    code, out, err = run_cli("collect", "--workload", str(REAL / "azure_llm_2023_code_first2000.csv"))
    assert code == 0 and "NVML skipped" in err
    assert json.loads(out)["workload"]["seq_len_max"] == 7574


def test_collect_uses_nvml_when_available(run_cli, monkeypatch):
    from kbopt.collectors import nvml
    fake = FakeNVML(readings=[(55, 30, 70.0)])
    monkeypatch.setattr(nvml, "load_pynvml", lambda: fake)
    code, out, _ = run_cli("collect", "--duration", "0.05", "--interval", "0.01")
    document = json.loads(out)
    assert code == 0 and document["hardware"]["gpu_name"] == "NVIDIA A100-SXM4-80GB"
    assert document["provenance"]["telemetry.compute_utilization"]["quality"] == "proxy"


def test_model_from_a_hugging_face_config(run_cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "num_hidden_layers": 28,
                                  "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
                                  "torch_dtype": "bfloat16"}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    model = json.loads(out)["model"]
    # q and o 3,584 x 28 x 128, k and v 3,584 x 4 x 128, in each of 28 layers (printed to 6 decimals)
    assert model.pop("attention_params_billion") == pytest.approx(28 * (2 * 3584 * 28 * 128 + 2 * 3584 * 4 * 128) / 1e9, abs=1e-6)
    assert code == 0 and model == {"head_dim": 128, "name": "Qwen/Qwen2.5-7B-Instruct", "num_kv_heads": 4,
                                   "num_layers": 28, "weight_dtype": "bf16", "num_attention_heads": 28, "hidden_size": 3584,
                                   "vision": False}
    code, _, err = run_cli("collect", "--no-nvml", "--model", "gpt-5")
    assert code == 2 and "not in the model catalog" in err


def test_a_multimodal_config_gives_the_outer_model_type_and_its_vision_encoder(run_cli, tmp_path):
    # Gemma 3: TGI 3.3 neither chunks its prefills nor caches its prefixes, known by model_type
    # gemma3 and the vision_config; the text_config's own model_type (gemma3_text) is not the checkpoint's.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gemma3", "vision_config": {"model_type": "siglip_vision_model"},
                                  "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62, "num_attention_heads": 32,
                                                  "num_key_value_heads": 16, "head_dim": 128, "hidden_size": 5376},
                                  "torch_dtype": "bfloat16"}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    model = json.loads(out)["model"]
    assert code == 0 and model["architecture"] == "gemma3" and model["vision"] is True and model["num_layers"] == 62
    config.write_text(json.dumps({"model_type": "llama\u001b[31m", "num_hidden_layers": 2, "num_attention_heads": 2,
                                  "hidden_size": 64}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    assert code == 0 and "architecture" not in json.loads(out)["model"]      # not a model_type: left out


# ------------------------------------------------------------------ review findings, pinned


def test_ratio_gauges_are_averaged_across_engines_not_added():
    text = ('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} 0.5\n'
            'vllm:kv_cache_usage_perc{engine="1"} 0.7\n# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 4\n')
    facts = _facts(facts_from_scrapes(parse(text, "two-engines")))
    assert facts["telemetry.kv_cache_usage_ratio"] == pytest.approx(0.6)
    assert facts["workload.requests_running_mean"] == 7


def test_a_histogram_reset_between_scrapes_uses_the_second_totals():
    first = parse(VLLM_BEFORE, "before")
    restarted = parse(VLLM_BEFORE.replace('le="0.1"} 90', 'le="0.1"} 5').replace('le="0.5"} 100', 'le="0.5"} 10')
                      .replace('le="+Inf"} 100', 'le="+Inf"} 10'), "after")
    facts = _facts(facts_from_scrapes(first, restarted))
    assert facts["workload.ttft_p99_ms"] == pytest.approx((0.1 + 0.4 * (9.9 - 5) / 5) * 1000)


def test_dcgm_with_several_gpus_reports_the_chosen_one():
    row = 'DCGM_FI_PROF_SM_ACTIVE{{gpu="{g}",modelName="NVIDIA H100 80GB HBM3"}} {v}\n'
    text = "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n" + row.format(g=0, v=0.2) + row.format(g=1, v=0.8)
    collected = facts_from_scrapes(parse(text, "node"), gpu=1)
    assert _facts(collected)["telemetry.compute_utilization"] == 0.8
    assert "hardware.gpu_count" not in collected.facts          # GPUs per replica: not the node's count
    with pytest.raises(KboptError, match="no GPU 5 in it"):
        facts_from_scrapes(parse(text, "node"), gpu=5)


def test_collect_waits_for_the_window_when_nvml_is_missing(metrics_server, monkeypatch):
    from kbopt.collectors import nvml
    monkeypatch.setattr(nvml, "load_pynvml", lambda: FakeNVML(fail_init=12))
    url, hits = metrics_server
    collected = collect(CollectOptions(metrics=(url,), nvml=True, duration_s=0.3, interval_s=0.05))
    assert len(hits) == 2 and collected.facts["workload.requests_waiting_mean"][1].window_s >= 0.3


def test_azure_2024_timestamps_with_an_offset(tmp_path):
    path = tmp_path / "azure2024.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,100,10\n"
                    "2024-05-10 00:00:02.009930+00:00,300,30\n")
    facts = _facts(summarize_trace(str(path), TraceOptions()))
    assert facts["workload.arrival_rate_per_s"] == pytest.approx(1.0)
    assert facts["workload.seq_len_max"] == 330


@pytest.mark.parametrize("content", ['{"completed": 3}', '{"completed": "3"}',
                                     '{"completed": 2, "duration": 1, "input_lens": [1, "a"], "output_lens": [1, 2]}'])
def test_bad_vllm_bench_results_are_exit_2(run_cli, tmp_path, content):
    path = tmp_path / "bench.json"
    path.write_text(content)
    code, _, err = run_cli("collect", "--no-nvml", "--workload", str(path))
    assert code == 2 and "bench.json" in err and "Traceback" not in err


@pytest.mark.parametrize("content,message", [("[1, 2]", "is a JSON object"),
                                             ('{"num_hidden_layers": "x", "num_attention_heads": 8, "head_dim": 64}', "unexpected values"),
                                             ('{"num_hidden_layers": 61, "kv_lora_rank": "512", "num_attention_heads": 128}',
                                              "unexpected values"),
                                             ('{"num_hidden_layers": 1e999, "num_attention_heads": 8, "head_dim": 64}', "unexpected values")])
def test_bad_model_configs_are_exit_2(run_cli, tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    code, _, err = run_cli("collect", "--no-nvml", "--model", str(path))
    assert code == 2 and message in err


def test_generic_trace_with_infinity_or_negative_lengths_is_exit_2(run_cli, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("in,out\n10,inf\n")
    code, _, err = run_cli("collect", "--no-nvml", "--workload", str(path), "--columns", "prompt=in,output=out")
    assert code == 2 and "t.csv:2" in err
    path.write_text("in,out\n10,-30\n")
    code, _, err = run_cli("collect", "--no-nvml", "--workload", str(path), "--columns", "prompt=in,output=out")
    assert code == 2 and "t.csv:2: a length or duration is negative" in err


def test_ctrl_c_is_one_line_and_exit_130(run_cli, monkeypatch):
    from kbopt.collectors import run
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(run, "collect", interrupted)
    code, out, err = run_cli("collect", "--no-nvml", "--workload", "x")
    assert code == 130 and out == "" and err == "kbopt: interrupted; nothing was written\n"


def test_throttling_and_clocks_are_noted():
    from fake_nvml import ThrottledNVML
    collected = _sample(ThrottledNVML())
    assert any("held down" in n and "100% of samples" in n for n in collected.notes)
    assert any("SM clock mean 1.41e+03" in n for n in collected.notes)


def test_tgi_metrics():
    text = ("# TYPE tgi_queue_size gauge\ntgi_queue_size 12\n"
            "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 30\n")
    facts = _facts(facts_from_scrapes(parse(text, "tgi")))
    assert facts["workload.engine"] == "tgi" and facts["workload.memory_preallocated"] is True
    assert (facts["workload.requests_waiting_mean"], facts["workload.requests_running_mean"]) == (12, 30)


def test_packs_from_the_environment(run_cli, monkeypatch):
    from pathlib import Path as P
    pack = str(P(__file__).resolve().parents[1] / "examples" / "packs" / "vllm-tuning")
    monkeypatch.setenv("KBOPT_RULES", pack)
    code, out, _ = run_cli("rules", "list", "--layer", "storage")
    assert code == 0 and "V-FP8-KV-CACHE" in out


# ------------------------------------------------------------------ performance-model facts from /metrics


def test_vllm_dump_gives_the_engines_own_settings():
    # tests/data/real/vllm_v1_metrics_qwen05b_kops.prom, its vllm:cache_config_info line: num_gpu_blocks="101625",
    # block_size="16", gpu_memory_utilization="0.9", enable_prefix_caching="True", cache_dtype="auto".
    collected = facts_from_scrapes(scrape(str(REAL / "vllm_v1_metrics_qwen05b_kops.prom")))
    facts = _facts(collected)
    assert (facts["serving.num_gpu_blocks"], facts["serving.kv_block_size"]) == (101625, 16)
    assert facts["serving.memory_fraction"] == 0.9 and facts["serving.prefix_caching"] is True
    assert "model.kv_cache_dtype" not in facts              # "auto": the model's dtype, which the labels do not say
    provenance = collected.facts["serving.num_gpu_blocks"][1]
    assert (provenance.source, provenance.quality, provenance.metric) == \
        ("vllm", "measured", "vllm:cache_config_info{num_gpu_blocks}")
    # Idle: every histogram and counter is 0, so no mean, quantile, hit ratio or rate.
    assert not {"workload.prompt_len_mean", "workload.itl_mean_ms", "workload.prefix_cache_hit_ratio",
                "workload.generation_tokens_per_s"} & set(facts)
    assert any("token rates need two scrapes" in n for n in collected.notes)


def test_overloaded_sglang_lengths_latencies_and_cache_hits():
    # tests/data/real/sglang_metrics_llama31_8b_overloaded_docs.prom, by hand from its lines:
    collected = facts_from_scrapes(scrape(str(REAL / "sglang_metrics_llama31_8b_overloaded_docs.prom")))
    facts = _facts(collected)
    # time_per_output_token_seconds_sum 866964.5791549598 / _count 7.400757e+06, in ms
    assert facts["workload.itl_mean_ms"] == pytest.approx(866964.5791549598 / 7400757 * 1000, abs=1e-5)
    # time_to_first_token_seconds_sum 2.3518979474117756e+06 / _count 11008, in ms (overloaded: 3.5 minutes)
    assert facts["workload.ttft_mean_ms"] == pytest.approx(2351897.9474117756 / 11008 * 1000, abs=1e-5)
    # prompt_tokens_total 8.128902e+06 and generation_tokens_total 7.557572e+06 over
    # e2e_request_latency_seconds_count 11228 finished requests
    assert facts["workload.prompt_len_mean"] == pytest.approx(8128902 / 11228, abs=1e-5)
    assert facts["workload.output_len_mean"] == pytest.approx(7557572 / 11228, abs=1e-5)
    assert collected.facts["workload.prompt_len_mean"][1].quality == "derived"
    assert facts["workload.prefix_cache_hit_ratio"] == pytest.approx(0.007507552643049313, abs=1e-6)   # cache_hit_rate
    generation = collected.facts["workload.generation_tokens_per_s"]       # gen_throughput 86.50814177726902
    assert generation[0] == pytest.approx(86.508142) and generation[1].quality == "proxy"


def test_dcgm_sm_clock_and_the_mig_instances_memory():
    # dcgm_exporter_A100_loaded_mig_nvdocs.prom: DCGM_FI_DEV_SM_CLOCK 1215 on the whole GPU; its one MIG
    # instance has GPU_I_PROFILE="1g.5gb", which nvidia-smi mig -lgip lists at 4.75 GiB.
    collected = facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_A100_loaded_mig_nvdocs.prom")))
    facts = _facts(collected)
    assert facts["telemetry.sm_clock_mhz"] == 1215
    assert facts["hardware.mig_memory_gib"] == 4.75
    assert collected.facts["hardware.mig_memory_gib"][1].quality == "derived"
    # DCGM_FI_DEV_SM_CLOCK in the T4 (under load) and the idle L4 dumps
    assert _facts(facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_T4_ericsson_ccd.prom"))))["telemetry.sm_clock_mhz"] == 660
    assert _facts(facts_from_scrapes(scrape(str(REAL / "dcgm_exporter_L4_kops.prom"))))["telemetry.sm_clock_mhz"] == 210


DCGM_LIMITS = """# TYPE DCGM_FI_DEV_POWER_MGMT_LIMIT gauge
DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 700
# TYPE DCGM_FI_DEV_ENFORCED_POWER_LIMIT gauge
DCGM_FI_DEV_ENFORCED_POWER_LIMIT{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 500
# TYPE DCGM_FI_DEV_MAX_SM_CLOCK gauge
DCGM_FI_DEV_MAX_SM_CLOCK{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 1980
# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 4
"""


def test_dcgm_power_limit_max_clock_and_throttling():
    first = parse(DCGM_LIMITS, "a")
    second = parse(DCGM_LIMITS.replace("} 4\n", "} 1\n"), "b")            # 0x4 power cap, then 0x1 idle only
    facts = _facts(facts_from_scrapes(first, second))
    assert facts["hardware.power_limit_watts"] == 500                     # the enforced limit, not the one asked for
    assert facts["hardware.max_sm_clock_mhz"] == 1980
    assert facts["telemetry.throttle_ratio"] == 0.5


def test_several_mig_profiles_ask_for_the_instances_memory():
    text = ('# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n'
            'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"} 0.5\n'
            'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 0.5\n')
    collected = facts_from_scrapes(parse(text, "mig"))
    assert "hardware.mig_memory_gib" not in collected.facts
    assert any("give hardware.mig_memory_gib" in n for n in collected.notes)
    one = _facts(facts_from_scrapes(parse(text.replace("3g.40gb", "1g.10gb"), "mig")))
    assert one["hardware.mig_memory_gib"] == 9.75


VLLM_LOADED = """# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",cache_dtype="fp8_e4m3",enable_prefix_caching="False",gpu_memory_utilization="0.85",num_gpu_blocks="4000"} 1.0
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{engine="0",le="100.0"} $p100
vllm:request_prompt_tokens_bucket{engine="0",le="1000.0"} $pall
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf"} $pall
vllm:request_prompt_tokens_count{engine="0"} $pall
vllm:request_prompt_tokens_sum{engine="0"} $psum
# TYPE vllm:request_generation_tokens histogram
vllm:request_generation_tokens_bucket{engine="0",le="100.0"} $gall
vllm:request_generation_tokens_bucket{engine="0",le="+Inf"} $gall
vllm:request_generation_tokens_count{engine="0"} $gall
vllm:request_generation_tokens_sum{engine="0"} $gsum
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05"} $gsum
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf"} $gsum
vllm:inter_token_latency_seconds_count{engine="0"} $gsum
vllm:inter_token_latency_seconds_sum{engine="0"} $isum
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0"} $psum
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0"} $hits
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0"} $psum
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0"} $gsum
"""


def _vllm_loaded(**counts):
    from string import Template
    return Template(VLLM_LOADED).substitute(counts)


def test_two_vllm_scrapes_give_lengths_cache_hits_itl_and_token_rates():
    # Before: 10 requests (500 prompt tokens, 200 generated). After 10 s: 110 requests, 100 of them in the
    # window, 90 with prompts under 100 tokens; 20,500 prompt tokens and 5,200 generated, 6,000 cache hits.
    first = parse(_vllm_loaded(p100=10, pall=10, psum=500, gall=10, gsum=200, isum=4, hits=0), "a", at=100.0)
    second = parse(_vllm_loaded(p100=100, pall=110, psum=20500, gall=110, gsum=5200, isum=104, hits=6000),
                   "b", at=110.0)
    collected = facts_from_scrapes(first, second)
    facts = _facts(collected)
    assert facts["workload.prompt_len_mean"] == pytest.approx(20000 / 100)
    assert facts["workload.output_len_mean"] == pytest.approx(5000 / 100)
    # p99 of the window's prompts: rank 99 of 100, 90 under 100 tokens, 10 in (100, 1000]
    assert facts["workload.prompt_len_p99"] == pytest.approx(100 + 900 * (99 - 90) / 10)
    assert facts["workload.itl_mean_ms"] == pytest.approx(100 / 5000 * 1000)
    assert facts["workload.prefix_cache_hit_ratio"] == pytest.approx(6000 / 20000)
    assert facts["workload.prompt_tokens_per_s"] == pytest.approx(20000 / 10)
    assert facts["workload.generation_tokens_per_s"] == pytest.approx(5000 / 10)
    assert collected.facts["workload.generation_tokens_per_s"][1].window_s == 10
    assert facts["model.kv_cache_dtype"] == "fp8" and facts["serving.prefix_caching"] is False
    assert (facts["serving.kv_block_size"], facts["serving.num_gpu_blocks"], facts["serving.memory_fraction"]) == \
        (32, 4000, 0.85)
    one = _facts(facts_from_scrapes(second))                       # one scrape: totals since start, no rates
    assert one["workload.prompt_len_mean"] == pytest.approx(20500 / 110) and "workload.prompt_tokens_per_s" not in one


def test_a_host_kv_tiers_hits_count_beside_the_gpus():
    # vLLM counts a KV connector's hits (an OffloadingConnector's host tier) apart, over the same
    # looked-up tokens: 6,000 GPU hits and 10,000 from the tier of 20,000 tokens are 80% served, not 30%.
    tier = "# TYPE vllm:external_prefix_cache_hits counter\nvllm:external_prefix_cache_hits_total{engine=\"0\"} $ext\n"
    def scrape(ext: int, **counts: int) -> str:
        from string import Template
        return Template(VLLM_LOADED + tier).substitute(counts, ext=ext)
    first = parse(scrape(0, p100=10, pall=10, psum=500, gall=10, gsum=200, isum=4, hits=0), "a", at=100.0)
    second = parse(scrape(10000, p100=100, pall=110, psum=20500, gall=110, gsum=5200, isum=104, hits=6000), "b", at=110.0)
    collected = facts_from_scrapes(first, second)
    assert _facts(collected)["workload.prefix_cache_hit_ratio"] == pytest.approx(16000 / 20000)
    assert "external_prefix_cache_hits" in collected.facts["workload.prefix_cache_hit_ratio"][1].metric


def test_exporter_junk_is_left_out_with_an_inert_note():
    text = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="1e999",cache_dtype="\x1b[31mx",'
            'gpu_memory_utilization="NaN",num_gpu_blocks="-5",enable_prefix_caching="yes"} 1.0\n'
            '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} NaN\n'
            '# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate 7\n')
    collected = facts_from_scrapes(parse(text, "junk"))
    facts = _facts(collected)
    assert not {"serving.kv_block_size", "serving.num_gpu_blocks", "serving.memory_fraction", "model.kv_cache_dtype",
                "serving.prefix_caching", "telemetry.kv_cache_usage_ratio", "workload.prefix_cache_hit_ratio"} & set(facts)
    assert any("not a finite number" in n for n in collected.notes)
    assert all("\x1b" not in n for n in collected.notes)
    facts_from_document(collected.document(), "collected")            # what is left reads back


def test_nan_from_an_exporter_is_not_a_crash(run_cli, tmp_path):
    path = tmp_path / "nan.prom"
    path.write_text('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} NaN\n'
                    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3\n')
    code, out, err = run_cli("collect", "--no-nvml", "--metrics", str(path))
    assert code == 0 and "not a finite number" in err and json.loads(out)["workload"]["requests_running_mean"] == 3


def test_nvml_power_limit_clocks_and_throttle_ratio():
    from fake_nvml import ThrottledNVML
    # Five samples (2 s every 0.5 s): SM clocks 1980, 1980, 1500, 1500, 1500 MHz; reasons 0x1 (idle, not a
    # slowdown), 0x4 (power cap), 0x4, 0x10 (sync boost, not a slowdown), 0x40 (HW thermal): 3 of 5 slowed.
    fake = ThrottledNVML(power_limit_mw=700_000, max_sm_clock=1980, clocks=(1980, 1980, 1500, 1500, 1500),
                         reasons=(0x1, 0x4, 0x4, 0x10, 0x40))
    collected = _sample(fake)
    facts = _facts(collected)
    assert facts["hardware.power_limit_watts"] == 700 and facts["hardware.max_sm_clock_mhz"] == 1980
    assert facts["telemetry.sm_clock_mhz"] == pytest.approx((2 * 1980 + 3 * 1500) / 5)
    assert facts["telemetry.throttle_ratio"] == pytest.approx(3 / 5)
    ratio = collected.facts["telemetry.throttle_ratio"][1]
    assert (ratio.source, ratio.quality, ratio.samples) == ("nvml", "measured", 5)
    unsupported = _facts(_sample(FakeNVML(power_supported=False)))
    assert "hardware.power_limit_watts" not in unsupported and "telemetry.throttle_ratio" not in unsupported


def test_traces_split_prompt_and_output_lengths():
    # azure_llm_2023_code_first2000.csv: ContextTokens sum 3,973,157 and GeneratedTokens sum 59,024 over 2,000
    # rows (awk); p99 is the 1,980th of the sorted column (nearest rank): 7,436 and 287.
    collected = summarize_trace(str(REAL / "azure_llm_2023_code_first2000.csv"), TraceOptions())
    facts = _facts(collected)
    assert facts["workload.prompt_len_mean"] == pytest.approx(3973157 / 2000)
    assert facts["workload.output_len_mean"] == pytest.approx(59024 / 2000)
    assert (facts["workload.prompt_len_p99"], facts["workload.output_len_p99"]) == (7436, 287)
    assert collected.facts["workload.prompt_len_mean"][1].metric == "ContextTokens"
    # mooncake_fast25_conversation_first610.jsonl: input_length sum 8,365,772, output_length sum 216,644 over
    # 610 requests; p99 the 604th sorted value: 87,172 and 1,019.
    facts = _facts(summarize_trace(str(REAL / "mooncake_fast25_conversation_first610.jsonl"), TraceOptions()))
    assert facts["workload.prompt_len_mean"] == pytest.approx(8365772 / 610)
    assert facts["workload.output_len_mean"] == pytest.approx(216644 / 610)
    assert (facts["workload.prompt_len_p99"], facts["workload.output_len_p99"]) == (87172, 1019)


def test_vllm_bench_means_and_token_rates():
    # vllm_bench_serve_result_qwen25vl3b.json: total_input_tokens 39800 and total_output_tokens 25472 over 199
    # completed; mean_itl_ms, mean_ttft_ms and output_throughput as written; 39800 prompt tokens over duration
    # 204.45408433000557 s.
    collected = summarize_trace(str(REAL / "vllm_bench_serve_result_qwen25vl3b.json"), TraceOptions())
    facts = _facts(collected)
    assert (facts["workload.prompt_len_mean"], facts["workload.output_len_mean"]) == (200, 128)
    assert facts["workload.itl_mean_ms"] == pytest.approx(34.434617229796345, abs=1e-6)
    assert facts["workload.ttft_mean_ms"] == pytest.approx(97.50969301155726, abs=1e-6)
    assert facts["workload.generation_tokens_per_s"] == pytest.approx(124.58542994370372, abs=1e-6)
    assert facts["workload.prompt_tokens_per_s"] == pytest.approx(39800 / 204.45408433000557, abs=1e-6)
    assert collected.facts["workload.prompt_tokens_per_s"][1].quality == "derived"


def test_generic_trace_split_only_when_the_columns_are(tmp_path):
    path = tmp_path / "requests.csv"
    path.write_text("in,out,all\n100,10,110\n300,30,330\n")
    split = _facts(summarize_trace(str(path), TraceOptions(format="csv", columns={"prompt": "in", "output": "out"})))
    assert (split["workload.prompt_len_mean"], split["workload.output_len_p99"]) == (200, 30)
    whole = _facts(summarize_trace(str(path), TraceOptions(format="csv", columns={"total": "all"})))
    assert "workload.prompt_len_mean" not in whole and whole["workload.seq_len_mean"] == 220


@pytest.mark.parametrize("name,content", [
    ("m.jsonl", '{"timestamp": 0, "input_length": Infinity, "output_length": 1}\n'),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": -1}\n'),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\ninf,ChatGPT,1,2,3,x\n"),
])
def test_traces_with_infinite_or_negative_values_are_exit_2(run_cli, tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    code, _, err = run_cli("collect", "--no-nvml", "--workload", str(path))
    assert code == 2 and f"{name}:" in err and "Traceback" not in err


CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


def _model(name):
    from kbopt.collectors.models import model_facts
    return model_facts(str(CONFIGS / name))


def test_deepseek_v3_config_mla_and_moe():
    # tests/data/configs/deepseek_v3_config.json (SOURCES.txt there): the MLA latent and rotary sizes, 256 routed
    # experts, 8 a token; weights FP8 by quantization_config. No KV heads x head_dim: MLA caches a latent.
    collected = _model("deepseek_v3_config.json")
    facts = _facts(collected)
    assert (facts["model.kv_lora_rank"], facts["model.qk_rope_head_dim"]) == (512, 64)
    assert (facts["model.qk_nope_head_dim"], facts["model.v_head_dim"]) == (128, 128)   # a prefill's decompressed heads
    assert (facts["model.num_experts"], facts["model.experts_per_token"], facts["model.num_layers"]) == (256, 8, 61)
    assert (facts["model.num_attention_heads"], facts["model.hidden_size"]) == (128, 7168)
    assert facts["model.weight_dtype"] == "fp8"
    assert "model.num_kv_heads" not in facts and "model.head_dim" not in facts
    # DeepSeek reports 37B activated parameters (671B total): the shape gives 37.55B.
    assert facts["model.active_params_billion"] == pytest.approx(37.55, abs=0.01)
    active = collected.facts["model.active_params_billion"][1]
    assert active.quality == "derived" and "estimate" in active.note
    facts_from_document(collected.document(), "collected")


def test_mixtral_qwen3_and_llama_configs():
    mixtral = _facts(_model("mixtral_8x7b_config.json"))
    assert (mixtral["model.num_experts"], mixtral["model.experts_per_token"]) == (8, 2)
    assert mixtral["model.active_params_billion"] == pytest.approx(12.88, abs=0.01)     # Mistral: 12.9B active
    qwen3 = _facts(_model("qwen3_4b_config.json"))
    assert qwen3["model.head_dim"] == 128                   # given, not 2560 / 32 = 80
    assert (qwen3["model.num_kv_heads"], qwen3["model.num_layers"]) == (8, 36)
    assert "model.num_experts" not in qwen3 and "model.active_params_billion" not in qwen3
    llama = _facts(_model("llama31_70b_config.json"))
    assert (llama["model.hidden_size"], llama["model.num_attention_heads"], llama["model.head_dim"]) == (8192, 64, 128)
    # a dense model's FFN width, which a LoRA adapter's MLP projections span (M-LORA-MEMORY); a MoE
    # model's goes to the expert width instead
    assert llama["model.intermediate_size"] == 28672 and "model.intermediate_size" not in mixtral


def test_moe_active_params_formula_gives_the_total_with_every_expert():
    import json as _json

    from kbopt.collectors.models import moe_active_params
    config = _json.loads((CONFIGS / "mixtral_8x7b_config.json").read_text())
    # With all 8 experts routed, the same count is the model's total: Mistral's 46.7B.
    assert moe_active_params({**config, "num_experts_per_tok": 8}) / 1e9 == pytest.approx(46.7, abs=0.01)
    assert moe_active_params({**config, "vocab_size": None}) is None


def test_model_catalog_rows_pass_their_shape_through():
    from kbopt.collectors.models import CATALOG_FIELDS, model_catalog, model_facts
    for entry in model_catalog():
        assert entry["source"].startswith("https://huggingface.co/") and entry["source"].endswith("/config.json")
        assert set(entry) - {"id", "match", "source"} <= set(CATALOG_FIELDS), entry["id"]
        collected = model_facts(entry["id"])              # each row's id finds that row (specific before general)
        assert collected.facts["model.num_layers"][1].source == f"catalog:{entry['id']}"
        facts_from_document(collected.document(), entry["id"])
    deepseek = _facts(model_facts("deepseek-ai/DeepSeek-V3-0324"))
    assert (deepseek["model.kv_lora_rank"], deepseek["model.active_params_billion"]) == (512, 37)
    assert "model.num_kv_heads" not in deepseek
    assert _facts(model_facts("meta-llama/Llama-3.1-8B-Instruct"))["model.hidden_size"] == 4096
    # every row gives its vocabulary, so a prefill's math leaves out the embedding and the lm_head (set 23 d6:
    # Qwen2.5-0.5B's tied 0.136 billion of 0.49 read as prefill math, 37% too much)
    small = _facts(model_facts("Qwen/Qwen2.5-0.5B-Instruct"))
    assert (small["model.vocab_size"], small["model.tied_embeddings"]) == (151936, True)
    assert all("vocab_size" in entry and "tied_embeddings" in entry for entry in model_catalog())


def test_a_block_fp8_moe_config_gives_the_expert_width_and_the_block(run_cli, tmp_path):
    # what kbopt needs to keep a tensor-parallel slice of each expert a whole number of blocks
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "num_hidden_layers": 94, "num_attention_heads": 64,
                                  "num_key_value_heads": 4, "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288,
                                  "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
                                  "torch_dtype": "bfloat16", "vocab_size": 151936, "tie_word_embeddings": False,
                                  "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    model = json.loads(out)["model"]
    assert code == 0 and model["moe_intermediate_size"] == 1536 and model["weight_block_size"] == 128
    assert (model["vocab_size"], model["tied_embeddings"]) == (151936, False)
    assert model["weight_dtype"] == "fp8" and model["num_experts"] == 128 and "intermediate_size" not in model


_LLAMA_8B_SHAPE = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "head_dim": 128, "hidden_size": 4096, "torch_dtype": "bfloat16", "vocab_size": 128256}


def _group(bits: int, kind: str, activations: bool) -> dict[str, object]:
    scheme = {"num_bits": bits, "type": kind, "symmetric": True, "strategy": "channel"}
    return {"targets": ["Linear"], "weights": scheme, "input_activations": dict(scheme, dynamic=True) if activations else None}


@pytest.mark.parametrize(("groups", "dtype", "runs_as"), [
    ({"group_0": _group(8, "float", True)}, "fp8", None),                   # RedHatAI *-FP8-dynamic
    ({"group_0": _group(4, "int", False)}, "int4", None),                   # *-quantized.w4a16
    ({"group_0": _group(8, "int", True)}, "int8", "int8_w8a8"),             # *-quantized.w8a8
    ({"group_0": _group(8, "int", False)}, "int8", "int8_weight_only"),
    ({"group_0": _group(4, "float", True)}, "fp4", "fp4"),                  # *-NVFP4 (W4A4)
])
def test_a_compressed_tensors_checkpoint_is_sized_in_its_own_weights(run_cli, tmp_path, groups, dtype, runs_as):
    # llm-compressor's checkpoints keep torch_dtype bfloat16 (the activations'): read as 16-bit weights,
    # an 8B FP8 model was sized at twice its memory and its KV pool short by 7.5 GiB
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**_LLAMA_8B_SHAPE, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": groups,
        "ignore": ["lm_head"], "kv_cache_scheme": None}}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    document = json.loads(out)
    assert code == 0 and document["model"]["weight_dtype"] == dtype
    assert document.get("serving", {}).get("quantization") == runs_as


def test_a_modelopt_checkpoint_reads_hf_quant_config_and_notes_its_kv_scales(run_cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_LLAMA_8B_SHAPE))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}))
    code, out, err = run_cli("collect", "--no-nvml", "--model", str(config))
    document = json.loads(out)
    assert code == 0 and document["model"]["weight_dtype"] == "fp4" and document["serving"]["quantization"] == "fp4"
    # the KV dtype is the engine's setting: the checkpoint's FP8 scales are said, not assumed in use
    assert "kv_cache_dtype" not in document["model"] and "FP8 (kv_cache_quant_algo) KV-cache scales" in out + err
    # an unknown scheme is not read as 16-bit weights in silence
    config.write_text(json.dumps({**_LLAMA_8B_SHAPE, "quantization_config": {"quant_method": "bitsandbytes\x1b[31m"}}))
    code, out, err = run_cli("collect", "--no-nvml", "--model", str(config))
    assert code == 0 and "a quantization scheme this reader does not know" in out + err and "\x1b" not in out + err


@pytest.mark.parametrize("vision", [
    # Qwen2.5-VL-7B-Instruct's vision_config (its report: a 675M-parameter ViT)
    {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "hidden_act": "silu", "out_hidden_size": 3584,
     "spatial_merge_size": 2, "num_heads": 16},
    # Qwen2-VL-7B-Instruct's: embed_dim is the ViT's width, hidden_size the language model's
    {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "hidden_act": "quick_gelu", "hidden_size": 3584,
     "spatial_merge_size": 2, "num_heads": 16},
])
def test_a_vision_config_gives_the_encoders_size_and_its_patches_a_token(run_cli, tmp_path, vision):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**_LLAMA_8B_SHAPE, "model_type": "qwen2_5_vl", "vision_config": vision}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    model = json.loads(out)["model"]
    assert code == 0 and model["vision"] is True and model["vision_patches_per_token"] == 4
    assert model["vision_params_billion"] == pytest.approx(0.675, abs=0.005)


def test_the_hosts_memory_is_read_from_meminfo_and_nothing_else(tmp_path):
    from kbopt.collectors.nvml import host_memory_gib
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2113309724 kB\nMemFree:        1000 kB\n")
    assert host_memory_gib(str(meminfo)) == pytest.approx(2113309724 / 2**20)
    for garbage in ("MemTotal: lots kB\n", "MemTotal: 12 MB\n", "\x00\xff", ""):
        meminfo.write_bytes(garbage.encode("latin-1"))
        assert host_memory_gib(str(meminfo)) is None
    assert host_memory_gib(str(tmp_path / "absent")) is None


def test_a_gemma3_config_gives_its_sliding_layers_and_its_encoders_patches_a_token(run_cli, tmp_path):
    # Gemma 3 27B: 52 of 62 layers keep a 1,024-token window (every 6th is global); without them the
    # pool was sized at every layer's full context (set 26: 100 sequences where 150 fit). SigLIP runs
    # (896 / 14)^2 = 4,096 patches an image, pooled to 256 tokens: 16 a token.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "gemma3", "mm_tokens_per_image": 256,
        "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62, "num_attention_heads": 32,
                        "num_key_value_heads": 16, "head_dim": 128, "hidden_size": 5376, "sliding_window": 1024,
                        "sliding_window_pattern": 6, "vocab_size": 262208, "torch_dtype": "bfloat16"},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                          "num_hidden_layers": 27, "image_size": 896, "patch_size": 14, "hidden_act": "gelu_pytorch_tanh"}}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    model = json.loads(out)["model"]
    assert code == 0 and (model["sliding_window"], model["sliding_window_layers"]) == (1024, 52)
    assert model["vision_patches_per_token"] == 16 and model["vision_params_billion"] == pytest.approx(0.411, abs=0.01)


@pytest.mark.parametrize(("extra", "expected"), [
    ({"layer_types": ["sliding_attention", "full_attention"] * 16, "sliding_window": 128}, (128, 16)),   # gpt-oss
    ({"sliding_window": 4096, "use_sliding_window": False}, None),                                       # Qwen2.5
    ({"sliding_window": 4096, "model_type": "mistral"}, (4096, 32)),                                     # Mistral-7B-v0.1
])
def test_a_sliding_window_is_read_only_with_the_layers_it_applies_to(run_cli, tmp_path, extra, expected):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**_LLAMA_8B_SHAPE, **extra}))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(config))
    model = json.loads(out)["model"]
    assert code == 0 and (None if "sliding_window" not in model else (model["sliding_window"], model["sliding_window_layers"])) == expected


@pytest.mark.parametrize(("name", "published"), [
    ("llama31_70b_config.json", 70.6), ("qwen3_4b_config.json", 4.0), ("mixtral_8x7b_config.json", 46.7),
    ("deepseek_v3_config.json", 671)])
def test_a_full_config_gives_the_parameter_count_its_model_card_publishes(run_cli, name, published):
    # set 26: a complete config.json was read with no params_billion, so nothing was sized by memory
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(CONFIGS / name))
    assert code == 0 and json.loads(out)["model"]["params_billion"] == pytest.approx(published, rel=0.02)


def test_a_config_without_its_name_is_named_by_its_hub_folder_or_its_folder(run_cli, tmp_path):
    config = json.loads((CONFIGS / "qwen3_4b_config.json").read_text())
    del config["_name_or_path"]
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-4B" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(snapshot / "config.json"))
    assert code == 0 and json.loads(out)["model"]["name"] == "Qwen/Qwen3-4B"
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, _ = run_cli("collect", "--no-nvml", "--model", str(tmp_path / "config.json"))
    assert code == 0 and json.loads(out)["model"]["name"] == str(tmp_path.resolve())
