"""The deployment after the advice, as one engine's launch command: today's settings (the facts'
serving.* values, carried by the engine profile's `deployment` entries) with every strategy's
settings merged in, one value per flag, checked against the profile at the deployment's version.

A Launch is a plain frozen value: reports/emit.py formats it as a bash script, and the advice's
text and JSON show its changes (today -> proposed, with the rule that set each).

What is never in it: a flag the engine refuses at that version (the profile's `refuses`), a
flag given twice, a method flag over a checkpoint that does not have that format (the change is
then a comment saying which checkpoint to make, and how), a batch cap below today's running batch
without the reason, and a value from the facts that could be read as an option.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from kbopt.engine.advice.caps import plan_metric, today_batch
from kbopt.engine.advice.command import Command
from kbopt.engine.advice.model import Advice, StrategyAdvice
from kbopt.engine.advice.settings import Setting, Target, clean, settings_for, targets, variant_of
from kbopt.engine.advice.whatif import service_gain
from kbopt.errors import KboptError
from kbopt.kb.engines import ENGINES, Carry, Engine, version_text
from kbopt.kb.knowledge import engine_catalog

# C0 and C1 controls and Unicode's line and paragraph separators: a line break to some readers
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
SIXTEEN_BIT = ("bf16", "fp16", "fp32")
CAP_FACT = "serving.max_num_seqs"      # the deployment entry of this fact names the engine's batch cap
PLACEHOLDER = "DRAFT_MODEL"            # a draft model the advice cannot name: never in an executable line


@dataclass(frozen=True)
class Arg:
    """One setting of the launch: a flag, a key of TensorRT-LLM's YAML file, or a variable."""
    name: str
    kind: str                          # cli | yaml | env
    value: str | None                  # as the engine reads it (unquoted); None: a switch
    today: str | None                  # the value today's server runs with (None: a switch, or not set)
    rule: str                          # what set it: a rule and its strategy, or the fact carried
    needs: tuple[str, ...] = ()
    why: str = ""                      # a stated reason beside the value (a cap kept below today's batch)
    set_today: bool = False            # today's server has it (with the value `today`)
    verbatim: bool = False             # from today's command, not in the profile: carried as given, unchecked
    words: bool = False                # the value is several shell-quoted words (SGLang --lora-paths a=x b=y)
    checkpoint_bound: bool = False     # today's checkpoint's quantization flag: set only while MODEL is that checkpoint
    default: str | None = None         # what today's server runs where its command leaves the flag to the engine

    @property
    def status(self) -> str:
        """unchanged: today's value; change: another value than today's; new: not set today."""
        if self.rule.startswith("removed"):
            return "removed"
        if not self.set_today:
            return "new"
        return "unchanged" if self.today == self.value else "change"

    @property
    def today_text(self) -> str:
        if not self.set_today:
            return f"(not set: the engine's default here, {self.default})" if self.default else "(not set)"
        return "(on)" if self.today is None else self.today

    @property
    def value_text(self) -> str:
        return "(removed)" if self.status == "removed" else "(on)" if self.value is None else self.value


@dataclass(frozen=True)
class Launch:
    target: Target
    model: str | None                  # the facts' model.name; None: the script asks for MODEL
    args: tuple[Arg, ...]
    notes: tuple[str, ...] = ()        # strategies with no setting here, checkpoints to make, what was left out
    dropped: tuple[str, ...] = field(default=())   # settings left out because the engine refuses them
    removed: tuple[Arg, ...] = ()      # today's settings a change replaces (--no-enable-prefix-caching)
    applied: tuple[str, ...] = ()      # each change this script makes, with what it gives alone (the model)
    not_applied: tuple[str, ...] = ()  # each change it cannot make (a checkpoint, a step outside it), with its gain
    baseline: str = "today's deployment"   # what the gains are relative to

    @property
    def spec(self) -> Engine:
        return self.target.spec

    def changes(self) -> tuple[Arg, ...]:
        return tuple(arg for arg in self.args if arg.status != "unchanged") + self.removed

    def argv(self) -> list[tuple[str, str | None]]:
        return [(arg.name, arg.value) for arg in self.args]


def checked_model(name: Any) -> str | None:
    """model.name as a launch command may take it, or a one-paragraph error naming the field."""
    if name is None:
        return None
    text = str(name)
    if _CONTROL.search(text):
        shown = "".join(f"<U+{ord(c):04X}>" if _CONTROL.match(c) else c for c in text)   # which one, visibly
        raise KboptError(f"model.name {shown!r} holds control characters (a newline, tab or escape): a launch "
                         "script does not take it; give the model id as the engine should load it")
    if text.strip() != text or not text:
        raise KboptError(f"model.name {text!r} starts or ends with white space: give the model id as the engine should load it")
    if text.startswith("-"):
        raise KboptError(f"model.name {text!r} starts with '-': the engine would read it as an option, not as the model "
                         f"to serve; give the model id or a path (./{text} for a local folder)")
    return text


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _parse(setting: Setting) -> list[tuple[str, str, str | None]]:
    """A setting's line as (kind, name, value) items: a command-line line may set several flags."""
    if setting.kind == "yaml":
        return [("yaml", setting.name, setting.text.split(":", 1)[1].strip())]
    if setting.kind == "env":
        name, _, value = setting.text.partition("=")
        return [("env", name, shlex.split(value)[0] if value else "")]
    out: list[tuple[str, str, str | None]] = []
    for word in shlex.split(setting.text):
        if word.startswith("--"):
            out.append(("cli", word, None))
        elif out:
            kind, flag, before = out[-1]
            out[-1] = (kind, flag, word if before is None else before + " " + word)
    return out


def _fp8_checkpoint(facts: Mapping[str, Any]) -> bool:
    """Today's FP8 weights come from a pre-quantized checkpoint (its id says FP8), not online quantization."""
    return "fp8" in str(facts.get("model.name") or "").lower()


def _sixteen_bit_checkpoint(facts: Mapping[str, Any]) -> bool:
    quantization = facts.get("serving.quantization")
    if quantization in (None, "none"):
        return facts.get("model.weight_dtype") in (None, *SIXTEEN_BIT)
    return quantization == "fp8" and not _fp8_checkpoint(facts)


