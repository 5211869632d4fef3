"""The settings of every stage in one place: the dataclasses, their named presets, and the ladder of cheaper ones.

Each stage has one frozen dataclass whose defaults are the paper's recipe; each field carries a
one-line reason (``help``), which is also what ``--help`` prints: the command line is generated
from these fields (``options``), so it cannot disagree with what runs. Named presets (``paper``,
``cpu``, ``dry-run``, ``smoke`` for solving; ``paper``, ``paper-code``, ``from-scratch``,
``smollm2-gpu``, ``smollm2-cpu`` for training) live here and nowhere else. Every default names its
source in its help: the paper's appendix table, the authors' code, or ours and why (the table is in
``docs/method.md``). ``from_json`` reads what an older or newer kit wrote: fields it does not know
are dropped (or refused, with ``strict``), fields missing take their defaults.

This module needs only the standard library; it knows nothing of models, tasks or files.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from arc_kit.names import shown

DEFAULT_TOKEN_BUDGET = 8192  # the authors' cap on a prompt plus its answer, and on a training sequence, for every
# model (their NeMo-8B runs: finetune_NemoReArc1200.py and evaluate_NemoReArc1200_*.py, max_tokens=8192)
DRY_RUN_TASKS = 5  # the dry run's tasks: the 5 shortest of ARC-AGI-1 evaluation by prompt tokens (its preset's sizing)
AGGREGATION_NAMES = ("product", "min", "max", "sum")  # scoring.AGGREGATIONS implements exactly these
SAMPLER_KINDS = ("dfs", "greedy", "sample", "beam")
PROBABILITY_MODES = ("full", "answer-mask")  # decoding.answer_log_probs implements exactly these
DECODING_MODES = ("authors", "strict")  # text_format.TaskEncoder.decode_answer implements exactly these
ENGINE_KINDS = ("fast", "reference")  # engine.make_engine implements exactly these
ENGINE_COMPILE_MODES = ("auto", "on", "off")


def setting(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | None = None,
            choices: tuple | None = None, neutral: bool = False, default_factory: Any = dataclasses.MISSING,
            command_line: bool = True):
    """A dataclass field with its reason (``help``), its command-line ``flag`` and whether it changes results.

    ``neutral`` fields (batch sizes, say) never change what a run produces, so a run folder made with
    other values may be resumed. ``command_line=False`` keeps a field off the generated options.
    """
    metadata = {"help": help, "flag": flag, "choices": choices, "neutral": neutral, "command_line": command_line}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


class Settings:
    """What every settings dataclass can do: replace, to and from JSON, compare on what matters."""

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping, *, strict: bool = False):
        """The inverse of ``to_json``; unknown fields are dropped (``strict``: ValueError naming them)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = [name for name in data if name not in known]
        if unknown and strict:
            raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(map(shown, unknown))}; known: "
                             f"{', '.join(known)}")
        hints = typing.get_type_hints(cls)
        values = {}
        for name, value in data.items():
            if name not in known:
                continue
            kind = hints.get(name)
            if isinstance(kind, type) and issubclass(kind, Settings) and isinstance(value, Mapping):
                value = kind.from_json(value, strict=strict)
            values[name] = value
        return cls(**values)

    def result_json(self) -> dict:
        """``to_json`` without the neutral fields: what two runs must share to be one run."""
        hints = typing.get_type_hints(type(self))
        result = {}
        for item in dataclasses.fields(self):
            if item.metadata.get("neutral"):
                continue
            value = getattr(self, item.name)
            kind = hints.get(item.name)
            result[item.name] = value.result_json() if isinstance(value, Settings) else \
                (dataclasses.asdict(value) if dataclasses.is_dataclass(value) and isinstance(kind, type) else value)
        return result


