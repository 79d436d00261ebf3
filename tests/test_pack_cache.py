"""The compiled-pack cache: same advice from a cached pack, and never a stale or broken entry."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.engine.pack import cache
from kbopt.engine.pack.packs import load_checked_pack
from kbopt.errors import RuleError
from kbopt.kb.facts import load_facts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "capacity-a100-chat.json"
PACK = ROOT / "examples" / "packs" / "vllm-tuning"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("KBOPT_CACHE_DIR", str(folder))
    monkeypatch.delenv("KBOPT_NO_CACHE", raising=False)
    return folder


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("pack-*.json")) if folder.exists() else []


def _builtin_entry(folder: Path) -> Path:
    return folder / f"pack-{cache.pack_key(())}.json"


@pytest.fixture(scope="module")
def built() -> tuple[bytes, object]:
    """The built-in pack's entry as kbopt writes it, and the pack: built once for the tests that
    plant or break an entry, which then rebuild through `cached_pack` with this pack."""
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="kbopt-cache-test-"))
    entry = folder / "entry.json"
    pack = load_checked_pack([])
    cache._store(folder, entry, pack)
    data = entry.read_bytes()
    shutil.rmtree(folder)
    return data, pack


def _seeded(folder: Path, built: tuple[bytes, object]) -> tuple[Path, list[object]]:
    """The built-in entry written into `folder` as the cache writes it (0700 folder, 0600 file),
    and a list each rebuild adds the pack to: `_builtin(rebuilds)` reads through the cache."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    entry = _builtin_entry(folder)
    entry.write_bytes(built[0])
    entry.chmod(0o600)
    return entry, []


def _builtin(rebuilds: list[object], built: tuple[bytes, object]):
    """The built-in pack through the cache, rebuilding (cheaply, with the prebuilt pack) on a miss."""
    return cache.cached_pack((), lambda: rebuilds.append(built[1]) or built[1])


def test_a_cached_pack_gives_byte_identical_advice(cache_dir):
    facts = load_facts(EXAMPLE)
    built = load_checked_pack([str(PACK)])
    # the layered pack's entry, and the built-in pack's, whose rules it took (loader.read_pack)
    assert len(_entries(cache_dir)) == 2 and _builtin_entry(cache_dir) in _entries(cache_dir)
    loaded = load_checked_pack([str(PACK)])
    assert loaded is not built and loaded.version == built.version
    for evaluator in available_evaluators():
        assert advise(facts, loaded, evaluator).to_json() == advise(facts, built, evaluator).to_json()


def test_each_layering_and_each_file_content_has_its_own_entry(cache_dir, tmp_path):
    load_checked_pack([])
    copy = tmp_path / "pack"
    shutil.copytree(PACK, copy)
    load_checked_pack([str(copy)])
    assert len(_entries(cache_dir)) == 2
    rule = next(copy.glob("*/*.yaml"))
    rule.write_text(rule.read_text().replace("title: ", "title: Edited ", 1))
    edited = load_checked_pack([str(copy)])
    assert len(_entries(cache_dir)) == 3
    assert any(r.title.startswith("Edited ") for r in edited.rules)


def test_a_corrupt_entry_is_rebuilt(cache_dir, built):
    entry, rebuilds = _seeded(cache_dir, built)
    assert _builtin(rebuilds, built).rules and not rebuilds          # read from the entry
    entry.write_bytes(b"not JSON")
    assert _builtin(rebuilds, built).rules and len(rebuilds) == 1
    assert entry.read_bytes() == built[0]


def test_a_broken_pack_is_never_cached(cache_dir, tmp_path):
    broken = tmp_path / "broken" / "diagnosis"
    broken.mkdir(parents=True)
    (broken / "x-broken.yaml").write_text("id: X-BROKEN\n")
    for _ in range(2):          # the second attempt reports the problem again, from the files
        with pytest.raises(RuleError):
            load_checked_pack([str(broken.parent)])
    assert _entries(cache_dir) == [_builtin_entry(cache_dir)]      # the built-in pack it was layered over