HOW_TO = {
    "int4": ("an INT4 {method} checkpoint (W4A16) of the model: make it with llm-compressor (oneshot with AWQModifier or "
             "GPTQModifier, scheme W4A16) or AutoAWQ, or use a published one"),
    "nvfp4": "an NVFP4 checkpoint: make it with NVIDIA ModelOpt (hf_ptq.py --qformat nvfp4) or use a published nvidia/*-FP4 one",
    "int8": "an INT8 W8A8 checkpoint: make it with llm-compressor (oneshot with SmoothQuant and GPTQModifier, scheme W8A8)",
    "int8_weight_only": "an INT8 weight-only checkpoint (W8A16): make it with llm-compressor (oneshot with GPTQModifier, scheme W8A16)",
    "fp8": ("an FP8 checkpoint: make it with llm-compressor (oneshot, scheme FP8_DYNAMIC) or NVIDIA ModelOpt "
            "(hf_ptq.py --qformat fp8), or use a published *-FP8 one"),
}


def quantizes_as_it_loads(engine: str, variant: str | None, params: Mapping[str, Any], facts: Mapping[str, Any]) -> bool:
    """Whether `engine` makes this quantization of today's checkpoint itself as it loads (online FP8
    from 16 bits, TGI's EETQ and SGLang's torchao INT8 weight-only): one server's script applies it."""
    return engine in ENGINES and _sixteen_bit_checkpoint(facts) and (
        (variant == "fp8" and engine_catalog().engines[engine].checkpoints.online_fp8
         and params.get("method") not in ("nvfp4", "fp8_checkpoint"))
        or (variant == "int8" and params.get("mode") == "weight_only" and engine in ("sglang", "tgi")))


def _needs_checkpoint(engine: str, strategy: StrategyAdvice, facts: Mapping[str, Any],
                      beside: tuple[Setting, ...] = ()) -> str | None:
    """How to make the checkpoint a quantization change needs, or None when the engine quantizes
    today's checkpoint itself (online FP8 from 16 bits, TGI's EETQ, SGLang's torchao INT8); `beside`,
    the change's settings, names those the profile gives with the checkpoint."""
    if strategy.id != "quantization" or strategy.status == "keep":
        return None
    variant = variant_of(strategy.key) or str(strategy.params.get("scheme") or "")
    params = strategy.params
    if quantizes_as_it_loads(engine, variant, params, facts) or variant in ("fp16", ""):
        return None
    kind = ("nvfp4" if variant == "nvfp4" or params.get("method") == "nvfp4"
            else "int8_weight_only" if variant == "int8" and params.get("mode") == "weight_only" else variant)
    if kind not in HOW_TO:
        return None
    how = HOW_TO[kind].format(method=str(params.get("method") or "AWQ").upper())
    given_with = [setting for setting in beside if setting.with_checkpoint and setting.kind == "cli"]
    given = (" and " + "; ".join(f"{setting.text} added to args ({clean(setting.needs[0]) if setting.needs else 'its profile gives it'})"
                                 for setting in given_with) if given_with else " (the engine reads its quantization config)")
    return (f"{strategy.key}: needs {how}; then run this script with MODEL set to that checkpoint{given}. Until then "
            f"MODEL stays today's checkpoint, and the script sets no quantization flag for the new one")


def _checkpoint_on_the_move(spec: Engine, facts: Mapping[str, Any], moved_from: str | None) -> str | None:
    """What today's quantization, kept, needs on the engine moved to: nothing where it reads today's
    checkpoint; a checkpoint made for it where today's engine quantizes 16-bit weights as it loads
    and it cannot (a newcomer's 2026-12 try: 141 GB of BF16 on 2x80 GB, silently), or where it cannot
    read today's format (set 17 d7: an AutoAWQ checkpoint on TensorRT-LLM loads unquantized)."""
    today = moved_from or facts.get("workload.engine") or "today's engine"
    quantization = facts.get("serving.quantization")
    loads = spec.checkpoints
    if quantization == "fp8" and _sixteen_bit_checkpoint(facts) and not loads.online_fp8:
        return (f"FP8 weights today come from {today} quantizing the 16-bit checkpoint as it loads, which {spec.title} "
                f"does not: it needs {HOW_TO['fp8']}; then run this script with MODEL set to that checkpoint (until then "
                "MODEL is today's 16-bit checkpoint, at twice the weight memory)")
    if quantization in loads.unread:
        return (f"today's checkpoint ({clean(facts.get('model.name') or 'model.name')}) is in the "
                f"{str(quantization).removeprefix('int4_').upper()} INT4 format {today} reads, which {spec.title} "
                f"does not read: it loads {loads.reads} ({loads.source}), so this one would load unquantized. Make "
                f"{loads.make}, and run the script with MODEL set to it")
    return None


def _carried(spec: Engine, target: Target, facts: Mapping[str, Any], notes: list[str]) -> list[Arg]:
    out: list[Arg] = []
    for carry in spec.deployment:
        value = facts.get(carry.fact)
        if value is None or (carry.when is not None and value != carry.when):
            continue
        if carry.deployed_only and not target.deployed:
            notes.append(f"{carry.fact} = {clean(value)} is {clean(facts.get('workload.engine') or 'another engine')}'s "
                         f"setting, in its own denominator: not carried to {spec.title}")
            continue
        if carry.mapping:
            mapped = dict(carry.mapping).get(str(value))
            if mapped is None:
                continue
            if carry.fact == "serving.quantization" and mapped == "fp8" and _fp8_checkpoint(facts):
                notes.append(f"serving.quantization = fp8 with an FP8 checkpoint ({clean(facts.get('model.name'))}): "
                             "the engine reads its quantization config, no flag")
                continue
            if carry.fact == "serving.quantization" and value == "fp4":
                # FP4 weights always come from a checkpoint, in one of two formats (NVFP4 from ModelOpt, MXFP4 as
                # gpt-oss ships): the engine reads which from its config, and a flag naming the other is refused
                # (vllm/config/model.py@0.12.0:1045 "does not match the quantization method").
                notes.append(f"serving.quantization = fp4 ({clean(facts.get('model.name'))}): an FP4 checkpoint, NVFP4 or "
                             "MXFP4; the engine reads which from its quantization config, no flag")
                continue
            if mapped.endswith("_marlin") and facts.get("hardware.vendor") == "amd":
                # Marlin is CUDA only: ROCm lists awq and gptq, not their Marlin forms (sglang
                # configs/model_config.py@0.5.0rc2:409-419, vllm platforms/rocm.py)
                mapped = mapped.removesuffix("_marlin")
            value = mapped
        if carry.value == "expert_size":
            value = facts.get("serving.tensor_parallel_size") or 1
        out.extend(_carry_args(carry, value))
    return out


