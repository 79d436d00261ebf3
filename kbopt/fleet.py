"""`kbopt fleet`: advice for every deployment a Prometheus server sees.

Replicas come from kbopt/collectors/fleet.py (one facts document each); here they are advised,
grouped into deployments (same namespace, engine, model, GPU and engine settings), compared
with each other, and written out: fleet.jsonl, one HTML report per deployment and index.html.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbopt.collectors.fleet import FleetFacts, ReplicaFacts
from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.model import Advice
from kbopt.engine.pack.rule import Pack
from kbopt.errors import KboptError
from kbopt.kb.facts import facts_from_document
from kbopt.kb.provenance import Provenance
from kbopt.kb.schema import FACTS_FORMAT
from kbopt.kb.vocabulary import Vocabulary
from kbopt.reports import render
from kbopt.reports.escape import terminal_text
from kbopt.reports.fleet import render_index

FLEET_FORMAT = "fleet/1"


@dataclass
class ReplicaResult:
    facts: ReplicaFacts
    advice: Advice | None = None
    error: str | None = None


@dataclass
class Deployment:
    name: str
    slug: str
    replicas: list[ReplicaResult]
    document: dict[str, Any] | None = None
    advice: Advice | None = None
    error: str | None = None
    differences: dict[str, Any] = field(default_factory=dict)

    @property
    def first(self) -> ReplicaFacts:
        return self.replicas[0].facts

    @property
    def missing(self) -> list[str]:
        return sorted({m for r in self.replicas for m in r.facts.missing})

    def record(self) -> dict[str, Any]:
        """fleet.jsonl's line for this deployment."""
        first = self.first
        return {
            "kbopt": FLEET_FORMAT, "deployment": self.name, "engine": first.engine, "model": first.model,
            "namespace": first.replica.namespace, "settings": first.settings,
            "replicas": [{**r.facts.replica.to_dict(), "gpus": r.facts.gpus, "device_join": r.facts.device_join,
                          "bottleneck": r.advice.bottleneck if r.advice else None,
                          "strategies": [s.id for s in r.advice.strategies] if r.advice else [],
                          "facts": _values(r.facts.document),
                          **({"missing": r.facts.missing} if r.facts.missing else {}),
                          **({"notes": r.facts.notes} if r.facts.notes else {}),
                          **({"error": r.error} if r.error else {})} for r in self.replicas],
            "facts": self.document, "advice": self.advice.to_dict() if self.advice else None,
            "differences": self.differences, "missing": self.missing,
            **({"error": self.error} if self.error else {}),
            "report": f"deployments/{self.slug}.html" if self.advice else None,
        }


def _values(document: dict[str, Any] | None) -> dict[str, Any]:
    """A replica's facts by path, without provenance (the deployment's document carries that)."""
    return {f"{section}.{name}": value for section, fields in (document or {}).items()
            if section not in ("kbopt", "provenance") and isinstance(fields, dict) for name, value in fields.items()}


@dataclass
class Fleet:
    prometheus: str
    window: str
    selector: str | None
    read: FleetFacts
    deployments: list[Deployment]
    elapsed_s: float

    def summary(self) -> dict[str, Any]:
        return {"prometheus": self.prometheus, "window": self.window, "selector": self.selector,
                "queries": self.read.queries, "expressions": self.read.expressions, "warnings": self.read.warnings,
                "deployments": len(self.deployments), "replicas": sum(len(d.replicas) for d in self.deployments),
                "unmatched_gpus": self.read.unmatched_gpus, "elapsed_s": round(self.elapsed_s, 3)}


