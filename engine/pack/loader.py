"""Load packs: the files engine.pack.files reads -> schema check -> typed Rule values, every problem
of every file collected as a Diagnostic in one pass."""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, assert_never

from kbopt.codes import diagnostic
from kbopt.diagnostics import Diagnostic
from kbopt.engine.lang import template
from kbopt.engine.lang.errors import LIMIT, ExprError
from kbopt.engine.lang.nodes import And, Arith, Call, Condition, Const, Fact, IfElse, ListOf, Needs, Value
from kbopt.engine.lang.normal_form import to_dnf, to_nnf
from kbopt.engine.lang.operators import FUNCTIONS
from kbopt.engine.lang.parse import parse_condition, parse_value
from kbopt.engine.pack import files
from kbopt.engine.pack.files import Document, KeyPath, PackDir, Retired
from kbopt.engine.pack.rule import (
    Caveat,
    Conclusion,
    Derive,
    Example,
    Mitigate,
    Pack,
    Parameter,
    Recommend,
    Reject,
    Require,
    Rule,
    StrategyRef,
    Warn,
)
from kbopt.errors import RuleError
from kbopt.kb.catalog import strategies
from kbopt.kb.knowledge import KnowledgeBase, builtin_knowledge
from kbopt.kb.vocabulary import FactSpec, Vocabulary, load_vocabulary

if TYPE_CHECKING:  # jsonschema itself is imported only once a rule file is checked
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

T = TypeVar("T")


def _schema_error(error: ValidationError, doc: Document) -> Diagnostic:
    path = list(error.absolute_path)
    where = "/".join(str(p) for p in path) or "(top level)"
    instance: Any = error.instance     # the rule file's YAML where the schema failed
    # jsonschema types a failing (sub)schema as a mapping, a bool or "unset"; the rule schema's are all mappings
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":
        unknown = sorted(set(instance) - set(schema.get("properties", {})))
        import difflib  # only to suggest a name on an error path
        known = sorted(schema.get("properties", {}))
        close = difflib.get_close_matches(unknown[0], known, n=1) if unknown else []
        hint = f"did you mean '{close[0]}'?" if close else f"allowed here: {', '.join(known)}"
        return doc.at(path + [unknown[0]] if unknown else path, "L004", f"unknown key {unknown[0]!r} in {where}", hint)
    if error.validator == "minItems":
        extra = " (one that fires and one that does not)" if path == ["examples"] else ""
        return doc.at(path, "L004", f"{where}: needs at least {error.validator_value} "
                      f"item(s), has {len(instance)}{extra}")
    if error.validator == "required":
        return doc.at(path, "L004", f"{where}: {error.message}",
                      "a rule needs id, title, layer, when, then, because, source and examples")
    return doc.at(path, "L004", f"{where}: {error.message}")


class _Failed(Exception):
    """One part of a rule that does not compile; the builder records it and checks the next part."""

    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic


