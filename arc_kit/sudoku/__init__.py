"""The paper's Sudoku experiment: puzzles with unique solutions, and training and scoring a model on them.

``rules`` holds the rules and the exact solver, ``generation`` the seeded generator, ``puzzles`` files,
augmentations and the training pool (all three numpy only); ``experiment`` trains and evaluates with the
kit's solver. The package hands on the names of all four. It may import ``run`` and below.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "rules": ("ALL_DIGITS", "SIZE", "as_grid", "clue_count", "count_solutions", "grid_from_text", "grid_text",
              "is_valid_solution", "keeps_clues", "random_solution", "score_answer", "solve", "solves"),
    "generation": ("MAX_PASSES", "SUDOKU_3M_CLUES", "clue_histogram", "clue_weights", "generate_puzzle",
                   "generate_puzzles", "parse_clues"),
    "puzzles": ("SudokuAugmentation", "SudokuPool", "load_csv", "write_csv"),
    "experiment": ("SudokuEvalSettings", "evaluate", "solve_puzzle", "train"),
})
