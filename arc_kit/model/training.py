"""Initial fine-tuning (``arc-kit pretrain``): LoRA or full training on drawn sequences.

The loop runs on Hugging Face ``accelerate``, so the same code trains on a CPU, one GPU, or
several processes under ``accelerate launch`` / ``torchrun`` (DDP; gloo on the CPU). The defaults
are the paper's recipe (``settings.TrainingSettings``; ``docs/method.md`` gives each one's source);
the ``from-scratch`` preset, for models built from a preset, is the kit's own (not in the paper).

A run folder is a loadable model folder plus ``training_log.csv``, ``arc_kit.json`` (settings,
package version, git commit, seeds, data), a loss curve and ``checkpoints/`` that a rerun resumes
from; it is new, empty or a training run's (``training_folder.TRAINING_KIND``, ``outputs``): never a folder of
the user's, nor a model another command made. This module knows how to train; what it trains on comes
from ``training_data``, the folder's checkpoints are ``training_folder``'s, and the log's file and its plot are
``training_log``'s.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arc_kit.model import devices
from arc_kit.model.bases import BASES, build_base, built_base_name
from arc_kit.model.deltas import make_adapter_config_portable, save_delta
from arc_kit.model.description import cut_to_limit
from arc_kit.model.folders import save_model
from arc_kit.model.loading import create_model, load_model
from arc_kit.model.optimization import (
    add_lora,
    build_optimizer,
    cosine_schedule,
    enable_activation_checkpointing,
    parameter_groups,
)
from arc_kit.model.training_data import BatchOrder, PaddingCollator, SequenceDataset
from arc_kit.model.training_folder import TRAINING_KIND, resume_point, save_checkpoint
from arc_kit.model.training_log import append_row, plot_loss_curve, start_log
from arc_kit.outputs import claim_folder, kit_subfolder, staged_into
from arc_kit.progress import progress_bar
from arc_kit.provenance import run_info
from arc_kit.settings import MODEL_PRESETS, LoadSettings, TrainingSettings, training_preset
from arc_kit.text import HuggingFaceTokenizer, TaskEncoder

logger = logging.getLogger(__name__)


def resolve_precision(precision: str, device: str) -> str:
    """accelerate's mixed-precision name for a setting (one of TrainingSettings.precision's choices): bf16, fp16, no."""
    if precision == "auto":  # as a model loads: bf16 or fp16 on a GPU, fp32 on the CPU
        dtype = str(devices.resolve_dtype("auto", device)).removeprefix("torch.")
        precision = {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, "fp32")
    return "no" if precision == "fp32" else precision


def prepare_for_training(model, settings: TrainingSettings):
    """LoRA-wrap (or unfreeze everything for full training) and switch on gradient checkpointing."""
    if settings.full_finetune:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    else:
        model = add_lora(model, settings.lora.lora_rank, settings.lora.lora_alpha, settings.lora.train_embeddings)
    if settings.lora.gradient_checkpointing:
        enable_activation_checkpointing(model)
        model.enable_input_require_grads()  # a transformers model, or peft's around one
    model.config.use_cache = False
    return model


@dataclass
class PretrainResult:
    path: Path  # the trained model folder
    steps_done: int
    stopped_by: str  # "steps" or "time limit"
    seconds: float
    tokens: int
    final_loss: float | None
    main_process: bool = True  # False in the other processes of a multi-process run


def token_budget_after_training(from_scratch: bool, trained_length: int, max_positions: int | None) -> int:
    """What a trained model records as ``token_budget`` in arc_kit.json: the length it can be trusted with.

    A model trained from scratch has seen no position past its training sequences; a fine-tuned
    pretrained model keeps what its pretraining gave it (its maximum positions) and never less than
    what it was fine-tuned on. A record for the reader: the budget at inference is the authors' cap
    for every model, bounded by the maximum positions only (``ModelFolder.token_budget``).
    """
    if from_scratch or not max_positions:
        return trained_length
    return max(trained_length, max_positions)


def training_settings_for(model: str | os.PathLike, preset: str | None = None) -> TrainingSettings:
    """The named training preset, or by default the one ``model`` calls for: ``from-scratch`` for a model
    preset (micro, tiny, ...), the paper's initial fine-tune for a model folder or a base."""
    return training_preset(preset or ("from-scratch" if str(model) in MODEL_PRESETS else "paper"))


# ---------------------------------------------------------------------------------------------
# The steps of a run: the model, the data, the optimizer, the loop, the saved model.

@dataclass
class _Source:
    """The model a run starts from, as loaded, and what the saved model records of it."""

    model: Any
    tokenizer: Any
    description: str  # "preset micro", or the resolved folder
    preset: str | None  # the from-scratch preset's name; None for a model folder or a base
    base_name: str | None  # a named base: what training adds is saved as a delta on it (deltas.save_delta)


