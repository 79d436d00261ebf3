"""What to collect next: the input facts the undecided rules wait on, without those that cannot
apply to this deployment, ranked by what knowing each could change in the advice."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kbopt.engine.advice.explain import FinalFacts, NotEvaluated
from kbopt.engine.evaluators.closures import catalog_condition
from kbopt.engine.pack.rule import Pack, Recommend, Reject, Rule, Warn

# What a waiting rule could change once the fact is known, and so how much the fact weighs: a
# strategy recommended or rejected outweighs a warning or a number of the performance model, which
# outweighs a step of the diagnosis that feeds them (those also wait, and are counted there).
ADVICE_WEIGHT, ESTIMATE_WEIGHT, STEP_WEIGHT = 3, 2, 1


@dataclass(frozen=True)
class Wanted:
    fact: str
    rules: int        # undecided rules waiting on it
    weight: int       # what they could change: ADVICE_WEIGHT per strategy rule, ESTIMATE_WEIGHT per number or warning, ...

    def to_dict(self) -> dict[str, object]:
        return {"fact": self.fact, "rules": self.rules, "weight": self.weight}


def facts_to_collect(pack: Pack, waiting: Sequence[NotEvaluated], final: FinalFacts) -> tuple[Wanted, ...]:
    """Each missing input fact once, heaviest first; a fact whose vocabulary `applies_when` is false
    on these facts (MLA's latent rank for a model with GQA heads, MIG sizes on a whole GPU, the mean
    sequence length beside the prompt and output means) is left out. Unknown applies."""
    rules = pack.by_id()
    counts: dict[str, int] = {}
    weights: dict[str, int] = {}
    for item in waiting:
        weight = _weight(pack, rules[item.rule])
        for path in item.missing:
            counts[path] = counts.get(path, 0) + 1
            weights[path] = weights.get(path, 0) + weight
    wanted = [Wanted(path, counts[path], weights[path]) for path in counts if _applies(pack, path, final)]
    return tuple(sorted(wanted, key=lambda w: (-w.weight, -w.rules, w.fact)))


def _weight(pack: Pack, rule: Rule) -> int:
    if any(isinstance(c, (Recommend, Reject)) for c in rule.then):
        return ADVICE_WEIGHT
    vocabulary = pack.kb.vocabulary
    if any(isinstance(c, Warn) for c in rule.then) or any(
            (spec := vocabulary.get(path)) is not None and spec.estimate for path in rule.derives):
        return ESTIMATE_WEIGHT
    return STEP_WEIGHT


def _applies(pack: Pack, path: str, final: FinalFacts) -> bool:
    spec = pack.kb.vocabulary.get(path)
    text = spec.applies_when if spec is not None else None
    if not text:
        return True
    return catalog_condition(pack, text)(final.lookup) is not False
