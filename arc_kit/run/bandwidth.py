"""The memory-bandwidth floor of a decode step: GPUs' peak bandwidth, the bytes of weights and cache, the least time.

A memory-bound decode step reads every weight and every cached key and value once; at a GPU's peak
bandwidth that takes ``decode_floor_seconds``. The planner's first guesses (``expectations``) and
the benchmarks (``experiments.bench``, ``experiments.engine_bench``) measure against it. Knows the
makers' data sheets and a model's config; knows nothing of engines, runs or what a step computes.
"""

from __future__ import annotations

# Peak memory bandwidth (bytes per second) from the makers' data sheets, by a part of the name torch
# gives the device; the first match counts (the more specific names first).
PEAK_BANDWIDTH = (("H200", 4.8e12), ("H100 NVL", 3.9e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12),
                  ("A100 80GB PCIe", 1.935e12), ("A100-SXM4-80GB", 2.039e12), ("A100", 1.555e12),
                  ("A10G", 6.0e11), ("L4", 3.0e11), ("T4", 3.2e11), ("P100", 7.32e11))


def device_bandwidth(name: str) -> float | None:
    """The peak memory bandwidth of a GPU named ``name`` (bytes per second), or None if not in the table."""
    return next((bandwidth for part, bandwidth in PEAK_BANDWIDTH if part in name), None)


def weight_bytes(model) -> int:
    """Bytes of the model's parameters (a tied embedding and head counted once)."""
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def kv_bytes_per_token(config, element_bytes: int) -> int:
    """Bytes one token adds to a KV cache: layers x (keys and values) x KV heads x head dim x element size."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * 2 * heads * head_dim * element_bytes


def decode_floor_seconds(weights: int, cache_tokens: int, bytes_per_token: int, bandwidth: float) -> float:
    """The least time a memory-bound decode step can take: ``weights`` bytes and the cache of
    ``cache_tokens`` tokens (all lanes together), each read once, at ``bandwidth`` bytes per second."""
    return (weights + cache_tokens * bytes_per_token) / bandwidth
