"""The paper's method on one task: test-time training, DFS with cache rewinding, the product of experts.

Read in this order, following one task: ``solver`` (the method on one task), ``ttt`` (test-time
training), ``search`` (the one search: DFS over lanes, one prompt a lane, with its guess, drafts,
deadline and out-of-memory halving; greedy decoding is a case of it), ``drafts`` (the speculative
search's proposals), ``step_costs`` (what a step costs, and how many draft tokens pay for it),
``answers`` (the answer alphabet, a search's completions and results), ``engine`` (the one decode
engine: lanes on a static KV cache, steps and prefix-reusing scoring),
``forward`` (its one forward pass: tokens at positions), ``weights`` (the model's weights as it
reads them, and which models it runs; ``four_bit`` for bitsandbytes' 4-bit layers), ``experts``
(candidates, the aggregations, the choice) and ``records`` (what a task returns, as the run folders
keep it; its JSON is ``run.record_json``'s). ``transformers_forward`` is
transformers' own forward, one lane at a time: the tests' oracle, and what runs a model the engine
cannot. It may import ``model``, ``text``, ``data`` and the floors below; it knows nothing of runs,
workers, tables, Kaggle or the command line.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "answers": ("AnswerSpace",),
    "engine": ("make_engine",),
    "experts": ("product_of_probabilities", "select"),
    "search": ("search",),
    "solver": ("Solver", "augmented_nlls"),
    "ttt": ("TestTimeTrainer",),
})