def _carry_args(carry: Carry, value: Any) -> list[Arg]:
    rule = f"today: {carry.fact}"
    yaml_scalar = json.dumps(value) if isinstance(value, str) else _text(value)    # a JSON scalar is a YAML scalar
    text = yaml_scalar if carry.kind == "yaml" else shlex.quote(_text(value))
    line = carry.set.replace("{value}", text)
    setting = Setting("", carry.kind, carry.name, line)
    return [Arg(name, kind, text, text, rule, set_today=True) for kind, name, text in _parse(setting)]


def _scripted_why(strategy: StrategyAdvice, name: str, value: Any) -> str:
    """Why a cap a script that applies part of the plan prints is what it is (the advisor's note)."""
    head = f"{name}={value} where the script applies only part of the plan: "
    return next((f"; {clean(note.text.removeprefix(head))}" for note in strategy.caveats if note.text.startswith(head)), "")


def _rule(strategy: StrategyAdvice) -> str:
    rules = strategy.recommended_by or strategy.because
    return clean(f"{rules[0] if rules else 'kbopt'} ({strategy.key or strategy.id})")


def _cap_why(strategy: StrategyAdvice) -> str:
    """Why the strategy's batch cap differs from what its rule computed (sized in the advisor, caps.py)."""
    return next((why for _, why in strategy.sized), "")


def _check_pool_fits(advice: Advice) -> None:
    for metric in ("kv_pool_gib_per_gpu", "kv_pool_tokens"):
        _, after = plan_metric(advice.plan, advice.derived, metric)
        if after is not None and after <= 0:
            raise KboptError(f"the deployment does not fit: derived.{metric} is {after:.3g} with the advice's changes the "
                             "performance model evaluates (the weights and activations leave no KV cache), so no batch "
                             "cap (serving.max_num_seqs) can be printed; give it more GPUs (serving.tensor_parallel_size "
                             "within hardware.gpu_count) or smaller weights, then ask again")


def _from_command(spec: Engine, command: Command) -> list[Arg]:
    """Today's command, flag for flag: the profile's flags with their kind, the rest as given."""
    out = []
    for name, value in command.args:
        flag = spec.by_name.get(name)
        kind = "env" if name in dict(command.env) else "yaml" if name in command.yaml_keys else flag.kind if flag is not None else "cli"
        modelled = name in command.modelled
        out.append(Arg(name, kind, value, value, "today: --launch" if modelled else "today: --launch (not modelled: carried as given)",
                       set_today=True, verbatim=not modelled, words=name in command.several))
    return out


