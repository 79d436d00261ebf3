"""`kbopt advise --emit ENGINE`: the advice as a ready bash launch script for that engine.

vLLM, SGLang and TGI get a command line; TensorRT-LLM gets `trtllm-serve` plus the YAML config
file it reads. The arguments sit in a bash array so that every line can carry a comment naming
the rule that set it (a `\\`-continued command cannot hold comments); settings the deployment
already runs (its serving.* facts equal the new value) are marked `# unchanged`. Every value is
shell- or YAML-quoted by engine/advice/settings.py and comments are one clean line, so nothing
from the facts can break out of the script.
"""
from __future__ import annotations

from typing import Any

from kbopt.engine.advice.model import Advice, StrategyAdvice
from kbopt.engine.advice.settings import Setting, Target, clean, settings_for, targets

YAML_FILE = "kbopt-trtllm.yaml"


def _rule(strategy: StrategyAdvice) -> str:
    rules = strategy.recommended_by or strategy.because
    return clean(f"{rules[0] if rules else 'kbopt'} ({strategy.key or strategy.id})")


def _comment(strategy: StrategyAdvice, setting: Setting) -> str:
    return "  # " + ("unchanged; " if setting.unchanged else "") + _rule(strategy)


def _needs(setting: Setting, indent: str) -> list[tuple[str, str]]:
    """Preconditions as comment lines above the setting (bash allows them inside an array)."""
    return [(f"{indent}# needs: {clean(n)}", "") for n in setting.needs]


def _pad(lines: list[tuple[str, str]]) -> list[str]:
    width = max((len(text) for text, comment in lines if comment), default=0)
    return [f"{text.ljust(width)}{comment}".rstrip() if comment else text for text, comment in lines]


def _yaml(entries: list[tuple[str, str, str]]) -> list[str]:
    """Dotted keys (kv_cache_config.dtype) nested as YAML, each leaf with its comment."""
    tree: dict[str, Any] = {}
    for key, value, comment in entries:
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = (value, comment)
    lines: list[tuple[str, str]] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        for name, child in node.items():
            if isinstance(child, dict):
                lines.append(("  " * depth + f"{name}:", ""))
                walk(child, depth + 1)
            else:
                lines.append(("  " * depth + f"{name}: {child[0]}", child[1]))
    walk(tree, 0)
    return _pad(lines)


def render_emit(advice: Advice, engine: str) -> str:
    facts = {**advice.facts}
    target: Target = targets(facts, engine)[0]
    spec = target.spec
    args: list[tuple[str, str]] = []
    env: list[tuple[str, str]] = []
    yaml: list[tuple[str, str, str]] = []
    notes: list[str] = []
    for strategy in advice.strategies:
        for setting in settings_for(target, strategy.id, strategy.key, strategy.params, facts, advice.derived):
            comment = _comment(strategy, setting)
            if setting.kind == "note":
                notes.append(f"# {_rule(strategy)}: {setting.text}")
            elif setting.kind == "cli":
                args += _needs(setting, "  ") + [("  " + setting.text, comment)]
            elif setting.kind == "env":
                env += _needs(setting, "") + [("export " + setting.text, comment)]
            else:
                yaml.append((setting.name, setting.text.split(":", 1)[1].strip(), comment))
    model = str(facts.get("model.name") or "MODEL")
    out = ["#!/usr/bin/env bash",
           f"# kbopt advise --emit {engine}: {clean(target.describe())}",
           f"# bottleneck: {clean(advice.bottleneck)}; every line names the rule that set it",
           *(f"# note: {clean(n)}" for n in spec.notes)]
    if not target.deployed:
        deployed = facts.get("workload.engine")
        out.append("# the facts do not name this engine (workload.engine"
                   + (f" = {clean(deployed)}" if deployed else " not given") + "): nothing is marked unchanged")
    out += notes
    out.append("set -euo pipefail")
    out.append(f"MODEL=${{MODEL:-{_shell_word(model)}}}")
    out += _pad(env)
    config = ""
    if engine == "trtllm" and yaml:
        out.append(f"cat > {YAML_FILE} <<'YAML'")
        out += _yaml(yaml)
        out.append("YAML")
        config = f" {'--config' if target.version >= (1, 1) else '--extra_llm_api_options'} {YAML_FILE}"
    out.append("args=(")
    out += _pad(args)
    out.append(")")
    command = spec.command
    out.append(f'exec {command} "$MODEL"{config} "${{args[@]}}"')
    return "\n".join(out) + "\n"


def _shell_word(text: str) -> str:
    import shlex
    return shlex.quote(clean(text))
