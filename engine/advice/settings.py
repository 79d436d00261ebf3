"""A strategy's parameters in an engine's own settings (kb/engines/<engine>.yaml), for the engine
and version the facts name.

Values that mean different things in each engine are computed per engine from the model's
estimates, never copied: the memory fraction has a different denominator in each (share of the
whole device in vLLM and TGI, of weights plus KV in SGLang, of the memory left after weights and
activations in TensorRT-LLM). Every value goes through a quoting step of its kind (shell, YAML),
so a string from the facts or a rule stays inert in a command line or config file.
"""
from __future__ import annotations

import functools
import json
import math
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard

from kbopt.engine.lang.text import fmt
from kbopt.engine.pack.kept import Kept
from kbopt.engine.pack.rule import Pack
from kbopt.kb.engines import ENGINES, Engine, Entry, Version, parse_version, version_text
from kbopt.kb.knowledge import engine_catalog

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class Target:
    """The engine and version settings are written for."""
    engine: str
    version: Version
    stated: bool           # the version came from serving.engine_version (else: the latest covered)
    deployed: bool         # the facts' workload.engine: serving.* facts are this engine's settings
    asked: Version | None = None   # serving.engine_version when no covered version matches it
    constants: Constants = ()      # the pack's values of the memory rules' parameters (pack_constants)
    attention_ranks: int = 1       # data-parallel attention ranks after the plan: a flag the engine divides among them is their total

    @property
    def spec(self) -> Engine:
        return engine_catalog().engines[self.engine]

    @property
    def below_floor(self) -> bool:
        floor = self.spec.floor
        return floor is not None and self.version < floor

    def describe(self) -> str:
        text = f"{self.spec.title} {version_text(self.version)}"
        covered = self.spec.versions
        if self.asked is not None:
            return (f"{self.spec.title} {version_text(self.asked)} (not a version kb/engines/{self.engine}.yaml covers: "
                    f"its settings are written as for the nearest covered one, {version_text(self.version)}; check them "
                    f"against {version_text(self.asked)})")
        if self.stated and not covered[0][:2] <= self.version[:2] <= covered[-1][:2]:
            return text + (f" (outside the versions kb/engines/{self.engine}.yaml covers, {version_text(covered[0])} to "
                           f"{version_text(covered[-1])}: a setting whose range excludes it is left out)")
        if self.stated:
            return text
        return text + f" (serving.engine_version not given: the latest version kb/engines/{self.engine}.yaml covers)"


class Setting(NamedTuple):
    """One line: a flag, YAML key or variable to set, or a note where there is none. (A
    NamedTuple: an advice writes tens of them, each built in a third of a frozen dataclass's time.)"""
    engine: str
    kind: str              # cli | yaml | env | note
    name: str              # the flag, dotted YAML key or variable; "" for a note
    text: str              # the line itself (a note: its text)
    value: str = ""        # the quoted value (yaml: the YAML scalar), for emitters that nest keys
    unchanged: bool = False
    needs: tuple[str, ...] = ()
    source: str = ""
    differs: bool = False  # the deployed engine runs this setting today with another value (serving.* facts)
    removes: tuple[str, ...] = ()   # flags of today's server it replaces
    with_checkpoint: bool = False   # given beside the checkpoint the change needs (kb/engines.py Entry)

    @property
    def line(self) -> str:
        return f"# {self.text}" if self.kind == "note" else self.text


def clean(text: object) -> str:
    """Text safe in a comment or note: one line, no control characters."""
    return _CONTROL.sub(" ", str(text)).strip()


