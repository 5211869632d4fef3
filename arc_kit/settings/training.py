"""The settings of training: how sequences are drawn, what the initial fine-tune trains on, the run, test-time training.

Each stage has one frozen dataclass whose defaults are the paper's recipe; every default names its
source in its help: the paper's appendix table, the authors' code, or ours and why (the table is in
``docs/method.md``).

This module needs only the standard library; it knows nothing of models, tasks or files.
"""

from __future__ import annotations

from dataclasses import dataclass

from arc_kit.settings.base import DEFAULT_TOKEN_BUDGET, Settings, setting


@dataclass(frozen=True)
class SequenceSettings(Settings):
    """How training sequences are drawn for the initial fine-tune; the defaults are the authors'.

    ``passes`` (theirs): every sequence holds ``pairs`` pairs; a pass over a task shuffles its
    examples and cuts them into sequences, so no example appears twice in a pass; a task gives
    ``sequences_per_task`` sequences, or fewer where ``max_passes`` passes over its examples run
    out (the authors use every example once: one pass). ``random`` (the kit's earlier sampler,
    the shipped model's): each sequence draws ``min_pairs`` to ``max_pairs`` distinct pairs afresh
    from a randomly chosen task. Sources of every default: ``docs/method.md``.
    """

    sampler: str = setting("passes", "passes: the authors' (every sequence the same number of pairs, each example "
                           "at most once per pass; arc_loader.py load_from_rearc); random: ours, earlier, the shipped "
                           "model's (min-max pairs drawn afresh for every sequence)", flag="--sequence-sampler",
                           choices=("passes", "random"))
    pairs: int = setting(7, "passes: pairs per sequence, the last one playing the test (authors: 6 shown + 1, "
                         "sizes=[6] in finetune_NemoReArc1200.py)", at_least=1, at_most=1000)
    sequences_per_task: int = setting(1200, "passes: sequences drawn from each task (paper App. B: 1200 epochs for "
                                      "NeMo-8B, 368 for Llama-3B; authors: n=1200); fewer where --max-passes runs a "
                                      "task out of examples; weighted pools scale it", at_least=1, at_most=10**7)
    max_passes: int = setting(1, "passes: most passes over a task's examples, each example at most once per pass "
                              "(authors: 1, every example used once in the whole run, their loader stops when a task "
                              "runs short); more reuse examples to reach --sequences-per-task (ours). Whole tasks "
                              "mixed in with --tasks are repeated without this limit, as the authors repeat theirs",
                              at_least=1, at_most=10**6)
    min_pairs: int = setting(3, "random: fewest pairs per sequence, the last one playing the test (ours)", at_least=1,
                             at_most=1000)
    max_pairs: int = setting(7, "random: most pairs per sequence (ours; ARC tasks have 3-7)", at_least=1, at_most=1000)
    max_len: int = setting(DEFAULT_TOKEN_BUDGET, "token budget of a sequence; earlier pairs are dropped (the last "
                           "first) to fit (authors: max_tokens=8192 in finetune_NemoReArc1200.py); cut to the "
                           "model's positions", at_least=64, at_most=1 << 20)
    mask_first_output: bool = setting(True, "the first output carries no loss: it cannot be predicted without an "
                                      "example (paper, section 5.2; authors: mask_first_n_examples=1)")
    keep_background: bool = setting(False, "keep colour 0 fixed (authors: all 10 colours permuted)")

    def __post_init__(self):
        super().__post_init__()  # the numbers, in their ranges
        if self.sampler not in ("passes", "random"):  # training_data.SequenceDataset implements exactly these
            raise ValueError(f"unknown sequence sampler {self.sampler!r}; expected passes or random")
        if not self.min_pairs <= self.max_pairs:
            raise ValueError(f"need min_pairs <= max_pairs, got {self.min_pairs}, {self.max_pairs}")