def build_launch(advice: Advice, engine: str, command: Command | None = None) -> Launch:
    """The deployment after the advice as `engine`'s launch: every setting once, checked.
    `command`: today's launch command (--launch); for its own engine it is carried flag for flag."""
    if engine not in ENGINES:
        raise KboptError(f"--emit {engine}: not an engine kbopt has a profile for ({', '.join(ENGINES)})")
    facts = advice.facts
    target = targets(facts, engine, advice.constants)[0]
    spec = target.spec
    vendor = facts.get("hardware.vendor")
    if vendor is not None and vendor not in spec.vendors:
        raise KboptError(f"--emit {engine}: {spec.title} runs on {' and '.join(v.upper() for v in spec.vendors)} GPUs "
                         f"only, and hardware.vendor is {vendor}; emit one of "
                         f"{', '.join(e for e in ENGINES if vendor in engine_catalog().engines[e].vendors)}")
    if target.below_floor:
        assert spec.floor is not None
        raise KboptError(f"serving.engine_version {version_text(target.version)} is below the oldest {spec.title} "
                         f"version kbopt's profile covers ({version_text(spec.floor)}; profiled for "
                         f"{', '.join(version_text(v) for v in spec.versions)}): the flags it would print (such as "
                         f"{_first_flag(spec)}) are not known to exist there; upgrade the engine or leave "
                         "serving.engine_version out to get the script for the latest covered version")
    model = checked_model(facts.get("model.name"))
    # the objectives the facts show missed, and where the whole advice leaves each, first: a script
    # that cannot meet one says so (set 17 d2: an SGLang script silent on a 35 ms ITL objective)
    notes: list[str] = [f"missed today: {s.text()}" for s in advice.symptoms
                        if s.objective is not None and s.miss is not None and s.miss > 0]
    # and those met today that the plan takes past their objective: the trade is the user's to see
    # before running it (review set 41 F3: a TTFT p99 met at 2.6 s of 3 s, about 4.2 s after the plan,
    # absent from the header)
    notes += [f"met today, past it after the plan: {s.text()}" for s in advice.symptoms
              if s.objective is not None and s.miss is not None and s.miss <= 0 and s.after is not None and s.after > s.objective]
    if advice.restated:
        notes.append(f"the advice behind this script: {advice.restated.text()}")
    if model is not None and "/" not in model:
        # a catalog key (kbopt collect --model llama-3-8b) names a shape, not a checkpoint to load
        notes.append(f"model.name {clean(model)!r} is neither a Hugging Face id (org/name) nor a path: run the "
                     "script with MODEL set to the checkpoint the engine should load (MODEL=org/name bash script.sh)")
    args: dict[str, Arg] = {}
    if command is not None and command.engine == engine:
        for arg in _from_command(spec, command):
            args.setdefault(arg.name, arg)
        if command.unmodelled:
            notes.append(f"carried as given from today's command, not checked by kbopt's profile: {', '.join(command.unmodelled)}")
        notes.extend(f"{name}: {spec.by_name[name].note}" for name, _ in command.args
                     if name in spec.by_name and spec.by_name[name].note)
    else:
        if command is not None:
            # Only what a deployment entry of today's engine carries becomes a fact the target can
            # set: a flag read for the advice alone (TGI's --lora-adapters, --speculate) is lost in
            # the move, and the new server would lack it (set 12: four LoRA adapters dropped).
            source = engine_catalog().engines[command.engine]
            carried = {entry.name for entry in source.deployment}
            if isinstance(facts.get("serving.speculative_method"), str):   # set below in the target's own words
                carried |= {read.flag for read in source.reads if read.fact in _SPECULATION_FACTS}
            # a flag read only into facts the target's own entries carry travels as those facts (vLLM's
            # --enable-prefix-caching is serving.prefix_caching, on by default in SGLang): set 15 read it as lost
            target_facts = {entry.fact for entry in spec.deployment}
            read_into: dict[str, set[str]] = {}
            for read in source.reads:
                read_into.setdefault(read.flag, set()).add(read.fact)
            carried |= {flag for flag, read_facts in read_into.items() if read_facts <= target_facts}
            lost = [name for name, _ in command.args if name not in carried]
            notes.append(f"today's command is for {command.engine}: its settings are carried through the facts they state. "
                         f"NOT carried to {spec.title}, which has no setting kbopt maps them to: "
                         f"{', '.join(lost) if lost else 'none'}"
                         + (": add the new engine's own equivalents yourself, or the new server lacks them" if lost else ""))
        for arg in _carried(spec, target, facts, notes):
            args.setdefault(arg.name, arg)
        _assumed_tensor_parallel(spec, args, facts, advice.derived)
    set_by: dict[str, str] = {}
    placeholders: list[str] = []
    cap_name = next((c.name for c in spec.deployment if c.fact == CAP_FACT), None)
    removed: list[Arg] = []
    # A quantization that needs another checkpoint is not in the script until MODEL names one, so
    # budgets and caps the advisor sized after the whole plan are printed as today's checkpoint
    # needs them, with the value for the new checkpoint beside.
    pending = [s.key for s in advice.strategies if s.status != "keep" and not s.stands_in_for and _needs_checkpoint(engine, s, facts)]
    # replicas the plan adds, which one server's script does not start
    replicas = advice.plan.replicas if advice.plan is not None and advice.plan.replicas else None
    if pending or replicas:
        # where the whole advice leaves an objective is not where this script does (set 19 d6: "meets
        # it" beside an INT8 checkpoint the script could not load)
        outside = " and ".join([*pending, *([f"{replicas:g} replicas"] if replicas else [])])
        notes = [f"{note}; that is the whole plan, {outside} included, which this script does not apply"
                 if note.startswith(("missed today: ", "met today, past it")) and "after the plan" in note else note for note in notes]
    # A migration carries only what facts state: speculation in place today, which no deployment
    # entry carries (it is read from --speculative-config and the like), is set in the new engine's
    # own words, or the new server would lack it (set 13: EAGLE-3 lost moving to SGLang). Other
    # strategies in place travel as their facts (a checkpoint's quantization is the checkpoint's).
    moved_from = advice.restated.moved_from if advice.restated else None   # the advice re-run for it (migrate.py)
    moved = moved_from is not None
    migrating = not target.deployed or moved or (command is not None and command.engine != engine)
    in_place = list(advice.strategies)
    method = facts.get("serving.speculative_method")
    if migrating and isinstance(method, str) and method != "none" and all(s.id != "speculative_decoding" for s in in_place):
        # speculation running today that no rule spoke of: the facts are its parameters
        in_place.append(StrategyAdvice(
            id="speculative_decoding", layer="scheduling", title="Speculative decoding", status="keep",
            params={"method": method, **{name: facts[path] for name, path in (("num_speculative_tokens", "serving.num_speculative_tokens"),
                                                                              ("draft_model", "model.draft_model")) if path in facts}},
            because=("today's command",), key=f"speculative_decoding[{method}]"))
    if migrating and (note := _checkpoint_on_the_move(spec, facts, moved_from)):
        notes.append(note)
    # What this script applies: in place already, or a change with a setting here and no checkpoint
    # to wait for. A change that works against an objective alone is left out while the changes it
    # was judged beside are not applied (set 18 d2: a 288-token chunk budget, harmless beside INT8
    # weights and a second replica, alone doubled a missed TTFT objective's mean).
    applies = {s.key for s in in_place if s.status == "keep" or (s.key not in pending and any(
        setting.kind != "note" for setting in settings_for(target, s.id, s.key, s.params, facts, advice.derived)))}
    waiting = {s.key: [k for k in s.beside if k not in applies] for s in in_place if s.beside and s.status != "keep"}
    for strategy in in_place:
        if strategy.status == "keep":
            if migrating and strategy.id == "speculative_decoding":   # the one read through no deployment entry
                _carry_in_place(strategy, target, facts, advice.derived, args)
            continue            # in place today: its settings are today's, carried above or the engine's default
        if _idle_stand_in(strategy, pending, engine, facts):
            continue
        rule = _rule(strategy)
        checkpoint = _needs_checkpoint(engine, strategy, facts, tuple(settings_for(
            target, strategy.id, strategy.key, strategy.params, facts, advice.derived)))
        if checkpoint:
            notes.append(checkpoint)
            continue
        if waiting.get(strategy.key):
            # what to set then, so that a user who applies the others does not apply them alone
            # (the regression review of set 36: INT8 without its 288-token budget, an ITL p99 of 255 ms against 50)
            then = "; ".join(setting.text for setting in settings_for(target, strategy.id, strategy.key, strategy.params,
                                                                       facts, advice.derived) if setting.kind != "note")
            placeholders.append(f"{strategy.key} ({rule}): {'set ' + clean(then) + ' once' if then else 'not set until'} "
                                f"{', '.join(waiting[strategy.key])} "
                                f"{'is' if len(waiting[strategy.key]) == 1 else 'are'} applied too: alone "
                                f"{clean(strategy.alone.removeprefix('harmful: '))}")
            continue
        params = strategy.params
        if (pending or replicas) and strategy.before_plan:
            params = {**params, **dict(strategy.before_plan)}
            waits = " and ".join(([f"MODEL set to the {' and '.join(pending)} checkpoint"] if pending else [])
                                 + ([f"the plan's {replicas:g} replicas"] if replicas else []))
            notes.extend(f"{name} {clean(str(today))}: sized for what this script applies; with {waits} it is "
                         f"{clean(str(strategy.params.get(name)))} ({rule})" + _scripted_why(strategy, name, today)
                         for name, today in strategy.before_plan if today != strategy.params.get(name))
        for setting in settings_for(target, strategy.id, strategy.key, params, facts, advice.derived):
            for name in setting.removes:
                if name in args and args[name].set_today and name not in set_by:
                    old = args.pop(name)
                    removed.append(Arg(name, old.kind, None, old.today, f"removed by {rule}", set_today=True))
            if setting.kind == "note":
                notes.append(f"{rule}: {setting.text}")
                continue
            if PLACEHOLDER in setting.text:
                placeholders.append(f"{setting.text} ({rule}): it names no draft model; put the draft checkpoint's id "
                                    f"or path in place of {PLACEHOLDER} and add it")
                continue
            for index, (kind, name, value) in enumerate(_parse(setting)):
                if name in set_by:
                    if args[name].value != value:
                        notes.append(f"{rule} also sets {name} {clean(value or '')}: the value of {set_by[name]} "
                                     "(earlier in the advice) is kept")
                    continue
                today = args[name].today if name in args else None
                arg = Arg(name, kind, value, today, rule, setting.needs if index == 0 else (), set_today=name in args)
                if name == cap_name and params is strategy.params:   # sized after the whole plan (caps.py): its why
                    arg = Arg(arg.name, arg.kind, arg.value, arg.today, arg.rule, arg.needs, _cap_why(strategy), arg.set_today)
                args[name], set_by[name] = arg, rule
        if strategy.stands_in_for in pending:
            _bind_stand_in(strategy, rule, args, set_by, notes, model is not None)
    _heads_split_evenly(spec, args, facts, notes)
    _gpus_needed(spec, args, facts, notes)
    _whole_blocks_per_gpu(target, args, facts, advice.derived, notes)
    if cap_name is not None and cap_name in args:
        _check_pool_fits(advice)
    _within_bounds(spec, args, facts, advice.derived, notes)
    _as_rank_totals(spec, args, facts, notes, {name for name, _ in command.args} if command is not None and command.engine == engine else set())
    _implied_caps(spec, args, facts, advice.derived, notes)
    _prompts_within_budget(spec, args, facts, notes)
    _into_replaced_sections(spec, args, notes)
    if engine == facts.get("workload.engine"):
        _todays_defaults(spec, args, advice.derived, notes)
    if engine == "trtllm" and (command is None or command.engine != engine):
        # stated, where kbopt writes the command: the settings are the PyTorch backend's (today's command keeps its own)
        args.setdefault("--backend", Arg("--backend", "cli", "pytorch", None, "kbopt: the PyTorch backend these settings are for"))
    if any(a.kind == "yaml" for a in args.values()):
        for option in ("--extra_llm_api_options", "--config"):
            if option in args and args[option].set_today:
                notes.append(f"today's {option} {clean(args[option].value or '')} is not a file kbopt could open where it "
                             "ran (give --launch @FILE beside it, or an absolute path): copy its keys into the YAML file this "
                             "script writes (the engine takes one file)")
                del args[option]
    if pending:
        _bind_to_todays_checkpoint(spec, args, notes, advice.facts, model)
    kept, dropped = _checked(spec, target, list(args.values()))
    applied, not_applied = _accounted(advice, pending, kept, removed, engine, facts)
    return Launch(target, model, tuple(kept), tuple(dict.fromkeys(notes)), tuple(placeholders + dropped), tuple(removed),
                  applied, not_applied, f"today's deployment moved to {spec.title}" if moved else "today's deployment")


