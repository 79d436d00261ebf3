"""Expert review set 19: six deployments a reviewer wrote (tests/data/review19, each with today's
launch command and NOTES.md's hand arithmetic), and what the advice must now read for the defects
it found."""
from __future__ import annotations

import pytest
from conftest import review_deployment, strategy_of

DATA = "review19"


def test_d1_vllms_acceptance_rate_is_accepted_over_drafted(pack):
    # Llama-3.3-70B FP8 on 2 H100s with EAGLE-3 over 3 drafts and vLLM's measured 55%: accepted over
    # drafted, so a verify step yields 1 + 3 x 0.55 = 2.65 tokens (2.02 read as each draft's chance),
    # and the modelled ITL meets the 9 ms measured instead of reading 11.1 ms.
    advice, _ = review_deployment(pack, DATA, "d1")
    d = advice.derived
    assert d["derived.spec_tokens_per_step"] == pytest.approx(1 + 3 * advice.facts["telemetry.spec_acceptance_rate"])
    assert "M-SPEC-TOKENS-FROM-RATE" in {f.rule for f in advice.fired}
    assert abs(d["derived.itl_model_ratio"] - 1) < abs(1 / 1.23 - 1)


def test_d5_the_first_token_waits_for_what_tensorrt_llms_default_admission_reserves(pack):
    # Llama-3.1-8B FP8 on an L40S, GUARANTEED_NO_EVICT with clients sending max_tokens 4,096: a
    # 227,616-token pool admits 227,616 / (2,200 + 4,096) = 36, so of 38 running and 25 waiting the
    # rest wait for a slot: the model's TTFT reads about the 9.8 s measured (Little: 25 / 2.7 a
    # second = 9.3 s), not 151 ms; admitting by use (MAX_UTILIZATION) drains it on the one GPU, and
    # no second replica is asked for.
    advice, _ = review_deployment(pack, DATA, "d5")
    assert 7000 < advice.derived["derived.ttft_expected_ms"] < 12000
    admission = strategy_of(advice, "admission_policy")
    ttft = next(g for g in admission.expected if g.metric == "ttft_expected_ms")
    assert ttft.after < 1000 < ttft.before
    assert strategy_of(advice, "scale_out") is None


def test_d6_the_script_says_its_projection_is_the_whole_plan_with_the_checkpoint_it_cannot_load(pack):
    # Llama-3.1-8B AWQ on an A10G under TGI: "after the plan about 1,050 ms: meets it" counted the
    # INT8 W8A8 checkpoint the script cannot load; the header now says so beside each projection.
    _, script = review_deployment(pack, DATA, "d6")
    missed = [line for line in script.splitlines() if line.startswith("# missed today:")]
    assert missed and all("that is the whole plan, quantization[int8] included, which this script does not apply" in line
                          for line in missed if "after the plan" in line)


def test_d2_a_running_server_whose_max_length_the_modelled_pool_cannot_hold_is_named(pack):
    # Qwen3-30B-A3B at --max-model-len 131072 on an H100: vLLM would not start without room for one
    # such sequence, so a modelled pool of about 121k tokens is short of the engine's, and says so.
    advice, _ = review_deployment(pack, DATA, "d2")
    assert advice.derived["derived.kv_pool_tokens"] < advice.facts["serving.max_model_len"]
    assert any(w.rule == "W-POOL-BELOW-MAX-MODEL-LEN" for w in advice.warnings)


def test_d5_a_client_limit_near_the_longest_outputs_is_offered_beside_max_utilization(pack):
    # clients send max_tokens 4,096 where outputs reach 1,500 at p99: at that limit the default
    # admission starts about 61 (227,616 / 3,700) with none of MAX_UTILIZATION's pauses
    advice, _ = review_deployment(pack, DATA, "d5")
    assert advice.derived["derived.max_batch_at_output_p99"] == 227616 // (2200 + 1500)
    admission = strategy_of(advice, "admission_policy")
    assert any(c.rule == "C-TRTLLM-MAX-TOKENS-ABOVE-OUTPUTS" and "about 61 run at once" in c.text for c in admission.caveats)
