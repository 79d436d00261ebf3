"""Load rule files: YAML (safely, keeping line numbers) -> schema check -> typed Rule values."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, assert_never

import yaml

from kbopt.engine.lang import template
from kbopt.engine.lang.errors import ExprError
from kbopt.engine.lang.nodes import And, Arith, Call, Const, Fact, IfElse, ListOf, Needs, Value
from kbopt.engine.lang.operators import FUNCTIONS
from kbopt.engine.lang.parse import parse_condition, parse_value
from kbopt.engine.pack.rule import (LAYERS, Caveat, Derive, Example, Mitigate, Pack, Parameter, Recommend, Reject,
                               Require, Rule, Warn)
from kbopt.errors import RuleError
from kbopt.kb.catalog import strategies
from kbopt.kb.vocabulary import Vocabulary, load_vocabulary
from kbopt.kb.yamlio import DuplicateKey, SafeLoader, check_duplicate_keys



def _read_yaml(text: str, file: str) -> tuple[Any, dict[tuple, int]]:
    """Parse YAML safely; return the data and the 1-based line of every key and list item."""
    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise RuleError(file, 1, "the rule file is empty")
        check_duplicate_keys(node)
        data = loader.construct_document(node)
    except DuplicateKey as error:
        raise RuleError(file, error.line, f"duplicate key {error.key!r}", "a later copy would silently replace the first") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise RuleError(file, mark.line + 1 if mark else None, f"not valid YAML: {getattr(error, 'problem', error)}") from None
    finally:
        loader.dispose()
    lines: dict[tuple, int] = {}

    def walk(n, path):
        lines[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                walk(value, path + (key.value,))
                lines[path + (key.value,)] = key.start_mark.line + 1   # the key's line, not its value's
        elif isinstance(n, yaml.SequenceNode):
            for index, item in enumerate(n.value):
                walk(item, path + (index,))

    walk(node, ())
    return data, lines


def _line(lines: dict[tuple, int], path: Iterable) -> int:
    path = tuple(path)
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def _schema_error(error, lines, file) -> RuleError:
    path = list(error.absolute_path)
    where = "/".join(str(p) for p in path) or "(top level)"
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        import difflib
        known = sorted(error.schema.get("properties", {}))
        close = difflib.get_close_matches(unknown[0], known, n=1) if unknown else []
        hint = f"did you mean '{close[0]}'?" if close else f"allowed here: {', '.join(known)}"
        return RuleError(file, _line(lines, path + [unknown[0]] if unknown else path),
                         f"unknown key {unknown[0]!r} in {where}", hint)
    if error.validator == "minItems":
        extra = " (one that fires and one that does not)" if path == ["examples"] else ""
        return RuleError(file, _line(lines, path), f"{where}: needs at least {error.validator_value} "
                         f"item(s), has {len(error.instance)}{extra}")
    if error.validator == "required":
        return RuleError(file, _line(lines, path), f"{where}: {error.message}",
                         "a rule needs id, title, layer, when, then, because, source and examples")
    return RuleError(file, _line(lines, path), f"{where}: {error.message}")


class _RuleBuilder:
    def __init__(self, data: dict, lines: dict[tuple, int], file: str, layer_dir: str | None,
                 vocabulary: Vocabulary, pack: str, shared: dict[str, Parameter]):
        self.data, self.lines, self.file, self.layer_dir = data, lines, file, layer_dir
        self.vocabulary, self.pack, self.shared = vocabulary, pack, shared
        self.catalog = strategies()

    def fail(self, path, message, hint=None):
        raise RuleError(self.file, _line(self.lines, path), message, hint)

    def expression(self, text, path, kind, parameters):
        parse = parse_condition if kind == "condition" else parse_value
        try:
            return parse(text, self.vocabulary, parameters)
        except ExprError as error:
            self.fail(path, f"{'/'.join(map(str, path))}: {error.message}", error.hint)

    def value(self, raw, path, parameters):
        """A literal, or an expression written `= expr`."""
        if isinstance(raw, str) and raw.startswith("="):
            return self.expression(raw[1:], path, "value", parameters)
        return Const(raw)

    def strategy(self, name, variant, path):
        if name not in self.catalog:
            import difflib
            close = difflib.get_close_matches(name, list(self.catalog), n=1)
            self.fail(path, f"unknown strategy {name!r}", f"did you mean '{close[0]}'?" if close else
                      "strategies: " + ", ".join(self.catalog))
        spec = self.catalog[name]
        if variant is not None and variant not in spec.variants:
            self.fail(path, f"{name} has no variant {variant!r}",
                      "variants: " + ", ".join(spec.variants) if spec.variants else f"{name} has no variants")

    def build(self) -> Rule:
        d = self.data
        if self.layer_dir and d["layer"] != self.layer_dir:
            self.fail(("layer",), f"layer {d['layer']!r} but the file is under rules/{self.layer_dir}/",
                      "move the file or fix the layer")
        stem = Path(self.file).stem
        if self.layer_dir and stem.upper() != d["id"]:
            self.fail(("id",), f"id {d['id']!r} does not match the file name {stem!r}", f"name the file {d['id'].lower()}.yaml")
        local = tuple(Parameter(name, p["value"], p["why"]) for name, p in (d.get("parameters") or {}).items())
        for parameter in local:
            if parameter.name in self.shared:
                self.fail(("parameters", parameter.name), f"parameter {parameter.name!r} is already a pack parameter",
                          "use the pack's value (rules/parameters.yaml) or choose another name")
        values = {**{name: p.value for name, p in self.shared.items()}, **{p.name: p.value for p in local}}
        when = self.expression(d["when"], ("when",), "condition", values)
        then = tuple(self.conclusion(item, ("then", i), values) for i, item in enumerate(d["then"]))
        used = {n.parameter for n in _constants((when,) + then) if n.parameter} | \
            template.parameter_names(d["because"])
        parameters = local + tuple(self.shared[name] for name in sorted(used) if name in self.shared)
        needed = [path for c in then if isinstance(c, Derive) for path in _required(c.value)]
        fire_condition = And((when,) + tuple(Needs(Fact(p)) for p in dict.fromkeys(needed))) \
            if needed else when
        sources = (d["source"],) if isinstance(d["source"], str) else tuple(d["source"])
        examples = tuple(self.example(e, ("examples", i)) for i, e in enumerate(d["examples"]))
        self.check_placeholders(d["because"], values)
        return Rule(id=d["id"], title=d["title"], layer=d["layer"], when_text=" ".join(d["when"].split()),
                    when=when, fire_condition=fire_condition, then=then, because=" ".join(d["because"].split()),
                    sources=sources, parameters=parameters, examples=examples, notes=d.get("notes"),
                    tags=tuple(d.get("tags", ())), file=self.file, line=_line(self.lines, ("id",)), pack=self.pack,
                    overrides=bool(d.get("overrides", False)),
                    lines={key: _line(self.lines, (key,)) for key in ("when", "then", "because", "source", "examples")})

    def conclusion(self, item, path, values):
        kind, body = next(iter(item.items()))
        path = path + (kind,)
        if kind == "derive":
            (target, raw), = body.items() if len(body) == 1 else self.fail(path, "derive one fact per item", "add another `- derive:` item")
            spec = self.vocabulary.get(target)
            if spec is None or not spec.derived:
                hint = self.vocabulary.suggest(target) if spec is None else None
                self.fail(path + (target,), f"{target!r} is not a derived fact",
                          "rules derive only the facts declared under `derived:` in kb/vocabulary.yaml (a pack cannot "
                          "declare new ones yet)" + (f"; did you mean '{hint}'?" if hint and spec is None else ""))
            value = self.value(raw, path + (target,), values)
            if isinstance(value, Const):
                self.check_literal(spec, value.value, path + (target,))
            return Derive(target, value)
        if kind == "recommend":
            strategy = body["strategy"]
            spec = self.catalog.get(strategy)
            self.strategy(strategy, None, path + ("strategy",))
            params = body.get("params") or {}
            for name in params:
                if name not in spec.params:
                    self.fail(path + ("params", name), f"{strategy} has no parameter {name!r}",
                              "parameters: " + ", ".join(spec.params))
            variant = None
            if spec.variant:
                variant = params.get(spec.variant)
                if not isinstance(variant, str):
                    self.fail(path + ("params",), f"{strategy} needs a literal {spec.variant}", "one of: " + ", ".join(spec.variants))
                self.strategy(strategy, variant, path + ("params", spec.variant))
            parsed = tuple((name, self.value(raw, path + ("params", name), values)) for name, raw in params.items())
            return Recommend(strategy, variant, parsed, float(body["weight"]), body.get("gain"))
        if kind == "warn":
            return Warn(" ".join(body.split()))
        if kind in ("reject", "caveat", "require"):
            self.strategy(body["strategy"], body.get("variant"), path + ("strategy",))
            if kind == "reject":
                return Reject(body["strategy"], body.get("variant"), " ".join(body["reason"].split()))
            if kind == "caveat":
                return Caveat(body["strategy"], body.get("variant"), " ".join(body["text"].split()))
            needs, _, needs_variant = body["needs"].rstrip("]").partition("[")
            self.strategy(needs, needs_variant or None, path + ("needs",))
            return Require(body["strategy"], body.get("variant"), body["needs"])
        self.strategy(body["strategy"], None, path + ("strategy",))
        self.strategy(body["by"], None, path + ("by",))
        return Mitigate(body["strategy"], body["by"], body.get("text"))

    def check_literal(self, spec, value, path):
        ok = {"bool": isinstance(value, bool), "enum": value in spec.values,
              "string": isinstance(value, str)}.get(spec.type, isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok:
            self.fail(path, f"{value!r} is not a valid {spec.type} for {spec.path}",
                      "one of: " + ", ".join(spec.values) if spec.values else None)

    def check_placeholders(self, text, values):
        for name, _ in template.placeholders(text):
            if name not in values and self.vocabulary.get(name) is None:
                hint = self.vocabulary.suggest(name)
                self.fail(("because",), f"because: unknown placeholder {{{name}}}",
                          f"did you mean '{hint}'?" if hint else "use a fact path or a parameter name")

    def example(self, raw, path) -> Example:
        # Example facts are validated when examples run (`kbopt rules test`), not on every load.
        return Example(name=raw["name"], facts=raw["facts"], fires=raw["fires"], expect=raw.get("expect") or {},
                       line=_line(self.lines, path))


def _constants(nodes) -> list[Const]:
    """Every literal in conditions and conclusions (to find the parameters a rule uses)."""
    out = []
    for node in nodes:
        if isinstance(node, Const):
            out.append(node)
        elif isinstance(node, (list, tuple)):
            out.extend(_constants(node))
        elif hasattr(node, "__dataclass_fields__"):
            out.extend(_constants([getattr(node, f) for f in node.__dataclass_fields__]))
    return out


def _required(node: Value) -> list[str]:
    """Facts a value expression cannot do without (a function of alternatives offers others)."""
    match node:
        case Call(fn=fn) if FUNCTIONS[fn].alternatives:
            return []
        case Fact(path=path):
            return [path]
        case Const():
            return []
        case Arith(left=left, right=right):
            return _required(left) + _required(right)
        case Call(args=children) | ListOf(items=children):
            return [p for c in children for p in _required(c)]
        case IfElse():
            return []        # its condition decides which facts it needs; a missing one leaves it unknown
        case _ as unreachable:
            assert_never(unreachable)


@lru_cache(maxsize=1)
def _rule_validator():
    import jsonschema
    from kbopt.kb.schema import RULE_SCHEMA
    return jsonschema.Draft202012Validator(RULE_SCHEMA)


def load_parameters(text: str, file: str) -> dict[str, Parameter]:
    """A pack's shared parameters (parameters.yaml): {name: {value, why}}."""
    data, lines = _read_yaml(text, file)
    entries = data.get("parameters") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise RuleError(file, 1, "expected a mapping `parameters: {name: {value: ..., why: ...}}`")
    out = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not {"value", "why"} <= set(entry) <= {"value", "why", "overrides"} \
                or not isinstance(entry["why"], str) or not isinstance(entry["value"], (int, float, str, bool)):
            raise RuleError(file, _line(lines, ("parameters", name)),
                            f"parameter {name!r} needs `value` and `why` (and `overrides: true` to retune another pack's)")
        out[name] = Parameter(name, entry["value"], " ".join(entry["why"].split()), bool(entry.get("overrides")),
                              _line(lines, ("parameters", name)))
    return out


