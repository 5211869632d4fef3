"""Names a subpackage hands on without importing its modules until one is asked for (PEP 562).

``model``, ``method``, ``run``, ``experiments``, ``kaggle`` and ``sudoku`` import torch or transformers; their
``__init__`` lists public names by module and gets a module ``__getattr__`` from ``lazy_exports``,
so that ``import arc_kit.method.records`` stays as cheap as that one module. This module knows
nothing of what the subpackages hold.
"""

from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> tuple[Callable, Callable, list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) for ``package`` handing on each module's listed names."""
    home = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(home)

    return __getattr__, __dir__, sorted(home)
