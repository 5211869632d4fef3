"""The weights the fast decode engine reads: LoRA merged in, projections fused, norms folded, refreshed in place.

``DecodeWeights(model)`` copies a Llama-family model's weights (Llama and SmolLM2, Mistral, Qwen2
with its q/k/v biases, Qwen3 with its q/k norms) into the form one decode step wants: per layer one
matrix for the query, key and value projections and one for the gate and up projections, the
RMS-norm weight that precedes each folded into its columns (``(x * r) * w @ W.T = (x * r) @ (W * w).T``),
likewise the final norm into the output head, and the attention scale into the queries (rope is
linear: scaling a query before or after rotating it is the same). A peft LoRA adapter is merged as the peft
model's forward applies it at this moment: ``W + scaling * B @ A`` for every active adapter of
every LoRA layer, the trained copies of ``modules_to_save`` (embeddings, head) where the adapter is
on, the base weights where it is disabled (``PeftModel.disable_adapter``). Merging is done in
float32 and stored in the model's dtype (bfloat16 on a GPU), on the model's device.

``refresh()`` reads the model again and copies into the same tensors, layer by layer (the peak is
one layer more): compiled steps and CUDA graphs that hold these tensors stay valid. Training keeps
the adapter; only decoding reads this copy, which costs a second copy of the weights' memory.

``unsupported_reason(model)`` says in a few words why a model cannot be read this way (another
architecture or activation, quantized weights, unsloth's patched forward, a LoRA variant such as
DoRA, a rope whose frequencies change with the length); None when it can. Sliding-window layers
are supported: each layer's window is kept (``LayerWeights.window``).

Knows the module layout of these transformers models and peft's LoRA layers; knows nothing of
caches, searches or tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # frequencies that do not depend on the length
LAYER_TYPES = ("full_attention", "sliding_attention")


def core_model(model):
    """The transformers model inside a peft wrapper (the model itself when there is none)."""
    return model.get_base_model() if hasattr(model, "get_base_model") and hasattr(model, "peft_config") else model


def _is_lora(module) -> bool:
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


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
    if type(module.get_base_layer()).__name__ not in ("Linear", "Embedding"):
        return f"a LoRA layer around {type(module.get_base_layer()).__name__}"
    return None


def _missing_part(core) -> str | None:
    """The first module of the Llama layout that ``core`` lacks, or None."""
    inner = getattr(core, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, name):
            return f"model.{name}"
    if not hasattr(core, "lm_head"):
        return "lm_head"
    for layer in inner.layers:
        for path in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"):
            owner = layer
            for part in path.split("."):
                owner = getattr(owner, part, None)
            if owner is None:
                return f"layers.{path}"
    return None


def unsupported_reason(model) -> str | None:
    """Why ``model`` cannot run on the fast engine, in a few words; None when it can."""
    core = core_model(model)
    config = getattr(core, "config", None)
    if config is None:
        return f"{type(model).__name__} has no transformers config"
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"architecture {kind!r} (the fast engine runs {', '.join(SUPPORTED_TYPES)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} (the fast engine runs silu)"
    if getattr(config, "quantization_config", None) is not None:
        return "quantized weights"
    missing = _missing_part(core)
    if missing is not None:
        return f"{type(core).__name__} has no {missing}"
    if any(getattr(type(part).forward, "__module__", "").startswith("unsloth")
           for part in (core, core.model, core.model.layers[0].self_attn)):
        return "unsloth's patched forward"
    rope_type = getattr(core.model.rotary_emb, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope type {rope_type!r} (its frequencies change with the length)"
    layer_types = getattr(config, "layer_types", None) or ()
    if any(kind not in LAYER_TYPES for kind in layer_types):
        return f"attention layer types {sorted(set(layer_types) - set(LAYER_TYPES))}"
    for module in core.modules():
        if _is_lora(module) and _lora_reason(module):
            return _lora_reason(module)
        if getattr(module, "weight", None) is not None and not module.weight.is_floating_point():
            return "quantized weights"
    return None


def effective_weights(module):
    """(weight, bias) that ``module`` (a Linear or Embedding, a LoRA layer, a saved copy) applies now, float32.

    A LoRA layer: its base weight plus ``scaling * B @ A`` of each active adapter (peft's own
    ``get_delta_weight``), unless its adapters are disabled; a saved copy: the trained module where
    its adapter is active, else the original.
    """
    if _is_saved_copy(module):
        active = [name for name in module.active_adapters if name in module.modules_to_save]
        chosen = module.original_module if module.disable_adapters or not active else module.modules_to_save[active[0]]
        return effective_weights(chosen)
    if _is_lora(module):
        weight, bias = effective_weights(module.get_base_layer())
        if not module.disable_adapters:
            for name in module.active_adapters:
                if name in module.lora_A:
                    weight = weight + module.get_delta_weight(name).float()
        return weight, bias
    bias = getattr(module, "bias", None)
    return module.weight.detach().float(), None if bias is None else bias.detach().float()


def _window(config, index: int) -> int | None:
    """The sliding window of layer ``index`` (None: full attention), as transformers' attention applies it."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return config.sliding_window if layer_types[index] == "sliding_attention" else None
    if config.model_type == "mistral":
        return getattr(config, "sliding_window", None)
    return None