# ---------------------------------------------------------------------------------------------
# Training sequences, initial fine-tuning, test-time training.

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
                         "sizes=[6] in finetune_NemoReArc1200.py)")
    sequences_per_task: int = setting(1200, "passes: sequences drawn from each task (paper App. B: 1200 epochs for "
                                      "NeMo-8B, 368 for Llama-3B; authors: n=1200); fewer where --max-passes runs a "
                                      "task out of examples; weighted pools scale it")
    max_passes: int = setting(1, "passes: most passes over a task's examples, each example at most once per pass "
                              "(authors: 1, every example used once in the whole run, their loader stops when a task "
                              "runs short); more reuse examples to reach --sequences-per-task (ours). Whole tasks "
                              "mixed in with --tasks are repeated without this limit, as the authors repeat theirs")
    min_pairs: int = setting(3, "random: fewest pairs per sequence, the last one playing the test (ours)")
    max_pairs: int = setting(7, "random: most pairs per sequence (ours; ARC tasks have 3-7)")
    max_len: int = setting(DEFAULT_TOKEN_BUDGET, "token budget of a sequence; earlier pairs are dropped (the last "
                           "first) to fit (authors: max_tokens=8192 in finetune_NemoReArc1200.py); cut to the "
                           "model's positions")
    mask_first_output: bool = setting(True, "the first output carries no loss: it cannot be predicted without an "
                                      "example (paper, section 5.2; authors: mask_first_n_examples=1)")
    keep_background: bool = setting(False, "keep colour 0 fixed (authors: all 10 colours permuted)")

    def __post_init__(self):
        if self.sampler not in ("passes", "random"):  # training_data.SequenceDataset implements exactly these
            raise ValueError(f"unknown sequence sampler {self.sampler!r}; expected passes or random")
        if not 1 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"need 1 <= min_pairs <= max_pairs, got {self.min_pairs}, {self.max_pairs}")
        if self.pairs < 1 or self.sequences_per_task < 1 or self.max_passes < 1:
            raise ValueError(f"pairs, sequences_per_task and max_passes must be at least 1, got {self.pairs}, "
                             f"{self.sequences_per_task}, {self.max_passes}")


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
                                   "(ours; without --tasks, the paper's: RE-ARC alone)")
    drop_easiest: float = setting(0.0, "share of each RE-ARC task's examples left out, easiest first by RE-ARC's own "
                                  "PSO difficulty (pixels, colours, objects), recomputed from the grids since our "
                                  "RE-ARC has no metadata.json (authors: 0.5, remove_easiest in "
                                  "finetune_NemoReArc1200.py; off by default: ours has 138-500 examples a task, not "
                                  "the thousands they generated)")

    def __post_init__(self):
        object.__setattr__(self, "task_sets", tuple(str(name) for name in self.task_sets))  # a list from JSON
        if not 0 <= self.re_arc_weight <= 1:
            raise ValueError(f"re_arc_weight must be in [0, 1], got {self.re_arc_weight}")
        if not 0 <= self.drop_easiest < 1:
            raise ValueError(f"drop_easiest must be in [0, 1), got {self.drop_easiest}")