def _assumed_tensor_parallel(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], derived: Mapping[str, Any]) -> None:
    """The tensor parallelism every estimate assumed, where the facts give the replica several GPUs
    and no serving.tensor_parallel_size: without the flag the engine loads on one GPU and the pool,
    caps and budgets sized on all of them do not exist (set 16 d1: a 2-GPU L40S replica relaunched
    on one, its cap of 131 over a pool of 28 sequences)."""
    carry = next((c for c in spec.deployment if c.fact == "serving.tensor_parallel_size"), None)
    tp = _whole(derived.get("derived.tensor_parallel"))
    if carry is None or carry.name in args or facts.get("serving.tensor_parallel_size") is not None or tp is None or tp < 2:
        return
    why = (f"serving.tensor_parallel_size is not in the facts: the advice's estimates split each layer over the "
           f"replica's {tp} GPUs (derived.tensor_parallel), so the script does; state today's degree if it differs")
    for arg in _carry_args(carry, tp):
        args[arg.name] = replace(arg, today=None, set_today=False, rule="kbopt: derived.tensor_parallel", why=why)


def _gpus_needed(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], notes: list[str]) -> None:
    """Where the script's tensor x pipeline parallelism spans more GPUs than the facts give a replica,
    say so first: the engine refuses to start on fewer (a plan that widens the split adds GPUs)."""
    degree = 1
    for fact in ("serving.tensor_parallel_size", "serving.pipeline_parallel_size"):
        name = next((c.name for c in spec.deployment if c.fact == fact), None)
        arg = args.get(name) if name else None
        degree *= (_whole(arg.value) or 1) if arg is not None else (_whole(facts.get(fact)) or 1)
    gpus = _whole(facts.get("hardware.gpu_count"))
    if gpus is not None and degree > gpus:
        notes.insert(0, f"this script needs {degree} GPUs for one replica (tensor x pipeline parallelism) and the facts give "
                        f"{gpus} (hardware.gpu_count): run it where the replica has {degree}, or take the alternative the "
                        "advice names on today's GPUs")


def _heads_split_evenly(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], notes: list[str]) -> None:
    """A new tensor-parallel degree that does not split the attention heads evenly is refused at
    load by every engine (sglang layers/linear.py@0.5.0rc2:781-786: the query heads divide by it, and
    the KV heads divide by it or it by them; vllm config/model.py@0.12.0:1141-1148 and
    layers/linear.py@0.12.0:918-923 the same): today's degree stays, saying why (Qwen2.5-7B's 28
    heads over 8 GPUs)."""
    name = next((c.name for c in spec.deployment if c.fact == "serving.tensor_parallel_size"), None)
    arg = args.get(name) if name else None
    tp, heads = _whole(arg.value) if arg is not None else None, _whole(facts.get("model.num_attention_heads"))
    if name is None or arg is None or tp is None or heads is None or arg.status == "unchanged":
        return
    kv_heads = _whole(facts.get("model.num_kv_heads"))
    kv_ok = kv_heads is None or facts.get("model.kv_lora_rank") or (kv_heads % tp == 0 if tp <= kv_heads else tp % kv_heads == 0)
    if heads % tp == 0 and kv_ok:
        return
    why = (f"{name} {tp} ({arg.rule}) does not split the model's {heads} attention heads"
           + (f" and {kv_heads} KV heads" if kv_heads else "") + " evenly, which the engine refuses at load")
    if arg.set_today and arg.today is not None:
        args[name] = replace(arg, value=arg.today, rule=f"today: {name} (a change to {tp} left out)", why=why)
    else:
        del args[name]
    notes.append(f"{why}: " + (f"today's {arg.today} stays" if arg.set_today else "not set"))


