"""The paper's method on one task: test-time training, DFS with cache rewinding, the product of experts.

The README's reading order follows one task through these modules, ``solver`` first; each says what it
does and does not know. ``engine`` is the one decode engine (its forward in ``forward``, the weights it
reads in ``weights`` and ``four_bit``); ``transformers_forward`` is transformers' own forward, one lane
at a time: the tests' oracle, and what runs a model the engine cannot. ``record_view`` draws a task's record
as HTML and ``answer_tokens`` reads an answer token by token, for looking at. It may import ``model``,
``text``, ``data`` and the floors below; it knows nothing of runs, workers, tables, Kaggle or the
command line.
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
