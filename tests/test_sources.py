"""The sources catalog: every `source:` entry resolves, and readers see labels, not file syntax."""
from __future__ import annotations

import pathlib

import pytest

from kbopt.kb import citations
from kbopt.kb.knowledge import seed_claims, source_catalog

HERE = pathlib.Path(__file__).parent
PACKS = ["examples/packs/vllm-tuning"]


def _cited(pack):
    return {entry for rule in pack.rules for entry in rule.sources}


def test_every_source_of_the_built_in_and_bundled_packs_is_in_the_catalog(pack):
    from kbopt.engine.pack.loader import load_pack
    cited = _cited(pack) | _cited(load_pack([HERE.parent / p for p in PACKS]))
    assert sorted(c for c in cited if citations.resolve(c) is None) == []


def test_claims_read_as_methodology_sections_and_pages_by_title():
    assert citations.label("seed K3.8") == "methodology §3.8"
    assert citations.label("https://docs.vllm.ai/en/latest/configuration/optimization.html#preemption") \
        == "vLLM documentation: Optimization and Tuning (#preemption)"
    assert citations.label("https://example.com/not-listed") == "https://example.com/not-listed"
    assert citations.label("test") == "test"


def test_seed_claims_keeps_its_shape():
    claims = seed_claims()
    assert claims["K4.6"] == source_catalog().claims["K4.6"].text and len(claims) == 28


def test_no_output_shows_the_source_syntax(run_cli, tmp_path):
    # Titles and notes of rules may mention the methodology; the source lists must not say "seed".
    for args in (["advise", "--facts", "examples/capacity-a100-chat.json", "--explain"],
                 ["advise", "--facts", "examples/capacity-a100-chat.json", "--format", "md"],
                 ["advise", "--facts", "examples/capacity-a100-chat.json", "--format", "html"],
                 ["rules", "list"], ["rules", "show", "D-BOTTLENECK-CAPACITY"]):
        code, out, _ = run_cli(*args)
        assert code == 0 and "seed K" not in out and "methodology §3.8" in out, args
    code, _, _ = run_cli("rules", "docs", "-o", str(tmp_path))
    assert code == 0 and "seed K" not in (tmp_path / "index.md").read_text()


def test_kbopts_own_yaml_files_name_a_key_written_twice():
    # review set 30: kb/models.yaml gave qwen3-30b-a3b vocab_size twice (129,280, then 151,936), and
    # YAML let the last one win without a word
    from kbopt.kb.packaged import package_dir, read_knowledge_yaml
    with pytest.raises(ValueError, match=r"^kb/x\.yaml:3: duplicate key 'a'$"):
        read_knowledge_yaml("a: 1\nb: 2\na: 3\n", "kb/x.yaml")
    kb = package_dir("kbopt.kb")
    shipped = sorted(kb.glob("*.yaml")) + sorted(kb.glob("engines/*.yaml"))
    assert len(shipped) >= 10
    for path in shipped:
        read_knowledge_yaml(path.read_text(encoding="utf-8"), str(path.relative_to(kb.parent)))