@dataclass(frozen=True)
class DataSettings(Settings):
    """What the initial fine-tune trains on; the default is the paper's: RE-ARC alone.

    The paper trains on RE-ARC only, to keep the concepts of the evaluation tasks out (section 5.2),
    and so does the authors' script for it (finetune_NemoReArc1200.py). Task sets (``--tasks``) are
    an option, mixed in as whole tasks at ``1 - re_arc_weight`` of the sequences.
    """

    task_sets: tuple[str, ...] = setting((), "task sets whose tasks are mixed in whole beside RE-ARC (paper: none)",
                                         command_line=False)  # the command line's --tasks
    re_arc_weight: float = setting(0.8, "share of sequences drawn from RE-ARC when task sets (--tasks) are mixed in "
                                   "(ours; without --tasks, the paper's: RE-ARC alone)", at_least=0, at_most=1)
    drop_easiest: float = setting(0.0, "share of each RE-ARC task's examples left out, easiest first by RE-ARC's own "
                                  "PSO difficulty (pixels, colours, objects), recomputed from the grids since our "
                                  "RE-ARC has no metadata.json (authors: 0.5, remove_easiest in "
                                  "finetune_NemoReArc1200.py; off by default: ours has 138-500 examples a task, not "
                                  "the thousands they generated)", at_least=0, below=1)

    def __post_init__(self):
        super().__post_init__()  # the numbers, in their ranges
        object.__setattr__(self, "task_sets", tuple(str(name) for name in self.task_sets))  # a list from JSON


@dataclass(frozen=True)
class TrainingSettings(Settings):
    """One initial fine-tune (or from-scratch) run; the defaults are the paper's initial fine-tune.

    Each field's help names its source: the paper's appendix table of training parameters, the
    authors' code (da-fr/Product-of-Experts-ARC-Paper, finetune_NemoReArc1200.py), or ours and why
    (``docs/method.md`` has the table).
    """

    steps: int | None = setting(None, "optimizer steps; unset: one epoch over every sequence the passes sampler "
                                "plans (authors: num_train_epochs=1; needed with the random sampler)", at_least=1,
                                at_most=10**9)
    batch_size: int = setting(4, "sequences per device and micro-batch (paper App. B)", at_least=1, at_most=1024)
    gradient_accumulation: int = setting(2, "micro-batches per optimizer step (paper App. B)", flag="--accumulation",
                                         at_least=1, at_most=65536)
    learning_rate: float = setting(1e-4, "LoRA adapters, or every non-embedding weight when training fully (paper "
                                   "table)", flag="--lr", at_least=0, at_most=10)
    embedding_learning_rate: float = setting(1e-5, "input embeddings and output head (paper App. B)",
                                             flag="--embedding-lr", at_least=0, at_most=10)
    warmup_ratio: float = setting(0.25, "share of the steps spent warming up linearly (paper App. B: 25%; the "
                                  "authors' finetune_NemoReArc1200.py uses 10%: preset paper-code)", flag="--warmup",
                                  at_least=0, at_most=1)
    weight_decay: float = setting(0.0, "paper App. B: off", at_least=0, at_most=10)
    max_grad_norm: float = setting(1.0, "gradient clipping (ours; also the default of the authors' trainer)",
                                   above=0, at_most=1e6)
    lora_rank: int = setting(256, "LoRA rank (paper App. B), rank-stabilised, no dropout, no bias", flag="--rank",
                             at_least=1, at_most=65536)
    lora_alpha: int = setting(24, "LoRA alpha (paper App. B)", flag="--alpha", at_least=1, at_most=1 << 20)
    full_finetune: bool = setting(False, "train every weight instead of LoRA adapters (ours: models from scratch)",
                                  flag="--full")
    train_embeddings: bool = setting(True, "train the input embeddings and output head too, at their own rate "
                                     "(paper: LoRA on the embeddings too; authors: embed_tokens and lm_head among "
                                     "the targets)")
    optimizer: str = setting("auto", "auto: 8-bit AdamW (paper App. B) where bitsandbytes works (a GPU), else AdamW",
                             choices=("auto", "adamw", "adamw_8bit"))
    precision: str = setting("auto", "auto: bf16 (paper App. B) on GPUs that have it, fp16 on older GPUs, fp32 on "
                             "the CPU", choices=("auto", "bf16", "fp16", "fp32"))
    gradient_checkpointing: bool = setting(True, "recompute activations: long sequences fit in memory (authors: "
                                           "on)")
    group_by_length: bool = setting(True, "cut each step's sequences into micro-batches of similar length "
                                    "(ours: less padding; the same sequences either way)")
    sequences: SequenceSettings = setting(default_factory=SequenceSettings, help="how sequences are drawn")
    data: DataSettings = setting(default_factory=DataSettings, help="what is trained on")
    seed: int = setting(0, "seeds the LoRA initialisation and every drawn sequence (ours; authors: 42 for the "
                        "global generators)", at_least=0, below=2**63)
    save_every: int = setting(250, "steps between checkpoints (and at the end, and at the time limit)", neutral=True,
                              at_least=1, at_most=10**9)
    log_every: int = setting(10, "steps between rows of training_log.csv", neutral=True, at_least=1, at_most=10**9)
    minutes: float | None = setting(None, "stop cleanly (checkpoint and final model) after this long (0: at the "
                                    "first step)", neutral=True, at_least=0, at_most=525600)
    data_workers: int = setting(0, "DataLoader worker processes drawing sequences", flag="--workers", neutral=True,
                                at_least=0, at_most=256)