class _RuleBuilder:
    def __init__(self, doc: Document, layer_dir: str | None, vocabulary: Vocabulary, pack: str,
                 shared: dict[str, Parameter]):
        self.doc, self.data, self.file, self.layer_dir = doc, doc.data, doc.file, layer_dir
        self.vocabulary, self.pack, self.shared = vocabulary, pack, shared
        self.catalog = strategies()
        self.problems: list[Diagnostic] = []

    def fail(self, path: Iterable[str | int], message: str, hint: str | None = None, code: str = "L005") -> NoReturn:
        raise _Failed(self.doc.at(path, code, message, hint))

    def check(self, step: Callable[[], T]) -> T | None:
        """Run one independent part of the build; a failure is recorded so the next part still runs."""
        try:
            return step()
        except _Failed as failure:
            self.problems.append(failure.diagnostic)
            return None

    def expression(self, parse: Callable[[str, Vocabulary, dict[str, Any]], T], text: str, path: KeyPath,
                   parameters: dict[str, Any]) -> T:
        """`text` read by `parse` (parse_condition or parse_value, so the result has the parser's type)."""
        try:
            return parse(text, self.vocabulary, parameters)
        except ExprError as error:
            self.fail(path, f"{'/'.join(map(str, path))}: {error.message}", error.hint, code=error.code)

    def value(self, raw: Any, path: KeyPath, parameters: dict[str, Any]) -> Value:
        """A literal, or an expression written `= expr`."""
        if isinstance(raw, str) and raw.startswith("="):
            return self.expression(parse_value, raw[1:], path, parameters)
        return Const(raw)

    def strategy(self, name: str, variant: str | None, path: KeyPath) -> None:
        if name not in self.catalog:
            import difflib  # only to suggest a name on an error path
            close = difflib.get_close_matches(name, list(self.catalog), n=1)
            self.fail(path, f"unknown strategy {name!r}", f"did you mean '{close[0]}'?" if close else
                      "strategies: " + ", ".join(self.catalog))
        spec = self.catalog[name]
        if variant is not None and variant not in spec.variants:
            self.fail(path, f"{name} has no variant {variant!r}",
                      "variants: " + ", ".join(spec.variants) if spec.variants else f"{name} has no variants")

    def build(self) -> Rule | None:
        d = self.data
        self.check(self.place)
        local = tuple(Parameter(name, p["value"], p["why"]) for name, p in (d.get("parameters") or {}).items())
        for parameter in local:
            self.check(partial(self.fresh, parameter))
        values = {**{name: p.value for name, p in self.shared.items()}, **{p.name: p.value for p in local}}
        when = self.check(lambda: self.expression(parse_condition, d["when"], ("when",), values))
        built = [self.check(partial(self.conclusion, item, ("then", i), values)) for i, item in enumerate(d["then"])]
        self.check(lambda: self.check_placeholders(d["because"], values))
        # Only a recorded problem leaves a part None: past this test `when` and every conclusion are built.
        if self.problems or when is None:
            return None
        then = tuple(c for c in built if c is not None)
        used = {n.parameter for n in _constants((when,) + then) if n.parameter} | \
            template.parameter_names(d["because"])
        parameters = local + tuple(self.shared[name] for name in sorted(used) if name in self.shared)
        # A value may read what an earlier derive of the same rule sets (computed in order, so
        # that fact is there by then); every other fact it cannot do without must be known first.
        set_before: set[str] = set()
        needed: list[str] = []
        derived_here = [c.path for c in then if isinstance(c, Derive)]
        for i, c in enumerate(then):
            if isinstance(c, Derive):
                # a read with an alternative (a coalesce() argument) sees a later one as absent; one without cannot
                required = [path for path in _required(c.value) if path not in set_before]
                later = next((path for path in required if path in derived_here), None)
                if later is not None:
                    what = "itself" if later == c.path else f"{later}, which this rule derives after it"
                    self.check(partial(self.fail, ("then", i, "derive", c.path), f"{c.path} reads {what}",
                                       "derive it first: a rule's values are computed in order"))
                needed += required
                set_before.add(c.path)
        if self.problems:
            return None
        fire_condition = And((when,) + tuple(Needs(Fact(p)) for p in dict.fromkeys(needed))) \
            if needed else when
        # The durable_rules backend compiles one rule per alternative of the normal form: refuse here,
        # with the file and line, a condition that expands past the limit rather than fail when compiling.
        if self.check(lambda: self.alternatives(fire_condition)) is None:
            return None
        sources = (d["source"],) if isinstance(d["source"], str) else tuple(d["source"])
        examples = tuple(self.example(e, ("examples", i)) for i, e in enumerate(d["examples"]))
        return Rule(id=d["id"], title=d["title"], layer=d["layer"], when_text=" ".join(d["when"].split()),
                    when=when, fire_condition=fire_condition, then=then, because=" ".join(d["because"].split()),
                    sources=sources, parameters=parameters, examples=examples, notes=d.get("notes"),
                    tags=tuple(d.get("tags", ())), file=self.file, line=self.doc.line(("id",)), pack=self.pack,
                    overrides=bool(d.get("overrides", False)),
                    lines={key: self.doc.line((key,)) for key in ("when", "then", "because", "source", "examples")})

    def alternatives(self, condition: Condition) -> int:
        try:
            return len(to_dnf(to_nnf(condition)))
        except ExprError as error:
            self.fail(("when",), f"when: {error.message}", error.hint, code=LIMIT)

    def place(self) -> None:
        """The layer and id agree with where the file lies."""
        d = self.data
        if self.layer_dir and d["layer"] != self.layer_dir:
            self.fail(("layer",), f"layer {d['layer']!r} but the file is under rules/{self.layer_dir}/",
                      "move the file or fix the layer")
        stem = Path(self.file).stem
        if self.layer_dir and stem.upper() != d["id"]:
            self.fail(("id",), f"id {d['id']!r} does not match the file name {stem!r}", f"name the file {d['id'].lower()}.yaml")

    def fresh(self, parameter: Parameter) -> None:
        if parameter.name in self.shared:
            self.fail(("parameters", parameter.name), f"parameter {parameter.name!r} is already a pack parameter",
                      "use the pack's value (rules/parameters.yaml) or choose another name", code="L006")

    def conclusion(self, item: dict[str, Any], path: KeyPath, values: dict[str, Any]) -> Conclusion:
        kind, body = next(iter(item.items()))
        path = path + (kind,)
        if kind == "derive":
            (target, raw), = body.items() if len(body) == 1 else self.fail(path, "derive one fact per item", "add another `- derive:` item")
            spec = self.vocabulary.get(target)
            if spec is None or not spec.derived:
                hint = self.vocabulary.suggest(target) if spec is None else None
                self.fail(path + (target,), f"{target!r} is not a derived fact",
                          "rules derive only the facts declared under `derived:` in kb/vocabulary.yaml, and a pack's own "
                          "in its derived.yaml as derived.<pack>.<name> (docs/rules.md)"
                          + (f"; did you mean '{hint}'?" if hint and spec is None else ""))
            value = self.value(raw, path + (target,), values)
            if isinstance(value, Const):
                self.check_literal(spec, value.value, path + (target,))
            return Derive(target, value)
        if kind == "recommend":
            strategy = body["strategy"]
            self.strategy(strategy, None, path + ("strategy",))
            offered = self.catalog[strategy]      # a known strategy: self.strategy() failed otherwise
            params = body.get("params") or {}
            for name in params:
                if name not in offered.params:
                    self.fail(path + ("params", name), f"{strategy} has no parameter {name!r}",
                              "parameters: " + ", ".join(offered.params))
            variant: str | None = None
            if offered.variant:
                variant = params.get(offered.variant)
                if not isinstance(variant, str):
                    self.fail(path + ("params",), f"{strategy} needs a literal {offered.variant}", "one of: " + ", ".join(offered.variants))
                self.strategy(strategy, variant, path + ("params", offered.variant))
            parsed = tuple((name, self.value(raw, path + ("params", name), values)) for name, raw in params.items())
            return Recommend(strategy, variant, parsed, float(body["weight"]), body.get("gain"))
        if kind == "warn":
            return Warn(" ".join(body.split()))
        if kind in ("reject", "caveat", "require"):
            self.strategy(body["strategy"], body.get("variant"), path + ("strategy",))
            if kind == "reject":
                return Reject(body["strategy"], body.get("variant"), " ".join(body["reason"].split()), bool(body.get("after_plan")))
            if kind == "caveat":
                return Caveat(body["strategy"], body.get("variant"), " ".join(body["text"].split()))
            needed = StrategyRef.parse(body["needs"])
            self.strategy(needed.strategy, needed.variant, path + ("needs",))
            return Require(body["strategy"], body.get("variant"), body["needs"])
        self.strategy(body["strategy"], None, path + ("strategy",))
        self.strategy(body["by"], None, path + ("by",))
        return Mitigate(body["strategy"], body["by"], body.get("text"))

    def check_literal(self, spec: FactSpec, value: Any, path: KeyPath) -> None:
        ok = {"bool": isinstance(value, bool), "enum": value in spec.values,
              "string": isinstance(value, str)}.get(spec.type, isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok:
            self.fail(path, f"{value!r} is not a valid {spec.type} for {spec.path}",
                      "one of: " + ", ".join(spec.values) if spec.values else None)

    def check_placeholders(self, text: str, values: dict[str, Any]) -> None:
        for name, spec in template.placeholders(text):
            problem = template.spec_problem(spec)
            if problem:
                self.fail(("because",), f"because: {{{name}:...}}: {problem}", "e.g. {telemetry.memory_used_ratio:.0%}",
                          code=LIMIT)
            if name not in values and self.vocabulary.get(name) is None:
                hint = self.vocabulary.suggest(name)
                self.fail(("because",), f"because: unknown placeholder {{{name}}}",
                          f"did you mean '{hint}'?" if hint else "use a fact path or a parameter name")

    def example(self, raw: dict[str, Any], path: KeyPath) -> Example:
        # Example facts are validated when examples run (`kbopt rules test`), not on every load.
        return Example(name=raw["name"], facts=raw["facts"], fires=raw["fires"], expect=raw.get("expect") or {},
                       line=self.doc.line(path))


def _constants(nodes: Iterable[object]) -> list[Const]:
    """Every literal in conditions and conclusions (to find the parameters a rule uses)."""
    out: list[Const] = []
    for node in nodes:
        if isinstance(node, Const):
            out.append(node)
        elif isinstance(node, (list, tuple)):
            out.extend(_constants(node))
        elif is_dataclass(node):
            out.extend(_constants([getattr(node, f.name) for f in fields(node)]))
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
def _rule_validator() -> Draft202012Validator:
    import jsonschema  # heavy (80 ms): a pack from the cache is never validated

    from kbopt.kb.schema import RULE_SCHEMA  # the rule schema, with jsonschema
    return jsonschema.Draft202012Validator(RULE_SCHEMA)


def load_rule_text(text: str, file: str, layer_dir: str | None = None, pack: str = "builtin",
                   vocabulary: Vocabulary | None = None, shared: dict[str, Parameter] | None = None) -> Rule:
    """One rule file; RuleError carries every problem found in it."""
    problems: list[Diagnostic] = []
    rule = _load_rule(text, file, layer_dir, pack, vocabulary or load_vocabulary(),
                      builtin_parameters() if shared is None else shared, problems)
    if problems or rule is None:      # no rule without a problem said
        raise RuleError(problems)
    return rule


def _load_rule(text: str, file: str, layer_dir: str | None, pack: str, vocabulary: Vocabulary,
               shared: dict[str, Parameter], problems: list[Diagnostic]) -> Rule | None:
    doc = files.parse(text, file, problems)
    if doc is None:
        return None
    if not isinstance(doc.data, dict):
        problems.append(doc.at((), "L004", "a rule file holds one mapping (id, title, layer, when, then, ...)"))
        return None
    # Unknown keys first: "did you mean 'when'" says more than "'when' is a required property".
    errors = sorted(_rule_validator().iter_errors(doc.data),
                    key=lambda e: (e.validator != "additionalProperties", doc.line(e.absolute_path)))
    if errors:
        problems.append(_schema_error(errors[0], doc))
        return None
    builder = _RuleBuilder(doc, layer_dir, vocabulary, pack, shared)
    rule = builder.build()
    problems.extend(builder.problems)
    return rule


@lru_cache(maxsize=1)
def builtin_parameters() -> dict[str, Parameter]:
    problems: list[Diagnostic] = []
    parameters = files.read_parameters(files.builtin(), problems)
    if problems:
        raise RuleError(problems)
    return parameters


@dataclass(frozen=True)
class Loaded:
    """What loading packs produced: the pack (None when anything is broken), every problem found,
    and the retired ids lint checks rules against."""
    pack: Pack | None
    diagnostics: tuple[Diagnostic, ...]
    retired: dict[str, Retired]
    dirs: tuple[str, ...]

    def checked(self) -> Pack:
        """The pack, or RuleError with every problem (the first said, the others counted)."""
        if self.diagnostics or self.pack is None:     # no pack without a diagnostic
            raise RuleError(self.diagnostics, lint_hint(self.dirs))
        return self.pack


def lint_hint(dirs: Iterable[str]) -> str:
    return "run `" + " ".join(["kbopt rules lint", *dirs]) + "` to see them all"


def load_pack(extra_dirs: Iterable[str | Path] = (), builtin: Pack | None = None) -> Pack:
    """The built-in rules, then each extra directory's (same layout: <layer>/<id>.yaml); see read_pack."""
    return read_pack(extra_dirs, builtin).checked()


def read_pack(extra_dirs: Iterable[str | Path] = (), builtin: Pack | None = None) -> Loaded:
    """Every file of every pack in one pass, collecting every problem rather than stopping at the first.

    A later pack may replace a rule of the same id (the rule says `overrides: true`) or disable
    one (disable.yaml: `disable: [{id: ..., why: ...}]`); anything else with a taken id is an error.
    `builtin`, the built-in pack as loaded already (from the compiled-pack cache), lends its rules
    where the packs layered over it retune no shared parameter and declare no derived fact, so
    that only their own files are parsed: a rule author's `kbopt rules test mypack` took about a
    second re-reading the 256 built-in rules each time.
    """
    problems: list[Diagnostic] = []
    vocabulary = load_vocabulary()
    digest = hashlib.sha256()
    dirs = tuple(dict.fromkeys(str(d) for d in extra_dirs))
    packs = files.discover(dirs, problems)
    # Parameters first, from every pack, so that a retuned threshold applies to every rule.
    shared = _pack_parameters(packs, problems)
    # The derived facts packs declare (derived.yaml), checked like the built-in ones.
    declared: dict[str, FactSpec] = {}
    for pack in packs[1:]:
        found = pack.optional(files.DERIVED)
        if found is not None:
            digest.update(files.DERIVED.encode() + b"\0" + found.read_bytes() + b"\0")
        declared.update(files.read_derived(pack, problems))
    if declared:
        vocabulary = vocabulary.with_pack_facts(declared)
    retired = {rule_id: entry for pack in packs for rule_id, entry in files.read_retired(pack, problems).items()}
    # A built-in rule is the same value whatever is layered over it, unless a pack retunes a
    # threshold it reads or declares facts (then every rule is built again, under the new ones).
    lent = ({rule.file: rule for rule in builtin.rules}
            if builtin is not None and dirs and not declared and shared == builtin_parameters() else {})
    rules: dict[str, Rule] = {}          # by id, in pack order: an override keeps the place of what it replaces
    for pack in packs:
        for rule_id, line in files.read_disable(pack, problems) if pack.pack != "builtin" else ():
            if rule_id not in rules:
                problems.append(diagnostic("L006", pack.name(files.DISABLE), line,
                                           f"cannot disable {rule_id}: no earlier pack has it"))
                continue
            del rules[rule_id]
            digest.update(f"disable {rule_id}".encode())
        for layer, file in pack.rule_files:
            name = pack.name(layer, file.name)
            text = files.read_text(file, name, problems)
            if text is None:
                continue
            digest.update(file.name.encode() + b"\0" + text.encode())
            rule = (lent.get(name) if pack.pack == "builtin" else None) or _load_rule(
                text, name, layer, pack.pack, vocabulary, shared, problems)
            if rule is None:
                continue
            taken = rules.get(rule.id)
            if taken is None and rule.overrides:
                problems.append(_at_id(rule, f"{rule.id} says `overrides: true` but no earlier pack has it"))
            elif taken is None or (rule.overrides and taken.pack != pack.pack):
                rules[rule.id] = rule
            else:
                problems.append(_at_id(rule, f"duplicate rule id {rule.id}",
                                       f"first defined in {taken.location}; to replace it, add `overrides: true`"))
    if problems:
        return Loaded(None, tuple(problems), retired, dirs)
    digest.update(repr(sorted((p.name, p.value) for p in shared.values())).encode())
    knowledge = dataclasses.replace(builtin_knowledge(), vocabulary=vocabulary) if declared else None
    return Loaded(build_pack(list(rules.values()), digest.hexdigest()[:12], knowledge), (), retired, dirs)


def _at_id(rule: Rule, message: str, help: str | None = None) -> Diagnostic:
    return diagnostic("L006", rule.file, rule.line, message, help=help, snippet=f"id: {rule.id}")


def _pack_parameters(packs: list[PackDir], problems: list[Diagnostic]) -> dict[str, Parameter]:
    """Built-in parameters, then each pack's parameters.yaml; retuning one needs `overrides: true`."""
    shared = dict(builtin_parameters())
    for pack in packs[1:]:
        file = pack.name(files.PARAMETERS)
        for name, parameter in files.read_parameters(pack, problems).items():
            if name in shared and not parameter.overrides:
                problems.append(diagnostic("L006", file, parameter.line, f"parameter {name!r} is already defined (value "
                                           f"{shared[name].value!r})", help="to retune it for every rule, add `overrides: true`"))
            elif name not in shared and parameter.overrides:
                problems.append(diagnostic("L006", file, parameter.line,
                                           f"parameter {name!r} says `overrides: true` but no earlier pack has it"))
            else:
                shared[name] = parameter
    return shared


def build_pack(rules: list[Rule], version: str, knowledge: KnowledgeBase | None = None) -> Pack:
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleError([_at_id(rule, f"duplicate rule id {rule.id}", f"first defined in {seen[rule.id].location}")])
        seen[rule.id] = rule
    producers: dict[str, list[str]] = {}
    for rule in rules:
        for path in rule.derives:
            producers.setdefault(path, []).append(rule.id)
    return Pack(rules=tuple(rules), version=version, producers={k: tuple(v) for k, v in sorted(producers.items())},
                kb=knowledge or builtin_knowledge())