def test_the_cache_can_be_turned_off(cache_dir, monkeypatch):
    monkeypatch.setenv("KBOPT_NO_CACHE", "1")
    load_checked_pack([])
    assert _entries(cache_dir) == []
    assert cache.cache_dir() is None


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("KBOPT_CACHE_DIR", str(blocker / "cache"))
    assert load_checked_pack([]).rules


def test_a_cold_advise_from_the_cache_loads_no_yaml_jsonschema_or_networkx(tmp_path):
    """What keeps a cold start fast: once the pack is cached, advising a JSON facts file imports
    none of the parsers and graph libraries that building the pack needs."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "KBOPT_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-X", "importtime", "-m", "kbopt", "advise", "--facts", str(EXAMPLE)]
    subprocess.run(command, env=env, capture_output=True, check=True)          # fills the cache
    imported = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in imported.splitlines() if line.startswith("import time:")}
    assert not loaded & {"yaml", "jsonschema", "networkx", "jinja2", "prometheus_client"}


def test_an_entry_others_could_write_is_not_read(cache_dir, built):
    """An entry writable by others is rebuilt, never loaded, however well-formed."""
    import os
    entry, rebuilds = _seeded(cache_dir, built)
    planted = entry.read_bytes()
    os.chmod(entry, 0o666)
    entry.write_bytes(planted + b" ")
    assert _builtin(rebuilds, built).rules and len(rebuilds) == 1     # rebuilt, not read
    assert entry.stat().st_mode & 0o077 == 0 and entry.read_bytes() != planted + b" "


def _planted(entry: Path, old: bytes, new: bytes) -> None:
    data = entry.read_bytes()
    assert old in data
    entry.write_bytes(data.replace(old, new, 1))


@pytest.mark.parametrize("plant", [
    # issue 28: the unpickler accepted a dotted global inside a kbopt module (io.FileIO, imported
    # by the cache module) and truncated a chosen file. An entry is JSON now: a class not in the
    # table of a pack's own dataclasses is refused, whatever its name.
    (b'"kbopt.engine.pack.rule.Pack"', b'"kbopt.engine.pack.cache.io.FileIO"'),
    (b'"kbopt.engine.pack.rule.Pack"', b'"os.system"'),
    (b'"kbopt.engine.pack.rule.Pack"', b'"kbopt.engine.pack.cache.Path"'),
    (b'"kbopt.engine.pack.rule.Pack"', b'"kbopt.engine.pack.rule.Rule"'),       # another class's fields
    (b'["rules","version"', b'["rules","__class__"'),                             # fields not the class's
    (b'"format":"kbopt-pack-cache/2"', b'"format":"kbopt-pack-cache/1"'),
    (b'"pack":[', b'"pack":["R",0],"x":['),                                     # a reference to nothing
])
def test_a_planted_entry_at_worst_costs_a_rebuild(cache_dir, tmp_path, plant, built):
    entry, rebuilds = _seeded(cache_dir, built)
    _planted(entry, *plant)
    planted = entry.read_bytes()
    victim = tmp_path / "victim"
    victim.write_text("kept")
    assert _builtin(rebuilds, built).rules and len(rebuilds) == 1
    assert victim.read_text() == "kept" and entry.read_bytes() != planted      # rebuilt


def test_an_old_pickle_entry_is_not_unpickled(cache_dir, tmp_path, built):
    """The exploit of issue 28 as a pickle, planted under the entry's name: never unpickled."""
    import pickle

    entry, rebuilds = _seeded(cache_dir, built)
    marker = tmp_path / "ran"

    class Call:
        def __reduce__(self):
            import os
            return os.system, (f"touch {marker}",)
    entry.write_bytes(pickle.dumps(Call()))
    assert _builtin(rebuilds, built).rules and len(rebuilds) == 1
    assert not marker.exists()


