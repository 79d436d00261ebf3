"""Adding a valid rule breaks no test that is not about it.

The whole test suite runs again, in a subprocess, on a copy of the source tree whose built-in pack
has gained new rules (with passing examples). Deselect with `-m "not acceptance"`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# setuptools maps these folders into the kbopt package (pyproject's package-dir).
SUBPACKAGES = ("engine", "kb", "reports", "rules")

NEW_RULES = {
    # A second way to the same diagnosis: a rule deriving a derived fact that already has a producer.
    # It reads only facts its consumers' examples give: a producer waiting on a fact that
    # S-FUSION-LAUNCH-BOUND's `fires: false` example lacks would leave that example undecided, a
    # failure that is about the new rule (fix the rule or that example), not a brittle test.
    "diagnosis/d-launch-bound-back-to-back.yaml": """\
id: D-LAUNCH-BOUND-BACK-TO-BACK
title: Kernels run back to back while the SMs stay under half busy
layer: diagnosis
when: telemetry.kernel_time_ratio > 0.95 and telemetry.compute_utilization < 0.5
then:
  - derive: {derived.launch_bound: true}
because: A kernel runs {telemetry.kernel_time_ratio:.0%} of the time, with no gap to speak of, yet compute is active only {telemetry.compute_utilization:.0%}.
source: [seed K2.1]
examples:
  - {name: back to back, facts: {telemetry: {kernel_time_ratio: 0.98, compute_utilization: 0.45}}, fires: true, expect: {derived: {derived.launch_bound: true}}}
  - {name: gaps between kernels, facts: {telemetry: {kernel_time_ratio: 0.9, compute_utilization: 0.45}}, fires: false}
""",
    # A recommendation reached by a new path; it fires on the bundled capacity-a100-chat and
    # low-utilization-a10g facts too, changing their ranking and reasons.
    "scheduling/s-length-bucketing-slow-first-token.yaml": """\
id: S-LENGTH-BUCKETING-SLOW-FIRST-TOKEN
title: Bucket by length when the first token is late and lengths vary widely
layer: scheduling
when: derived.slow_first_token and derived.variable_lengths
then:
  - recommend:
      strategy: length_bucketing
      weight: 2
      params: {bucket_edges: "= edges(workload.seq_len_mean, workload.seq_len_p99, workload.seq_len_max)"}
      gain: Short prompts stop waiting behind long ones for their first token.
because: The first token is late and lengths vary widely, so short requests queue behind long ones.
source: [seed K4.6, seed K1.2]
examples:
  - name: late first token, varied lengths
    facts:
      workload: {ttft_p99_ms: 900, seq_len_max: 4096, seq_len_mean: 900, seq_len_std: 700, seq_len_p99: 3800}
      constraints: {ttft_slo_ms: 500}
    fires: true
    expect: {chosen: [length_bucketing]}
  - name: first token on time
    facts:
      workload: {ttft_p99_ms: 300, seq_len_max: 4096, seq_len_mean: 900, seq_len_std: 700, seq_len_p99: 3800}
      constraints: {ttft_slo_ms: 500}
    fires: false
""",
}


def _copy_tree(tmp_path: Path) -> Path:
    """A copy of the source tree whose kbopt/ folder is importable as the whole package, built like
    setuptools' package-dir mapping: engine, kb, reports and rules linked in as subpackages."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", "build", "dist"))
    for name in SUBPACKAGES:
        (src / "kbopt" / name).symlink_to(src / name, target_is_directory=True)
    return src


def _environment(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KBOPT_RULES", "KBOPT_UPDATE_SNAPSHOTS", "PYTEST_ADDOPTS", "PYTHONPATH")}
    # The copy's folder comes first on sys.path (the working directory, and PYTHONPATH for any
    # further subprocess), and PathFinder precedes setuptools' editable finder: the copy wins.
    env["PYTHONPATH"] = str(src)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.mark.acceptance
def test_the_suite_passes_on_a_pack_with_new_rules(tmp_path):
    src = _copy_tree(tmp_path)
    for name, text in NEW_RULES.items():
        (src / "rules" / name).write_text(text)
    env = _environment(src)

    probe = subprocess.run([sys.executable, "-c", "import kbopt.rules, kbopt.engine.pack.loader as l; "
                            "print(kbopt.rules.__file__); print(l.__file__); print(len(l.load_pack().rules))"],
                           cwd=src, env=env, capture_output=True, text=True, check=False)
    assert probe.returncode == 0, probe.stderr
    *modules, count = probe.stdout.split()
    for where in modules:
        assert Path(where).is_relative_to(tmp_path), f"the subprocess imported {where}, not the copy"
    from kbopt.engine.pack.loader import load_pack
    assert int(count) == len(load_pack().rules) + len(NEW_RULES)

    # The browser test is slow and needs chromium; this module must not run itself again. The
    # README's excerpt is the built-in pack's output, which a pack with a new recommendation
    # rightly changes (a new rule adds an action to the summary): it is the README's, not a rule's.
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto",
                             "-k", "not browser and not readme_example", "-m", "not acceptance", "tests"],
                            cwd=src, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
