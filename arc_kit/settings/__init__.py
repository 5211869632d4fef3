"""The settings of every stage in one place: the dataclasses, their named presets, and the ladder of cheaper ones.

Each stage has one frozen dataclass whose defaults are the paper's recipe; each field carries a
one-line reason (``help``), which is also what ``--help`` prints: the command line is generated
from these fields (``options``), so it cannot disagree with what runs. Named presets (``paper``,
``cpu``, ``dry-run``, ``smoke`` for solving; ``paper``, ``paper-code``, ``from-scratch``,
``smollm2-gpu``, ``smollm2-cpu`` for training) live here and nowhere else. Every default names its
source in its help: the paper's appendix table, the authors' code, or ours and why (the table is in
``docs/method.md``). ``from_json`` reads what an older or newer kit wrote: fields it does not know
are dropped (or refused, with ``strict``), fields missing take their defaults.

``base`` holds what every settings dataclass shares and the command-line options; ``training`` the
training stages; ``solving`` the solver and the competition job; ``presets`` the named presets and
the ladder. Import the names from here.

This package needs only the standard library; it knows nothing of models, tasks or files.
"""

from arc_kit.settings.base import (
    ANY_NUMBER,
    DEFAULT_TOKEN_BUDGET,
    Bounds,
    Option,
    Settings,
    get_path,
    options,
    replace_path,
    setting,
    setting_like,
)
from arc_kit.settings.presets import (
    DRY_RUN_TASKS,
    SOLVE_PRESETS,
    TRAINING_PRESETS,
    ladder,
    smoke,
    solve_preset,
    training_preset,
)
from arc_kit.settings.solving import (
    AGGREGATION_NAMES,
    DECODING_MODES,
    DRAFT_SOURCES,
    ENGINE_COMPILE_MODES,
    PROBABILITY_MODES,
    SAMPLER_KINDS,
    SEARCH_KINDS,
    CompetitionSettings,
    SamplerSettings,
    SolveSettings,
)
from arc_kit.settings.training import DataSettings, SequenceSettings, TestTimeSettings, TrainingSettings

__all__ = [
    "AGGREGATION_NAMES",
    "ANY_NUMBER",
    "DECODING_MODES",
    "DEFAULT_TOKEN_BUDGET",
    "DRAFT_SOURCES",
    "DRY_RUN_TASKS",
    "ENGINE_COMPILE_MODES",
    "PROBABILITY_MODES",
    "SAMPLER_KINDS",
    "SEARCH_KINDS",
    "SOLVE_PRESETS",
    "TRAINING_PRESETS",
    "Bounds",
    "CompetitionSettings",
    "DataSettings",
    "Option",
    "SamplerSettings",
    "SequenceSettings",
    "Settings",
    "SolveSettings",
    "TestTimeSettings",
    "TrainingSettings",
    "get_path",
    "ladder",
    "options",
    "replace_path",
    "setting",
    "setting_like",
    "smoke",
    "solve_preset",
    "training_preset",
]