@dataclass(frozen=True)
class TrainingSettings(Settings):
    """One initial fine-tune (or from-scratch) run; the defaults are the paper's initial fine-tune.

    Each field's help names its source: the paper's appendix table of training parameters, the
    authors' code (da-fr/Product-of-Experts-ARC-Paper, finetune_NemoReArc1200.py), or ours and why
    (``docs/method.md`` has the table).
    """

    steps: int | None = setting(None, "optimizer steps; unset: one epoch over every sequence the passes sampler "
                                "plans (authors: num_train_epochs=1; needed with the random sampler)")
    batch_size: int = setting(4, "sequences per device and micro-batch (paper App. B)")
    gradient_accumulation: int = setting(2, "micro-batches per optimizer step (paper App. B)", flag="--accumulation")
    learning_rate: float = setting(1e-4, "LoRA adapters, or every non-embedding weight when training fully (paper "
                                   "table)", flag="--lr")
    embedding_learning_rate: float = setting(1e-5, "input embeddings and output head (paper App. B)",
                                             flag="--embedding-lr")
    warmup_ratio: float = setting(0.25, "share of the steps spent warming up linearly (paper App. B: 25%; the "
                                  "authors' finetune_NemoReArc1200.py uses 10%: preset paper-code)", flag="--warmup")
    weight_decay: float = setting(0.0, "paper App. B: off")
    max_grad_norm: float = setting(1.0, "gradient clipping (ours; also the default of the authors' trainer)")
    lora_rank: int = setting(256, "LoRA rank (paper App. B), rank-stabilised, no dropout, no bias", flag="--rank")
    lora_alpha: int = setting(24, "LoRA alpha (paper App. B)", flag="--alpha")
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
                        "global generators)")
    save_every: int = setting(250, "steps between checkpoints (and at the end, and at the time limit)", neutral=True)
    log_every: int = setting(10, "steps between rows of training_log.csv", neutral=True)
    minutes: float | None = setting(None, "stop cleanly (checkpoint and final model) after this long", neutral=True)
    data_workers: int = setting(0, "DataLoader worker processes drawing sequences", flag="--workers", neutral=True)


@dataclass(frozen=True)
class TestTimeSettings(Settings):
    """Per-task training; the defaults are the paper's (Appendix table, test-time column).

    The sequences' token budget is the solve budget (``SolveSettings.max_len``), never a second one.
    """

    steps: int = setting(64, "optimizer steps per task (paper App. B; authors: the 8 symmetries x 8 copies)", flag="--ttt-steps")
    batch_size: int = setting(1, "sequences per step (paper App. B)", flag="--ttt-batch-size")
    learning_rate: float = setting(1e-4, "LoRA adapters (paper App. B)", flag="--ttt-lr")
    embedding_learning_rate: float = setting(1e-5, "input embeddings and output head (paper App. B)",
                                             flag="--ttt-embedding-lr")
    warmup_ratio: float = setting(0.5, "share of the steps spent warming up (paper App. B: 50%; authors: "
                                  "warmup_steps=32 of 64)", flag="--ttt-warmup")
    lora_rank: int = setting(32, "rank of the per-task LoRA (paper App. B)", flag="--ttt-rank")
    lora_alpha: int = setting(16, "alpha of the per-task LoRA (paper App. B)", flag="--ttt-alpha")
    train_embeddings: bool = setting(True, "train the embeddings and head too", command_line=False)
    max_grad_norm: float = setting(1.0, "gradient clipping", command_line=False)
    optimizer: str = setting("auto", "8-bit AdamW where bitsandbytes works, else AdamW", command_line=False)
    gradient_checkpointing: bool = setting(False, "on for large models on small GPUs", command_line=False)
    mask_first_output: bool = setting(True, "the first output of a sequence carries no loss", command_line=False)
    seed: int = setting(0, "the adapter's initial weights (every task starts from them)", command_line=False)

    __test__ = False  # not a pytest test class despite the name


# ---------------------------------------------------------------------------------------------
# Candidate generation and the whole method.

@dataclass(frozen=True)
class SamplerSettings(Settings):
    """Which sampler, and its knobs; the default is the paper's DFS at T = 9%."""

    kind: str = setting("dfs", "dfs | greedy | sample | beam", flag="--sampler", choices=SAMPLER_KINDS)
    threshold: float = setting(0.09, "DFS: minimum probability of a returned answer")
    count: int = setting(1, "sample: answers drawn; beam: beams (and answers returned)")
    temperature: float = setting(1.0, "sample: softmax temperature")
    max_forward_calls: int = setting(20_000, "DFS: cap on single-token model calls per search (reported when hit)")
    use_guess: bool = setting(True, "DFS: explore the best answer found so far first", command_line=False)

    def __post_init__(self):
        if self.kind not in SAMPLER_KINDS:
            raise ValueError(f"unknown sampler {self.kind!r}; expected one of {SAMPLER_KINDS}")
        if self.count < 1:
            raise ValueError("count must be at least 1")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be a probability in (0, 1], got {self.threshold}")

    @property
    def name(self) -> str:
        if self.kind == "dfs":
            return f"DFS T={self.threshold * 100:g}%"
        if self.kind == "greedy":
            return "greedy"
        return f"{'stochastic' if self.kind == 'sample' else 'beam'} x{self.count}"


