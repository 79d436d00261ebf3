"""`kbopt advise --emit ENGINE`: the deployment after the advice as a ready bash launch script.

engine/advice/launch.py decides the launch (today's settings with the advice's changes merged
in, one value per flag, checked against the engine's profile); this module only formats it.
vLLM, SGLang and TGI get a command line; TensorRT-LLM gets `trtllm-serve` plus the YAML file of
extra options it reads. The arguments sit in a bash array so that every line can carry a comment
naming the rule that set it and today's value (a `\\`-continued command cannot hold comments).
Every value is shell- or YAML-quoted here and comments are one clean line, so nothing from the
facts can break out of the script.
"""
from __future__ import annotations

import shlex
from typing import Any

from kbopt.engine.advice.command import Command
from kbopt.engine.advice.launch import Arg, Launch, build_launch
from kbopt.engine.advice.model import Advice
from kbopt.engine.advice.settings import clean
from kbopt.kb.engines import version_text

YAML_FILE = "kbopt-trtllm.yaml"


def _comment(arg: Arg) -> str:
    if arg.status == "unchanged":
        text = f"unchanged; {arg.rule}"
    elif arg.status == "change":
        text = f"{arg.today_text} -> {arg.value_text}; {arg.rule}"
    else:
        text = f"new; {arg.rule}"
    return "  # " + clean(text + (f"; {arg.why}" if arg.why else ""))


def _needs(arg: Arg, indent: str) -> list[tuple[str, str]]:
    """Preconditions as comment lines above the setting (bash allows them inside an array)."""
    return [(f"{indent}# needs: {clean(n)}", "") for n in arg.needs]


PAD_AT_MOST = 60     # a longer setting (twelve LoRA adapters' paths) keeps its comment beside it, unaligned


def _pad(lines: list[tuple[str, str]]) -> list[str]:
    width = max((len(text) for text, comment in lines if comment and len(text) <= PAD_AT_MOST), default=0)
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


def render_emit(advice: Advice, engine: str, command: Command | None = None) -> str:
    return render_launch(build_launch(advice, engine, command), advice.bottleneck)


def render_launch(launch: Launch, bottleneck: str) -> str:
    target, spec = launch.target, launch.spec
    args: list[tuple[str, str]] = []
    env: list[tuple[str, str]] = []
    yaml: list[tuple[str, str, str]] = []
    bound: list[tuple[str, str]] = []
    for arg in launch.args:
        if arg.kind == "cli":
            # several words were read shell-quoted (shlex.join) and go back as they are
            word = arg.name if arg.value is None else f"{arg.name} {arg.value if arg.words else shlex.quote(arg.value)}"
            if arg.checkpoint_bound:
                bound += _needs(arg, "  ") + [(f"  args+=({word})", _comment(arg))]
                continue
            args += _needs(arg, "  ") + [("  " + word, _comment(arg))]
        elif arg.kind == "env":
            env += _needs(arg, "") + [(f"export {arg.name}={shlex.quote(arg.value or '')}", _comment(arg))]
        else:
            yaml.append((arg.name, arg.value or "null", _comment(arg)))
    out = ["#!/usr/bin/env bash",
           f"# kbopt advise --emit {spec.id}: {clean(target.describe())}",
           f"# bottleneck: {clean(bottleneck)}; the deployment after the advice: each line names the rule that set it, "
           "or the fact it carries from today's server",
           *(f"# note: {clean(n)}" for n in spec.notes)]
    if target.asked is not None:
        out.append(f"# warning: {spec.title} {version_text(target.asked)} is not covered: written for "
                   f"{version_text(target.version)}, the nearest covered version")
    if not target.deployed:
        out.append(f"# the facts do not name {spec.id} as the deployed engine (workload.engine): settings that only "
                   "mean something in the deployed engine are not carried")
    changes = launch.changes()
    if changes:
        out.append("# changes (today -> proposed):")
        out += [f"#   {clean(a.name)}: {clean(a.today_text)} -> {clean(a.value_text)}  [{clean(a.rule)}]" for a in changes]
    else:
        out.append("# changes: none; this is today's deployment")
    if launch.applied or launch.not_applied:
        out.append(f"# what each change gives alone (the performance model, on {launch.baseline}):")
        out += [f"#   applied here: {clean(text)}" for text in launch.applied]
        out += [f"#   not applied by this script: {clean(text)}" for text in launch.not_applied]
    out += [f"# {clean(note)}" for note in launch.notes]
    out += [f"# left out: {clean(note)}" for note in launch.dropped]
    out.append("set -euo pipefail")
    if launch.model is None:
        out.append('MODEL=${MODEL:?"set MODEL to the model id or path (model.name is not in the facts)"}')
    else:
        out.append(f"MODEL_DEFAULT={shlex.quote(launch.model)}")
        out.append('MODEL=${MODEL:-$MODEL_DEFAULT}')
    out += _pad(env)
    config = ""
    if yaml:
        out.append(f"cat > {YAML_FILE} <<'YAML'")
        out += _yaml(yaml)
        out.append("YAML")
        option = "--config" if spec.flag_at("--config", target.version) else "--extra_llm_api_options"
        config = f" {option} {YAML_FILE}"
    out.append("args=(")
    out += _pad(args)
    out.append(")")
    if bound:
        out.append('if [ "$MODEL" = "$MODEL_DEFAULT" ]; then  # today\'s checkpoint: its quantization flag (a new one brings its own)')
        out += _pad(bound)
        out.append("fi")
    out.append(f'exec {spec.command} "$MODEL"{config} "${{args[@]}}"')
    return "\n".join(out) + "\n"

