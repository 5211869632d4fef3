"""The settings of training: how sequences are drawn, what the initial fine-tune trains on, the training itself.

``LoraTrainingSettings`` is the training both stages run (steps, rates, the LoRA, the optimizer): the
initial fine-tune holds it (``TrainingSettings.lora``), and so does the solver for test-time training
(``SolveSettings.ttt``, from ``TEST_TIME_TRAINING``: the paper's test-time column). Each field is declared
once; its default is the initial fine-tune's and every default names its source in its help: the paper's
appendix table, the authors' code, or ours and why (the table is in ``docs/method.md``).

This module needs only the standard library; it knows nothing of models, tasks or files.
"""

from __future__ import annotations

from dataclasses import dataclass

from arc_kit.settings.base import DEFAULT_TOKEN_BUDGET, Settings, setting


@dataclass(frozen=True)
class SequenceSettings(Settings):
    """How training sequences are drawn for the initial fine-tune (each field's help says for which ``sampler``);
    the defaults are the authors'. A pass over a task shuffles its examples and cuts them into sequences."""

    sampler: str = setting("passes", "passes: the authors' (every sequence the same number of pairs, each example "
                           "at most once per pass; arc_loader.py load_from_rearc); random: ours, earlier, the shipped "
                           "model's (min-max pairs drawn afresh for every sequence)", flag="--sequence-sampler",
                           choices=("passes", "random"))  # training_data.SequenceDataset implements exactly these
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
    max_tokens: int = setting(DEFAULT_TOKEN_BUDGET, "token budget of a sequence; earlier pairs are dropped (the last "
                              "first) to fit (authors: max_tokens=8192 in finetune_NemoReArc1200.py); cut to the "
                              "model's positions", flag="--max-len", at_least=64, at_most=1 << 20)
    fixed_background: bool = setting(False, "keep colour 0 fixed (authors: all 10 colours permuted)",
                                     flag="--keep-background")

    def __post_init__(self):
        super().__post_init__()  # the declared ranges and choices
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
        super().__post_init__()  # the declared ranges
        object.__setattr__(self, "task_sets", tuple(str(name) for name in self.task_sets))  # a list given


@dataclass(frozen=True)
class LoraTrainingSettings(Settings):
    """The training itself, as the initial fine-tune and test-time training both run it; the defaults are the
    paper's initial fine-tune (Appendix table), ``TEST_TIME_TRAINING`` its test-time column."""

    steps: int | None = setting(None, "optimizer steps (test-time: per task, paper App. B: 64, the authors' 8 "
                                "symmetries x 8 copies); initial fine-tune unset: one epoch over every sequence the "
                                "passes sampler plans (authors: num_train_epochs=1; needed with the random sampler)",
                                at_least=1, at_most=10**9)
    batch_size: int = setting(4, "sequences per device and micro-batch (paper App. B: 4; test-time 1)", at_least=1,
                              at_most=1024)
    learning_rate: float = setting(1e-4, "LoRA adapters, or every non-embedding weight when training fully (paper "
                                   "App. B, both stages)", flag="--lr", at_least=0, at_most=10)
    embedding_learning_rate: float = setting(1e-5, "input embeddings and output head (paper App. B, both stages)",
                                             flag="--embedding-lr", at_least=0, at_most=10)
    warmup_ratio: float = setting(0.25, "share of the steps spent warming up linearly (paper App. B: 25%, test-time "
                                  "50%, the authors' warmup_steps=32 of 64; the authors' finetune_NemoReArc1200.py "
                                  "uses 10%: preset paper-code)", flag="--warmup", at_least=0, at_most=1)
    max_grad_norm: float = setting(1.0, "gradient clipping (ours; also the default of the authors' trainer)",
                                   above=0, at_most=1e6)
    lora_rank: int = setting(256, "LoRA rank (paper App. B: 256, test-time 32), rank-stabilised, no dropout, no bias",
                             flag="--rank", at_least=1, at_most=65536)
    lora_alpha: int = setting(24, "LoRA alpha (paper App. B: 24, test-time 16)", flag="--alpha", at_least=1,
                              at_most=1 << 20)
    train_embeddings: bool = setting(True, "train the input embeddings and output head too, at their own rate "
                                     "(paper: LoRA on the embeddings too; authors: embed_tokens and lm_head among "
                                     "the targets)")
    optimizer: str = setting("auto", "auto: 8-bit AdamW (paper App. B) where bitsandbytes works (a GPU), else AdamW",
                             choices=("auto", "adamw", "adamw_8bit"))  # optimization.build_optimizer's kinds
    gradient_checkpointing: bool = setting(True, "recompute activations in the backward pass: long sequences fit in "
                                           "memory, the same gradients (authors: on; test-time off: what a large "
                                           "model needs on a small GPU, arc-kit check-model says when)", neutral=True)
    mask_first_output: bool = setting(True, "the first output of a sequence carries no loss: it cannot be predicted "
                                      "without an example (paper, section 5.2; authors: mask_first_n_examples=1)")
    training_seed: int = setting(0, "seeds the LoRA initialisation (every task's test-time training starts from it) "
                                 "and every drawn sequence (ours; authors: 42 for the global generators)",
                                 flag="--seed", at_least=0, below=2**63)


