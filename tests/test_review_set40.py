"""Expert review set 40 (TensorRT-LLM 1.1 serving a 70B FP8 on 4 H100s, TGI 3.3.4 on an A10G, vLLM 0.12
with 32k contexts on an H200, a 1B model at 300 requests a second on vLLM 0.13): what the advice must
now read. The deployments and the reviewer's notes are in tests/data/review40."""
from __future__ import annotations

from conftest import review_deployment

DATA = "review40"


def test_d1_no_max_utilization_where_the_batch_cap_is_what_queues_requests(pack):
    # 126 running under --max_batch_size 128: the cap queues them, not the admission policy, and
    # pausing requests under MAX_UTILIZATION has crashed the PyTorch backend (F1)
    advice, script = review_deployment(pack, DATA, "d1")
    assert all(s.id != "admission_policy" for s in advice.strategies)
    assert "MAX_UTILIZATION" not in script


def test_d4_more_api_servers_where_most_of_the_first_token_is_spent_outside_the_engine(pack):
    # 90 of 110 ms outside the engine's model at 300 requests a second, a 620 ms p99 against 250:
    # the absolute 100 ms gate left --api-server-count out (F3)
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.ttft_outside_engine_share"] > 0.5
    assert "--api-server-count 4" in script