def _whole_blocks_per_gpu(target: Target, args: dict[str, Arg], facts: Mapping[str, Any], derived: Mapping[str, Any],
                          notes: list[str]) -> None:
    """Expert parallelism where tensor parallelism would cut a block-quantized expert mid-block:
    vLLM and SGLang refuse a slice of an expert's width that is not a whole number of quantization
    blocks (sglang layers/quantization/fp8.py@0.5.0rc2:538-553, vllm quantization/fp8.py@0.12.0:723-727:
    Qwen3-235B-A22B-FP8's 1,536 at TP8 is 192, under two 128-blocks); with experts whole on each GPU
    nothing is cut (review set 15 d1)."""
    spec = target.spec
    width, block, experts = (_whole(facts.get("model.moe_intermediate_size")), _whole(facts.get("model.weight_block_size")),
                             _whole(facts.get("model.num_experts")))
    tp_name = next((c.name for c in spec.deployment if c.fact == "serving.tensor_parallel_size"), None)
    ep_names = {c.name for c in spec.deployment if c.fact == "serving.expert_parallel"}
    tp_arg = args.get(tp_name) if tp_name else None
    tp = _whole(tp_arg.value if tp_arg is not None else facts.get("serving.tensor_parallel_size"))
    if (width is None or block is None or experts is None or tp is None or tp < 2 or experts < 2
            or (width % tp == 0 and (width // tp) % block == 0) or any(name in args for name in ep_names)):
        return
    why = (f"model.moe_intermediate_size {width} over tensor parallelism {tp} is {width / tp:g}, not a whole number of "
           f"{block}-wide quantization blocks (model.weight_block_size), which {spec.title} refuses to load")
    if experts % tp:
        notes.append(f"{why}; expert parallelism would need {experts} experts to divide among {tp} GPUs: serve at a "
                     "tensor parallelism that cuts whole blocks")
        return
    rule = f"kbopt: whole quantization blocks per GPU (parallelism, expert {tp})"
    added = False
    for setting in settings_for(target, "parallelism", "parallelism", {"expert": True, "tensor": tp, "degree": tp}, facts, derived):
        if setting.kind == "note":
            notes.append(f"{why}: {setting.text}")
            continue
        for kind, name, value in _parse(setting):
            if name in ep_names and name not in args:
                args[name] = Arg(name, kind, value, None, rule, why=why + "; with whole experts on each GPU nothing is cut")
                added = True
    if added:
        notes.append(f"expert parallelism added: {why}")


def _whole(value: Any) -> int | None:
    """A positive whole number from a fact or a flag's text, else None."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# The engine takes the checkpoint's quantization from its config and refuses a --quantization that
# names another method (vllm/config/__init__.py@0.10.2:1202-1207, sglang configs/model_config.py@0.5.0rc2:467-480):
# today's flag must go with today's checkpoint (review set 15: AWQ -> INT8 kept --quantization awq_marlin).
def _bind_to_todays_checkpoint(spec: Engine, args: dict[str, Arg], notes: list[str], facts: Mapping[str, Any],
                               model: str | None) -> None:
    for name in dict.fromkeys(c.name for c in spec.deployment if c.fact == "serving.quantization"):
        arg = args.get(name)
        if arg is None or not arg.set_today or arg.kind != "cli":
            continue
        flag = f"{name}{'' if arg.value is None else ' ' + arg.value}"
        if model is None:
            notes.append(f"{flag} is today's checkpoint's quantization: remove it when MODEL names the new checkpoint, "
                         "whose config says its own (the engine refuses a method that differs from the checkpoint's)")
            continue
        args[name] = replace(arg, checkpoint_bound=True)
        notes.append(f"{flag} is today's checkpoint's quantization: the script sets it only while MODEL is "
                     f"{clean(facts.get('model.name'))}; the new checkpoint's config says its own, and the engine refuses "
                     "a method that differs from the checkpoint's")


def _idle_stand_in(strategy: StrategyAdvice, pending: list[str], engine: str, facts: Mapping[str, Any]) -> bool:
    """A stand-in this engine's script has no use for: the variant it stands in for is applied
    here (this engine makes it as it loads), or it needs a checkpoint of its own here."""
    return bool(strategy.stands_in_for) and (strategy.stands_in_for not in pending
                                             or _needs_checkpoint(engine, strategy, facts) is not None)


def _bind_stand_in(strategy: StrategyAdvice, rule: str, args: dict[str, Arg], set_by: Mapping[str, str], notes: list[str],
                   bound: bool) -> None:
    """A variant applied on today's checkpoint in place of one that needs another: its flags are
    set only while MODEL is today's checkpoint (the new one's config names its own quantization,
    and the engine refuses a method that differs from it)."""
    mine = [name for name, by in set_by.items() if by == rule]
    if bound:
        for name in mine:
            if args[name].kind == "cli":
                args[name] = replace(args[name], checkpoint_bound=True)
    unbound = [name for name in mine if not args[name].checkpoint_bound]
    notes.append(f"{strategy.key} ({rule}) is applied on today's checkpoint until the {strategy.stands_in_for} one exists "
                 "(a flag before a new checkpoint)" + (f": remove {', '.join(unbound)} when MODEL names that checkpoint"
                                                       if unbound else ": the script sets it only while MODEL is today's"))


_SPECULATION_FACTS = frozenset({"serving.speculative_method", "serving.num_speculative_tokens", "model.draft_model"})


def _carry_in_place(strategy: StrategyAdvice, target: Target, facts: Mapping[str, Any], derived: Mapping[str, Any],
                    args: dict[str, Arg]) -> None:
    """A strategy in place today, as the target engine sets it, where nothing carried sets it yet."""
    for setting in settings_for(target, strategy.id, strategy.key, strategy.params, facts, derived):
        if setting.kind == "note" or PLACEHOLDER in setting.text:
            continue
        for index, (kind, name, value) in enumerate(_parse(setting)):
            if name not in args:
                args[name] = Arg(name, kind, value, None, f"{_rule(strategy)}, in place today", setting.needs if index == 0 else ())


def _accounted(advice: Advice, pending: list[str], kept: list[Arg], removed: list[Arg], engine: str,
               facts: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Each change of the advice as this script makes it or not, with what the performance model
    expects of it alone: a user who runs the script sees which part of the gain it brings, and
    which waits for a checkpoint or for a step the script cannot take (review set 8)."""
    set_by = {arg.rule for arg in kept if arg.status != "unchanged"} | {arg.rule.removeprefix("removed by ") for arg in removed}
    applied: list[str] = []
    not_applied: list[str] = []
    by_key = {strategy.key: strategy for strategy in advice.strategies}
    for strategy in advice.strategies:
        if strategy.status == "keep" or _idle_stand_in(strategy, pending, engine, facts):
            continue
        gain = service_gain(strategy.expected)
        if strategy.key in pending:
            not_applied.append(f"{strategy.key} (needs its checkpoint, above): {gain or 'no estimate of its own'}")
        elif _rule(strategy) in set_by:
            applied.append(f"{strategy.key}{': ' + gain if gain else ' (no estimate of its own)'}")
        elif waiting := [key for key in strategy.beside if key in pending or key not in by_key or _rule(by_key[key]) not in set_by]:
            # the same changes build_launch waits on: those of the plan this script does not apply
            not_applied.append(f"{strategy.key} (left out until {', '.join(waiting)} "
                               f"{'is' if len(waiting) == 1 else 'are'} applied: see the notes): "
                               f"{gain or 'no estimate of its own'}")
        else:
            not_applied.append(f"{strategy.key} (no {engine} setting here: see the notes): {gain or 'no estimate of its own'}")
    return tuple(applied), tuple(not_applied)


def _within_bounds(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], derived: Mapping[str, Any],
                   notes: list[str]) -> None:
    """A cap the engine refuses above the script's token budget (vLLM's --max-num-seqs, whether
    set or the engine's default on this GPU) comes down to that budget, saying why."""
    for bound in spec.bounds:
        limit = args.get(bound.at_most)
        if limit is None or not str(limit.value).isdigit():
            continue
        budget = int(str(limit.value))
        capped = args.get(bound.flag)
        gib = derived.get("derived.gpu_memory_gib")
        running = (int(str(capped.value)) if capped is not None and str(capped.value).isdigit()
                   else bound.default_on(str(facts.get("hardware.gpu_name") or ""),
                                         float(gib) if isinstance(gib, int | float) and not isinstance(gib, bool) else None))
        if running is None or running <= budget:
            continue
        why = (f"lowered to the token budget {bound.at_most} {budget}: {bound.why}, and the server would run "
               f"{running}{'' if capped is not None else ' by default on this GPU'} ({bound.source})")
        args[bound.flag] = (replace(capped, value=str(budget), rule=limit.rule, why=why) if capped is not None
                            else Arg(bound.flag, "cli", str(budget), None, limit.rule, why=why))
        notes.append(f"{bound.flag} {budget}: {why}")


def _as_rank_totals(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], notes: list[str],
                    from_command: set[str]) -> None:
    """Per-GPU caps written as the totals the engine divides among its data-parallel attention
    ranks (SGLang's --max-running-requests), where the launch turns that attention on. A value
    from today's command (`from_command`: its flags) is its own total already, today's too (set 24
    d3: --max-running-requests 1024 over 8 ranks read as 8,192 today)."""
    totals = spec.rank_totals
    size = args.get(totals.size) if totals is not None else None
    if totals is None or totals.switch not in args or size is None or not str(size.value).isdigit() or int(str(size.value)) < 2:
        return
    ranks = int(str(size.value))
    # today's value is per GPU only where today's server had data-parallel attention too
    today_ranks = int(facts.get("serving.data_parallel_size") or 1) if facts.get("serving.dp_attention") is True else 1
    for flag in totals.flags:
        arg = args.get(flag)
        if arg is None or arg.rule.startswith("today: --launch") or not str(arg.value).isdigit():
            continue
        per_gpu = int(str(arg.value))
        today = (str(int(arg.today) * today_ranks) if arg.today is not None and arg.today.isdigit() and flag not in from_command
                 else arg.today)
        args[flag] = replace(arg, value=str(per_gpu * ranks), today=today)
        notes.append(f"{flag} {per_gpu * ranks}: {per_gpu} per GPU x {ranks} data-parallel attention ranks; "
                     f"{spec.title} divides it among them ({totals.source})")


