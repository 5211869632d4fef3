"""The paper's Sudoku experiment: puzzles with unique solutions, and training and scoring a model on them.

``puzzles`` generates and checks puzzles (numpy only: the rules and exact solver in ``rules``, the
generator in ``generation``, files and augmentations in ``puzzles`` itself, which re-exports them all);
``experiment`` trains and evaluates with the kit's solver. It may import ``run`` and below.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "experiment": ("SudokuEvalSettings", "evaluate", "solve_puzzle"),
    "puzzles": ("generate_puzzles",),
})
