"""Named presets of the settings and the ladder of cheaper solve settings.

Named presets (``paper``, ``cpu``, ``dry-run``, ``explore``, ``smoke`` for solving; ``paper``, ``paper-code``,
``from-scratch``, ``smollm2-gpu``, ``smollm2-cpu`` for training; the Sudoku experiment's training;
``MODEL_PRESETS``, the Llama-style from-scratch models with the 64-symbol vocabulary that
``model.loading.create_model`` builds) live here and nowhere else (the defaults of a dataclass that
two stages hold, and the Sudoku evaluation's, live beside their classes). ``ladder`` gives the rungs a
time budget steps down.

This module needs only the standard library; it knows nothing of models, tasks or files.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from arc_kit.settings.solving import SamplerSettings, SolveSettings
from arc_kit.settings.training import (
    TEST_TIME_TRAINING,
    DataSettings,
    LoraTrainingSettings,
    SequenceSettings,
    TrainingSettings,
)

# Sizes are in parameters with the 64-symbol vocabulary.
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # ~0.1M: for tests; a 2000-token forward takes ~0.2 s on one CPU core.
    "micro": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2),
    # ~2.4M: trains for real on a CPU in minutes.
    "tiny": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=6, num_attention_heads=6,
                 num_key_value_heads=2),
    # ~19M: a GPU model for short budgets.
    "small": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=12, num_attention_heads=6,
                  num_key_value_heads=2),
    # ~71M: a GPU model for an hour or more.
    "base": dict(hidden_size=640, intermediate_size=1792, num_hidden_layers=16, num_attention_heads=10,
                 num_key_value_heads=2),
}

DRY_RUN_TASKS = 5  # the dry run's tasks: the 5 shortest of ARC-AGI-1 evaluation by prompt tokens (its preset's sizing)


def smoke(settings: SolveSettings) -> SolveSettings:
    """A few seconds per task: enough to prove that the whole path works, not to score."""
    return settings.replace(inference_augmentations=min(2, settings.inference_augmentations),
                            scoring_augmentations=min(2, settings.scoring_augmentations),
                            steps=min(4, settings.ttt.steps),
                            max_forward_calls=min(2000, settings.sampler.max_forward_calls))


def _cpu() -> SolveSettings:
    """The method sized for a 2-core CPU and a small model.

    DFS at T = 1% (a small model rarely gives a whole answer 9%), 8 + 8 augmentations instead of
    16 + 16, prompts within 4096 tokens (long tasks drop train pairs), a DFS cap of 2000
    single-token calls per search, and a test-time learning rate of 1e-3 (the paper's 1e-4 barely
    moves a small model in 64 steps).
    """
    return SolveSettings(sampler=SamplerSettings("dfs", threshold=0.01, max_forward_calls=2000),
                         inference_augmentations=8, scoring_augmentations=8, max_len=4096,
                         ttt=TEST_TIME_TRAINING.replace(learning_rate=1e-3, embedding_learning_rate=1e-3))


def _dry_run() -> SolveSettings:
    """The main job on a 2-core CPU with the shipped SmolLM2-135M fine-tune, sized by measurement.

    The cpu preset (DFS at T = 1%) with 8 test-time steps instead of 64 (each step of a 106M model
    costs about a second here) and 4 + 4 augmentations: on the 5 shortest ARC-AGI-1 evaluation tasks
    this solved 3 in about 5 minutes on one thread, where T = 2% and T = 5% solved 2
    (docs/results.md). The task choice lives with the command.
    """
    cpu = _cpu()
    return cpu.replace(ttt=cpu.ttt.replace(steps=8), inference_augmentations=4, scoring_augmentations=4)


def _explore() -> SolveSettings:
    """One task in a notebook or a Python session on a 2-core CPU with the shipped model: the dry run's preset (8
    test-time steps, DFS at T = 1% under 4 augmentations) with 8 scoring augmentations, each symmetry once, so that
    the product of experts has a view of every symmetry to show (docs/results.md: its time on the exploration
    notebook's task)."""
    return _dry_run().replace(scoring_augmentations=8)


SOLVE_PRESETS: dict[str, SolveSettings] = {
    "paper": SolveSettings(),
    "cpu": _cpu(),
    "dry-run": _dry_run(),  # the main job (its task choice, the shortest by tokens, lives with the command)
    "explore": _explore(),  # one task, looked at closely (notebooks/explore.py, the README's Python section)
    "smoke": smoke(SolveSettings()),
}

# The mix the shipped model and the CPU fine-tune were trained on (ours): the ARC-AGI-1 training tasks beside RE-ARC.
_KIT_MIX = DataSettings(task_sets=("arc-agi-1/training",), re_arc_weight=0.8)

TRAINING_PRESETS: dict[str, TrainingSettings] = {
    "paper": TrainingSettings(),
    # The authors' published script for the paper's NeMo-8B model (da-fr/Product-of-Experts-ARC-Paper,
    # finetune_NemoReArc1200.py at 82619f6): 10% warm-up where the paper's table says 25%, and the easiest half
    # of each RE-ARC task left out (remove_easiest=0.5). Everything else is the paper's.
    "paper-code": TrainingSettings(lora=LoraTrainingSettings(warmup_ratio=0.1), data=DataSettings(drop_easiest=0.5)),
    # Full training of a fresh model: higher learning rates, no checkpointing (models are small).
    # The kit's own sampler (3-7 pairs drawn afresh) and 1000 steps, as before the authors' sampler.
    "from-scratch": TrainingSettings(lora=LoraTrainingSettings(learning_rate=1e-3, embedding_learning_rate=1e-3,
                                                               gradient_checkpointing=False, warmup_ratio=0.05,
                                                               steps=1000),
                                     full_finetune=True, weight_decay=0.01,
                                     sequences=SequenceSettings(sampler="random")),
    # SmolLM2-135M on one GPU for minutes, not hours: a LoRA small enough to ship (rank 32, about
    # 20 MB in bf16), a higher rate and a shorter warm-up than the paper's hours-long run, bf16,
    # no checkpointing (135M leaves memory to spare), 4096-token sequences; the kit's own sampler, 1000 steps,
    # the kit's mix: how the shipped model was trained (kaggle_dataset/model/arc_kit.json).
    "smollm2-gpu": TrainingSettings(lora=LoraTrainingSettings(lora_rank=32, lora_alpha=16, learning_rate=3e-4,
                                                              embedding_learning_rate=3e-5, warmup_ratio=0.1,
                                                              batch_size=8, optimizer="adamw",
                                                              gradient_checkpointing=False, steps=1000),
                                    gradient_accumulation=2, precision="bf16", save_every=100,
                                    sequences=SequenceSettings(sampler="random", max_tokens=4096), data=_KIT_MIX),
    # SmolLM2-135M on a 2-core CPU for hours: the GPU preset's shippable LoRA (rank 32) and rates, one
    # sequence per micro-batch (4 per step), 2048-token sequences so a step takes seconds, not minutes,
    # the authors' sampler; a run is sized by --minutes and --steps (the schedule's length).
    "smollm2-cpu": TrainingSettings(lora=LoraTrainingSettings(lora_rank=32, lora_alpha=16, learning_rate=3e-4,
                                                              embedding_learning_rate=3e-5, warmup_ratio=0.05,
                                                              batch_size=1, optimizer="adamw",
                                                              gradient_checkpointing=False, steps=1000),
                                    gradient_accumulation=4, precision="fp32", save_every=25, log_every=5,
                                    sequences=SequenceSettings(max_tokens=2048)),
}

# The Sudoku experiment's sequences (paper, section 5.5): one puzzle per sequence, its solution in the loss (the
# random sampler drawing exactly one pair; the authors' passes sampler would put ``pairs`` puzzles in a sequence
# and permute the whole pool per item). The trainer's own augmentation (a symmetry of the square, digits
# permuted with 0 kept) is a Sudoku symmetry too.
SUDOKU_SEQUENCES = SequenceSettings(sampler="random", min_pairs=1, max_pairs=1, max_tokens=512, fixed_background=True)


def sudoku_training(settings: TrainingSettings) -> TrainingSettings:
    """``settings`` for the Sudoku experiment: its sequences, and no output masked (a sequence holds one)."""
    return settings.replace(sequences=SUDOKU_SEQUENCES, lora=settings.lora.replace(mask_first_output=False))


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
