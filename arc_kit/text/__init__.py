"""The text a model reads: the task format, the 64-symbol vocabulary, tasks to token ids and back.

``format`` writes tasks as text and reads answers back; ``vocabulary`` holds the tokenizers;
``encoder`` turns tasks into token ids (prompts, training sequences, the token budget) and back.
numpy only; it may import ``arc_kit.data`` and ``arc_kit.settings``, and knows nothing of models.
"""

from arc_kit.text.encoder import Encoded, TaskEncoder, TaskTooLongError
from arc_kit.text.format import DROP_ORDERS, PREPROMPT, NotAGridError, TextFormat, read_grid
from arc_kit.text.vocabulary import BOS, EOS, PAD, GridTokenizer, HuggingFaceTokenizer, Vocabulary

__all__ = [
    "BOS", "DROP_ORDERS", "EOS", "PAD", "PREPROMPT", "Encoded", "GridTokenizer", "HuggingFaceTokenizer",
    "NotAGridError", "TaskEncoder", "TaskTooLongError", "TextFormat", "Vocabulary", "read_grid",
]
