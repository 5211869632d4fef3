"""The weights the engine reads: LoRA merged in, projections fused, norms folded, refreshed in place; which models.

``DecodeWeights(model)`` copies a Llama-family model's weights (Llama and SmolLM2, Mistral, Qwen2
with its q/k/v biases, Qwen3 with its q/k norms) into the form one forward wants: per layer one
matrix for query, key and value and one for gate and up, the RMS-norm weight that precedes each
folded into its columns (``(x * r) * w @ W.T = (x * r) @ (W * w).T``), likewise the final norm into
the head, and the attention scale (``head_dim ** -0.5``) into the queries (rope is linear: scaling
before or after rotating is the same). Shapes, rope, epsilon and sliding windows come from the
config, the weights from the modules' parameters, never from a module's forward or attributes, so a
model whose modules were patched (unsloth) reads the same. A peft LoRA adapter is merged as the peft
model applies it now: ``W + scaling * B @ A`` for every active adapter, the trained copies of
``modules_to_save`` where the adapter is on, the base weights where it is disabled. Merging is done in
float32 and stored in the model's dtype, on its device.

With ``pack`` (the engine's eager steps on an x86-64 CPU), a float32 matrix of at least ``PACKED_ELEMENTS``
is held packed: oneDNN's blocked copy (an opaque ``torch._mkldnn`` tensor) that ``forward.linear``
gives to oneDNN's linear. At the 1 to 48 rows of a DFS step that is up to twice as fast on the
2-core CPU as the dense matrix's matmul (MKL), about 15% at a prompt's 228 (docs/results.md);
smaller matrices lose more to its call (about 12 microseconds) than they gain. Its sums run in
another order: the dry run's NLLs moved by up to 1e-4 (generation) and 4.4e-4 (scoring, near 53).

Layers held in bitsandbytes 4 bits (nf4 or fp4, double quantization or not) cannot be merged into or
folded without re-quantizing: each such group is a ``four_bit.FourBitProjection`` over the model's own
packed weights (no matrix copied). Embeddings are never 4-bit.

``refresh()`` reads the model again into the same tensors (a packed one packed again, then copied),
layer by layer (the peak is one layer more): compiled steps and CUDA graphs that hold them stay
valid. The copy costs a second copy of the weights' memory (over 4 bits, only the norms, biases and
LoRA pairs).

``unsupported_reason(model)`` says in a few words why a model cannot be read this way (another
architecture or activation, 8-bit or another quantizer's weights, a LoRA variant such as DoRA, a
rope whose frequencies change with the length); None when it can.

Knows the module layout of these transformers models and peft's LoRA layers; knows nothing of caches,
searches or tasks.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from arc_kit.method.four_bit import FourBitProjection, base_of, is_four_bit, is_lora, quant_state_reason

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # frequencies that do not depend on the length
LAYER_TYPES = ("full_attention", "sliding_attention")
PACKED_ELEMENTS = 2**18  # the smallest matrix packed (module docstring)
PACKED_ROWS = 64  # the rows oneDNN's layout is chosen for: at 1 to 228 rows as fast as any other choice measured


def core_model(model):
    """The transformers model inside a peft wrapper (the model itself when there is none)."""
    return model.get_base_model() if hasattr(model, "get_base_model") and hasattr(model, "peft_config") else model


def _is_saved_copy(module) -> bool:
    return hasattr(module, "original_module") and hasattr(module, "modules_to_save")


def _lora_reason(module) -> str | None:
    """Why the LoRA layer ``module`` cannot be merged here, or None."""
    active = [name for name in module.active_adapters if name in module.lora_A]
    if any(name in getattr(module, "lora_variant", {}) for name in active):
        return "a LoRA variant (DoRA or another) that is not a plain low-rank update"
    if any(getattr(module, "lora_bias", {}).get(name) for name in active):
        return "LoRA with its own bias"
    if getattr(module, "merged", False):
        return "an adapter merged into the base weights by peft"
    base = module.get_base_layer()
    if type(base).__name__ not in ("Linear", "Embedding") and not is_four_bit(base):
        return f"a LoRA layer around {type(base).__name__}"
    return None


def _missing_part(core) -> str | None:
    """That ``core`` lacks a module of the Llama layout (the first it lacks), or None."""
    def lacks(owner, path: str) -> bool:
        for part in path.split("."):
            owner = getattr(owner, part, None)
        return owner is None

    missing = [path for path in ("model.embed_tokens", "model.layers", "model.norm", "lm_head") if lacks(core, path)]
    missing = missing or [f"layers.{path}" for layer in core.model.layers for path in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
        "mlp.down_proj", "input_layernorm", "post_attention_layernorm") if lacks(layer, path)]
    return f"{type(core).__name__} has no {missing[0]}" if missing else None


def _quantization_reason(config) -> str | None:
    """Why the config's quantization is not one the engine runs (bitsandbytes 4-bit is), or None."""
    quantization = getattr(config, "quantization_config", None)
    if quantization is None:
        return None
    read = quantization.get if isinstance(quantization, dict) else lambda key: getattr(quantization, key, None)
    method = read("quant_method")
    method = getattr(method, "value", method)  # an enum in transformers' config classes
    if method != "bitsandbytes":
        return f"{method} quantized weights (the engine runs bitsandbytes 4-bit)"
    if not (read("load_in_4bit") or read("_load_in_4bit")):
        return "8-bit bitsandbytes weights (the engine runs bitsandbytes 4-bit)"
    return None


