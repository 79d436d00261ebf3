"""The prefilter drops the lines of families kbopt never reads: what the collector extracts must
not change, on every real exposition, a 50k-series synthetic one, and the parser's edge cases."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from synthetic_exposition import synthetic_exposition

from kbopt.collectors import prometheus
from kbopt.collectors.prometheus import facts_from_scrapes, parse, prefilter
from kbopt.errors import KboptError

REAL = sorted((Path(__file__).resolve().parent / "data" / "real").glob("*.prom"))


def _extracted(scrape, gpu: int | None):
    """Everything the collector gives, or the error it raises."""
    try:
        collected = facts_from_scrapes(scrape, gpu=gpu)
    except KboptError as error:
        return "error", str(error)
    return collected.facts, collected.notes


def _same(text: str, gpus=(None,)) -> None:
    try:
        whole = parse(text, "t", filtered=False)
    except KboptError as error:
        with pytest.raises(KboptError, match=re.escape(str(error))):
            parse(text, "t")
        return
    kept = parse(text, "t")
    # Every sample of a family the collector reads is there, the same; the rest are a subset.
    for name, rows in whole.samples.items():
        if prometheus._wanted(name):
            assert kept.samples.get(name) == rows, name
    for name, rows in kept.samples.items():
        assert all(row in whole.samples[name] for row in rows), name
    for gpu in gpus:
        assert _extracted(kept, gpu) == _extracted(whole, gpu)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_expositions_give_the_same_facts(path):
    text = path.read_text(encoding="utf-8")
    _same(text)
    # ... and as a second scrape over a window (rates, histogram differences).
    first = parse(text, "a", filtered=False)
    assert facts_from_scrapes(first, parse(text, "b", filtered=False)).facts == \
        facts_from_scrapes(parse(text, "a"), parse(text, "b")).facts


def test_a_50k_series_exposition_gives_the_same_facts_from_a_fraction_of_its_lines():
    text = synthetic_exposition(50_000)
    _same(text, gpus=(None, *range(8)))
    assert prefilter(text).count("\n") < text.count("\n") / 20


def test_every_metric_name_the_module_mentions_is_read():
    """READ_FAMILIES is written by hand: a mapper reading a name missing from it would get no
    samples. Every string in the module that looks like one of the engines' metric names is in it."""
    tree = ast.parse(Path(prometheus.__file__).read_text(encoding="utf-8"))
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"(DCGM_FI_|vllm:|sglang:|tgi_|nv_)[A-Za-z0-9_:]+", node.value)
             and not node.value.endswith("_")}
    assert len(names) > 25
    assert {name for name in names if not prometheus._wanted(name)} == set()


PREFIX = """\
# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# HELP vllm:num_requests_running_by_lora Not read, its name starts like a read one.
# TYPE vllm:num_requests_running_by_lora gauge
vllm:num_requests_running_by_lora{model_name="m"} 99.0
"""


def test_a_family_whose_name_starts_like_a_read_one_is_dropped():
    kept = prefilter(PREFIX)
    assert "vllm:num_requests_running{" in kept and "running_by_lora{" not in kept
    assert parse(PREFIX, "t").samples["vllm:num_requests_running"] == [({"model_name": "m"}, 3.0)]
    _same(PREFIX)
    # The other way round: the read family's name is the longer one.
    text = PREFIX.replace("_by_lora", "").replace("vllm:num_requests_running", "vllm:num_requests", 3)
    _same(text)


def test_comments_empty_lines_and_unknown_types():
    text = """
# a comment, then empty lines

# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization.
# TYPE DCGM_FI_DEV_GPU_UTIL gauge

DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="NVIDIA L4"} 40
# TYPE DCGM_FI_DEV_SOMETHING gaugehistogram
DCGM_FI_DEV_SOMETHING{gpu="0",modelName="NVIDIA L4"} 1
# TYPE DCGM_FI_DEV_POWER_USAGE info
DCGM_FI_DEV_POWER_USAGE{gpu="0",modelName="NVIDIA L4"} 70
\t  DCGM_FI_DEV_FB_USED{gpu="0"}   100   1700000000000
# EOF
"""
    _same(text)
    assert "SOMETHING" not in prefilter(text)


def test_counters_histograms_and_summaries_keep_their_suffixes():
    text = """\
# TYPE node_cpu_seconds counter
node_cpu_seconds{cpu="0"} 5
# TYPE vllm:num_preemptions counter
vllm:num_preemptions 4
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop"} 10
vllm:request_success_created{finished_reason="stop"} 1.7e9
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 2
vllm:time_to_first_token_seconds_sum 0.3
vllm:time_to_first_token_seconds_count 2
vllm:time_to_first_token_seconds_created 1.7e9
# TYPE vllm:e2e_request_latency_seconds summary
vllm:e2e_request_latency_seconds{quantile="0.5"} 1
vllm:e2e_request_latency_seconds_sum 3
"""
    kept = parse(text, "t").samples
    assert kept["vllm:num_preemptions_total"] == [({}, 4.0)]          # renamed under its # TYPE line
    assert "vllm:time_to_first_token_seconds_sum" in kept and "vllm:e2e_request_latency_seconds_sum" not in kept
    _same(text)


def test_labels_of_unread_series_still_count():
    """GPUs, MIG instances and the GPU's name come from the labels of any series."""
    text = """\
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="NVIDIA A100"} 50
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",modelName="NVIDIA A100"} 1400
DCGM_FI_DEV_SM_CLOCK{gpu="1",modelName="NVIDIA A100-X"} 1400
DCGM_FI_DEV_SM_CLOCK{gpu="1",GPU_I_ID="2",modelName="NVIDIA A100-X"} 1400
"""
    _same(text, gpus=(None, 0, 1, 5))
    kept = parse(text, "t")
    assert _extracted(kept, 5)[0] == "error"                       # no GPU 5: both GPUs still seen
    assert kept.values("DCGM_FI_DEV_SM_CLOCK", gpu="1")              # a series brought GPU 1's name
    assert facts_from_scrapes(kept, gpu=1).facts["hardware.mig_enabled"][0] is True


def test_only_unread_families_are_the_same_errors():
    _same("# TYPE node_load1 gauge\nnode_load1 0.5\nnode_load5 0.4\n")       # no engine metrics
    _same("# TYPE DCGM_FI_DEV_SM_CLOCK gauge\nDCGM_FI_DEV_SM_CLOCK 1\n")     # an exporter, nothing read
    _same("# a comment only\n")                                                # no metrics
    with pytest.raises(KboptError, match="not Prometheus text exposition"):
        parse("this is not { exposition\n", "t")


def test_what_the_filter_is_not_sure_of_goes_to_the_parser_whole():
    for text in ('{__name__="vllm:num_requests_running"} 1\n',                 # name in the labels
                 '# TYPE "vllm.utf8" gauge\n"vllm.utf8" 1\n',                 # quoted (UTF-8) name
                 "# TYPE vllm:num_requests_running\n",                       # TYPE without a type
                 # a family declared twice: dropping `other` would merge its two declarations
                 "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions 1\n"
                 "# TYPE other gauge\nother 1\n# HELP vllm:num_preemptions again\nvllm:num_preemptions 2\n"):
        assert prefilter(text) is text
    _same("# TYPE vllm:num_preemptions counter\nvllm:num_preemptions 1\n"
          "# TYPE other gauge\nother 1\n# HELP vllm:num_preemptions again\nvllm:num_preemptions 2\n")
    # A sample that closes an unread family must not join the read family kept before it.
    text = "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions 1\n# TYPE other gauge\nother 1\nvllm:num_preemptions 2\n"
    _same(text)
