"""Measuring the method: the paper's tables, analysis of records, model evaluation and the benchmarks.

``tables`` (the ablation and the sampler comparison, run as run folders), ``table_records`` (their
records, and the tables written out), ``analysis`` (what records say: thresholds, ranks, drafts'
share), ``evaluation`` (models compared by the NLL of the right answers), ``generate_samplers``
(Table 2's stochastic and beam samplers, through transformers' ``generate``), ``bench`` (``arc-kit
bench``) with ``engine_bench`` and ``drafts_bench``. It may import ``run``, ``method`` and everything
below; it knows nothing of Kaggle's files or the command line.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "tables": ("run_table",),
})