# The paper's test-time training (Appendix B, test-time column): 64 steps of one sequence (the authors: the 8
# symmetries x 8 copies), half of them warm-up (warmup_steps=32 of 64), a rank-32, alpha-16 LoRA; no activation
# checkpointing (a small model does not need it). Rates, clipping, optimizer and loss mask as the initial fine-tune.
TEST_TIME_TRAINING = LoraTrainingSettings(steps=64, batch_size=1, warmup_ratio=0.5, lora_rank=32, lora_alpha=16,
                                          gradient_checkpointing=False)

# The options test-time training gives the solving commands (the others keep the defaults above).
TEST_TIME_FLAGS = {"steps": "--ttt-steps", "batch_size": "--ttt-batch-size", "learning_rate": "--ttt-lr",
                   "embedding_learning_rate": "--ttt-embedding-lr", "warmup_ratio": "--ttt-warmup",
                   "lora_rank": "--ttt-rank", "lora_alpha": "--ttt-alpha",
                   "gradient_checkpointing": "--ttt-checkpointing"}


@dataclass(frozen=True)
class TrainingSettings(Settings):
    """One initial fine-tune (or from-scratch) run; the defaults are the paper's initial fine-tune (the authors'
    code: da-fr/Product-of-Experts-ARC-Paper, finetune_NemoReArc1200.py)."""

    lora: LoraTrainingSettings = setting(default_factory=LoraTrainingSettings, help="the training: steps, rates, "
                                         "the LoRA, the optimizer")
    gradient_accumulation: int = setting(2, "micro-batches per optimizer step (paper App. B)", flag="--accumulation",
                                         at_least=1, at_most=65536)
    weight_decay: float = setting(0.0, "paper App. B: off", at_least=0, at_most=10)
    full_finetune: bool = setting(False, "train every weight instead of LoRA adapters (ours: models from scratch)",
                                  flag="--full")
    precision: str = setting("auto", "auto: bf16 (paper App. B) on GPUs that have it, fp16 on older GPUs, fp32 on "
                             "the CPU", choices=("auto", "bf16", "fp16", "fp32"))
    group_by_length: bool = setting(True, "cut each step's sequences into micro-batches of similar length "
                                    "(ours: less padding; the same sequences either way)")
    sequences: SequenceSettings = setting(default_factory=SequenceSettings, help="how sequences are drawn")
    data: DataSettings = setting(default_factory=DataSettings, help="what is trained on")
    save_every: int = setting(250, "steps between checkpoints (and at the end, and at the time limit)", neutral=True,
                              at_least=1, at_most=10**9)
    log_every: int = setting(10, "steps between rows of training_log.csv", neutral=True, at_least=1, at_most=10**9)
    minutes: float | None = setting(None, "stop cleanly (checkpoint and final model) after this long, the warm-up "
                                    "and cosine decay fitted to the steps that fit (timed on the first three; ours) "
                                    "(0: at the first step)", at_least=0, at_most=525600)
    data_workers: int = setting(0, "DataLoader worker processes drawing sequences", flag="--workers", neutral=True,
                                at_least=0, at_most=256)
