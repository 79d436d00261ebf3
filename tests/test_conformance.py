"""One conformance corpus (OPA's pattern): cases as data, run alike on every evaluator and on the
pack in each of the forms a command meets it in.

The cases: every built-in rule's examples, every IR fixture's examples (a pack of that fixture
alone), every bundled example and review-set deployment, and random documents over the whole
vocabulary. The forms: the pack built from the rule files, and the same pack written to the
compiled-pack cache and read back (what a second `kbopt advise` runs on). Each case runs on each
evaluator, the two forms shared between them, and all must agree:

- byte-identical advice JSON;
- what fired is what the language's definition says of the final facts: a rule fired exactly
  where the tree walk (engine/lang/logic.py, the specification the closures and durable_rules'
  network compile) decides its condition true, and every derived value is one its rule's
  expression gives by the tree walk;
- a rule example's expectations (fires, derived values, chosen strategies).
"""
from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.authoring.examples import expectation_failures
from kbopt.engine.evaluators import available_evaluators
from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, evaluate, value_of
from kbopt.engine.pack import cache
from kbopt.engine.pack.files import PackDir, read_parameters
from kbopt.engine.pack.loader import build_pack, load_pack, load_rule_text
from kbopt.engine.pack.rule import Derive, Example, Pack, Rule
from kbopt.errors import EvaluationError, FactsError
from kbopt.kb.facts import Facts, facts_from_document, load_facts

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILT = load_pack()
READ_BACK = cache.decode(cache.encode(BUILT))
# the cache holds what lasts across processes (the pack's Compiled data), not its runtime
assert READ_BACK.rules == BUILT.rules and READ_BACK is not BUILT
# A bundled example runs on every evaluator over both forms; every other case on each evaluator
# over one form, the forms crossed (durable_rules on the built pack, the reference on the read-back
# one), so that one comparison holds both the evaluators and the forms to the same advice.
RUNS = [(evaluator, form) for evaluator in available_evaluators() for form in ("built", "read back")]
CROSSED = [(evaluator, form) for evaluator, form in zip(available_evaluators(), ("built", "read back"), strict=False)]
if len(CROSSED) == 1:
    CROSSED = RUNS
# Random GPUs, coherent in name, vendor and compute capability (the facts checks refuse others).
COHERENT_GPUS = (("NVIDIA L4", "nvidia", "8.9"), ("NVIDIA A100-SXM4-40GB", "nvidia", "8.0"),
                 ("Tesla T4", "nvidia", "7.5"), ("something else", "nvidia", "9.0"), ("AMD Instinct MI300X", "amd", None))


@dataclass(frozen=True)
class Case:
    name: str
    document: dict[str, Any]
    rule: Rule | None = None            # a rule example's rule, whose expectations hold too
    example: Example | None = None
    fixture: Path | None = None         # an IR fixture: a pack of that rule alone


def _fixture_rule(path: Path) -> Rule:
    shared = read_parameters(PackDir("fixtures", HERE / "fixtures", "fixtures", ()), problems := [])
    assert not problems, problems
    return load_rule_text(path.read_text(encoding="utf-8"), f"fixtures/ir/{path.name}", shared=shared)


def _random_documents(count: int) -> Iterator[dict[str, Any]]:
    """Documents over the whole vocabulary, coherent enough to pass the facts checks mostly."""
    rng = random.Random(20261202)
    vocabulary = BUILT.kb.vocabulary
    for _ in range(count):
        document: dict[str, Any] = {}
        for spec in vocabulary.facts.values():
            if spec.derived or spec.quality_of or rng.random() < 0.35:
                continue
            section, name = spec.path.split(".")
            if spec.type == "ratio":
                value: Any = round(rng.random(), 3)
            elif spec.type == "integer":
                value = rng.choice([v for v in (1, 2, 4, 8, 32, 128, 512, 513, 4096) if spec.max is None or v <= spec.max])
            elif spec.type == "number":
                value = round(rng.uniform(0.5, 5000 if spec.max is None else min(5000, spec.max)), 1)
            elif spec.type == "bool":
                value = rng.random() < 0.5
            elif spec.type == "enum":
                value = rng.choice(spec.values)
            elif spec.type == "list":
                value = rng.sample(spec.values, rng.randint(0, len(spec.values)))
            elif spec.type == "version":
                value = rng.choice(["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0"])
            elif spec.pattern:     # an engine's version
                value = rng.choice(["0.10.2", "0.11.0", "0.12.0", "0.5.0rc2", "1.1.0", "3.3.0"])
            else:
                value = rng.choice(["NVIDIA L4", "NVIDIA A100-SXM4-40GB", "Tesla T4", "something else"])
            document.setdefault(section, {})[name] = value
        workload = document.get("workload", {})
        for low, high in (("seq_len_mean", "seq_len_max"), ("seq_len_p99", "seq_len_max"),
                          ("concurrency_mean", "concurrency_peak"), ("arrival_rate_per_s", "arrival_rate_peak_per_s")):
            if low in workload and high in workload and workload[low] > workload[high]:
                workload[low], workload[high] = workload[high], workload[low]
                if isinstance(workload[low], int) and not isinstance(workload[high], int):
                    workload[high] = math.ceil(workload[high])    # an integer maximum stays an integer
        hardware = document.get("hardware", {})
        name, vendor, capability = rng.choice(COHERENT_GPUS)
        for key, value in (("gpu_name", name), ("vendor", vendor), ("compute_capability", capability)):
            if key in hardware:
                hardware[key] = value
        if hardware.get("compute_capability", "") is None:
            del hardware["compute_capability"]
        yield document