@dataclass
class LayerWeights:
    """One decoder layer, ready for a step (shapes for H query heads, K key-value heads, head dim D)."""

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

    def tensors(self) -> list:
        return [tensor for tensor in (self.qkv, self.qkv_bias, self.query_norm, self.key_norm, self.output,
                                      self.output_bias, self.gate_up, self.gate_up_bias, self.down, self.down_bias)
                if tensor is not None]


def _stacked_biases(pairs):
    """The biases of (weight, bias) pairs stacked in float32; None when none has one (zeros for one without)."""
    import torch

    if all(bias is None for _, bias in pairs):
        return None
    return torch.cat([torch.zeros(weight.shape[0], device=weight.device) if bias is None else bias
                      for weight, bias in pairs])


def _in(dtype, tensor):
    """A copy of ``tensor`` in ``dtype`` (never the model's own storage: ``refresh`` writes into it), or None."""
    return None if tensor is None else tensor.to(dtype, copy=True)


def _read_layer(layer, config, index: int, dtype) -> LayerWeights:
    """Layer ``index`` of the model as the step reads it (fresh tensors in ``dtype``)."""
    import torch

    attention, mlp = layer.self_attn, layer.mlp
    input_norm = layer.input_layernorm.weight.detach().float()
    post_norm = layer.post_attention_layernorm.weight.detach().float()
    qkv = [effective_weights(getattr(attention, name)) for name in ("q_proj", "k_proj", "v_proj")]
    gate_up = [effective_weights(mlp.gate_proj), effective_weights(mlp.up_proj)]
    output, down = effective_weights(attention.o_proj), effective_weights(mlp.down_proj)
    norms = [getattr(attention, name, None) for name in ("q_norm", "k_norm")]
    scaling = float(getattr(attention, "scaling", attention.head_dim ** -0.5))
    if norms[0] is None:  # the attention scale goes into the query rows (or after Qwen3's query norm, into it)
        qkv[0] = (qkv[0][0] * scaling, None if qkv[0][1] is None else qkv[0][1] * scaling)
    return LayerWeights(
        qkv=(torch.cat([weight for weight, _ in qkv]) * input_norm).to(dtype),
        qkv_bias=_in(dtype, _stacked_biases(qkv)),
        query_norm=None if norms[0] is None else (norms[0].weight.detach().float() * scaling).to(dtype),
        key_norm=None if norms[1] is None else norms[1].weight.detach().to(dtype).clone(),
        output=_in(dtype, output[0]), output_bias=_in(dtype, output[1]),
        gate_up=(torch.cat([weight for weight, _ in gate_up]) * post_norm).to(dtype),
        gate_up_bias=_in(dtype, _stacked_biases(gate_up)),
        down=_in(dtype, down[0]), down_bias=_in(dtype, down[1]),
        window=_window(config, index))


class DecodeWeights:
    """A model's weights for decoding (module docstring); ``refresh()`` re-reads them into the same tensors."""

    def __init__(self, model):
        core = core_model(model)
        config = core.config
        self.model, self.config = model, config
        embed = core.model.embed_tokens
        self.dtype = (embed.original_module if _is_saved_copy(embed) else embed).weight.dtype
        self.device = (embed.original_module if _is_saved_copy(embed) else embed).weight.device
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = float(config.rms_norm_eps)
        self.rotary = core.model.rotary_emb
        self.embed, self.head, self.head_bias, self.layers = self._read()
        self.vocab_size = self.head.shape[0]
        self.windows = tuple(dict.fromkeys(layer.window for layer in self.layers))  # distinct, in layer order
        self.refreshes = 0  # how many times ``refresh`` re-read the model

    def _read_outer(self):
        """(embedding, head with the final norm folded in, head bias): fresh tensors."""
        core = core_model(self.model)
        embed, _ = effective_weights(core.model.embed_tokens)
        head, head_bias = effective_weights(core.lm_head)
        final_norm = core.model.norm.weight.detach().float()
        return _in(self.dtype, embed), (head * final_norm).to(self.dtype), _in(self.dtype, head_bias)

    def _read(self):
        import torch

        core = core_model(self.model)
        with torch.no_grad():
            embed, head, head_bias = self._read_outer()
            layers = [_read_layer(layer, self.config, index, self.dtype)
                      for index, layer in enumerate(core.model.layers)]
        return embed, head, head_bias, layers

    def refresh(self) -> None:
        """Read the model again (its adapter trained, reset, enabled or disabled) into the same tensors."""
        import torch

        core = core_model(self.model)
        with torch.no_grad():
            for target, source in zip((self.embed, self.head, self.head_bias), self._read_outer()):
                if target is not None:
                    target.copy_(source)
            for index, (layer, held) in enumerate(zip(core.model.layers, self.layers)):
                fresh = _read_layer(layer, self.config, index, self.dtype)
                for target, source in zip(held.tensors(), fresh.tensors()):
                    target.copy_(source)
        self.refreshes += 1

    def tensors(self) -> list:
        """Every tensor a step reads (for marking their addresses static under CUDA graphs)."""
        outer = [tensor for tensor in (self.embed, self.head, self.head_bias) if tensor is not None]
        return outer + [tensor for layer in self.layers for tensor in layer.tensors()]