def targets(facts: Mapping[str, Any], engine: str | None = None, constants: Constants = (),
            attention_ranks: int = 1) -> tuple[Target, ...]:
    """The engine the settings are for: `engine` when asked, else workload.engine; every engine
    that runs on hardware.vendor's GPUs (all four on NVIDIA) when neither names a covered engine.
    The version is serving.engine_version for the deployed engine, else the latest covered; a
    stated version no profile covers is written for as the nearest covered one (`asked` keeps
    it), unless it is below the engine's floor."""
    deployed = facts.get("workload.engine")
    catalog = engine_catalog()
    vendor = facts.get("hardware.vendor")
    # No engine named: every engine that runs on the GPU's maker (TensorRT-LLM is NVIDIA's only).
    chosen = (engine,) if engine else (deployed,) if deployed in ENGINES else tuple(
        name for name in ENGINES if vendor is None or vendor in catalog.engines[name].vendors)
    out = []
    for name in chosen:
        spec = catalog.engines.get(str(name))
        if spec is None:
            raise ValueError(f"no engine profile {name!r}: the engines are {', '.join(ENGINES)}")
        given = parse_version(facts.get("serving.engine_version")) if name == deployed else None
        if given is None:
            out.append(Target(spec.id, spec.latest, False, name == deployed, constants=constants, attention_ranks=attention_ranks))
        elif given in spec.versions or (spec.floor is not None and given < spec.floor):
            out.append(Target(spec.id, given, True, name == deployed, constants=constants, attention_ranks=attention_ranks))
        else:
            out.append(Target(spec.id, spec.nearest(given), True, name == deployed, given, constants, attention_ranks))
    return tuple(out)


def variant_of(key: str) -> str | None:
    """`quantization[int8]` -> int8."""
    return key[key.index("[") + 1:-1] if key.endswith("]") and "[" in key else None


