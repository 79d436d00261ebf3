"""A large Prometheus exposition like one node's federated scrape: dcgm-exporter on 8 GPUs and
vLLM serving several models, among the runtime, HTTP and latency families kbopt never reads.
Shared by tests/test_prometheus_filter.py and benchmarks/bench.py."""
from __future__ import annotations

import random

_BUCKETS = ("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75",
            "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf")
_DCGM_READ = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
              "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
              "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")


def _histogram(out: list[str], name: str, labels: str, rng: random.Random) -> None:
    count = 0
    for bound in _BUCKETS:
        count += rng.randint(0, 50)
        out.append(f'{name}_bucket{{{labels},le="{bound}"}} {count}.0')
    out.append(f"{name}_sum{{{labels}}} {count * rng.uniform(0.01, 2):.4f}")
    out.append(f"{name}_count{{{labels}}} {count}.0")


def synthetic_exposition(series: int = 50_000, seed: int = 7) -> str:
    """About `series` series, most of them in families kbopt never reads."""
    rng = random.Random(seed)
    out: list[str] = []
    gpus = [(str(g), f'gpu="{g}",UUID="GPU-{g:08x}",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
                     f'Hostname="node-1"') for g in range(8)]
    for field in _DCGM_READ + tuple(f"DCGM_FI_DEV_UNREAD_FIELD_{i}" for i in range(60)):
        out += [f"# HELP {field} {field} (synthetic).", f"# TYPE {field} gauge"]
        out += [f"{field}{{{labels}}} {rng.uniform(0, 100):.3f}" for _, labels in gpus]
    models = [f"model-{m}" for m in range(4)]   # four replicas behind one federated scrape
    for family, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                         ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:num_preemptions_total", "counter"),
                         ("vllm:request_success_total", "counter")):
        out += [f"# HELP {family} {family} (synthetic).", f"# TYPE {family} {kind}"]
        out += [f'{family}{{model_name="{m}"}} {rng.randint(0, 64)}.0' for m in models]
    for family in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                   "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
                   "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                   "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                   "vllm:request_inference_time_seconds", "vllm:iteration_tokens_total"):
        out += [f"# HELP {family} {family} (synthetic).", f"# TYPE {family} histogram"]
        for m in models:
            _histogram(out, family, f'model_name="{m}"', rng)
    out += ["# HELP http_request_size_bytes Request sizes.", "# TYPE http_request_size_bytes summary"]
    for handler in range(40):
        out += [f'http_request_size_bytes{{handler="/v1/{handler}",quantile="{q}"}} {rng.random():.5f}'
                for q in ("0.5", "0.9", "0.99")]
    out += ["# HELP http_requests_total Requests by handler, method and status.", "# TYPE http_requests_total counter"]
    out += [f'http_requests_total{{handler="/v1/{h}",method="POST",status="{200 + h}"}} {rng.randint(0, 10**6)}.0'
            for h in range(40)]
    # The bulk: one latency histogram per route and tenant, which no rule reads.
    out += ["# HELP http_request_duration_seconds Latency by route and tenant.",
            "# TYPE http_request_duration_seconds histogram"]
    so_far = sum(1 for line in out if line[0] != "#")
    for tenant in range(max(0, series - so_far) // (len(_BUCKETS) + 2)):
        _histogram(out, "http_request_duration_seconds", f'route="/v1/{tenant % 40}",tenant="t{tenant}"', rng)
    return "\n".join(out) + "\n"
