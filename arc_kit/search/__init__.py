"""Finding and scoring answers: the decode engines, DFS with cache rewinding, the samplers, the product of experts.

``decode_engine`` is the interface the searches ask of a model; ``static_engine`` (static KV
cache, one fixed-shape step) and ``reference_engine`` (transformers' own cache) implement it, and
``engine`` chooses. ``dfs`` and ``batched_dfs`` return every answer above a probability threshold,
``samplers`` the paper's other samplers, ``scoring`` the product of experts over augmented views.
It may import ``text``, ``data`` and the floors below; it knows nothing of training or runs.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "decoding": ("AnswerSpace",),
    "dfs": ("DfsSettings", "dfs_search"),
    "engine": ("make_engine",),
    "scoring": ("augmented_nlls", "product_of_probabilities"),
})