@dataclass(frozen=True)
class SolveSettings(Settings):
    """The whole method's settings; defaults are the paper's final configuration."""

    sampler: SamplerSettings = setting(default_factory=SamplerSettings, help="candidate generation")
    inference_augmentations: int = setting(16, "each symmetry twice, fresh colours and pair order each time",
                                           flag="--augmentations")
    scoring_augmentations: int = setting(16, "fresh ones, for the product of experts")
    aggregation: str = setting("product", "product | min | max | sum | generation (no scoring pass)",
                               choices=(*AGGREGATION_NAMES, "generation"))
    probabilities: str = setting("full", "full: an answer's probability under the model's whole softmax (the "
                                 "paper's P(s|q)); answer-mask: renormalised over the answer tokens",
                                 choices=PROBABILITY_MODES)
    attempts: int = setting(2, "answers chosen per test input: 2 (the competition's), or 1 (top-1, as in the "
                            "paper's Sudoku experiment)", choices=(1, 2))
    test_time_training: bool = setting(True, "train a fresh LoRA on each task's own examples first", flag="--ttt")
    ttt: TestTimeSettings = setting(default_factory=TestTimeSettings, help="test-time training")
    max_len: int | None = setting(DEFAULT_TOKEN_BUDGET, "token budget of a prompt plus its longest answer, and of "
                                  "test-time training sequences, for every model (authors: max_tokens=8192 in every "
                                  "NeMo-8B run; their Llama-3B evaluation 16384); cut to what the model takes (its "
                                  "positions); unset (older run files): this default")
    decoding: str = setting("authors", "how generated text becomes a grid. authors: theirs (arc_loader.py decode): "
                            "rows split at newlines, every non-digit dropped, empty rows skipped, no eos needed; "
                            "strict: ours, earlier: digits and row breaks only, up to an eos", choices=DECODING_MODES)
    keep_background: bool = setting(False, "augmentations keep colour 0 (the authors permute all 10)",
                                    command_line=False)
    scoring_batch_size: int = setting(16, "answers scored together on one prompt's cache (batched: prompts "
                                      "per forward, and rows per answer forward)", neutral=True, command_line=False)
    batched: bool = setting(True, "search a test input's augmentations together (DFS lanes after the first, "
                            "which gives their guess) and score all scoring augmentations together; the same "
                            "candidates and NLLs up to rounding unless a DFS cap is hit (--no-batched: one by one)")
    seed: int = setting(0, "seeds every augmentation and sample (with the task id)")
    engine: str = setting("fast", "fast: the static-cache decode engine (LoRA merged, one fixed-shape step per "
                          "token; models it cannot run fall back to the reference, logged); reference: "
                          "transformers' forward and caches. The same answers up to float rounding",
                          choices=ENGINE_KINDS, neutral=True)
    engine_compile: str = setting("auto", "fast engine: torch.compile its step (auto: on a GPU, with CUDA graphs; "
                                  "eager on the CPU)", choices=ENGINE_COMPILE_MODES, neutral=True)

    def __post_init__(self):
        if self.engine not in ENGINE_KINDS:
            raise ValueError(f"unknown engine {self.engine!r}; expected one of {ENGINE_KINDS}")
        if self.engine_compile not in ENGINE_COMPILE_MODES:
            raise ValueError(f"unknown engine compile mode {self.engine_compile!r}; expected one of "
                             f"{ENGINE_COMPILE_MODES}")
        if self.aggregation not in (*AGGREGATION_NAMES, "generation"):
            raise ValueError(f"unknown aggregation {self.aggregation!r}")
        if self.probabilities not in PROBABILITY_MODES:
            raise ValueError(f"unknown probabilities {self.probabilities!r}; expected one of {PROBABILITY_MODES}")
        if self.attempts not in (1, 2):
            raise ValueError(f"attempts must be 1 or 2, got {self.attempts}")
        if self.inference_augmentations < 1:
            raise ValueError("inference_augmentations must be at least 1")
        if self.max_len is not None and self.max_len < 64:
            raise ValueError(f"max_len must be at least 64 tokens, got {self.max_len}")
        if self.decoding not in DECODING_MODES:
            raise ValueError(f"unknown decoding {self.decoding!r}; expected one of {DECODING_MODES}")

    @property
    def description(self) -> str:
        """One line for logs: sampler, augmentations, TTT, aggregation."""
        return (f"{self.sampler.name}, {self.inference_augmentations}+{self.scoring_augmentations} augmentations, "
                f"{f'TTT {self.ttt.steps} steps' if self.test_time_training else 'no TTT'}, {self.aggregation}")