def _four_bit_reason(core) -> str | None:
    """Why the model's 4-bit layers cannot run as ``four_bit`` runs them, or None (also when it has none)."""
    for module in core.modules():
        if _is_saved_copy(module) and is_four_bit(base_of(module.original_module)):
            return "a trained copy of a 4-bit layer"
        if is_four_bit(module) and quant_state_reason(module):
            return quant_state_reason(module)
    embed = core.model.embed_tokens
    if is_four_bit(base_of(embed.original_module if _is_saved_copy(embed) else embed)):
        return "4-bit embeddings"
    for layer in core.model.layers:
        for owner, names in (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj"))):
            if len({is_four_bit(base_of(getattr(getattr(layer, owner), name))) for name in names}) > 1:
                return f"{'/'.join(names)} mixing 4-bit and plain layers"
    return None


def unsupported_reason(model) -> str | None:
    """Why ``model`` cannot run on the engine, in a few words; None when it can."""
    core = core_model(model)
    config = getattr(core, "config", None)
    if config is None:
        return f"{type(model).__name__} has no transformers config"
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"architecture {kind!r} (the engine runs {', '.join(SUPPORTED_TYPES)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} (the engine runs silu)"
    reason = _quantization_reason(config) or _missing_part(core)
    if reason:
        return reason
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope type {rope_type!r} (its frequencies change with the length)"
    layer_types = getattr(config, "layer_types", None) or ()
    if any(kind not in LAYER_TYPES for kind in layer_types):
        return f"attention layer types {sorted(set(layer_types) - set(LAYER_TYPES))}"
    for module in core.modules():
        if is_lora(module) and _lora_reason(module):
            return _lora_reason(module)
        if (getattr(module, "weight", None) is not None and not module.weight.is_floating_point()
                and not is_four_bit(module)):
            return "quantized weights"
    return _four_bit_reason(core)


def effective_weights(module):
    """(weight, bias) that ``module`` (a Linear or Embedding, a LoRA layer, a saved copy) applies now, float32, the
    adapter merged as the module docstring says (``scaling * B @ A`` by peft's own ``get_delta_weight``)."""
    if _is_saved_copy(module):
        active = [name for name in module.active_adapters if name in module.modules_to_save]
        chosen = module.original_module if module.disable_adapters or not active else module.modules_to_save[active[0]]
        return effective_weights(chosen)
    if is_lora(module):
        weight, bias = effective_weights(module.get_base_layer())
        if not module.disable_adapters:
            for name in module.active_adapters:
                if name in module.lora_A:
                    weight = weight + module.get_delta_weight(name).float()
        return weight, bias
    bias = getattr(module, "bias", None)
    return module.weight.detach().float(), None if bias is None else bias.detach().float()


def head_dim(config) -> int:
    """The width of one attention head, as the config says it."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _window(config, index: int) -> int | None:
    """The sliding window of layer ``index`` (None: full attention), as transformers' attention applies it."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return config.sliding_window if layer_types[index] == "sliding_attention" else None
    return getattr(config, "sliding_window", None) if config.model_type == "mistral" else None


@dataclass
class LayerWeights:
    """One decoder layer, ready for a step (shapes for H query heads, K key-value heads, head dim D); over 4-bit
    weights each of ``qkv``, ``output``, ``gate_up`` and ``down`` is a ``four_bit.FourBitProjection``."""

    qkv: object  # ((H + 2K) * D, hidden): query (times the attention scale), key, value rows, the input norm
    # folded into the columns
    qkv_bias: object | None
    query_norm: object | None  # (D,): Qwen3's RMS norm of each query head (times the attention scale), else None
    key_norm: object | None
    output: object  # (hidden, H * D)
    output_bias: object | None
    gate_up: object  # (2 * intermediate, hidden): gate rows then up rows, the post-attention norm folded in
    gate_up_bias: object | None
    down: object  # (hidden, intermediate)
    down_bias: object | None
    window: int | None  # sliding window (positions), None: full attention

    def parts(self) -> list:
        """Its matrices (or projections), norms and biases, in field order: all but the window."""
        return [value for name, value in vars(self).items() if name != "window"]


def owned_tensors(parts) -> list:
    """The tensors of ``parts`` (tensors, 4-bit projections or None) that the decode weights own, in a fixed order:
    what ``refresh`` writes into."""
    return [tensor for part in parts if part is not None
            for tensor in (part.tensors() if isinstance(part, FourBitProjection) else [part])]


def _group(modules, norm, dtype, scales=None, pack: bool = False):
    """(weight, bias) of layers that read one input: over 4-bit layers a ``FourBitProjection``, else their
    merged matrices (each times its scale) stacked, with the RMS-norm weight ``norm`` folded into the columns
    (``pack``: packed for oneDNN when it is large enough, module docstring)."""
    import torch

    scales = scales or [1.0] * len(modules)
    if is_four_bit(base_of(modules[0])):  # the projection adds the biases, as bitsandbytes does
        return FourBitProjection(modules, norm, dtype, scales), None
    pairs = [effective_weights(module) for module in modules]
    # torch.cat copies: ``refresh`` never writes into the model's own storage
    weight = torch.cat([pair[0] if scale == 1.0 else pair[0] * scale for pair, scale in zip(pairs, scales)])
    weight = (weight if norm is None else weight * norm).to(dtype)
    if pack and weight.numel() >= PACKED_ELEMENTS:  # refresh copies a fresh packing into it (``copy_`` takes it)
        weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACKED_ROWS)
    if all(bias is None for _, bias in pairs):
        return weight, None
    bias = torch.cat([torch.zeros(matrix.shape[0], device=matrix.device) if bias is None else bias * scale
                      for (matrix, bias), scale in zip(pairs, scales)])  # zeros for a layer without
    return weight, bias.to(dtype)


