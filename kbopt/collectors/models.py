"""Model facts from the bundled catalog (`--model NAME`) or a Hugging Face config.json (`--model FILE`)."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from kbopt.collectors.collected import Collected
from kbopt.errors import KboptError
from kbopt.kb.packaged import package_dir, read_knowledge_yaml
from kbopt.kb.provenance import Provenance

HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8", "int8": "int8"}
# The model.* facts a catalog row may give (kb/models.yaml), each optional but the name.
CATALOG_FIELDS = ("params_billion", "active_params_billion", "num_layers", "num_kv_heads", "head_dim", "weight_dtype",
                  "num_attention_heads", "hidden_size", "num_experts", "experts_per_token", "kv_lora_rank", "qk_rope_head_dim", "mtp_layers",
                  "architecture", "vision", "vision_params_billion", "vision_patches_per_token",
                  "moe_intermediate_size", "weight_block_size", "vocab_size", "tied_embeddings")


@lru_cache(maxsize=1)
def model_catalog() -> tuple[dict[str, Any], ...]:
    text = package_dir("kbopt.kb").joinpath("models.yaml").read_text(encoding="utf-8")
    return tuple(read_knowledge_yaml(text, "kb/models.yaml")["models"])


def _from_catalog(name: str) -> Collected:
    for entry in model_catalog():
        if re.search(entry["match"], name, re.IGNORECASE):
            out = Collected()
            provenance = Provenance(f"catalog:{entry['id']}", "catalog", note=entry["source"])
            out.put("model.name", name, Provenance("input", "user"))
            for field in CATALOG_FIELDS:
                if field in entry:
                    out.put(f"model.{field}", entry[field], provenance)
            return out
    known = ", ".join(e["id"] for e in model_catalog())
    raise KboptError(f"--model {name}: not in the model catalog ({known}); pass the model's config.json instead")


def _from_config(path: Path) -> Collected:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KboptError(f"--model {path}: not a readable config.json: {error}") from None
    except RecursionError:          # json nests without a bound; a config is a few levels deep
        raise KboptError(f"--model {path}: not a readable config.json: nested too deeply") from None
    if not isinstance(config, dict):
        raise KboptError(f"--model {path}: a config.json is a JSON object")
    # read before the merge below: a multimodal config's text_config has a model_type of its own (gemma3_text)
    architecture = config.get("model_type")
    vision = isinstance(config.get("vision_config"), dict)
    if isinstance(config.get("text_config"), dict):      # multimodal configs nest the language model
        config = {**config, **config["text_config"]}
    try:
        out = _shape(path, config)
    except (TypeError, ValueError, ZeroDivisionError) as error:
        raise KboptError(f"--model {path}: unexpected values in config.json ({error})") from None
    if isinstance(architecture, str) and _MODEL_TYPE.fullmatch(architecture):
        out.put("model.architecture", architecture, Provenance(f"config:{path.name}", "measured", metric="model_type"))
    out.put("model.vision", vision, Provenance(f"config:{path.name}", "measured", metric="vision_config"))
    if vision:
        encoder = vision_encoder(config["vision_config"], _size(config, "mm_tokens_per_image"))
        if encoder is not None:
            params, patches = encoder
            decoder = out.facts.get("model.params_billion")
            if decoder is not None:         # the checkpoint holds the encoder beside the decoder
                out.facts["model.params_billion"] = (round(decoder[0] + params / 1e9, 6), decoder[1])
            out.put("model.vision_params_billion", params / 1e9, Provenance(
                f"config:{path.name}", "derived", metric="vision_config: depth x (attention 4 w^2 + MLP) + patch merger",
                note="kbopt/collectors/models.py, vision_encoder: the ViT's linear layers (a gated MLP where hidden_act is silu)"))
            if patches:
                out.put("model.vision_patches_per_token", patches, Provenance(
                    f"config:{path.name}", "measured", metric="vision_config.spatial_merge_size squared"))
    return out


def vision_encoder(vision: dict[str, Any], tokens_per_image: int | None = None) -> tuple[float, int | None] | None:
    """The vision encoder's parameters and the patches it merges into one image token, from a
    vision_config (Qwen2-VL's embed_dim/mlp_ratio, Qwen2.5-VL's and SigLIP's hidden/intermediate
    sizes; the patches a token from spatial_merge_size, or an image's patches over the tokens the
    config gives it, mm_tokens_per_image: Gemma 3's 4,096 over 256); None where its shape is not stated."""
    depth = _size(vision, "depth") or _size(vision, "num_hidden_layers")
    width = _size(vision, "embed_dim") or _size(vision, "hidden_size")
    ratio = vision.get("mlp_ratio")
    inner = _size(vision, "intermediate_size") or (
        int(width * ratio) if width and isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 < ratio <= 64 else None)
    if not depth or not width or not inner:
        return None
    gated = vision.get("hidden_act") in ("silu", "swiglu")
    params = depth * (4 * width * width + (3 if gated else 2) * width * inner)
    merge = _size(vision, "spatial_merge_size")
    # Qwen2-VL names the language model's width hidden_size beside its own embed_dim; Qwen2.5-VL out_hidden_size
    out = _size(vision, "out_hidden_size") or (_size(vision, "hidden_size") if vision.get("embed_dim") else None)
    if merge and out:
        merged = width * merge * merge
        params += merged * merged + merged * out          # the patch merger's two projections
    if params > 1e14 or (merge and merge > 32):     # past any encoder (vocabulary: 10^5 billion): not a shape to size by
        return None
    patches = merge * merge if merge else None
    image, patch = _size(vision, "image_size"), _size(vision, "patch_size")
    if patches is None and image and patch and tokens_per_image and image % patch == 0:
        per_image = (image // patch) ** 2
        patches = per_image // tokens_per_image if per_image % tokens_per_image == 0 and per_image <= 1024 * tokens_per_image else None
    return float(params), patches


_MODEL_TYPE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")     # transformers' model_type spelling; anything else is left out


def _count(config: dict[str, Any], *keys: str) -> int | None:
    """The first of `keys` the config gives, as a whole number >= 1 (ValueError for anything else)."""
    for key in keys:
        value = config.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**40:
                raise ValueError(f"{key} is {value!r}, not a whole number >= 1")
            return value
    return None


# ModelOpt's quant_algo (config.json quantization_config, or hf_quant_config.json beside it) -> the
# weights' dtype and how they run (modelopt/torch/export/model_config.py QUANTIZATION_* names)
_MODELOPT = {"FP8": ("fp8", None), "FP8_PB_WO": ("fp8", None), "FP8_PER_CHANNEL_PER_TOKEN": ("fp8", None),
             "NVFP4": ("fp4", "fp4"), "W4A16_AWQ": ("int4", "int4_awq"), "INT4_AWQ": ("int4", "int4_awq"),
             "W4A8_AWQ": ("int4", None), "W8A8_SQ_PER_CHANNEL": ("int8", "int8_w8a8"), "INT8_SQ": ("int8", "int8_w8a8"),
             "W8A16": ("int8", "int8_weight_only")}


def _quantization(quantization: object) -> tuple[str | None, str | None]:
    """(model.weight_dtype, serving.quantization or None) from a quantization_config or
    hf_quant_config.json's `quantization`; (None, None) for a scheme this reader does not know."""
    if not isinstance(quantization, dict):
        return None, None
    method, bits = quantization.get("quant_method"), quantization.get("bits")
    if method == "fp8":
        return "fp8", None
    if method == "mxfp4":       # gpt-oss: 4-bit float weights (serving.quantization mxfp4 says how they run)
        return "fp4", "mxfp4"
    if method in ("awq", "gptq") and bits in (4, 8):
        return ("int4" if bits == 4 else "int8"), None
    algo = quantization.get("quant_algo")
    if method in ("modelopt", None) and isinstance(algo, str):
        return _MODELOPT.get(algo.upper(), (None, None))
    if method == "compressed-tensors":
        return _compressed_tensors(quantization.get("config_groups"))
    return None, None


def _compressed_tensors(groups: object) -> tuple[str | None, str | None]:
    """A compressed-tensors checkpoint's Linear weights (each group's `weights`: num_bits and type;
    `input_activations` set when the matmuls run in that format too): one scheme for every group,
    else unknown (a mixed checkpoint is sized by hand)."""
    if not isinstance(groups, dict) or not groups:
        return None, None
    schemes = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            return None, None
        activations = group.get("input_activations")
        schemes.add((weights.get("num_bits"), weights.get("type"), isinstance(activations, dict)))
    if len(schemes) != 1:
        return None, None
    bits, kind, with_activations = schemes.pop()
    if (bits, kind) == (8, "float"):
        return "fp8", None
    if (bits, kind) == (8, "int"):
        return "int8", "int8_w8a8" if with_activations else "int8_weight_only"
    if (bits, kind) == (4, "int"):
        return "int4", None
    if (bits, kind) == (4, "float"):       # NVFP4 (format nvfp4-pack-quantized); W4A4 where activations are FP4 too
        return "fp4", "fp4" if with_activations else None
    return None, None


def _kv_scheme(quantization: object) -> str | None:
    """The KV-cache format a checkpoint carries scales for (compressed-tensors kv_cache_scheme,
    ModelOpt kv_cache_quant_algo), as a note: the engines use it only where told to (the KV dtype
    is a serving setting, model.kv_cache_dtype)."""
    if not isinstance(quantization, dict):
        return None
    scheme, algo = quantization.get("kv_cache_scheme"), quantization.get("kv_cache_quant_algo")
    if isinstance(scheme, dict) and scheme.get("num_bits") == 8:
        return f"8-bit {'float' if scheme.get('type') == 'float' else 'integer'} (kv_cache_scheme)"
    if isinstance(algo, str) and algo.upper() in ("FP8", "INT8", "NVFP4"):
        return f"{algo.upper()} (kv_cache_quant_algo)"
    return None


def _shape(path: Path, config: dict[str, Any]) -> Collected:
    out = Collected()
    def source(field: str) -> Provenance:
        return Provenance(f"config:{path.name}", "measured", metric=field)
    layers = _count(config, "num_hidden_layers")
    heads = _count(config, "num_attention_heads")
    hidden = _count(config, "hidden_size")
    kv_lora_rank = _count(config, "kv_lora_rank")
    if layers:
        out.put("model.num_layers", layers, source("num_hidden_layers"))
        _sliding_window(config, layers, out, source)
    if heads:
        out.put("model.num_attention_heads", heads, source("num_attention_heads"))
    if hidden:
        out.put("model.hidden_size", hidden, source("hidden_size"))
    ffn = _count(config, "intermediate_size")
    if ffn and not _count(config, "num_local_experts", "n_routed_experts", "num_experts"):
        out.put("model.intermediate_size", ffn, source("intermediate_size"))     # dense: a LoRA adapter's MLP widths
    # the embedding and lm_head: 16-bit in quantized checkpoints, and no prefill math (M-PREFILL-PARAMS)
    vocab = _count(config, "vocab_size")
    if vocab:
        out.put("model.vocab_size", vocab, source("vocab_size"))
    if isinstance(config.get("tie_word_embeddings"), bool):
        out.put("model.tied_embeddings", config["tie_word_embeddings"], source("tie_word_embeddings"))
    experts = _count(config, "num_local_experts", "n_routed_experts", "num_experts")
    if experts:
        key = next(k for k in ("num_local_experts", "n_routed_experts", "num_experts") if config.get(k) is not None)
        out.put("model.num_experts", experts, source(key))
        routed = _count(config, "num_experts_per_tok")
        if routed:
            out.put("model.experts_per_token", routed, source("num_experts_per_tok"))
        # an expert's width: its own key where the model has shared experts or dense layers beside (DeepSeek, Qwen3-MoE)
        width = _count(config, "moe_intermediate_size", "intermediate_size")
        if width:
            out.put("model.moe_intermediate_size", width, source("moe_intermediate_size" if config.get("moe_intermediate_size")
                                                                else "intermediate_size"))
    mtp = config.get("num_nextn_predict_layers")
    if isinstance(mtp, int) and not isinstance(mtp, bool) and 1 <= mtp <= 64:    # 0: none shipped
        # multi-token-prediction modules shipped with the weights (DeepSeek-V3/R1: 1): speculative decoding's drafter
        out.put("model.mtp_layers", mtp, source("num_nextn_predict_layers"))
    if kv_lora_rank:
        # Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one latent of kv_lora_rank plus
        # the decoupled rotary key (qk_rope_head_dim) per token and layer, shared by all heads. KV heads x
        # head_dim would size it many times too large, so those two facts are left out.
        out.put("model.kv_lora_rank", kv_lora_rank, source("kv_lora_rank"))
        rope = config.get("qk_rope_head_dim")
        if isinstance(rope, int) and not isinstance(rope, bool) and 0 <= rope < 2**20:
            out.put("model.qk_rope_head_dim", rope, source("qk_rope_head_dim"))
        for key in ("qk_nope_head_dim", "v_head_dim"):     # the decompressed heads a prefill's attention runs on
            width = _count(config, key)
            if width:
                out.put(f"model.{key}", width, source(key))
        if not layers:
            raise KboptError(f"--model {path}: num_hidden_layers is needed")
    else:
        kv_heads = _count(config, "num_key_value_heads") or heads
        head_dim = _count(config, "head_dim") or (hidden // heads if heads and hidden else None)
        if not layers or not kv_heads or not head_dim:
            raise KboptError(f"--model {path}: num_hidden_layers, num_key_value_heads/num_attention_heads and "
                             "head_dim/hidden_size are needed")
        out.put("model.num_kv_heads", kv_heads, source("num_key_value_heads" if config.get("num_key_value_heads") else
                                                       "num_attention_heads (no GQA)"))
        out.put("model.head_dim", head_dim, source("head_dim" if config.get("head_dim") else "hidden_size/num_attention_heads"))
    dtype = HF_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    # ModelOpt's older exports keep the scheme in hf_quant_config.json beside config.json
    quantization, where = config.get("quantization_config"), "quantization_config"
    if not isinstance(quantization, dict):
        quantization, where = _hf_quant_config(path), "hf_quant_config.json"
    quantized, runs_as = _quantization(quantization)
    if quantized and isinstance(quantization, dict):   # torch_dtype is then the activations' (DeepSeek-V3: bfloat16 beside FP8 weights)
        out.put("model.weight_dtype", quantized, source(where))
        block = quantization.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 100000 for b in block):
            out.put("model.weight_block_size", block[0], source("quantization_config.weight_block_size"))
        if runs_as:         # mxfp4: weights only, the activations do not run on FP4 tensor cores
            out.put("serving.quantization", runs_as, source(where))
    elif dtype:
        out.put("model.weight_dtype", dtype, source("torch_dtype"))
    name = config.get("_name_or_path")
    if isinstance(name, str) and name:
        out.put("model.name", name, source("_name_or_path"))
    else:       # what the engine loads: the Hugging Face id a hub cache folder names, else the folder itself
        folder = path.resolve().parent
        hub = next((part for part in folder.parts if part.startswith("models--") and part.count("--") >= 2), None)
        out.put("model.name", hub.removeprefix("models--").replace("--", "/", 1) if hub else str(folder), Provenance(
            f"config:{path.name}", "derived", metric="the hub cache folder's model id" if hub else "the config's folder"))
    attention = attention_params(config)
    if attention is not None and layers:
        out.put("model.attention_params_billion", layers * attention / 1e9, Provenance(
            f"config:{path.name}", "derived", metric="shape: layers x (q, k, v, o projections)",
            note="kbopt/collectors/models.py, attention_params: what data-parallel attention replicates on every GPU"))
    if experts:
        _estimated(out, path, "model.active_params_billion", moe_active_params(config),
                   "shape: shared + experts_per_token x per-expert parameters",
                   "moe_active_params): embeddings, attention, dense and shared MLPs, routers, and num_experts_per_tok "
                   "gated experts a layer; norms and biases left out",
                   "an MoE config without the sizes to count its active parameters; give model.active_params_billion")
    kv = _kv_scheme(quantization)
    if kv:
        out.notes.append(f"{path.name}: the checkpoint carries {kv} KV-cache scales; the engine stores the KV cache in "
                         "them only where its KV dtype is set so (model.kv_cache_dtype: give it if it is)")
    elif isinstance(quantization, dict) and not quantized:
        out.notes.append(f"{path.name}: a quantization scheme this reader does not know (quant_method "
                         f"{str(quantization.get('quant_method'))[:40]!r}): give model.weight_dtype")
    _estimated(out, path, "model.params_billion", model_params(config),
               "shape: embeddings + layers x (attention + MLP or every expert)",
               "model_params; a vision encoder is added where the config has one): norms and biases left out; a "
               "checkpoint's own count (its model card, safetensors metadata) is better",
               "a config.json has no parameter count and its shape does not give one here; give model.params_billion "
               "for memory sizing")
    return out


def _estimated(out: Collected, path: Path, fact: str, count: float | None, metric: str, how: str, missing: str) -> None:
    """A parameter count estimated from the config's shape, in billions, or a note saying what to give."""
    if count is not None and count <= 1e14:
        out.put(fact, count / 1e9, Provenance(f"config:{path.name}", "derived", metric=metric,
                                              note=f"an estimate from the config's shape (kbopt/collectors/models.py, {how}"))
    else:
        out.notes.append(f"{path.name}: {missing}")


def _sliding_window(config: dict[str, Any], layers: int, out: Collected, source: Callable[[str], Provenance]) -> None:
    """The attention window and how many layers keep only it: layer_types (gpt-oss, newer Gemma 3 and
    Qwen configs), else Gemma 3's sliding_window_pattern (every pattern-th layer global), Gemma 2's
    alternation, Mistral's every layer; a window named with use_sliding_window false is not used."""
    window = _count(config, "sliding_window")
    if not window or config.get("use_sliding_window") is False:
        return
    types, pattern, kind = config.get("layer_types"), _count(config, "sliding_window_pattern"), config.get("model_type")
    if isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types):
        sliding, field = sum(t == "sliding_attention" for t in types), "layer_types"
    elif pattern:
        sliding, field = layers - layers // pattern, "sliding_window_pattern"
    elif kind == "gemma2":
        sliding, field = layers // 2, "model_type gemma2 (sliding and global layers alternate)"
    elif kind in ("mistral", "mixtral"):
        sliding, field = layers, f"model_type {kind} (every layer)"
    else:
        out.notes.append(f"config.json: a sliding_window of {window} tokens without the layers it applies to "
                         "(layer_types): give model.sliding_window_layers")
        return
    out.put("model.sliding_window", window, source("sliding_window"))
    out.put("model.sliding_window_layers", sliding, source(field))


def _hf_quant_config(path: Path) -> dict[str, Any] | None:
    """The `quantization` section of a ModelOpt hf_quant_config.json beside the config, if any."""
    try:
        data = json.loads(path.with_name("hf_quant_config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    section = data.get("quantization") if isinstance(data, dict) else None
    return section if isinstance(section, dict) else None


def _size(config: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = config.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def attention_params(config: dict[str, Any]) -> int | None:
    """One layer's attention parameters, from config.json: q, k, v, o projections (hidden x heads x
    head_dim, 2 x hidden x kv_heads x head_dim, heads x head_dim x hidden); with MLA, the low-rank q
    (q_lora_rank) and kv (kv_lora_rank) down- and up-projections and o. None when a size is missing."""
    def get(key: str, default: int | None = None) -> int | None:
        return _size(config, key, default)
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    if not (hidden and heads):
        return None
    if get("kv_lora_rank"):
        nope, rope, v = get("qk_nope_head_dim"), get("qk_rope_head_dim"), get("v_head_dim")
        rank, q_rank = get("kv_lora_rank"), get("q_lora_rank", 0)
        if nope is None or rope is None or not v or not rank or q_rank is None:
            return None
        q = (hidden * q_rank + q_rank * heads * (nope + rope)) if q_rank else hidden * heads * (nope + rope)
        return q + hidden * (rank + rope) + rank * heads * (nope + v) + heads * v * hidden
    head_dim = get("head_dim") or hidden // heads
    kv_heads = get("num_key_value_heads") or heads
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def moe_active_params(config: dict[str, Any]) -> float | None:
    """Parameters one token reads in a Mixtral/DeepSeek/Qwen-MoE style decoder, from config.json:

        vocab x hidden (x2 when the output head is not tied)
        + layers x attention
        + dense layers x 3 x hidden x intermediate_size          (gated MLP: gate, up, down)
        + MoE layers x (hidden x experts                          (router)
                        + shared experts' 3 x hidden x their size
                        + experts_per_token x 3 x hidden x moe_intermediate_size)

    attention: q, k, v, o projections (hidden x heads x head_dim, 2 x hidden x kv_heads x head_dim,
    heads x head_dim x hidden); with MLA, the low-rank q (q_lora_rank) and kv (kv_lora_rank) down- and
    up-projections and o. MoE layers: after DeepSeek's first_k_dense_replace dense layers, every layer
    otherwise. Norms and biases are left out (under 0.1%), so is DeepSeek's multi-token-prediction
    layer (not used to serve). None when a size it needs is missing."""
    def get(key: str, default: int | None = None) -> int | None:
        return _size(config, key, default)
    hidden, layers, heads, vocab = get("hidden_size"), get("num_hidden_layers"), get("num_attention_heads"), get("vocab_size")
    experts = get("num_local_experts") or get("n_routed_experts") or get("num_experts")
    routed = get("num_experts_per_tok")
    expert_size = get("moe_intermediate_size") or get("intermediate_size")
    if not (hidden and layers and heads and vocab and experts and routed and expert_size):
        return None
    return _decoder_params(config, routed)


def model_params(config: dict[str, Any]) -> float | None:
    """Every parameter of the checkpoint's decoder, from config.json: as moe_active_params with every
    routed expert counted, or for a dense model embeddings + layers x (attention + a gated MLP's
    3 x hidden x intermediate_size); None where a size is missing or the MLP is not a gated one
    (hidden_act silu, or Gemma's gelu_pytorch_tanh)."""
    experts = _size(config, "num_local_experts") or _size(config, "n_routed_experts") or _size(config, "num_experts")
    if experts and experts > 1:
        return moe_active_params({**config, "num_experts_per_tok": experts}) if _size(config, "num_experts_per_tok") else None
    act = config.get("hidden_act") or config.get("hidden_activation")
    if act not in ("silu", "swish", "gelu_pytorch_tanh") and not (act is None and config.get("model_type") in _GATED):
        return None
    return _decoder_params(config, 0)


# model types whose MLP is gated (gate, up, down), their configs' default activation where none is named
_GATED = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "granite", "olmo2", "cohere"})


def _decoder_params(config: dict[str, Any], routed: int) -> float | None:
    def get(key: str, default: int | None = None) -> int | None:
        return _size(config, key, default)
    hidden, layers, vocab = get("hidden_size"), get("num_hidden_layers"), get("vocab_size")
    experts = get("num_local_experts") or get("n_routed_experts") or get("num_experts") or 0
    expert_size = get("moe_intermediate_size") or get("intermediate_size")
    if not (hidden and layers and vocab and expert_size):
        return None
    attention = attention_params(config)
    if attention is None:
        return None
    if not experts:             # a dense decoder: every layer's MLP
        return float(vocab * hidden * (1 if config.get("tie_word_embeddings") else 2) + layers * (attention + 3 * hidden * expert_size))
    dense_layers = min(layers, get("first_k_dense_replace", 0) or 0)
    dense_mlp = 3 * hidden * (get("intermediate_size") or 0)
    shared = 3 * hidden * ((get("n_shared_experts", 0) or 0) * expert_size + (get("shared_expert_intermediate_size", 0) or 0))
    moe = hidden * experts + shared + routed * 3 * hidden * expert_size
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return float(embeddings + layers * attention + dense_layers * dense_mlp + (layers - dense_layers) * moe)


def model_facts(name_or_file: str) -> Collected:
    path = Path(name_or_file)
    return _from_config(path) if path.suffix == ".json" or path.is_file() else _from_catalog(name_or_file)