def _implied_caps(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], derived: Mapping[str, Any],
                  notes: list[str]) -> None:
    """A cap the engine would lower by itself under a flag the script sets (kb/engines: implied_caps)
    is set to the replica's running batch, which the advice's estimates assume (a total: the
    engine divides it among data-parallel attention ranks itself)."""
    for cap in spec.implied_caps:
        if cap.when not in args or cap.flag in args:
            continue
        running = derived.get("derived.running_batch")
        today = today_batch(facts)
        batch = math.ceil(running if _number(running) else today[0] if today else 0)
        if batch <= cap.value:
            continue
        why = (f"with {cap.when} and no {cap.flag}, {spec.title} runs {cap.value} requests ({cap.source}); "
               f"the advice's estimates assume today's {batch}")
        args[cap.flag] = Arg(cap.flag, "cli", str(batch), None, "kbopt: derived.running_batch", why=why)
        notes.append(f"{cap.flag} {batch}: {why}")


def _prompts_within_budget(spec: Engine, args: dict[str, Arg], facts: Mapping[str, Any], notes: list[str]) -> None:
    """Chunked prefill on where the engine refuses a prompt over the step's budget without it
    (kb/engines: prompt_limit) and the workload's long prompts are over the script's budget."""
    limit = spec.prompt_limit
    backend = args.get("--backend")
    if limit is None or limit.chunking in args or (backend is not None and backend.value != "pytorch"):
        return
    budget_arg = args.get(limit.budget)
    budget = _whole(budget_arg.value) if budget_arg is not None else limit.default
    fact = next((name for name in ("workload.prompt_len_p99", "workload.prompt_len_mean") if _number(facts.get(name))), None)
    longest = facts[fact] if fact is not None else None
    if budget is None or longest is None or longest <= budget:
        return
    why = (f"prompts of {longest:,.0f} tokens ({fact}) are over the step's budget of {budget:,} "
           f"({limit.budget}{'' if budget_arg is not None else ', its default'}): without chunked prefill "
           f"{spec.title} refuses them ({limit.source}); chunked at that budget, a prompt takes "
           f"{math.ceil(longest / budget)} steps")
    args[limit.chunking] = Arg(limit.chunking, "yaml", "true", None, "kbopt: the workload's prompts fit no step", why=why)
    notes.append(f"{limit.chunking}: true: {why}")