def _read_layer(layer, config, index: int, dtype, pack: bool) -> LayerWeights:
    """Layer ``index`` of the model as the step reads it (fresh tensors in ``dtype``)."""
    attention, mlp = layer.self_attn, layer.mlp
    input_norm = layer.input_layernorm.weight.detach().float()
    post_norm = layer.post_attention_layernorm.weight.detach().float()
    norms = [getattr(attention, name, None) for name in ("q_norm", "k_norm")]
    scaling = head_dim(config) ** -0.5
    # the attention scale goes into the query rows (or after Qwen3's query norm, into it)
    qkv, qkv_bias = _group([attention.q_proj, attention.k_proj, attention.v_proj], input_norm, dtype,
                           [scaling if norms[0] is None else 1.0, 1.0, 1.0], pack)
    gate_up, gate_up_bias = _group([mlp.gate_proj, mlp.up_proj], post_norm, dtype, pack=pack)
    output, output_bias = _group([attention.o_proj], None, dtype, pack=pack)
    down, down_bias = _group([mlp.down_proj], None, dtype, pack=pack)
    return LayerWeights(
        qkv=qkv, qkv_bias=qkv_bias,
        query_norm=None if norms[0] is None else (norms[0].weight.detach().float() * scaling).to(dtype),
        key_norm=None if norms[1] is None else norms[1].weight.detach().to(dtype).clone(),
        output=output, output_bias=output_bias, gate_up=gate_up, gate_up_bias=gate_up_bias, down=down,
        down_bias=down_bias, window=_window(config, index))