def resolved(strategy: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters with the ones a pattern implies spelled out (parallelism: pattern=tensor,
    degree=4 is tensor=4), so that each maps to one flag."""
    out = dict(params)
    if strategy == "parallelism":
        pattern, degree = out.get("pattern"), out.get("degree")
        if pattern in ("tensor", "pipeline", "data") and degree is not None:
            out.setdefault(str(pattern), degree)
    return out


def settings_for(target: Target, strategy: str, key: str, params: Mapping[str, Any],
                 facts: Mapping[str, Any], derived: Mapping[str, Any]) -> tuple[Setting, ...]:
    """The settings of one strategy for one engine and version, in catalog order."""
    params = resolved(strategy, params)
    variant = variant_of(key)
    slots: dict[str, list[Entry]] = {}
    for entry in engine_catalog().for_strategy(target.engine, strategy):
        if entry.variant not in (None, variant) or (entry.param and entry.param not in params):
            continue
        if entry.when and any(params.get(name) != value for name, value in entry.when):
            continue
        slots.setdefault(entry.slot, []).append(entry)
    out: list[Setting] = []
    for entries in slots.values():
        out.extend(_slot(target, entries, params, facts, derived))
    totals = target.spec.rank_totals
    if target.attention_ranks > 1 and totals is not None:
        # a per-GPU cap as the total the engine divides among its ranks, as the launch writes it
        # (launch.py _as_rank_totals: SGLang's --max-running-requests)
        out = [s._replace(text=f"{s.name} {int(s.value) * target.attention_ranks}", value=str(int(s.value) * target.attention_ranks))
               if s.kind == "cli" and s.name in totals.flags and s.value.isdigit() else s for s in out]
    return tuple(out)


def _slot(target: Target, entries: list[Entry], params: Mapping[str, Any], facts: Mapping[str, Any],
          derived: Mapping[str, Any]) -> list[Setting]:
    """The first alternative that holds at the version and whose value can be computed."""
    out_of_range: list[Entry] = []
    problems: list[str] = []
    for entry in entries:
        if not entry.holds_at(target.version):
            out_of_range.append(entry)
            continue
        if entry.kind == "note":        # a note may name a parameter's value: {target_in_flight}
            text = entry.set
            for name, value in params.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    text = text.replace("{" + name + "}", f"{value:,}" if isinstance(value, int) else fmt(value))
            return [Setting(target.engine, "note", "", clean(text), needs=entry.needs, source=entry.source,
                            removes=entry.removes)]
        values, problem = _values(entry, target.engine, params, facts, derived, target.version, target.constants)
        if values is None:
            problems.append(problem)
            continue
        return [_setting(target, entry, values, facts)]
    if any(problems):
        return [Setting(target.engine, "note", "", clean(next(p for p in problems if p)))]
    if problems:
        return []
    if out_of_range:
        entry = out_of_range[0]
        return [Setting(target.engine, "note", "", clean(
            f"{entry.name or entry.strategy} holds for {target.spec.title} {entry.range_text()}, "
            f"not {version_text(target.version)}: not set"), source=entry.source)]
    return []


def _setting(target: Target, entry: Entry, values: dict[str, Any], facts: Mapping[str, Any]) -> Setting:
    quoted = {name: _quote(entry.kind, value) for name, value in values.items()}
    text = entry.set
    for name in sorted(quoted, key=len, reverse=True):      # value_plus_one before value
        text = text.replace("{" + name + "}", quoted[name])
    unchanged = bool(entry.unchanged) and target.deployed and all(
        _same(facts.get(path), values.get("value") if want == "{value}" else want) for path, want in entry.unchanged)
    differs = target.deployed and any(
        facts.get(path) is not None and not _same(facts.get(path), values.get("value") if want == "{value}" else want)
        for path, want in entry.unchanged)
    return Setting(target.engine, entry.kind, entry.name, text, quoted.get("value", ""), unchanged,
                   entry.needs, entry.source, differs, entry.removes, entry.with_checkpoint)


def differs_from_today(strategy: str, key: str, params: Mapping[str, Any], facts: Mapping[str, Any],
                       derived: Mapping[str, Any], constants: Constants = ()) -> bool:
    """Whether a strategy in place today sets, in the deployed engine, a value other than the one
    its serving.* facts say it runs: then applying it is a change, not a keep."""
    deployed = facts.get("workload.engine")
    if deployed not in ENGINES:
        return False
    target = targets(facts, str(deployed), constants)[0]
    return any(s.differs for s in settings_for(target, strategy, key, params, facts, derived))


def sets_otherwise(strategy: str, key: str, before: Mapping[str, Any], after: Mapping[str, Any], facts: Mapping[str, Any],
                   derived: Mapping[str, Any], constants: Constants = ()) -> bool:
    """Whether the deployed engine's settings of a strategy read differently with `after`'s
    parameters than with `before`'s (a parameter no setting prints moves nothing, nor does one
    whose facts say today's server runs it whatever the value: a host KV tier in place)."""
    deployed = facts.get("workload.engine")
    if deployed not in ENGINES:
        return False
    target = targets(facts, str(deployed), constants)[0]
    def texts(params: Mapping[str, Any]) -> list[str]:
        return [s.text for s in settings_for(target, strategy, key, params, facts, derived) if not s.unchanged]
    return texts(before) != texts(after)


def _same(have: Any, want: Any) -> bool:
    if have is None or want is None:
        return False
    if isinstance(want, float) or isinstance(have, float):
        return isinstance(have, int | float) and isinstance(want, int | float) and abs(have - want) < 0.005
    return bool(have == want)


def _quote(kind: str, value: Any) -> str:
    if isinstance(value, dict):
        text = json.dumps(value, sort_keys=False)
        return text if kind == "yaml" else shlex.quote(text)
    if kind == "yaml":
        return json.dumps(value)        # a JSON scalar is a YAML scalar: strings stay strings
    if isinstance(value, bool):
        value = "true" if value else "false"
    return shlex.quote(str(value))


def _values(entry: Entry, engine: str, params: Mapping[str, Any], facts: Mapping[str, Any],
            derived: Mapping[str, Any], version: Version = (99,), constants: Constants = ()) -> tuple[dict[str, Any] | None, str]:
    """The placeholders of an entry's line, or None and why they cannot be computed."""
    raw = params.get(entry.param) if entry.param else None
    if entry.value is None:
        return ({"value": raw} if entry.param else {}), ""
    if entry.value == "fraction":
        fraction, why = memory_fraction(engine, raw, facts, derived, constants)
        return ({"value": fraction} if fraction is not None else None), why
    if entry.value == "speculative":
        return _speculative(engine, params, version)
    if entry.value == "hicache_size":
        pool = derived.get("derived.kv_pool_gib_per_gpu")
        if not _number(raw) or not _number(pool) or pool <= 0:
            return None, "host_cache_gib: the GPU KV pool (derived.kv_pool_gib_per_gpu) is not known, so the host pool is not sized"
        if raw <= pool:
            return None, (f"host_cache_gib: {raw:g} GiB of host memory is not more than the GPU KV pool ({pool:.1f} GiB); "
                          "SGLang needs a host pool larger than the GPU's, so the default (twice the GPU pool) is kept")
        # SGLang reads the size in GB of 1e9 bytes, as an integer (server_args.py@0.5.1:1607-1612, memory_pool_host.py@0.5.1:73-77)
        return {"value": math.floor(raw * 2**30 / 1e9)}, ""
    if entry.value == "offload_total":
        # vLLM's --kv-offloading-size is the total over the TP x PP ranks (vllm/config/vllm.py@0.12.0:476-483).
        if not _number(raw) or raw <= 0:
            return None, "host_cache_gib is not a size: not set"
        ranks = 1
        for fact in ("serving.tensor_parallel_size", "serving.pipeline_parallel_size"):
            size = facts.get(fact)
            ranks *= int(size) if _number(size) and size >= 1 else 1
        return {"value": round(raw * ranks, 1)}, ""
    if entry.value == "offload_connector":
        # vLLM's OffloadingConnector takes the host tier per rank in blocks of the GPU's block size
        # (v1/kv_offload/cpu.py@0.11.0:25-29, spec.py:33-36); --kv-offloading-backend native, the
        # size in GiB, leaves num_cpu_blocks 0 and the connector raises at start (config/vllm.py@0.12.0:476-488,
        # @0.13.0:493-501), so the connector is named whole.
        if not _number(raw) or raw < 1:
            return None, "host_blocks: the KV bytes a token or the GPU pool is not known, so the host tier is not sized; not set"
        return {"value": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                          "kv_connector_extra_config": {"num_cpu_blocks": int(raw)}}}, ""
    if entry.value == "cpu_loras":
        # only where today's command holds fewer adapters in host memory than the new slots (the
        # engine's default is the slots themselves): otherwise nothing to write
        today = facts.get("serving.max_cpu_loras")
        return ({"value": int(raw)}, "") if _number(raw) and _number(today) and today < raw else (None, "")
    if entry.value == "nvfp4_moe":
        # only for an NVFP4 MoE (an empty reason: nothing to say where it does not apply)
        experts = facts.get("model.num_experts")
        return ({}, "") if facts.get("serving.quantization") == "fp4" and _number(experts) and experts > 1 else (None, "")
    if entry.value == "host_bytes":
        return ({"value": int(raw * 2**30)}, "") if _number(raw) and raw > 0 else (None, "host_cache_gib is not a size: not set")
    if entry.value == "expert_size":
        size = params.get("expert_size") or params.get("tensor") or params.get("degree")
        return ({"value": size}, "") if _number(size) else (None, "expert: no degree given to size expert parallelism; not set")
    if entry.value == "under_budget":
        budget = params.get("max_num_batched_tokens")
        if _number(raw) and _number(budget) and raw >= budget:
            return None, (f"long_prefill_token_threshold: {raw:g} is not under the step's budget of {budget:g} tokens, "
                          "which already caps every prefill chunk: the flag would change nothing, not set")
        return {"value": raw}, ""
    if entry.value == "graph_sizes":
        # TGI captures one graph per listed batch size and pads a batch up to the next one
        # (launcher/src/main.rs@v3.3.0:2158-2173): its default powers of two to 32, then every 16.
        if not _number(raw) or raw < 1:
            return None, "max_batch: no batch size given; not set"
        top = int(-(-raw // 16) * 16) if raw > 32 else int(raw)
        sizes = [s for s in (1, 2, 4, 8, 16, 32) if s < top] + list(range(48, top, 16)) + [top]
        return {"value": ",".join(str(s) for s in dict.fromkeys(sizes))}, ""
    if entry.value in ("above_graph_ceiling", "sglang_graph_ceiling"):
        # Graphs for batches up to a new cap: needed only past what the engine captures already
        # (derived.cuda_graph_max_batch: today's setting or its default); a lower value would shrink
        # the capture (set 15: a cap of 431 on an MI300X set --cuda-graph-max-bs under SGLang's 512).
        ceiling = derived.get("derived.cuda_graph_max_batch")
        if not _number(raw) or raw < 1:
            return None, "max_num_seqs: no cap given; CUDA graph sizes not set"
        if _number(ceiling) and raw <= ceiling:
            return None, (f"CUDA graphs: the cap of {raw:g} is within the batches the engine captures already "
                          f"(up to {ceiling:g} here, derived.cuda_graph_max_batch): not set")
        return {"value": sglang_capture_top(raw) if entry.value == "sglang_graph_ceiling" else raw}, ""
    if entry.value == "vllm_graph_ceiling":
        # vLLM captures up to twice max_num_seqs, at most vllm_graph_capture_max (rules/parameters.yaml):
        # a capture size is set only for a cap past that, or past what today's command captures
        ceiling = max(_parameter("vllm_graph_capture_max", constants), derived.get("derived.cuda_graph_max_batch") or 0)
        if not _number(raw) or raw < 1:
            return None, "no batch size given; CUDA graph capture not set"
        if raw <= ceiling:
            return None, ""      # vLLM's own capture covers it: nothing to set, nothing to say
        return {"value": int(raw)}, ""
    if entry.value == "capture_grid":
        return ({"value": sglang_capture_top(raw)}, "") if _number(raw) and raw >= 1 else (None, "max_batch: no batch size given; not set")
    if entry.value == "spec_reserve":
        # a speculative method added where today's command pins SGLang's memory fraction: the fraction
        # less what its own default keeps for a draft (sglang_speculation_reserve_gib); nothing to
        # write where the fraction is SGLang's own or speculation already runs (an empty reason)
        today, gpu = facts.get("serving.memory_fraction"), derived.get("derived.gpu_memory_gib")
        running = facts.get("serving.speculative_method") not in (None, "none")
        if raw in (None, "none") or running or not _number(today) or not _number(gpu) or gpu <= 0:
            return None, ""
        return {"value": round(float(today) - _parameter("sglang_speculation_reserve_gib", constants) / float(gpu), 3)}, ""
    if entry.value == "queue_limit":
        # admission_control may be a yes/no: only a number is a queue limit.
        return ({"value": raw}, "") if _number(raw) and raw > 0 else (None, "admission_control: no limit given")
    raise ValueError(f"kb/engines/{engine}.yaml: unknown value computation {entry.value!r}")


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _speculative(engine: str, params: Mapping[str, Any], version: Version) -> tuple[dict[str, Any] | None, str]:
    """The speculative settings of `engine` at `version` for the method and draft count. A draft
    head the facts do not name (model.draft_model) stays the placeholder DRAFT_MODEL, which the
    launch script never puts in an executable line."""
    method, tokens = params.get("method"), params.get("num_speculative_tokens")
    if not _number(tokens) or tokens < 1:
        return None, "speculative_decoding: num_speculative_tokens not given; not set"
    tokens = int(tokens)
    draft = str(params.get("draft_model") or "DRAFT_MODEL")
    if engine == "sglang":
        return {"value": tokens, "value_plus_one": tokens + 1, "draft": draft}, ""
    if engine == "trtllm":
        # DecodingBaseConfig.from_dict (1.0-era llm_args.py): EAGLE-3 is "Eagle" with eagle3_one_model
        names = {"ngram": "NGram", "eagle": "Eagle", "eagle3": "Eagle", "mtp": "MTP", "draft_model": "DraftTarget"}
        config: dict[str, Any] = {"decoding_type": names.get(str(method), "DraftTarget")}
        if method == "mtp":
            config["num_nextn_predict_layers"] = tokens
        else:
            config["max_draft_len"] = tokens
        if method == "ngram":
            config["max_matching_ngram_size"] = 4
        elif method != "mtp":
            config["speculative_model_dir"] = draft
        if method in ("eagle", "eagle3"):
            config["eagle3_one_model"] = True
        return {"value": config}, ""
    if method not in ("ngram", "eagle", "eagle3", "mtp"):
        # vLLM's V1 engine has no draft_model speculation (vllm/engine/arg_utils.py@0.12.0:1774).
        return None, f"speculative_decoding: method {clean(method)} is not one vLLM's V1 engine runs (ngram, eagle, eagle3, mtp); not set"
    name = "deepseek_mtp" if method == "mtp" and version < (0, 11) else str(method)   # mtp from 0.11 (config/speculative.py@0.11.0:213-216)
    spec: dict[str, Any] = {"method": name, "num_speculative_tokens": tokens}
    if method == "ngram":
        spec["prompt_lookup_max"] = 4
    elif method != "mtp":
        spec["model"] = draft
    return {"value": spec}, ""


# The engines' memory rules and vLLM's graph capture (rules/parameters.yaml holds the same constants for the model's
# KV-pool estimates): read from the pack the advice runs on (pack_constants), so a pack that retunes
# one sizes the settings on it too, and the two cannot drift apart.
MEMORY_CONSTANTS = ("activation_gib_per_1k_tokens", "budget_tokens_large", "budget_tokens_small", "large_gpu_gib",
                    "nontorch_gib_sharded", "nontorch_gib_single", "trtllm_reserved_share", "vllm_graph_capture_max")
Constants = tuple[tuple[str, float], ...]


def pack_constants(pack: Pack) -> Constants:
    """The pack's values of the memory rules' parameters, as its rules read them."""
    def build() -> Constants:
        found = {p.name: float(p.value) for rule in pack.rules for p in rule.parameters if p.name in MEMORY_CONSTANTS}
        return tuple(sorted(found.items()))
    runtime = pack.runtime
    if runtime.memory_constants is None:
        runtime.memory_constants = build()
    return runtime.memory_constants


def sglang_capture_top(batch: float) -> int:
    """The smallest batch at or above `batch` that SGLang captures once --cuda-graph-max-bs names it:
    past its default capture list it adds sizes 16 apart from the list's top (160, 256 or 512 by the
    GPU's memory; cuda_graph_runner.py@0.5.1:205-210), so a cap off that grid is never captured
    (review set 32: 177 beside a largest graph of 176). Multiples of 16 past 32, and of 8 up to it,
    are on every GPU's grid."""
    top = math.ceil(batch)
    return top if top <= 8 else -(-top // 8) * 8 if top <= 32 else -(-top // 16) * 16


def _parameter(name: str, constants: Constants) -> float:
    for known, value in constants:
        if known == name:
            return value
    return _builtin_parameter(name)


@functools.cache
def _builtin_parameter(name: str) -> float:
    from kbopt.engine.pack.loader import builtin_parameters  # the loader (YAML, jsonschema): only where no pack gave it
    return float(builtin_parameters()[name].value)


CAPS = {"vllm": 0.95, "sglang": 0.95, "trtllm": 0.95, "tgi": 1.0}


def kv_target_gib(fraction: float, facts: Mapping[str, Any], derived: Mapping[str, Any], constants: Constants = ()) -> float | None:
    """The KV pool per GPU a memory_fraction asks for. The strategy's parameter is read as a share
    of the whole device memory for weights, activations and KV (vLLM's gpu_memory_utilization,
    the catalog's convention): the KV pool it leaves is what every engine must be given."""
    gpu, weights = derived.get("derived.gpu_memory_gib"), derived.get("derived.weights_gib_per_gpu")
    if not _number(gpu) or not _number(weights):
        return None
    return float(fraction * gpu - weights - _activations(facts, gpu, constants) - _nontorch(derived, constants))


def _activations(facts: Mapping[str, Any], gpu: float, constants: Constants) -> float:
    budget = facts.get("serving.max_num_batched_tokens")
    if not _number(budget):
        large = gpu >= _parameter("large_gpu_gib", constants)
        budget = _parameter("budget_tokens_large" if large else "budget_tokens_small", constants)
    return _parameter("activation_gib_per_1k_tokens", constants) * float(budget) / 1024


def _nontorch(derived: Mapping[str, Any], constants: Constants) -> float:
    tp = derived.get("derived.tensor_parallel")
    return _parameter("nontorch_gib_sharded" if _number(tp) and tp > 1 else "nontorch_gib_single", constants)


def memory_fraction(engine: str, fraction: Any, facts: Mapping[str, Any],
                    derived: Mapping[str, Any], constants: Constants = ()) -> tuple[float | None, str]:
    """`fraction` (a share of the whole device, vLLM's denominator) in `engine`'s own denominator,
    giving the same KV pool; None and why when the estimates do not allow it."""
    if not _number(fraction) or not 0 < fraction <= 1:
        return None, "memory_fraction is not a share between 0 and 1: not set"
    kv = kv_target_gib(float(fraction), facts, derived, constants)
    if kv is None:
        return None, ("memory_fraction: converting it to this engine's denominator needs derived.gpu_memory_gib "
                      "and derived.weights_gib_per_gpu; not set")
    if kv <= 0:
        return None, "memory_fraction: at this share the weights and activations leave no KV cache; not set"
    gpu, weights = float(derived["derived.gpu_memory_gib"]), float(derived["derived.weights_gib_per_gpu"])
    activations = _activations(facts, gpu, constants)
    if engine == "vllm":
        value = (weights + activations + _nontorch(derived, constants) + kv) / gpu
    elif engine == "sglang":
        value = (weights + kv) / gpu                      # activations and CUDA graphs sit outside it
    elif engine == "trtllm":
        free = gpu - weights - activations
        value = kv / (free * (1 - _parameter("trtllm_reserved_share", constants)))
    else:
        value = (weights + activations + kv) / gpu        # TGI: whole device; KV fills what warm-up leaves
    value = round(value, 3)
    if value > CAPS[engine]:
        return None, f"memory_fraction: this engine would need {value}, above {CAPS[engine]}; not set"
    return value, ""


def settings_map(strategy: str, key: str, params: Mapping[str, Any], facts: Mapping[str, Any],
                 derived: Mapping[str, Any], on: tuple[Target, ...] | None = None) -> dict[str, tuple[str, ...]]:
    """What a strategy's advice carries: each target engine's lines (a note starts with "# ").
    `on`: targets(facts), where the caller has them (an advice asks once for all its strategies).

    The lines follow from the strategy, its parameters, the targets and the few facts the
    computations read (a memory fraction reads the GPU's memory and the weights' share); they
    are kept under the first four with those facts and their values, and taken again when
    the facts read have the same values (the replicas of a deployment, a batch's lines)."""
    on = on if on is not None else targets(facts)
    try:
        memo_key = (strategy, key, tuple((name, type(value), tuple(value) if type(value) is list else value)
                                         for name, value in params.items()), on)
        hash(memo_key)
    except TypeError:                  # a parameter that cannot be a key (a list): not kept
        return _settings_map(strategy, key, params, facts, derived, on)
    found = _KEPT.get(memo_key)
    if found is not None:
        reads, lines = found
        if all(type(value := (facts if in_facts else derived).get(path, _NOT_THERE)) is kind and value == read
               for in_facts, path, kind, read in reads):
            return dict(lines)
    log: list[tuple[bool, str, type, Any]] = []
    recorded_facts, recorded_derived = _Recorded(facts, True, log), _Recorded(derived, False, log)
    lines = _settings_map(strategy, key, params, recorded_facts, recorded_derived, on)
    if not (recorded_facts.listed or recorded_derived.listed):
        _KEPT.offer(memo_key, (tuple(dict.fromkeys(log)) if _hashable(log) else tuple(log), lines))
    return dict(lines)


def _settings_map(strategy: str, key: str, params: Mapping[str, Any], facts: Mapping[str, Any],
                  derived: Mapping[str, Any], on: tuple[Target, ...]) -> dict[str, tuple[str, ...]]:
    return {t.engine: tuple(s.line for s in settings_for(t, strategy, key, params, facts, derived)) for t in on}


SETTINGS_KEPT = 256          # (strategy, parameters, targets) kept: tens of KB at most
_KEPT: Kept[tuple[Any, ...], tuple[tuple[tuple[bool, str, type, Any], ...], dict[str, tuple[str, ...]]]] = Kept(SETTINGS_KEPT)
_NOT_THERE = object()        # what a fact not given reads as, recorded like a value


class _Recorded(Mapping[str, Any]):
    """The facts as settings_for reads them, each fact read noted with its value (or its
    absence). Listing them all (never done today) marks the result as not to be kept."""

    def __init__(self, facts: Mapping[str, Any], in_facts: bool, log: list[tuple[bool, str, type, Any]]) -> None:
        self.facts, self.in_facts, self.log, self.listed = facts, in_facts, log, False

    def __getitem__(self, path: str) -> Any:
        value = self.facts.get(path, _NOT_THERE)
        self.log.append((self.in_facts, path, type(value), value))
        if value is _NOT_THERE:
            raise KeyError(path)
        return value

    def __iter__(self) -> Iterator[str]:
        self.listed = True
        return iter(self.facts)

    def __len__(self) -> int:
        self.listed = True
        return len(self.facts)


def _hashable(log: list[tuple[bool, str, type, Any]]) -> bool:
    try:
        hash(tuple(log))
    except TypeError:
        return False
    return True
