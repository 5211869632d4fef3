"""The engine's buffers: static KV caches kept from search to search, and rope tables, made once each.

A cache is (layers, 2, rows, kv heads, capacity, head dim) (``forward``'s layout): its rows a lane
bucket (``step_costs.lane_bucket``), its capacity a capacity bucket (``capacity_bucket``: 256, 512,
1024, then multiples of 1024), so that a few shapes serve every search and a compiled step needs a
few graphs. ``CachePool.cache`` gives the pool's cache of a (rows, capacity), made on first use
(zeros: masked columns stay finite) and kept; to make room beyond ``POOL_BYTES`` the least recently
used are dropped first, never the one the caller holds. ``CachePool.rope`` gives the model's rope
tables at the positions of a capacity. For a compiled step (``compiled``) every tensor is made
``for_compiling``: its address static under CUDA graphs, its capacity dimension dynamic (one graph
serves every capacity). Knows shapes and bytes; knows nothing of what the rows hold, lanes or searches.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from arc_kit.method.forward import rope_tables

POOL_BYTES = 4 * 2**30  # caches kept for later searches, least recently used dropped first beyond this


def capacity_bucket(positions: int) -> int:
    """The capacity of a cache for ``positions`` positions: 256, 512 or 1024, else the next multiple of 1024."""
    return next((small for small in (256, 512, 1024) if positions <= small), -(-positions // 1024) * 1024)


def for_compiling(tensor, capacity_dimension: int | None = None):
    """``tensor`` readied for the compiled step: its address static under CUDA graphs (on CUDA), its capacity
    dimension dynamic. Every tensor the step reads is made so but the few hundred bytes of tokens and positions."""
    import torch

    if tensor.device.type == "cuda":
        torch._dynamo.mark_static_address(tensor)
    if capacity_dimension is not None:
        torch._dynamo.mark_dynamic(tensor, capacity_dimension)
    return tensor


class CachePool:
    """The caches by (rows, capacity), most recently used last, and the rope tables by capacity (module docstring)."""

    def __init__(self, weights, compiled: bool):
        self.weights, self.compiled = weights, compiled  # compiled: every tensor made ``for_compiling``
        self.caches: OrderedDict = OrderedDict()
        self._rope: dict[int, tuple] = {}  # capacity -> (cos, sin)

    def cache(self, rows: int, capacity: int, held=None):
        """The cache of (``rows``, ``capacity``), made on first use; room made by dropping others, never ``held``."""
        import torch

        key, weights = (rows, capacity), self.weights
        if key in self.caches:
            self.caches.move_to_end(key)
            return self.caches[key]
        shape = (len(weights.layers), 2, rows, weights.kv_heads, capacity, weights.head_dim)
        needed = int(np.prod(shape)) * torch.finfo(weights.dtype).bits // 8
        for old in list(self.caches):  # the least recently used first
            if sum(cache.numel() * cache.element_size() for cache in self.caches.values()) + needed <= POOL_BYTES:
                break
            if self.caches[old] is not held:
                del self.caches[old]
        self.caches[key] = self._made(torch.zeros(shape, dtype=weights.dtype, device=weights.device), 4)
        return self.caches[key]

    def rope(self, capacity: int):
        """The model's rope (cos, sin) at positions 0..capacity-1, made once per capacity."""
        if capacity not in self._rope:
            weights = self.weights
            tables = rope_tables(weights.config, weights.head_dim, capacity, weights.dtype, weights.device)
            self._rope[capacity] = tuple(self._made(table, 0) for table in tables)
        return self._rope[capacity]

    def _made(self, tensor, capacity_dimension: int):
        return for_compiling(tensor, capacity_dimension) if self.compiled else tensor