class DecodeWeights:
    """A model's weights for decoding (module docstring); ``refresh()`` re-reads them into the same tensors. ``pack``:
    the layers' large float32 CPU matrices packed for oneDNN, where this torch can (module docstring)."""

    def __init__(self, model, pack: bool = False):
        import torch

        core = core_model(model)
        config = core.config
        self.model, self.config = model, config
        embed = core.model.embed_tokens
        weight = (embed.original_module if _is_saved_copy(embed) else embed).weight
        self.dtype, self.device = weight.dtype, weight.device
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = head_dim(config)
        self.eps = float(config.rms_norm_eps)
        self.pack = (pack and self.dtype == torch.float32 and self.device.type == "cpu"  # oneDNN's float32 on an
                     and torch.backends.mkldnn.is_available() and platform.machine().lower() in ("x86_64", "amd64"))
        with torch.no_grad():
            self.embed, self.head, self.head_bias = self._read_outer()
            self.layers = [_read_layer(layer, config, index, self.dtype, self.pack)
                           for index, layer in enumerate(core.model.layers)]
        self.vocab_size = self.head.shape[0]
        self.windows = tuple(dict.fromkeys(layer.window for layer in self.layers))  # distinct, in layer order
        self.refreshes = 0  # how many times ``refresh`` re-read the model

    def _read_outer(self):
        """(embedding, head with the final norm folded in (or applied by it, over 4 bits), head bias): fresh."""
        core = core_model(self.model)
        embed, _ = effective_weights(core.model.embed_tokens)
        head, head_bias = _group([core.lm_head], core.model.norm.weight.detach().float(), self.dtype)
        return embed.to(self.dtype, copy=True), head, head_bias

    def refresh(self) -> None:
        """Read the model again (its adapter trained, reset, enabled or disabled) into the same tensors."""
        import torch

        core = core_model(self.model)
        with torch.no_grad():
            for target, source in zip(owned_tensors((self.embed, self.head, self.head_bias)),
                                      owned_tensors(self._read_outer())):
                target.copy_(source)
            for index, (layer, held) in enumerate(zip(core.model.layers, self.layers)):
                fresh = _read_layer(layer, self.config, index, self.dtype, self.pack)
                for target, source in zip(owned_tensors(held.parts()), owned_tensors(fresh.parts())):
                    target.copy_(source)
        self.refreshes += 1

    def tensors(self) -> list:
        """Every tensor a step reads (for marking their addresses static under CUDA graphs): the copies this
        holds, and the model's own packed 4-bit weights and their quant states."""
        parts = [self.embed, self.head, self.head_bias, *(part for layer in self.layers for part in layer.parts())]
        shared = [tensor for part in parts if isinstance(part, FourBitProjection) for tensor in part.shared()]
        return owned_tensors(parts) + shared
