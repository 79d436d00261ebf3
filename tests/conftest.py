from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

# The compiled-pack cache of every kbopt the tests start (in process or not) lives in a folder of
# this run's own: never the user's ~/.cache, and never an entry from another checkout. It is
# removed when the run ends (pytest_unconfigure).
os.environ["KBOPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="kbopt-test-cache-")

from kbopt.cli import main
from kbopt.engine.evaluators import durable_available
from kbopt.engine.pack.loader import load_pack

needs_durable = pytest.mark.skipif(durable_available() is not None,
                                   reason=f"durable_rules does not import here: {durable_available()}")


def review_deployment(pack, folder: str, name: str, *overrides: str):
    """An expert review's deployment (tests/data/<folder>/<name>-*.json and <name>.launch): its
    advice, and today's launch command relaunched with it (which must pass `bash -n`); `overrides`
    are `path=value` facts set after the command's, as `--set` does."""
    import subprocess
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    from kbopt.reports.emit import render_launch
    data = Path(__file__).resolve().parent / "data" / folder
    command = read_command(f"@{data / f'{name}.launch'}")     # a relative options file is beside it
    advice = advise(load_facts(next(data.glob(f"{name}-*.json")), [*command.overrides(), *overrides]), pack, available_evaluators()[0])
    script = render_launch(build_launch(advice, command.engine, command), advice.bottleneck)
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    return advice, script


def changed_deployment(pack, folder: str, name: str, tmp_path, **changes):
    """The advice on an expert review's facts (tests/data/<folder>/<name>-*.json) with some facts
    changed (`section__fact=value`, e.g. constraints__objective_first="itl"), without its launch command."""
    import json
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    document = json.loads(next((Path(__file__).resolve().parent / "data" / folder).glob(f"{name}-*.json")).read_text())
    for key, value in changes.items():
        section, fact = key.split("__", 1)
        document.setdefault(section, {})[fact] = value
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(document))
    return advise(load_facts(path), pack, available_evaluators()[0])


def script_flags(script: str) -> str:
    """A launch script without its comment lines: what the shell runs."""
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))


def script_flag(script: str, name: str) -> str | None:
    """The value a launch script gives a flag (the word after it), or None where it sets none."""
    argv = script_flags(script).split()
    return argv[argv.index(name) + 1] if name in argv else None


def migrated_script(advice, folder: str, name: str, engine: str) -> str:
    """The review deployment's advice emitted for `engine`, read with today's launch command, as
    `kbopt advise --emit ENGINE` writes it: the advice re-run for that engine (migrate.py)."""
    from pathlib import Path

    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.advice.migrate import advice_for
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.reports.emit import render_launch
    command = read_command(f"@{Path(__file__).resolve().parent / 'data' / folder / f'{name}.launch'}")
    moved = advice_for(advice, engine, shared_pack(), available_evaluators()[0])
    return render_launch(build_launch(moved, engine, command), moved.bottleneck)


def strategy_of(advice, strategy_id: str):
    """The advice's strategy with this id, or None."""
    return next((s for s in advice.strategies if s.id == strategy_id), None)


def engine_runs_on(engine: str, example) -> bool:
    """Whether a serving engine runs on a facts file's GPU: TensorRT-LLM is NVIDIA's only, and an
    AMD example refuses it (tests/test_gpu_catalog.py), so tests that pair every example with every
    engine leave that pair out."""
    from kbopt.kb.facts import load_facts
    from kbopt.kb.knowledge import engine_catalog
    vendor = load_facts(example).values.get("hardware.vendor")
    return vendor is None or vendor in engine_catalog().engines[engine].vendors


@functools.cache
def shared_pack():
    """The built-in pack, built once per test process (building one takes about a second)."""
    return load_pack()


@pytest.fixture(scope="session")
def pack():
    return shared_pack()


@pytest.fixture
def run_cli(capsys):
    """Run `kbopt ARGS` in-process; return (exit code, stdout, stderr)."""
    def run(*args: str):
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err
    return run


def pytest_configure(config):
    config.addinivalue_line("markers",
                            "acceptance: reruns the whole suite on a copy of the tree (deselect with -m 'not acceptance')")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ["KBOPT_CACHE_DIR"], ignore_errors=True)
