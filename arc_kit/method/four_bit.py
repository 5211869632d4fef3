"""Projections over bitsandbytes 4-bit weights for the engine: bitsandbytes' own matmul, the LoRA beside it.

A model loaded with ``BitsAndBytesConfig(load_in_4bit=True)`` holds its linear layers as
``bnb.nn.Linear4bit``: a packed weight and its ``quant_state``. Merging a LoRA, folding an RMS-norm
weight or the attention scale into it would mean re-quantizing, so ``FourBitProjection`` leaves the
packed weights alone and applies, for a group of layers that read one input (query, key and value;
gate and up; or one layer):

    y = concat_i( matmul_4bit((x * norm) in the layer's compute dtype, W_i, bias_i) * scale_i )
        + ((x * norm) @ A.T) @ B.T

``matmul_4bit`` is called as ``Linear4bit.forward`` calls it, hence what transformers and peft
compute; ``norm`` is the RMS-norm weight before the group (or None); ``scale_i`` the attention scale
on the query layer (1 elsewhere). ``A`` stacks the ``lora_A`` of every adapter of every layer of the
group, ``B`` places each ``scaling * lora_B`` (times ``scale_i``) in its layer's rows and its
adapter's columns, zeros where an adapter is inactive or disabled: one low-rank pair per group, in
float32, of a fixed shape, so ``refresh`` copies a new adapter into the same tensors. The layers are
not concatenated: the packed tensors stay the model's own (most of a 4-bit model's memory, which
training goes on using), and a double-quantized layer's absmax is quantized per layer.

Knows bitsandbytes' 4-bit layers and peft's LoRA layers; knows nothing of the decoder's arithmetic,
caches or searches.
"""

from __future__ import annotations

from dataclasses import dataclass


def is_four_bit(module) -> bool:
    """Whether ``module`` (no LoRA wrapper) is a bitsandbytes 4-bit linear layer: a packed weight with a quant state."""
    return getattr(getattr(module, "weight", None), "quant_state", None) is not None


def is_lora(module) -> bool:
    """Whether ``module`` is a peft LoRA wrapper."""
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def base_of(module):
    """The layer a peft LoRA wrapper wraps (``module`` itself when it is no wrapper)."""
    return module.get_base_layer() if is_lora(module) else module


def quant_state_reason(module) -> str | None:
    """Why bitsandbytes' ``matmul_4bit`` cannot run the 4-bit layer ``module``, in a few words, or None."""
    state = module.weight.quant_state
    if len(state.shape) != 2:
        return f"a 4-bit weight of shape {list(state.shape)}"
    if state.nested and state.state2.blocksize != 256:
        return "double quantization with blocks other than 256"
    return None


@dataclass
class QuantizedPart:
    """One 4-bit layer of a group, as ``matmul_4bit`` takes it; the tensors are the model's own."""

    data: object  # the packed weight
    state: object  # its bitsandbytes QuantState
    compute_dtype: object  # what ``Linear4bit`` casts its input to (the model's dtype when it sets none)
    scale: float  # multiplies the product: the attention scale on the query layer, else 1.0
    bias: object | None  # a copy in the compute dtype (``Linear4bit`` adds it in that dtype)

    def tensors(self) -> list:
        import torch

        states = [self.state, *([self.state.state2] if self.state.nested else [])]
        return [self.data, *(value for state in states for value in vars(state).values()
                             if isinstance(value, torch.Tensor))]


def _lora_factors(modules, scales, device):
    """(A, B) of the group's LoRA (module docstring), float32, fresh tensors; (None, None) when it has none."""
    import torch

    downs, blocks = [], []  # blocks: (output rows of the layer, its scale * scaling * B or zeros)
    row = 0
    for module, scale in zip(modules, scales):
        rows = module.weight.quant_state.shape[0] if is_four_bit(module) else base_of(module).weight.shape[0]
        for name, down in getattr(module, "lora_A", {}).items():
            up = module.lora_B[name].weight.detach().float()
            on = not module.disable_adapters and name in module.active_adapters
            downs.append(down.weight.detach().float())
            blocks.append((row, up * (module.scaling[name] * scale) if on else torch.zeros_like(up)))
        row += rows
    if not downs:
        return None, None
    down = torch.cat(downs).to(device, copy=True)
    up = torch.zeros((row, down.shape[0]), dtype=torch.float32, device=device)
    column = 0
    for start, block in blocks:
        up[start:start + block.shape[0], column:column + block.shape[1]] = block
        column += block.shape[1]
    return down, up


class FourBitProjection:
    """A group of 4-bit layers reading one input (module docstring); called on (..., in) gives (..., out)."""

    def __init__(self, modules, norm, dtype, scales):
        """``modules``: the group's layers (LoRA wrappers or not) around ``Linear4bit``; ``norm``: the
        RMS-norm weight before them (float32) or None; ``dtype``: the engine's; ``scales``: one per layer."""
        import bitsandbytes

        scales = [float(scale) for scale in scales]
        self.matmul, self.dtype, self.parts = bitsandbytes.matmul_4bit, dtype, []
        for base, scale in zip(map(base_of, modules), scales):
            compute = getattr(base, "compute_dtype", None) or dtype
            bias = None if base.bias is None else base.bias.detach().to(compute, copy=True)
            self.parts.append(QuantizedPart(base.weight.data, base.weight.quant_state, compute, scale, bias))
        self.shape = (sum(part.state.shape[0] for part in self.parts), self.parts[0].state.shape[1])
        device = self.parts[0].data.device
        self.norm = None if norm is None else norm.to(device=device, dtype=dtype, copy=True)
        self.down, self.up = _lora_factors(modules, scales, device)

    def __call__(self, inputs):
        import torch

        if self.norm is not None:
            inputs = inputs * self.norm
        outputs = []
        for part in self.parts:
            product = self.matmul(inputs.to(part.compute_dtype), part.data.t(), quant_state=part.state,
                                  bias=part.bias).to(self.dtype)
            outputs.append(product if part.scale == 1.0 else product * part.scale)
        result = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)
        if self.down is None:
            return result
        low_rank = torch.nn.functional.linear(torch.nn.functional.linear(inputs.float(), self.down), self.up)
        return result + low_rank.to(self.dtype)

    def tensors(self) -> list:
        """The tensors this projection owns (the norm weight, the biases, the LoRA pair): what ``refresh`` copies
        into."""
        return [tensor for tensor in (self.norm, *(part.bias for part in self.parts), self.down, self.up)
                if tensor is not None]

    def shared(self) -> list:
        """The model's own tensors it reads (packed weights, quant states): never copied, never refreshed."""
        return [tensor for part in self.parts for tensor in part.tensors()]
