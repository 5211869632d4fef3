"""Models and their training: loading a model folder, building a shrunk base, the fine-tune and test-time training.

``description`` (a model folder read once per process: its kind, config, token budget, tokenizer, weights),
``loading`` (building and loading models, base + delta), ``checks`` (a folder checked before anything is allocated),
``memory`` (what a model needs, from its config), ``bases`` and ``gguf_tokenizer`` (pretrained bases read
from GGUF), ``shrinking`` (the vocabulary cut to the grid alphabet), ``training_data``, ``training``
and ``optimization`` (the fine-tune, whose pieces test-time training, ``method.ttt``, uses too). It
may import ``text``, ``data`` and the floors below; it knows nothing of decoding, search or runs.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "loading": ("LoadSettings", "create_model", "default_model_path", "load_model"),
    "training": ("pretrain",),
})
