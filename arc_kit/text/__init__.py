"""The text a model reads: the task format, the 64-symbol vocabulary, tasks to token ids and back.

numpy only; it may import ``arc_kit.data`` and ``arc_kit.settings``, and knows nothing of models.
"""

from arc_kit.text.format import (
    DROP_ORDERS,
    PREPROMPT,
    Encoded,
    GridTokenizer,
    HuggingFaceTokenizer,
    NotAGridError,
    TaskEncoder,
    TaskTooLongError,
    TextFormat,
    Vocabulary,
    read_grid,
)

__all__ = [
    "DROP_ORDERS", "PREPROMPT", "Encoded", "GridTokenizer", "HuggingFaceTokenizer", "NotAGridError", "TaskEncoder",
    "TaskTooLongError", "TextFormat", "Vocabulary", "read_grid",
]