def _into_replaced_sections(spec: Engine, args: dict[str, Arg], notes: list[str]) -> None:
    """A command-line setting that an options-file section the script writes would drop goes into
    that section too, at its value (kb/engines: section_overrides)."""
    for override in spec.section_overrides:
        flag = args.get(override.flag)
        written = any(a.kind == "yaml" and name.startswith(override.section + ".") for name, a in args.items())
        if flag is None or not written or override.key in args:
            continue
        why = (f"the options file's {override.section} replaces the one {override.flag} builds ({override.source}): "
               f"written into it at {flag.value}")
        args[override.key] = Arg(override.key, "yaml", flag.value, flag.today, flag.rule, set_today=flag.set_today, why=why)
        notes.append(f"{override.key}: {flag.value}: {why}")


def _first_flag(spec: Engine) -> str:
    return spec.deployment[0].name if spec.deployment else spec.flags[0].name


# The engine's own value where today's command leaves a setting to it, as the model reads it.
DEFAULTS_READ = {"serving.max_num_batched_tokens": "derived.prefill_budget_tokens"}


def _todays_defaults(spec: Engine, args: dict[str, Arg], derived: Mapping[str, Any], notes: list[str]) -> None:
    """A change to a setting today's command leaves to the engine says what that default is on this
    deployment (TGI's prefill budget, about a second of the card's math: "(not set) -> 960" read as
    if there were no budget today); one that sets the default itself is no change, and is not set
    (review set 38 F15, set 39 F9: SGLang's --chunked-prefill-size 8192, its default on an H100)."""
    for entry in spec.deployment:
        value = derived.get(DEFAULTS_READ.get(entry.fact, ""))
        arg = args.get(entry.name)
        if arg is not None and not arg.set_today and isinstance(value, int | float) and not isinstance(value, bool):
            if arg.value == f"{value:.0f}":
                del args[entry.name]
                notes.append(f"{entry.name} {arg.value} ({arg.rule}): the engine's default here already: not set")
                continue
            args[entry.name] = replace(arg, default=f"{value:,.0f}")


def _checked(spec: Engine, target: Target, args: list[Arg]) -> tuple[list[Arg], list[str]]:
    """The args the engine takes at the target's version; each refused one left out, saying why,
    and today's value back in its place where today's server ran one (a prefill budget refused
    beside --speculate leaves today's budget, not none). Dropping one can make another refused (a
    size without its backend): repeated until none is."""
    dropped: list[str] = []
    while True:
        argv = [(a.name, a.value) for a in args if not a.verbatim]
        bad = {name for name, value in argv if _own_problem(spec, target, name, value, argv)}
        if not bad:
            return args, dropped
        kept: list[Arg] = []
        for arg in args:
            if arg.name not in bad:
                kept.append(arg)
                continue
            dropped.append(f"{arg.name}{'' if arg.value is None else ' ' + clean(arg.value)} ({arg.rule}): "
                           + "; ".join(_own_problem(spec, target, arg.name, arg.value, argv))
                           + ("; today's value stays" if arg.set_today and arg.value != arg.today else ""))
            if arg.set_today and arg.value != arg.today:
                kept.append(Arg(arg.name, arg.kind, arg.today, arg.today, "today: --launch", set_today=True))
        args = kept


def _own_problem(spec: Engine, target: Target, name: str, value: str | None, argv: list[tuple[str, str | None]]) -> list[str]:
    """The profile's problems with one flag, beside the others of `argv`: those the engine names
    it by. A combination refused on another flag (a prefill budget below --max-input-tokens) is
    that flag's problem, not the limit's, though leaving out either would end it."""
    others = [(n, v) for n, v in argv if n != name]
    before = set(spec.problems(target.version, others))
    return [p for p in spec.problems(target.version, others + [(name, value)])
            if p not in before and (p == name or p.startswith((f"{name} ", f"{name}:")))]


def deployed_launch(advice: Advice, command: Command | None = None) -> Launch | str | None:
    """The launch for the facts' own engine (workload.engine): a Launch, the one-paragraph reason
    none can be written (a version below the floor, a model id that would be an option), or None
    when the facts name no engine kbopt has a profile for."""
    engine = advice.facts.get("workload.engine")
    if engine not in ENGINES:
        return None
    try:
        return build_launch(advice, str(engine), command)
    except KboptError as error:
        return str(error)


def launch_dict(advice: Advice, command: Command | None = None) -> dict[str, Any] | None:
    """The deployed engine's settings as today -> proposed, for the JSON advice."""
    launch = deployed_launch(advice, command)
    if launch is None:
        return None
    engine = str(advice.facts.get("workload.engine"))
    if isinstance(launch, str):
        return {"engine": engine, "error": launch}
    return {"engine": engine, "version": version_text(launch.target.version),
            "settings": [{"setting": a.name, "kind": a.kind,
                          "today": (True if a.today is None else a.today) if a.set_today else None,
                          **({"engine_default": a.default} if a.default and not a.set_today else {}),
                          "proposed": None if a.status == "removed" else True if a.value is None else a.value,
                          "status": a.status, "rule": a.rule, **({"why": a.why} if a.why else {}),
                          **({"only_with_todays_checkpoint": True} if a.checkpoint_bound else {})}
                         for a in (*launch.args, *launch.removed)],
            "notes": list(launch.notes), "left_out": list(launch.dropped)}