@dataclass(frozen=True)
class CompetitionSettings(Settings):
    """The competition job's clock (``kaggle.run_competition``); the defaults are the competition's limits."""

    hours: float = setting(12.0, "the limit, counted from the job's start")
    safety_minutes: float = setting(45.0, "plan to end this long before the limit")
    stop_minutes: float = setting(15.0, "stop workers still running this long before the limit (the last write "
                                        "follows)")
    smoke_tasks: int = setting(3, "tasks solved when the test file is the public placeholder")
    job: str = setting("auto", "auto: a smoke job on --smoke-tasks tasks when the test file is the public "
                               "placeholder (its ids all among the evaluation or training ids), else every task; "
                               "smoke: the smoke job whatever the test file holds (public data elsewhere); full: "
                               "every task", choices=("auto", "smoke", "full"))
    workers_per_gpu: int = setting(0, "worker processes sharing each GPU (0: as many as the first worker's "
                                      "measured peak memory allows, at most 8)")


# ---------------------------------------------------------------------------------------------
# Presets and the ladder.

def smoke(settings: SolveSettings) -> SolveSettings:
    """A few seconds per task: enough to prove that the whole path works, not to score."""
    return settings.replace(inference_augmentations=min(2, settings.inference_augmentations),
                            scoring_augmentations=min(2, settings.scoring_augmentations),
                            ttt=settings.ttt.replace(steps=min(4, settings.ttt.steps)),
                            sampler=settings.sampler.replace(
                                max_forward_calls=min(2000, settings.sampler.max_forward_calls)))


def _cpu() -> SolveSettings:
    """The method sized for a 2-core CPU and a small model.

    DFS at T = 1% (a small model rarely gives a whole answer 9%), 8 + 8 augmentations instead of
    16 + 16, prompts within 4096 tokens (long tasks drop train pairs), a DFS cap of 2000
    single-token calls per search, and a test-time learning rate of 1e-3 (the paper's 1e-4 barely
    moves a small model in 64 steps).
    """
    return SolveSettings(sampler=SamplerSettings("dfs", threshold=0.01, max_forward_calls=2000),
                         inference_augmentations=8, scoring_augmentations=8, max_len=4096,
                         ttt=TestTimeSettings(learning_rate=1e-3, embedding_learning_rate=1e-3))


def _dry_run() -> SolveSettings:
    """The main job on a 2-core CPU with the shipped SmolLM2-135M fine-tune, sized by measurement.

    The cpu preset (DFS at T = 1%) with 8 test-time steps instead of 64 (each step of a 106M model
    costs about a second here) and 4 + 4 augmentations: on the 5 shortest ARC-AGI-1 evaluation tasks
    this solved 3 in about 5 minutes on one thread, where T = 2% and T = 5% solved 2
    (docs/results.md). The task choice lives with the command.
    """
    cpu = _cpu()
    return cpu.replace(ttt=cpu.ttt.replace(steps=8), inference_augmentations=4, scoring_augmentations=4)