@dataclass(frozen=True)
class TestTimeSettings(Settings):
    """Per-task training; the defaults are the paper's (Appendix table, test-time column).

    The sequences' token budget is the solve budget (``SolveSettings.max_len``), never a second one.
    """

    steps: int = setting(64, "optimizer steps per task (paper App. B; authors: the 8 symmetries x 8 copies)", flag="--ttt-steps",
                         at_least=1, at_most=10**6)
    batch_size: int = setting(1, "sequences per step (paper App. B)", flag="--ttt-batch-size", at_least=1,
                              at_most=1024)
    learning_rate: float = setting(1e-4, "LoRA adapters (paper App. B)", flag="--ttt-lr", at_least=0, at_most=10)
    embedding_learning_rate: float = setting(1e-5, "input embeddings and output head (paper App. B)",
                                             flag="--ttt-embedding-lr", at_least=0, at_most=10)
    warmup_ratio: float = setting(0.5, "share of the steps spent warming up (paper App. B: 50%; authors: "
                                  "warmup_steps=32 of 64)", flag="--ttt-warmup", at_least=0, at_most=1)
    lora_rank: int = setting(32, "rank of the per-task LoRA (paper App. B)", flag="--ttt-rank", at_least=1,
                             at_most=65536)
    lora_alpha: int = setting(16, "alpha of the per-task LoRA (paper App. B)", flag="--ttt-alpha", at_least=1,
                              at_most=1 << 20)
    train_embeddings: bool = setting(True, "train the embeddings and head too", command_line=False)
    max_grad_norm: float = setting(1.0, "gradient clipping", command_line=False, above=0, at_most=1e6)
    optimizer: str = setting("auto", "8-bit AdamW where bitsandbytes works, else AdamW", command_line=False,
                             choices=("auto", "adamw", "adamw_8bit"))
    gradient_checkpointing: bool = setting(False, "recompute activations in the backward pass: what a large model "
                                           "needs on a small GPU (arc-kit check-model says when)",
                                           flag="--ttt-checkpointing", neutral=True)
    mask_first_output: bool = setting(True, "the first output of a sequence carries no loss", command_line=False)
    seed: int = setting(0, "the adapter's initial weights (every task starts from them)", command_line=False,
                        at_least=0, below=2**63)

    __test__ = False  # not a pytest test class despite the name
