"""The settings of every stage in one place: the dataclasses, their named presets, and the ladder of cheaper ones.

Each stage has one frozen dataclass whose defaults are the paper's recipe; each field is declared once,
in one class (a test holds every class to it), with a one-line reason (``help``) that names its source
(the paper's appendix table, the authors' code, or ours and why; the table is in ``docs/method.md``)
and is what ``--help`` prints. What two stages share is one dataclass both hold
(``LoraTrainingSettings``: the initial fine-tune's and test-time training's). ``base`` holds what every
settings dataclass shares (checks, JSON through the kit's one codec ``arc_kit.codec``, the command-line options);
``training`` the training stages; ``solving`` the solver, the run's pool of Ray actors (its watchdog's
two times), the competition job and its clock, the Sudoku evaluation and how a model is loaded;
``presets`` the named presets, the from-scratch models' too (and nowhere else), and the ladder. Import
the names from here.

This package needs only the standard library; it knows nothing of models, tasks or files.
"""

from arc_kit.settings.base import (
    ANY_NUMBER,
    DEFAULT_TOKEN_BUDGET,
    Bounds,
    Settings,
    changed,
    described,
    options,
    replace_path,
    replace_paths,
    setting,
)
from arc_kit.settings.presets import (
    DRY_RUN_TASKS,
    MODEL_PRESETS,
    SOLVE_PRESETS,
    TRAINING_PRESETS,
    ladder,
    smoke,
    solve_preset,
    sudoku_training,
    training_preset,
)
from arc_kit.settings.solving import (
    DECODING_MODES,
    DRAFT_SOURCES,
    ENGINE_COMPILE_MODES,
    PROBABILITY_MODES,
    SEARCH_KINDS,
    SUDOKU_SOLVING,
    CompetitionSettings,
    LoadSettings,
    PoolSettings,
    SamplerSettings,
    SolveSettings,
    SudokuEvalSettings,
)
from arc_kit.settings.training import (
    TEST_TIME_TRAINING,
    DataSettings,
    LoraTrainingSettings,
    SequenceSettings,
    TrainingSettings,
)

__all__ = [
    "ANY_NUMBER", "DECODING_MODES", "DEFAULT_TOKEN_BUDGET", "DRAFT_SOURCES", "DRY_RUN_TASKS",
    "ENGINE_COMPILE_MODES", "MODEL_PRESETS", "PROBABILITY_MODES", "SEARCH_KINDS", "SOLVE_PRESETS", "SUDOKU_SOLVING",
    "TEST_TIME_TRAINING", "TRAINING_PRESETS", "Bounds", "CompetitionSettings", "DataSettings",
    "LoadSettings", "LoraTrainingSettings", "PoolSettings", "SamplerSettings", "SequenceSettings", "Settings",
    "SolveSettings", "SudokuEvalSettings", "TrainingSettings", "changed", "described", "ladder", "options",
    "replace_path", "replace_paths", "setting", "smoke", "solve_preset", "sudoku_training", "training_preset",
]