SOLVE_PRESETS: dict[str, SolveSettings] = {
    "paper": SolveSettings(),
    "cpu": _cpu(),
    "dry-run": _dry_run(),  # the main job (its task choice, the shortest by tokens, lives with the command)
    "smoke": smoke(SolveSettings()),
}

# The mix the shipped model and the CPU fine-tune were trained on (ours): the ARC-AGI-1 training tasks beside RE-ARC.
_KIT_MIX = DataSettings(task_sets=("arc-agi-1/training",), re_arc_weight=0.8)

TRAINING_PRESETS: dict[str, TrainingSettings] = {
    "paper": TrainingSettings(),
    # The authors' published script for the paper's NeMo-8B model (da-fr/Product-of-Experts-ARC-Paper,
    # finetune_NemoReArc1200.py at 82619f6): 10% warm-up where the paper's table says 25%, and the easiest half
    # of each RE-ARC task left out (remove_easiest=0.5). Everything else is the paper's.
    "paper-code": TrainingSettings(warmup_ratio=0.1, data=DataSettings(drop_easiest=0.5)),
    # Full training of a fresh model: higher learning rates, no checkpointing (models are small).
    # The kit's own sampler (3-7 pairs drawn afresh) and 1000 steps, as before the authors' sampler.
    "from-scratch": TrainingSettings(full_finetune=True, learning_rate=1e-3, embedding_learning_rate=1e-3,
                                     weight_decay=0.01, gradient_checkpointing=False, warmup_ratio=0.05,
                                     steps=1000, sequences=SequenceSettings(sampler="random")),
    # SmolLM2-135M on one GPU for minutes, not hours: a LoRA small enough to ship (rank 32, about
    # 20 MB in bf16), a higher rate and a shorter warm-up than the paper's hours-long run, bf16,
    # no checkpointing (135M leaves memory to spare), 4096-token sequences; the kit's own sampler, 1000 steps,
    # the kit's mix: how the shipped model was trained (kaggle_dataset/model/arc_kit.json).
    "smollm2-gpu": TrainingSettings(lora_rank=32, lora_alpha=16, learning_rate=3e-4, embedding_learning_rate=3e-5,
                                    warmup_ratio=0.1, batch_size=8, gradient_accumulation=2, optimizer="adamw",
                                    precision="bf16", gradient_checkpointing=False, save_every=100, steps=1000,
                                    sequences=SequenceSettings(sampler="random", max_len=4096), data=_KIT_MIX),
    # SmolLM2-135M on a 2-core CPU for hours: the GPU preset's shippable LoRA (rank 32) and rates, one
    # sequence per micro-batch (4 per step), 2048-token sequences so a step takes seconds, not minutes,
    # the authors' sampler; a run is sized by --minutes and --steps (the schedule's length).
    "smollm2-cpu": TrainingSettings(lora_rank=32, lora_alpha=16, learning_rate=3e-4, embedding_learning_rate=3e-5,
                                    warmup_ratio=0.05, batch_size=1, gradient_accumulation=4, optimizer="adamw",
                                    precision="fp32", gradient_checkpointing=False, save_every=25, log_every=5,
                                    steps=1000, sequences=SequenceSettings(max_len=2048)),
}


def solve_preset(name: str) -> SolveSettings:
    if name not in SOLVE_PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(SOLVE_PRESETS)}")
    return SOLVE_PRESETS[name]


def training_preset(name: str) -> TrainingSettings:
    if name not in TRAINING_PRESETS:
        raise ValueError(f"unknown training preset {name!r}; known: {', '.join(TRAINING_PRESETS)}")
    return TRAINING_PRESETS[name]