def _corpus() -> list[Case]:
    cases = [Case(f"{rule.id}/{example.name}", example.facts, rule, example)
             for rule in BUILT.rules for example in rule.examples]
    for path in sorted((HERE / "fixtures" / "ir").glob("*.yaml")):
        rule = _fixture_rule(path)
        cases += [Case(f"fixture {path.stem}/{example.name}", example.facts, rule, example, path) for example in rule.examples]
    deployments = sorted((ROOT / "examples").glob("*.json")) + sorted(HERE.glob("data/review*/*.json"))
    cases += [Case(str(path.relative_to(ROOT)), json.loads(path.read_text())) for path in deployments]
    # the README's command tries 100 (KBOPT_FUZZ unset); CI's fuzz step, at KBOPT_FUZZ=short, 300
    count = 300 if os.environ.get("KBOPT_FUZZ") in ("short", "long") else 100
    cases += [Case(f"random {index}", document) for index, document in enumerate(_random_documents(count))]
    return cases


CORPUS = _corpus()


def _forms(case: Case) -> dict[str, Pack]:
    if case.fixture is None:
        return {"built": BUILT, "read back": READ_BACK}
    built = build_pack([case.rule], "fixture")
    return {"built": built, "read back": cache.decode(cache.encode(built))}


def _against_the_definition(pack: Pack, facts: Facts, fired: set[str], derived: dict[str, Any]) -> list[str]:
    """Where the run disagrees with the tree walk on its final facts: a rule fired that the
    definition decides not true, or not fired that it decides true; a derived value no firing
    rule's expression gives."""
    values = {**facts.engine_values(pack.kb.vocabulary), **derived}

    def lookup(path: str) -> tuple[str, Any]:
        if path in values:
            return KNOWN, values[path]
        return (ABSENT, None) if path.startswith("derived.") else (MISSING, None)
    problems = []
    given = {derive.path: [] for rule in pack.rules for derive in rule.then if isinstance(derive, Derive)}
    for rule in pack.rules:
        decided = evaluate(rule.fire_condition, lookup)
        if (decided is True) != (rule.id in fired):
            problems.append(f"{rule.id}: {'fired' if rule.id in fired else 'not fired'} where the definition decides {decided}")
        if rule.id in fired:
            for derive in (c for c in rule.then if isinstance(c, Derive)):
                try:
                    given[derive.path].append(value_of(derive.value, lookup))
                except Exception as error:
                    given[derive.path].append(type(error).__name__)
    for path, value in derived.items():
        if path in given and given[path] and not any(v == value or (v != v and value != value) for v in given[path]):
            problems.append(f"{path} = {value!r}, where its rules' expressions give {given[path]!r}")
    return problems


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_conformance(case: Case):
    try:
        facts = facts_from_document(case.document, "facts")
    except FactsError:
        assert case.rule is None, f"{case.name}: the example's facts are refused"
        return      # a random document refused before any rule runs: the facts checks' business
    forms = _forms(case)
    said = {}
    for evaluator, form in (RUNS if case.name.startswith("examples/") else CROSSED):
        try:
            advice = advise(facts, forms[form], evaluator)
        except EvaluationError as error:
            # a random document past what the model computes (a pool of 2^54 tokens from TP 4096 x an
            # MLA rank of 1): the evaluators agree when they stop at the same rule with the same words
            assert case.rule is None and case.name.startswith("random"), f"{case.name}: {error}"
            said[(evaluator, form)] = f"error: {error}"
            continue
        said[(evaluator, form)] = advice.to_json()
        if len(said) == 1:      # the others must say the same, byte for byte
            fired = {f.rule for f in advice.fired}
            problems = _against_the_definition(forms[form], facts, fired, dict(advice.derived))
            assert not problems, f"{case.name} ({evaluator}, {form} pack): " + "; ".join(problems)
        if case.rule is not None and case.example is not None:
            failures = expectation_failures(case.rule, case.example, advice)
            assert not failures, f"{case.name} at {case.rule.file}:{case.example.line} ({evaluator}): " + "; ".join(failures)
    first = next(iter(said.values()))
    assert all(text == first for text in said.values()), f"{case.name}: the runs disagree: {sorted(said)}"


def test_the_corpus_holds_every_kind_of_case():
    kinds = {("rule" if c.rule and not c.fixture else "fixture" if c.fixture else "random" if c.name.startswith("random")
              else "deployment") for c in CORPUS}
    assert kinds == {"rule", "fixture", "deployment", "random"}
    assert sum(1 for c in CORPUS if c.rule and not c.fixture) == sum(len(r.examples) for r in BUILT.rules)
    for runs in (RUNS, CROSSED):
        assert {e for e, _ in runs} == set(available_evaluators()) and {f for _, f in runs} == {"built", "read back"}


def test_a_run_that_disagrees_with_the_definition_is_caught():
    """The definition check is not vacuous: a rule said to fire where its condition is false, and a
    derived value its expression does not give, are both named."""
    facts = load_facts(ROOT / "examples" / "l4-8b-bf16-vllm.json")
    advice = advise(facts, BUILT, "reference")
    fired = {f.rule for f in advice.fired}
    assert not _against_the_definition(BUILT, facts, fired, dict(advice.derived))
    derives = {c.path for r in BUILT.rules for c in r.then if isinstance(c, Derive)}
    derived_path = next(p for p, v in advice.derived.items() if p in derives and type(v) is float)
    wrong = {**advice.derived, derived_path: advice.derived[derived_path] * 1.5 + 1}
    assert any(derived_path in p for p in _against_the_definition(BUILT, facts, fired, wrong))
    not_fired = next(r.id for r in BUILT.rules if r.id not in fired)
    assert any(not_fired in p for p in _against_the_definition(BUILT, facts, fired | {not_fired}, dict(advice.derived)))