def test_a_field_of_the_wrong_type_is_refused(built):
    """Every field is checked against its annotation, containers' elements included."""
    import json
    document = json.loads(built[0])
    names = next(row for row in document["classes"] if row and row[0] == "kbopt.engine.pack.rule.Pack")[1]
    for field, wrong in (("version", 17), ("rules", ["L"]), ("rules", ["T", "a rule"]), ("kb", "text"),
                         ("producers", ["D", "derived.x", ["T", 1]])):
        planted = json.loads(json.dumps(document))
        planted["pack"][1 + names.index(field)] = wrong
        with pytest.raises(cache.CorruptEntry, match=f"Pack.{field} is"):
            cache.decode(json.dumps(planted).encode())
    assert cache.checker(tuple[str, ...])(("a",)) and not cache.checker(tuple[str, ...])(("a", 1))
    assert cache.checker(float)(1) and not cache.checker(int | None)("1")


def test_every_class_a_pack_holds_has_checkable_fields():
    """A field whose annotation cannot be resolved would be let through unchecked: none is."""
    import typing
    for name, cls in cache.value_classes().items():
        assert typing.get_type_hints(cls), name


def test_a_cached_pack_is_the_pack_built(cache_dir):
    from kbopt.engine.evaluators import make_evaluator
    built = load_checked_pack([str(PACK)])
    make_evaluator(built, "reference")
    loaded = cache.decode(cache.encode(built))
    assert loaded.rules == built.rules and loaded.kb == built.kb and loaded.producers == built.producers
    # what lasts across processes comes back (precompiled before the store); what a run keeps does not
    assert loaded.compiled == built.compiled and built.compiled.schedule_order and built.compiled.durable_rulesets
    assert built.runtime.evaluators and not loaded.runtime.evaluators


def test_every_knowledge_file_a_pack_carries_is_in_its_key(tmp_path, monkeypatch):
    # A cached pack carries the knowledge base (the model's error bands included): editing any of
    # its files must make a new entry, or the advice would show the old figures.
    from kbopt.kb.packaged import package_dir
    kb_copy = tmp_path / "kb"
    shutil.copytree(package_dir("kbopt.kb"), kb_copy)
    monkeypatch.setattr(cache, "package_dir", lambda package: kb_copy if package == "kbopt.kb" else package_dir(package))
    before = cache.pack_key(())
    for name in cache.KB_FILES:
        path = kb_copy / name
        original = path.read_bytes()
        path.write_bytes(original + b"\n# edited\n")
        assert cache.pack_key(()) != before, name
        path.write_bytes(original)
    assert "model_errors.yaml" in cache.KB_FILES


def test_a_layered_pack_takes_the_builtin_rules_from_the_cached_pack_unless_it_retunes_them(cache_dir, tmp_path):
    # Only the layered pack's own files are parsed: its built-in rules are the cached pack's values,
    # and its advice is the advice of a pack read whole from the files.
    from kbopt.engine.pack.loader import read_pack
    builtin = load_checked_pack([])
    layered = read_pack([str(PACK)], builtin).checked()
    whole = read_pack([str(PACK)]).checked()
    lent = {r.id for r in builtin.rules}
    assert all(r is next(b for b in builtin.rules if b.id == r.id) for r in layered.rules if r.id in lent)
    assert [r.id for r in layered.rules] == [r.id for r in whole.rules] and layered.version == whole.version
    facts = load_facts(EXAMPLE)
    assert advise(facts, layered, "reference").to_json() == advise(facts, whole, "reference").to_json()
    # a pack that retunes a shared threshold has every rule built again, under the new value
    retuned = tmp_path / "retuned"
    shutil.copytree(PACK, retuned)
    name, parameter = next(iter(cache.files.read_parameters(cache.files.builtin(), []).items()))
    (retuned / "parameters.yaml").write_text(
        f"parameters:\n  {name}: {{value: {parameter.value}, why: the same value retuned, overrides: true}}\n")
    again = read_pack([str(retuned)], builtin).checked()
    assert not any(r is b for r in again.rules for b in builtin.rules)
