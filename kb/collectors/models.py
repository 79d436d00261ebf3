"""Model facts from the bundled catalog (`--model NAME`) or a Hugging Face config.json (`--model FILE`)."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from kbopt.errors import KboptError
from kbopt.kb.collectors.collected import Collected
from kbopt.kb.provenance import Provenance
from kbopt.kb.yamlio import read_yaml

HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8", "int8": "int8"}


@lru_cache(maxsize=1)
def model_catalog() -> tuple[dict[str, Any], ...]:
    return tuple(read_yaml(resources.files("kbopt.kb").joinpath("models.yaml").read_text(encoding="utf-8"))["models"])


def _from_catalog(name: str) -> Collected:
    for entry in model_catalog():
        if re.search(entry["match"], name, re.IGNORECASE):
            out = Collected()
            provenance = Provenance(f"catalog:{entry['id']}", "catalog", note=entry["source"])
            out.put("model.name", name, Provenance("input", "user"))
            for field in ("params_billion", "num_layers", "num_kv_heads", "head_dim", "weight_dtype"):
                out.put(f"model.{field}", entry[field], provenance)
            return out
    known = ", ".join(e["id"] for e in model_catalog())
    raise KboptError(f"--model {name}: not in the model catalog ({known}); pass the model's config.json instead")


def _from_config(path: Path) -> Collected:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KboptError(f"--model {path}: not a readable config.json: {error}") from None
    if not isinstance(config, dict):
        raise KboptError(f"--model {path}: a config.json is a JSON object")
    if isinstance(config.get("text_config"), dict):      # multimodal configs nest the language model
        config = {**config, **config["text_config"]}
    try:
        return _shape(path, config)
    except (TypeError, ValueError, ZeroDivisionError) as error:
        raise KboptError(f"--model {path}: unexpected values in config.json ({error})") from None


def _shape(path: Path, config: dict[str, Any]) -> Collected:
    out = Collected()
    def source(field: str) -> Provenance:
        return Provenance(f"config:{path.name}", "measured", metric=field)
    if config.get("kv_lora_rank"):
        raise KboptError(f"--model {path}: compressed (MLA) attention (kv_lora_rank) is not modelled: the KV cache "
                         "holds a latent per token, not heads x head_dim; give model.* facts by hand")
    layers, heads = config.get("num_hidden_layers"), config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads and config.get("hidden_size") else None)
    if not layers or not kv_heads or not head_dim:
        raise KboptError(f"--model {path}: num_hidden_layers, num_key_value_heads/num_attention_heads and "
                         "head_dim/hidden_size are needed")
    out.put("model.num_layers", int(layers), source("num_hidden_layers"))
    out.put("model.num_kv_heads", int(kv_heads), source("num_key_value_heads"))
    out.put("model.head_dim", int(head_dim), source("head_dim" if config.get("head_dim") else "hidden_size/num_attention_heads"))
    dtype = HF_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    if dtype:
        out.put("model.weight_dtype", dtype, source("torch_dtype"))
    name = config.get("_name_or_path") or (config.get("architectures") or [None])[0]
    if name:
        out.put("model.name", str(name), source("_name_or_path"))
    out.notes.append(f"{path.name}: a config.json has no parameter count; give model.params_billion for memory sizing")
    return out


def model_facts(name_or_file: str) -> Collected:
    path = Path(name_or_file)
    return _from_config(path) if path.suffix == ".json" or path.is_file() else _from_catalog(name_or_file)