def ladder(settings: SolveSettings) -> list[SolveSettings]:
    """The configured settings, then ever cheaper ones: the rungs the time budget steps down.

    Halved TTT steps; halved augmentations; a DFS threshold of at least 20%; a quarter of the TTT
    steps and augmentations; finally no TTT and at most two augmentations (no more than the rung
    before: nothing grows on the way down), with DFS kept at its 20% threshold (cheaper than greedy,
    paper Table 2) and any other sampler replaced by greedy.
    """
    sampler, ttt = settings.sampler, settings.ttt
    rungs = [settings]

    def cheaper(**changes) -> None:
        rungs.append(dataclasses.replace(rungs[-1], **changes))

    cheaper(ttt=ttt.replace(steps=max(1, ttt.steps // 2)))
    cheaper(inference_augmentations=max(1, settings.inference_augmentations // 2),
            scoring_augmentations=max(0, settings.scoring_augmentations // 2))
    if sampler.kind == "dfs":
        cheaper(sampler=sampler.replace(threshold=max(sampler.threshold, 0.2)))
    cheaper(ttt=ttt.replace(steps=max(1, ttt.steps // 4)),
            inference_augmentations=max(1, settings.inference_augmentations // 4),
            scoring_augmentations=max(0, settings.scoring_augmentations // 4))
    last_sampler = rungs[-1].sampler if sampler.kind == "dfs" else sampler.replace(kind="greedy")
    cheaper(test_time_training=False, sampler=last_sampler,
            inference_augmentations=min(2, rungs[-1].inference_augmentations),
            scoring_augmentations=min(2, rungs[-1].scoring_augmentations))
    return rungs


# ---------------------------------------------------------------------------------------------
# What the command line is generated from.

@dataclass(frozen=True)
class Option:
    """One command-line option of a settings dataclass: where it lives, its flag, type and help."""

    path: tuple[str, ...]  # field names from the top settings down, e.g. ("ttt", "steps")
    flag: str
    kind: type
    help: str
    choices: tuple | None
    optional: bool  # the field may be None


def options(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[Option]:
    """Every command-line option of a settings class, nested settings flattened, in field order."""
    hints = typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        kind = hints[item.name]
        if isinstance(kind, type) and issubclass(kind, Settings):
            yield from options(kind, (*prefix, item.name))
            continue
        if not item.metadata.get("command_line", True):
            continue
        arguments = [a for a in typing.get_args(kind) if a is not type(None)]
        optional = bool(arguments) and len(arguments) < len(typing.get_args(kind))
        base = arguments[0] if optional else kind
        flag = item.metadata.get("flag") or "--" + item.name.replace("_", "-")
        yield Option((*prefix, item.name), flag, base, item.metadata.get("help", ""), item.metadata.get("choices"),
                     optional)


def get_path(settings: Settings, path: tuple[str, ...]) -> Any:
    value = settings
    for name in path:
        value = getattr(value, name)
    return value


def replace_path(settings: Settings, path: tuple[str, ...], value: Any) -> Settings:
    """``settings`` with the field at ``path`` (nested) set to ``value``."""
    if len(path) == 1:
        return dataclasses.replace(settings, **{path[0]: value})
    inner = getattr(settings, path[0])
    return dataclasses.replace(settings, **{path[0]: replace_path(inner, path[1:], value)})


__all__ = ["AGGREGATION_NAMES", "CompetitionSettings", "DECODING_MODES", "DEFAULT_TOKEN_BUDGET", "DRY_RUN_TASKS",
           "DataSettings", "ENGINE_COMPILE_MODES", "ENGINE_KINDS", "Option", "PROBABILITY_MODES", "SAMPLER_KINDS",
           "SOLVE_PRESETS", "SamplerSettings", "SequenceSettings", "Settings",
           "SolveSettings", "TRAINING_PRESETS", "TestTimeSettings", "TrainingSettings", "get_path", "ladder", "options",
           "replace_path", "setting", "smoke", "solve_preset", "training_preset"]