def _load_source(model_source: str | os.PathLike, settings: TrainingSettings) -> _Source:
    """A fresh model of a preset (seeded by the training's seed), or a model folder or base loaded in float32."""
    if str(model_source) in MODEL_PRESETS:
        model, tokenizer = create_model(str(model_source), seed=settings.lora.training_seed)
        return _Source(model, tokenizer, f"preset {model_source}", str(model_source), None)
    if str(model_source) in BASES:
        model_source = build_base(str(model_source))
    base_name = built_base_name(model_source)
    loaded = load_model(model_source, LoadSettings(device="cpu", dtype="float32", backend="transformers"))
    return _Source(loaded.model, loaded.tokenizer, str(Path(model_source).resolve()), None, base_name)


def _start_accelerator(settings: TrainingSettings, device: str, checkpoints: Path):
    """accelerate's ``Accelerator`` for the run, with the checkpoints folder made by the main process."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=device == "cpu", mixed_precision=resolve_precision(settings.precision, device),
                              gradient_accumulation_steps=settings.gradient_accumulation)
    if accelerator.is_main_process:
        kit_subfolder(checkpoints)  # a link there is refused: checkpoints go only into the run's own folder
    accelerator.wait_for_everyone()
    return accelerator


def _ready_to_train(source: _Source, settings: TrainingSettings):
    """(model, settings): the model in training mode, LoRA-wrapped from the seed, and the settings with the
    sequences' token budget cut to the model's positions."""
    import torch

    model = source.model
    model.train()
    budget = cut_to_limit(settings.sequences.max_tokens, getattr(model.config, "max_position_embeddings", None),
                          source.description)
    settings = settings.replace(sequences=settings.sequences.replace(max_tokens=budget))
    with torch.random.fork_rng(devices=[]):  # the LoRA initialisation draws from the seed, not the global state
        torch.manual_seed(settings.lora.training_seed)
        model = prepare_for_training(model, settings)
    return model, settings


def _planned_dataset(pools: Mapping[str, Sequence], encoder: TaskEncoder, settings: TrainingSettings, accelerator,
                     weights: Mapping[str, float] | None, repeatable: Collection[str]):
    """(dataset, settings, plan): the sequences to train on, the settings with the steps they take when
    none were set, and the plan's summary (logged by the main process)."""
    lora = settings.lora
    per_step = lora.batch_size * settings.gradient_accumulation * accelerator.num_processes
    dataset = SequenceDataset(pools, encoder, settings.sequences, weights=weights, seed=lora.training_seed,
                              length=None if lora.steps is None else lora.steps * per_step,
                              repeatable=repeatable, mask_first_output=lora.mask_first_output)
    if lora.steps is None:  # as many steps as the plan has sequences (the last step filled up)
        settings = settings.replace(lora=lora.replace(steps=-(-dataset.planned // per_step)))
        dataset.length_total = settings.lora.steps * per_step
    plan = dataset.summary()
    if plan is not None and accelerator.is_main_process:  # shown when examples recur or pools fall short
        logger.log(logging.WARNING if plan.cut or plan.passes > 1 else logging.INFO, "%s", plan.line())
    return dataset, settings, plan


def _prepared_optimization(model, settings: TrainingSettings, accelerator):
    """(model, optimizer, scheduler), the first two prepared by the accelerator, the scheduler checkpointed."""
    lora = settings.lora
    optimizer = build_optimizer(parameter_groups(model, lora.learning_rate, lora.embedding_learning_rate,
                                                 settings.weight_decay), lora.optimizer)
    scheduler = cosine_schedule(optimizer, lora.steps, lora.warmup_ratio)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)  # stepped by hand: once per optimizer step
    return model, optimizer, scheduler


def _batch_loader(dataset: SequenceDataset, encoder: TaskEncoder, settings: TrainingSettings, first_step: int,
                  accelerator):
    """This process's micro-batches from ``first_step`` on, in ``BatchOrder``, padded."""
    from torch.utils.data import DataLoader

    length_of = dataset.length if settings.group_by_length else None
    return DataLoader(dataset, batch_sampler=BatchOrder(settings, first_step, accelerator.process_index,
                                                        accelerator.num_processes, length_of),
                      collate_fn=PaddingCollator(encoder.tokenizer.pad_id), num_workers=settings.data_workers)


FITTED_AFTER = 3  # optimizer steps of a run under a time limit before its schedule is fitted: the first two timed


class _TrainingLoop:
    """The loop over micro-batches: an optimizer step per accumulation, log rows, checkpoints, the time limit.

    It keeps the window of micro-batches since the last log row and the run's totals; ``run`` leaves
    ``step``, ``stopped_by``, ``total_tokens`` and ``last_loss`` for the result. Under a time limit the schedule
    (warm-up, then cosine decay) is fitted to the steps that fit in it once the first steps are timed, and the run
    ends there: a short run learns, instead of spending its minutes in the warm-up of a schedule planned for days.
    """

    def __init__(self, accelerator, model, optimizer, scheduler, settings: TrainingSettings, *, out: Path,
                 started: float, first_step: int, progress: bool):

        self.accelerator, self.model, self.optimizer, self.scheduler = accelerator, model, optimizer, scheduler
        self.settings, self.checkpoints, self.started = settings, out / "checkpoints", started
        self.log = out / "training_log.csv"
        if accelerator.is_main_process:
            start_log(self.log)
        self.bar = progress_bar(total=settings.lora.steps, initial=first_step, desc="pretrain", unit="step",
                        disable=not (progress and accelerator.is_main_process))
        self.deadline = None if settings.minutes is None else started + 60 * settings.minutes
        self.step, self.total_tokens, self.last_loss, self.stopped_by = first_step, 0, None, "steps"
        self.first_step, self.end, self.timed_from = first_step, settings.lora.steps, 0.0
        scheduler.lr_lambdas[0].steps = settings.lora.steps  # the planned schedule (a checkpoint's may be a fitted one)
        self._open_window()

    def _open_window(self) -> None:
        self.window_loss, self.window_count, self.window_tokens, self.window_start = 0.0, 0, 0, time.monotonic()

    def run(self, loader) -> None:
        """Train on ``loader``'s micro-batches to the last step, or to the time limit."""
        settings = self.settings
        for batch in loader:
            self._learn(batch)
            if not self.accelerator.sync_gradients:
                continue
            self.scheduler.step()
            self.step += 1
            self.bar.update(1)
            self._fit_schedule()
            if self.step % settings.log_every == 0 or self.step == settings.lora.steps:
                self._write_log_row()
            out_of_time = self._out_of_time() or self.step == self.end < settings.lora.steps
            if self.step % settings.save_every == 0 or self.step == settings.lora.steps or out_of_time:
                save_checkpoint(self.accelerator, self.checkpoints, self.step, settings.save_every)
            if out_of_time:
                self.stopped_by = "time limit"
                break
        self.bar.close()

    def _learn(self, batch) -> None:
        """Forward and backward on one micro-batch; the optimizer steps when the accumulation is complete."""
        accelerator = self.accelerator
        batch = {name: tensor.to(accelerator.device, non_blocking=True) for name, tensor in batch.items()}
        with accelerator.accumulate(self.model):
            loss = self.model(**batch).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients and self.settings.lora.max_grad_norm:
                accelerator.clip_grad_norm_(self.model.parameters(), self.settings.lora.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad()
        self.window_loss += loss.detach().float().item()
        self.window_count += 1
        tokens = int(batch["attention_mask"].sum()) * accelerator.num_processes
        self.window_tokens += tokens
        self.total_tokens += tokens

    def _write_log_row(self) -> None:
        """The window's mean loss over every process, in the log and on the bar; a new window opens."""
        import torch

        accelerator = self.accelerator
        elapsed = time.monotonic() - self.window_start
        totals = accelerator.reduce(torch.tensor([self.window_loss, self.window_count], device=accelerator.device),
                                    "sum")
        self.last_loss = float(totals[0] / totals[1])  # the mean over every process's micro-batches
        rates = {group.get("name"): group["lr"] for group in self.optimizer.param_groups}
        if accelerator.is_main_process:
            append_row(self.log, self.step, self.last_loss, rates, self.window_tokens, elapsed,
                       time.monotonic() - self.started)
        self.bar.set_postfix(loss=f"{self.last_loss:.4f}")
        self._open_window()

    def _fit_schedule(self) -> None:
        """Under a time limit, after ``FITTED_AFTER`` steps: the schedule's length (and the run's end) set to the steps
        that fit before the deadline at the pace of the timed ones, the fewest any process finds."""
        import torch

        if self.deadline is None or self.step not in (self.first_step + 1, self.first_step + FITTED_AFTER):
            return
        if self.step == self.first_step + 1:
            self.timed_from = time.monotonic()  # the first step pays for warming up: timed from its end
            return
        pace = (time.monotonic() - self.timed_from) / (FITTED_AFTER - 1)
        fitted = torch.tensor([self.step + max(0, int((self.deadline - time.monotonic()) / max(pace, 1e-9)))])
        if self.accelerator.num_processes > 1:  # every process must end at the same step
            fitted = self.accelerator.reduce(fitted.to(self.accelerator.device), "min")
        self.end = self.scheduler.lr_lambdas[0].steps = min(self.end, int(fitted[0]))

    def _out_of_time(self) -> bool:
        """True past the deadline: on every process alike when there are several."""
        import torch

        out_of_time = self.deadline is not None and time.monotonic() > self.deadline
        if self.deadline is not None and self.accelerator.num_processes > 1:  # every process must stop at the same step
            flag = torch.tensor([float(out_of_time)], device=self.accelerator.device)
            out_of_time = bool(self.accelerator.reduce(flag, "max")[0] > 0)
        return out_of_time

def _save_trained(trained, source: _Source, out: Path, settings: TrainingSettings, info: dict,
                  mixed_precision: str) -> None:
    """The trained model in ``out``: a delta on its named base after LoRA, else a merged, ordinary folder."""
    import torch

    budget = token_budget_after_training(source.preset is not None, settings.sequences.max_tokens,
                                         getattr(trained.config, "max_position_embeddings", None))
    record = {"preset": source.preset, "training": info, "token_budget": budget}
    if source.base_name is not None and not settings.full_finetune:
        save_delta(trained, source.tokenizer, out, source.base_name, record,  # megabytes, not the whole model
                   dtype=torch.bfloat16 if mixed_precision == "bf16" else None)
    else:
        if not settings.full_finetune:
            with staged_into(out / "adapter") as staging:  # renamed into place: a link there is never followed
                trained.save_pretrained(staging)
                make_adapter_config_portable(staging)  # readable by the oldest peft the kit supports
            trained = trained.merge_and_unload()
        trained.config.use_cache = True
        save_model(trained, source.tokenizer, out, record)


def pretrain(model_source: str | os.PathLike, out: str | os.PathLike,
             pools: Mapping[str, Sequence], settings: TrainingSettings = TrainingSettings(), *,
             weights: Mapping[str, float] | None = None, data_description: str = "",
             repeatable: Collection[str] = (), resume: bool = True, device: str = "auto",
             progress: bool = True, command: str = "pretrain") -> PretrainResult:
    """Train a model (a folder, or a preset name for a fresh from-scratch model) and save it to ``out``.

    ``pools`` (and optional ``weights``, ``repeatable``) are the training pools, see
    ``training_data.pretraining_data``. A rerun with the same ``out`` resumes from the latest
    checkpoint; with ``settings.minutes`` the run stops cleanly in time, saving a checkpoint and a
    usable model. The sequences' token budget is cut to the model's positions (a warning says so).
    """
    if settings.lora.steps is None and settings.sequences.sampler != "passes":
        raise ValueError("set steps: only the passes sequence sampler plans how many sequences there are")
    device = devices.resolve_device(device)  # an unknown device: one line, before the folder is made
    started = time.monotonic()
    source = _load_source(model_source, settings)  # a model that does not load: refused before the folder is made
    out = claim_folder(out, TRAINING_KIND, command)  # ``command`` (pretrain, sudoku train) names it in its marker
    accelerator = _start_accelerator(settings, device, out / "checkpoints")
    model, settings = _ready_to_train(source, settings)
    encoder = TaskEncoder(HuggingFaceTokenizer(source.tokenizer), max_len=settings.sequences.max_tokens)
    dataset, settings, plan = _planned_dataset(pools, encoder, settings, accelerator, weights, repeatable)
    model, optimizer, scheduler = _prepared_optimization(model, settings, accelerator)
    first_step = resume_point(accelerator, out, settings.lora.steps, resume)
    loader = _batch_loader(dataset, encoder, settings, first_step, accelerator)

    info = run_info(settings=settings.to_json(), model_source=source.description, data=data_description,
                    plan=None if plan is None else asdict(plan),
                    processes=accelerator.num_processes, device=device,
                    mixed_precision=accelerator.mixed_precision, seeds={"training": settings.lora.training_seed},
                    optimizer=type(optimizer.optimizer).__name__)  # accelerate's wrapper around it
    loop = _TrainingLoop(accelerator, model, optimizer, scheduler, settings, out=out, started=started,
                         first_step=first_step, progress=progress)
    loop.run(loader)
    unfit = dataset.unfit_line()  # the planned sequences that fitted nowhere, said once (this process's count)
    if unfit is not None:
        logger.warning("%s", unfit)
    accelerator.wait_for_everyone()
    seconds = time.monotonic() - started
    if accelerator.is_main_process:
        trained = accelerator.unwrap_model(model)
        info.update(steps_done=loop.step, stopped_by=loop.stopped_by, seconds=round(seconds, 1),
                    tokens_this_run=loop.total_tokens, final_loss=loop.last_loss)
        _save_trained(trained, source, out, settings, info, accelerator.mixed_precision)
        plot_loss_curve(out / "training_log.csv", out / "loss_curve.png")
    accelerator.wait_for_everyone()
    return PretrainResult(out, loop.step, loop.stopped_by, seconds, loop.total_tokens, loop.last_loss,
                          accelerator.is_main_process)