def load_rule_text(text: str, file: str, layer_dir: str | None = None, pack: str = "builtin",
                   vocabulary: Vocabulary | None = None, shared: dict[str, Parameter] | None = None) -> Rule:
    vocabulary = vocabulary or load_vocabulary()
    data, lines = _read_yaml(text, file)
    if not isinstance(data, dict):
        raise RuleError(file, 1, "a rule file holds one mapping (id, title, layer, when, then, ...)")
    # Unknown keys first: "did you mean 'when'" says more than "'when' is a required property".
    errors = sorted(_rule_validator().iter_errors(data),
                    key=lambda e: (e.validator != "additionalProperties", _line(lines, e.absolute_path)))
    if errors:
        raise _schema_error(errors[0], lines, file)
    if shared is None:
        shared = builtin_parameters()
    return _RuleBuilder(data, lines, file, layer_dir, vocabulary, pack, shared).build()


def _read_text(file, shown: str | None = None) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RuleError(shown or str(file), None, f"not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise RuleError(shown or str(file), None, f"cannot read: {error.strerror}") from None


def _rule_files(root) -> list:
    files = []
    for layer in LAYERS:
        folder = root.joinpath(layer)
        if folder.is_dir():
            files.extend((layer, f) for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith((".yaml", ".yml")))
    return files


def builtin_root():
    return resources.files("kbopt.rules")


@lru_cache(maxsize=1)
def builtin_parameters() -> dict[str, Parameter]:
    return load_parameters(builtin_root().joinpath("parameters.yaml").read_text(encoding="utf-8"), "rules/parameters.yaml")


def load_pack(extra_dirs: Iterable[str | Path] = ()) -> Pack:
    """The built-in rules, then each extra directory's (same layout: <layer>/<id>.yaml).

    A later pack may replace a rule of the same id (the rule says `overrides: true`) or disable
    one (disable.yaml: `disable: [{id: ..., why: ...}]`); anything else with a taken id is an error.
    """
    vocabulary = load_vocabulary()
    digest = hashlib.sha256()
    rules: list[Rule] = []
    sources = [("builtin", builtin_root(), "rules")] + [(str(d), Path(d), str(d)) for d in dict.fromkeys(extra_dirs)]
    for pack, root, shown in sources[1:]:
        if not Path(root).is_dir():
            raise RuleError(str(root), None, "no such rules directory")
    # Parameters first, from every pack, so that a retuned threshold applies to every rule.
    shared = pack_parameters([Path(root) for _, root, _ in sources[1:]])
    for pack, root, shown in sources:
        files = _rule_files(root)
        disabled = _disabled(Path(root), shown) if pack != "builtin" else {}
        if pack != "builtin" and not files and not disabled and not Path(root, "parameters.yaml").is_file():
            raise RuleError(str(root), None, "no rule files found", "rules live in <dir>/<layer>/<id>.yaml, layers: " + ", ".join(LAYERS))
        for rule_id, (line, why) in disabled.items():
            if not any(r.id == rule_id for r in rules):
                raise RuleError(f"{shown}/disable.yaml", line, f"cannot disable {rule_id}: no earlier pack has it")
            rules = [r for r in rules if r.id != rule_id]
            digest.update(f"disable {rule_id}".encode())
        for layer, file in files:
            text = _read_text(file, f"{shown}/{layer}/{file.name}")
            digest.update(file.name.encode() + b"\0" + text.encode())
            rule = load_rule_text(text, f"{shown}/{layer}/{file.name}", layer, pack, vocabulary, shared)
            taken = next((i for i, r in enumerate(rules) if r.id == rule.id), None)
            if taken is None:
                if rule.overrides:
                    raise RuleError(rule.file, rule.line, f"{rule.id} says `overrides: true` but no earlier pack has it")
                rules.append(rule)
            elif rule.overrides and rules[taken].pack != pack:
                rules[taken] = rule          # in the place of the rule it replaces
            else:
                raise RuleError(rule.file, rule.line, f"duplicate rule id {rule.id}",
                                f"first defined in {rules[taken].location}; to replace it, add `overrides: true`")
    digest.update(repr(sorted((p.name, p.value) for p in shared.values())).encode())
    return build_pack(rules, digest.hexdigest()[:12])


def pack_parameters(roots: list[Path]) -> dict[str, Parameter]:
    """Built-in parameters, then each pack's parameters.yaml; retuning one needs `overrides: true`."""
    shared = dict(builtin_parameters())
    for root in roots:
        path = root / "parameters.yaml"
        if not path.is_file():
            continue
        for name, parameter in load_parameters(_read_text(path), str(path)).items():
            if name in shared and not parameter.overrides:
                raise RuleError(str(path), parameter.line, f"parameter {name!r} is already defined (value "
                                f"{shared[name].value!r})", "to retune it for every rule, add `overrides: true`")
            if name not in shared and parameter.overrides:
                raise RuleError(str(path), parameter.line, f"parameter {name!r} says `overrides: true` but no earlier pack has it")
            shared[name] = parameter
    return shared


def _disabled(root: Path, shown: str) -> dict[str, tuple[int, str]]:
    path = root / "disable.yaml"
    if not path.is_file():
        return {}
    data, lines = _read_yaml(_read_text(path), f"{shown}/disable.yaml")
    entries = data.get("disable") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and set(e) == {"id", "why"} for e in entries):
        raise RuleError(f"{shown}/disable.yaml", 1, "expected `disable: [{id: RULE-ID, why: reason}, ...]`")
    return {e["id"]: (_line(lines, ("disable", i)), e["why"]) for i, e in enumerate(entries)}


def build_pack(rules: list[Rule], version: str) -> Pack:
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleError(rule.file, rule.line, f"duplicate rule id {rule.id}", f"first defined in {seen[rule.id].location}")
        seen[rule.id] = rule
    producers: dict[str, list[str]] = {}
    for rule in rules:
        for path in rule.derives:
            producers.setdefault(path, []).append(rule.id)
    return Pack(rules=tuple(rules), version=version, producers={k: tuple(v) for k, v in sorted(producers.items())})
