"""Test-time training: a fresh LoRA per task, trained on that task's own train pairs only.

``TestTimeTrainer`` wraps a loaded model in one LoRA adapter once; for each task it resets the
adapter to its initial weights (no reloading from disk), trains it on leave-one-out sequences of
the task's train pairs (each pair in turn plays the test, the others are the examples, every
sequence freshly augmented; the 8 symmetries are balanced, each used 8 times in 64 sequences as
the authors did) and leaves the model in eval mode, ready for inference with the adapter on. The
defaults (``settings.TEST_TIME_TRAINING``) are the paper's. A ``deadline`` (``time.monotonic()``) is
checked between steps: training stops there, keeping the steps made (the schedule is not shortened).
It never sees a test output: it is only ever given ``task.train``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import numpy as np

from arc_kit.data.augmentation import balanced_symmetries
from arc_kit.data.tasks import Pair
from arc_kit.method.records import TrainingSummary
from arc_kit.model.optimization import (
    add_lora,
    build_optimizer,
    cosine_schedule,
    enable_activation_checkpointing,
    parameter_groups,
)
from arc_kit.model.training_data import PaddingCollator, sample_leave_one_out
from arc_kit.settings import TEST_TIME_TRAINING, LoraTrainingSettings
from arc_kit.text import TaskEncoder, TaskTooLongError

ADAPTER = "ttt"


def _summary(steps: int, losses: list[float], started: float, skipped: str | None = None,
             stopped: str | None = None) -> TrainingSummary:
    """What one task's training did: its steps, seconds since ``started``, first loss and mean of its last 8."""
    return TrainingSummary(steps, round(time.monotonic() - started, 3), skipped, losses[0] if losses else None,
                           float(np.mean(losses[-8:])) if losses else None, stopped)


class TestTimeTrainer:
    """Owns a model wrapped in a resettable LoRA adapter; ``train`` adapts it to one task."""

    __test__ = False

    def __init__(self, model, encoder: TaskEncoder, settings: LoraTrainingSettings = TEST_TIME_TRAINING, *,
                 keep_background: bool = False):
        import torch

        self.settings, self.encoder, self.keep_background = settings, encoder, keep_background
        self.device = next(model.parameters()).device
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(settings.training_seed)  # the global generator is left as it was
            self.model = add_lora(model, settings.lora_rank, settings.lora_alpha, settings.train_embeddings,
                                  adapter_name=ADAPTER)
        if settings.gradient_checkpointing:
            enable_activation_checkpointing(self.model)
        self._initial = {name: parameter.detach().clone() for name, parameter in self.model.named_parameters()
                         if parameter.requires_grad}
        self._collate = PaddingCollator(encoder.tokenizer.pad_id)
        self._autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda"
                          and torch.cuda.is_bf16_supported() else contextlib.nullcontext())
        self.model.eval()

    def reset(self) -> None:
        """Put the adapter (and the trained embedding copies) back to their initial weights."""
        import torch

        with torch.no_grad():
            for name, parameter in self.model.named_parameters():
                if name in self._initial:
                    parameter.copy_(self._initial[name])

    @contextlib.contextmanager
    def adapter_disabled(self):
        """Run the model as it was before any test-time training."""
        with self.model.disable_adapter():
            yield self.model

    def _sequence(self, train: Sequence[Pair], rng: np.random.Generator, held_out: int, symmetry: int):
        """A leave-one-out sequence, trying the other held-out pairs if this one cannot teach anything."""
        for offset in range(len(train)):
            try:
                encoded = sample_leave_one_out(train, rng, self.encoder, held_out=(held_out + offset) % len(train),
                                               symmetry=symmetry, mask_first_output=self.settings.mask_first_output,
                                               keep_background=self.keep_background)
            except TaskTooLongError:
                continue
            if encoded.loss_mask.any():
                return encoded
        return None

    def train(self, train: Sequence[Pair], rng: np.random.Generator, steps: int | None = None, *,
              deadline: float | None = None) -> TrainingSummary:
        """Reset the adapter and train it on ``train`` (a task's train pairs); eval mode afterwards.

        ``steps`` overrides the settings' number of steps (the time budget may ask for fewer). No step
        starts once ``deadline`` (``time.monotonic()``) has passed; the result says so (``stopped``).
        """
        import torch

        started = time.monotonic()
        self.reset()
        settings = self.settings if steps is None else self.settings.replace(steps=steps)
        if len(train) < 2:
            return _summary(0, [], started, "fewer than 2 train pairs")
        self.model.train()
        optimizer = build_optimizer(parameter_groups(self.model, settings.learning_rate,
                                                     settings.embedding_learning_rate), settings.optimizer)
        scheduler = cosine_schedule(optimizer, settings.steps, settings.warmup_ratio)
        losses: list[float] = []
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        # each symmetry equally often (8 times each in the paper's 64 sequences), in random order
        symmetries = balanced_symmetries(rng, settings.steps * settings.batch_size)
        try:
            for step in range(settings.steps):
                if deadline is not None and time.monotonic() >= deadline:
                    return _summary(step, losses, started,
                                    stopped=f"deadline reached after {step} of {settings.steps} steps")
                items = []
                for slot in range(settings.batch_size):
                    index = step * settings.batch_size + slot
                    encoded = self._sequence(train, rng, held_out=index % len(train), symmetry=symmetries[index])
                    if encoded is None:
                        return _summary(step, losses, started, "no leave-one-out sequence fits the token budget")
                    items.append({"input_ids": torch.from_numpy(encoded.ids),
                                  "labels": torch.from_numpy(encoded.labels)})
                batch = {key: value.to(self.device) for key, value in self._collate(items).items()}
                with self._autocast:
                    loss = self.model(**batch).loss
                loss.backward()
                if settings.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(trainable, settings.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
        finally:
            self.model.eval()
        return _summary(settings.steps, losses, started)