def slug(name: str) -> str:
    """A file name for a deployment: label values are untrusted, so only [A-Za-z0-9._-], never a
    path, and a hash of the whole name keeps two names that read alike apart."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "deployment"
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def build_fleet(read: FleetFacts, pack: Pack, evaluator: str, prometheus: str, selector: str | None,
                started: float | None = None) -> Fleet:
    groups: dict[tuple[Any, ...], list[ReplicaResult]] = {}
    for replica in read.replicas:
        result = ReplicaResult(replica)
        if replica.document is None:
            result.error = "; ".join(replica.notes) or "no facts"
        else:
            try:
                result.advice = advise(facts_from_document(replica.document, f"replica {replica.replica.id}"), pack, evaluator)
            except KboptError as error:
                result.error = str(error)
        groups.setdefault(replica.deployment_key, []).append(result)
    names = Counter(_name(key) for key in groups)
    deployments = []
    seen: Counter[str] = Counter()
    for key, members in sorted(groups.items(), key=lambda item: (_name(item[0]), item[0])):
        name = _name(key)
        seen[name] += 1
        if names[name] > 1:            # same model, other settings or GPU: another deployment
            name += f" #{seen[name]}"
        deployment = Deployment(name, slug(name), members)
        deployment.document = aggregate([r.facts.document for r in members if r.facts.document], len(members),
                                        pack.kb.vocabulary)
        if deployment.document is None:
            deployment.error = "no replica gave facts"
        else:
            try:
                deployment.advice = advise(facts_from_document(deployment.document, f"deployment {name}"), pack, evaluator)
            except KboptError as error:
                deployment.error = str(error)
        deployment.differences = differences(members)
        deployments.append(deployment)
    elapsed = time.monotonic() - started if started is not None else 0.0
    return Fleet(prometheus, read.window, selector, read, deployments, elapsed)


def _name(key: tuple[Any, ...]) -> str:
    namespace, engine, model, gpu, _ = key
    return (f"{namespace}/" if namespace else "") + f"{model} ({engine}" + (f", {gpu})" if gpu else ")")


def aggregate(documents: list[dict[str, Any]], replicas: int, vocabulary: Vocabulary) -> dict[str, Any] | None:
    """One facts document for a deployment: each numeric fact the mean over the replicas that
    have it, any other the value most of them report; the provenance says which."""
    if not documents:
        return None
    values: dict[str, list[Any]] = {}
    origin: dict[str, dict[str, Any]] = {}
    for document in documents:
        for section, fields in document.items():
            if section in ("kbopt", "provenance") or not isinstance(fields, dict):
                continue
            for name, reading in fields.items():
                path = f"{section}.{name}"
                values.setdefault(path, []).append(reading)
                origin.setdefault(path, (document.get("provenance") or {}).get(path, {}))
    out: dict[str, Any] = {"kbopt": FACTS_FORMAT}
    provenance: dict[str, Any] = {}
    for path in sorted(values):
        items = values[path]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items)
        spec = vocabulary.get(path)
        if numeric:
            value: Any = sum(items) / len(items)
            value = round(value) if spec is not None and spec.type == "integer" else round(value, 6)
            how = f"mean of {len(items)} of {replicas} replicas" + (f" ({min(items):g}..{max(items):g})" if len(items) > 1 else "")
        else:
            common, count = Counter(json.dumps(v, sort_keys=True) for v in items).most_common(1)[0]
            value = json.loads(common)
            how = f"as {count} of {replicas} replicas report it"
        section, name = path.split(".", 1)
        out.setdefault(section, {})[name] = value
        raw = dict(origin[path]) or {"source": "prometheus", "quality": "derived"}
        if replicas > 1:
            raw["note"] = "; ".join(n for n in (raw.get("note"), how) if n)
        provenance[path] = Provenance(**raw).to_dict()
    out["provenance"] = provenance
    return out


def differences(members: list[ReplicaResult]) -> dict[str, Any]:
    """Where replicas of one deployment disagree: facts beyond a tolerance, bottlenecks,
    strategies, and a finding when some replicas are under pressure while others idle."""
    out: dict[str, Any] = {}
    advised = [(r.facts.replica.id, r.advice) for r in members if r.advice is not None]
    if len(members) < 2:
        return out
    facts: list[dict[str, Any]] = []
    for path in sorted({p for _, advice in advised for p in advice.facts}):
        by_replica = {ident: advice.facts[path] for ident, advice in advised if path in advice.facts}
        numbers = [v for v in by_replica.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) != len(by_replica) or len(numbers) < 2:
            if len({json.dumps(v, sort_keys=True) for v in by_replica.values()}) > 1:
                facts.append({"fact": path, "by_replica": by_replica})
            continue
        low, high = min(numbers), max(numbers)
        ratio_like = all(0 <= v <= 1 for v in numbers)
        if high - low > (0.1 if ratio_like else max(0.25 * max(abs(high), abs(low)), 1.0)):
            facts.append({"fact": path, "min": low, "max": high, "by_replica": by_replica})
    if facts:
        out["facts"] = facts
    bottlenecks = {ident: advice.bottleneck for ident, advice in advised}
    if len(set(bottlenecks.values())) > 1:
        out["bottlenecks"] = bottlenecks
    strategies = {ident: [s.id for s in advice.strategies] for ident, advice in advised}
    if len({tuple(v) for v in strategies.values()}) > 1:
        out["strategies"] = strategies
    pressed, idle = [], []
    for ident, advice in advised:
        f = advice.facts
        if f.get("workload.preemption_ratio", 0) > 0.01 or f.get("workload.requests_waiting_mean", 0) >= 1 \
                or f.get("telemetry.kv_cache_usage_ratio", 0) >= 0.9:
            pressed.append(ident)
        elif f.get("telemetry.kv_cache_usage_ratio", 1) < 0.5 and f.get("workload.requests_waiting_mean", 0) < 1:
            idle.append(ident)
    if pressed and idle:
        out["findings"] = [{
            "kind": "uneven_load", "pressed": pressed, "idle": idle,
            "text": f"{len(pressed)} of {len(members)} replicas are under pressure (preempting, queueing or with a "
                    f"full KV cache) while {len(idle)} idle: a routing problem, not a capacity one. Check the load "
                    "balancer (session affinity, a stale endpoint list, long-prompt pinning) before adding replicas "
                    "or memory."}]
    return out


# ------------------------------------------------------------------ output


def fleet_lines(fleet: Fleet) -> str:
    return "".join(json.dumps(d.record(), ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
                   for d in fleet.deployments)


def fleet_files(fleet: Fleet) -> dict[str, str]:
    """Every file of the output directory, by relative path."""
    files = {"fleet.jsonl": fleet_lines(fleet), "index.html": render_index(fleet)}
    for deployment in fleet.deployments:
        if deployment.advice is not None:
            files[f"deployments/{deployment.slug}.html"] = render(deployment.advice, "html")
    return files


def write_directory(files: dict[str, str], output: str) -> None:
    """All or nothing, as kbopt.output.write_output for a file: the directory is written in full
    beside the target, then renamed into place; an earlier fleet output there is replaced, any
    other non-empty directory is left alone. Ctrl-C or an error leaves no half-written folder."""
    if not output:
        raise KboptError("-o: the directory name is empty")
    target = Path(output)
    if target.exists() and not target.is_dir():
        raise KboptError(f"-o {output}: is a file; give a directory")
    if target.is_dir() and any(target.iterdir()) and not (target / "fleet.jsonl").is_file():
        raise KboptError(f"-o {output}: not empty and not an earlier kbopt fleet output; give a new or empty directory")
    parent = target.resolve().parent
    try:
        temporary = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}."))
    except OSError as error:
        raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
    old: Path | None = None
    try:
        for relative, text in files.items():
            path = temporary / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o777 & ~umask)          # mkdtemp makes 0700; honour umask instead
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.old."))
            os.replace(target, old / "previous")
        os.replace(temporary, target)
    except OSError as error:
        shutil.rmtree(temporary, ignore_errors=True)
        if old is not None and not target.exists():
            os.replace(old / "previous", target)     # put the earlier output back
        raise KboptError(f"-o {output}: cannot write there: {error.strerror}") from None
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        if old is not None and not target.exists():
            os.replace(old / "previous", target)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def summary_text(fleet: Fleet) -> str:
    """What the command says on standard error: one line per deployment, label values inert."""
    lines = [f"kbopt fleet: {len(fleet.deployments)} deployment(s), {fleet.summary()['replicas']} replica(s) from "
             f"{terminal_text(fleet.prometheus)} in {fleet.read.queries} queries, {fleet.elapsed_s:.2f} s"]
    for deployment in fleet.deployments:
        bottleneck = deployment.advice.bottleneck if deployment.advice else "no advice"
        lines.append(f"  {terminal_text(deployment.name)}: {len(deployment.replicas)} replica(s), {bottleneck}"
                     + (f"; missing {', '.join(deployment.missing)}" if deployment.missing else "")
                     + (f"; {terminal_text(deployment.error)}" if deployment.error else ""))
        for finding in deployment.differences.get("findings", []):
            lines.append(f"    {terminal_text(finding['text'])}")
    for warning in fleet.read.warnings:
        lines.append(f"kbopt: warning: Prometheus answered in part: {terminal_text(warning)}")
    return "\n".join(lines) + "\n"
