"""The paper's method on one task: test-time training, DFS with cache rewinding, the product of experts.

Read in this order: ``answers`` (the answer alphabet, a search's completions and results),
``engine`` (the interface the searches ask of a model, out-of-memory halving) and ``engines`` (the
factory, the only importer of the concrete engines: ``fast`` with its static KV cache and
fixed-shape step, ``reference`` on transformers' own cache), ``dfs`` (every answer above a
probability threshold, rewinding the cache) and ``batched_dfs`` (the augmentations' searches as
lanes of one engine), ``drafts`` (the speculative DFS's proposals), ``samplers`` (the paper's other
samplers), ``scoring`` (the product of experts over augmented views), ``ttt`` (test-time training's
entry point), ``solver`` (the method on one task) and ``records`` (what it returns; its JSON is
``run.record_json``'s). It may import
``model``, ``text``, ``data`` and the floors below; it knows nothing of runs, workers, tables,
Kaggle or the command line.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "answers": ("AnswerSpace",),
    "dfs": ("dfs_search",),
    "engines": ("make_engine",),
    "scoring": ("augmented_nlls", "product_of_probabilities"),
    "solver": ("Solver",),
    "ttt": ("TestTimeTrainer",),
})
