"""Expert review set 5: four more deployments (tests/data/review5, each with today's launch command)
and what the advice must read for them."""
from __future__ import annotations

from conftest import review_deployment, script_flag, script_flags


def _deployment(pack, name: str):
    return review_deployment(pack, "review5", name)


def test_d10_sglang_speculating_without_a_cap_runs_48_and_the_cap_is_raised_first(pack):
    # SGLang 0.5, DeepSeek-R1 on 8 B200s with MTP and no --max-running-requests: SGLang caps the
    # running requests at 48 (server_args.py@0.5.1:618-620); 48 run, 40 wait, the KV cache is 16% used.
    advice, script = _deployment(pack, "d10")
    assert advice.derived["derived.batch_cap_replica"] == 48
    first = advice.strategies[0]
    assert first.id == "memory_budget" and "S-BATCH-CAP-RAISE" in first.recommended_by
    assert "scale_out" not in {s.id for s in advice.strategies}
    assert "--max-running-requests" in script
    # SGLang steps a batch above --cuda-graph-max-bs eagerly; on a B200 it captures up to 512 by
    # default (cuda_graph_runner.py@0.5.0rc2:185-190), which covers a rank's cap, so the flag is not
    # set (a value under 512 would shrink the capture: set 15).
    per_rank = first.params["max_num_seqs"]
    assert per_rank <= advice.derived["derived.cuda_graph_max_batch"] == 512
    assert "--cuda-graph-max-bs" not in script_flags(script)
    assert f"the cap of {per_rank} is within the batches the engine captures already" in script


def test_d12_tgi_keeps_the_chunk_budget_that_meets_the_itl_objective_and_drops_speculation(pack):
    # TGI 3.3 on an A10G: a prefill budget of about 300 tokens meets the 150 ms ITL p99 (288: 147 ms
    # after the plan, the chunk's math counted over the decoder's parameters, not the embeddings);
    # --speculate would turn chunking off, so it is rejected, and today's limits stay in the script.
    advice, script = _deployment(pack, "d12")
    assert any(r.id == "speculative_decoding" and "R-TGI-SPECULATE-NO-CHUNKING" in r.because for r in advice.rejected)
    assert 256 <= int(script_flag(script, "--max-batch-prefill-tokens") or 0) <= 320
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.after is not None and itl.after <= 150
    assert "--speculate" not in script.split("exec")[0].split("args=(")[1]
    assert "--max-input-tokens 6144" in script
