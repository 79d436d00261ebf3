"""JSON Schemas generated from the vocabulary (facts) and for rule files."""
from __future__ import annotations

import math
import re
from typing import Any

from kbopt.kb.catalog import LAYERS
from kbopt.kb.vocabulary import QUALITIES, FactSpec, Vocabulary, load_vocabulary

FACTS_FORMAT = "facts/1"
VERSION_PATTERN = r"^[0-9]+\.[0-9]$"


def fact_schema(spec: FactSpec) -> dict[str, Any]:
    schema: dict[str, Any]
    if spec.type == "ratio":
        schema = {"type": "number", "minimum": 0, "maximum": 1}
    elif spec.type in ("number", "integer"):
        schema = {"type": spec.type}
        if spec.min is not None:
            schema["exclusiveMinimum" if spec.exclusive_min else "minimum"] = spec.min
        if spec.max is not None:
            schema["maximum"] = spec.max
    elif spec.type == "bool":
        schema = {"type": "boolean"}
    elif spec.type == "enum":
        schema = {"enum": list(spec.values)}
    elif spec.type == "version":
        schema = {"anyOf": [{"type": "string", "pattern": VERSION_PATTERN},
                            {"type": "number", "minimum": 1, "description": "8.9 unquoted is read as \"8.9\""}]}
    elif spec.type == "list":
        schema = {"type": "array", "items": {"enum": list(spec.values)}, "uniqueItems": True}
    else:
        schema = {"type": "string", **({"pattern": spec.pattern} if spec.pattern else {})}
    description = spec.description + (f" [{spec.unit}]" if spec.unit else "")
    # null means "not known": collectors write it for a field they could not read.
    return {"description": description, "anyOf": [schema, {"type": "null"}]}


def facts_schema(vocabulary: Vocabulary | None = None) -> dict[str, Any]:
    vocabulary = vocabulary or load_vocabulary()
    properties: dict[str, Any] = {"kbopt": {"const": FACTS_FORMAT, "description": "format marker"}}
    for section, specs in vocabulary.input_sections().items():
        properties[section] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {spec.path.split(".", 1)[1]: fact_schema(spec) for spec in specs},
        }
    input_paths = sorted(spec.path for specs in vocabulary.input_sections().values() for spec in specs)
    properties["provenance"] = {
        "type": "object",
        "description": "where each fact came from (written by `kbopt collect`); facts without an entry are user input",
        "propertyNames": {"enum": input_paths},
        "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["source", "quality"],
            "properties": {
                "source": {"type": "string", "description": "nvml, dcgm, vllm, sglang, trace:azure, ..."},
                "quality": {"enum": list(QUALITIES),
                            "description": "measured: a direct measurement; proxy: a stand-in (NVML's busy-time "
                                           "utilizations); derived: computed from other readings; user; catalog"},
                "metric": {"type": "string"}, "samples": {"type": "integer", "minimum": 0},
                "window_s": {"type": "number", "minimum": 0}, "note": {"type": "string"},
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://kbopt.invalid/schema/facts-1.json",
        "title": "kbopt facts v1",
        "description": "Facts about one LLM inference deployment. Every field is optional.",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


_EXPR = {"type": "string", "minLength": 1}
_PARAM_VALUES = {"type": "object", "additionalProperties": {}}

RULE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://kbopt.invalid/schema/rule-1.json",
    "title": "kbopt rule",
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "title", "layer", "when", "then", "because", "source", "examples"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z][A-Z0-9]*(-[A-Z0-9]+)+$",
               "description": "stable id, e.g. S-PAGED-KV-CAPACITY"},
        "title": {"type": "string", "minLength": 3},
        "layer": {"enum": list(LAYERS)},
        "tags": {"type": "array", "items": {"type": "string"}},
        "overrides": {"type": "boolean", "description": "this rule replaces a rule of the same id from an earlier pack"},
        "when": {**_EXPR, "description": "condition over facts, e.g. telemetry.memory_used_ratio > 0.9"},
        "parameters": {
            "type": "object",
            "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"},
            "additionalProperties": {
                "type": "object", "additionalProperties": False, "required": ["value", "why"],
                "properties": {"value": {"type": ["number", "string", "boolean"]}, "why": {"type": "string", "minLength": 10}},
            },
        },
        "then": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object", "minProperties": 1, "maxProperties": 1,
                "additionalProperties": False,
                "properties": {
                    "derive": {"type": "object", "minProperties": 1},
                    "recommend": {
                        "type": "object", "additionalProperties": False, "required": ["strategy", "weight"],
                        "properties": {"strategy": {"type": "string"}, "params": _PARAM_VALUES,
                                       "weight": {"type": "number", "exclusiveMinimum": 0},
                                       "gain": {"type": "string"}},
                    },
                    "reject": {
                        "type": "object", "additionalProperties": False, "required": ["strategy", "reason"],
                        "properties": {"strategy": {"type": "string"}, "variant": {"type": "string"},
                                       "reason": {"type": "string"}, "after_plan": {"type": "boolean"}},
                    },
                    "caveat": {
                        "type": "object", "additionalProperties": False, "required": ["strategy", "text"],
                        "properties": {"strategy": {"type": "string"}, "variant": {"type": "string"},
                                       "text": {"type": "string"}},
                    },
                    "require": {
                        "type": "object", "additionalProperties": False, "required": ["strategy", "needs"],
                        "properties": {"strategy": {"type": "string"}, "variant": {"type": "string"},
                                       "needs": {"type": "string"}},
                    },
                    "warn": {"type": "string", "minLength": 10,
                             "description": "a warning about the whole advice, shown first"},
                    "mitigate": {
                        "type": "object", "additionalProperties": False, "required": ["strategy", "by"],
                        "properties": {"strategy": {"type": "string"}, "by": {"type": "string"},
                                       "text": {"type": "string"}},
                    },
                },
            },
        },
        "because": {"type": "string", "minLength": 10},
        "source": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
        "notes": {"type": "string"},
        "examples": {
            "type": "array", "minItems": 2,
            "items": {
                "type": "object", "additionalProperties": False, "required": ["name", "facts", "fires"],
                "properties": {
                    "name": {"type": "string"},
                    "facts": {"type": "object"},
                    "fires": {"enum": [True, False, "unknown"],
                              "description": "true: fires; false: decided not to fire; unknown: not evaluated for lack of facts"},
                    "expect": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "derived": {"type": "object"},
                            "bottleneck": {"type": "string"},
                            "chosen": {"type": "array", "items": {"type": "string"}},
                            "rejected": {"type": "array", "items": {"type": "string"}},
                            "params": {"type": "object"},
                        },
                    },
                },
            },
        },
    },
}


_PROVENANCE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "source": str, "quality": str, "metric": str, "samples": int, "window_s": (int, float), "note": str}
_VERSION = re.compile(VERSION_PATTERN)


def _plain_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _plainly_valid_value(spec: FactSpec, value: Any) -> bool:
    if value is None:
        return True
    kind = spec.type
    if kind in ("ratio", "number", "integer"):
        if not _plain_number(value) or (kind == "integer" and not isinstance(value, int)):
            return False
        low, high = (0, 1) if kind == "ratio" else (spec.min, spec.max)
        if low is not None and (value <= low if spec.exclusive_min and kind != "ratio" else value < low):
            return False
        return high is None or value <= high
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "enum":
        return isinstance(value, str) and value in spec.values
    if kind == "version":
        return (isinstance(value, str) and _VERSION.search(value) is not None) or (_plain_number(value) and value >= 1)
    if kind == "list":
        return isinstance(value, list) and all(isinstance(v, str) and v in spec.values for v in value) \
            and len(set(value)) == len(value)
    return isinstance(value, str) and (spec.pattern is None or re.search(spec.pattern, value) is not None)


def plainly_valid(document: dict[str, Any], vocabulary: Vocabulary) -> bool:
    """True only when `document` certainly satisfies facts_schema(vocabulary).

    The ordinary document is checked here without importing jsonschema (a third of a cold start);
    anything unusual answers False, and the JSON Schema validator then decides and explains. So this
    may refuse what the schema accepts, never the reverse (tests/test_facts.py checks it)."""
    sections = vocabulary.input_sections()
    for key, body in document.items():
        if key == "kbopt":
            if body != FACTS_FORMAT or not isinstance(body, str):
                return False
        elif key == "provenance":
            if not isinstance(body, dict):
                return False
            for path, entry in body.items():
                spec = vocabulary.get(path) if isinstance(path, str) else None
                if spec is None or spec.derived or spec.quality_of or not isinstance(entry, dict) \
                        or not {"source", "quality"} <= set(entry) <= set(_PROVENANCE_FIELDS):
                    return False
                for name, value in entry.items():
                    if not isinstance(value, _PROVENANCE_FIELDS[name]) or isinstance(value, bool):
                        return False
                if entry["quality"] not in QUALITIES or (isinstance(entry.get("samples"), int) and entry["samples"] < 0):
                    return False
                window = entry.get("window_s")
                if window is not None and not (_plain_number(window) and window >= 0):
                    return False
        elif key in sections and isinstance(body, dict):
            for name, value in body.items():
                spec = vocabulary.get(f"{key}.{name}") if isinstance(name, str) else None
                if spec is None or spec.derived or not _plainly_valid_value(spec, value):
                    return False
        else:
            return False
    return True
