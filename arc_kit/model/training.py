"""Initial fine-tuning (``arc-kit pretrain``): LoRA or full training on drawn sequences.

The loop runs on Hugging Face ``accelerate``, so the same code trains on a CPU, one GPU, or
several processes under ``accelerate launch`` / ``torchrun`` (DDP; gloo on the CPU). The defaults
are the paper's recipe (``settings.TrainingSettings``; ``docs/method.md`` gives each one's source);
the ``from-scratch`` preset, for models built from a preset, is the kit's own (not in the paper).

A run folder is a loadable model folder plus ``training_log.csv``, ``arc_kit.json`` (settings,
package version, git commit, seeds, data), a loss curve and ``checkpoints/`` that a rerun resumes
from; it is new, empty or a training run's (``TRAINING_KIND``, ``outputs``): never a folder of the
user's, nor a model another command made. This module knows how to train; what it trains on comes
from ``training_data``, and the log's file and its plot are ``training_log``'s.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arc_kit.model import devices
from arc_kit.model.bases import BASES, build_base, built_base_name
from arc_kit.model.deltas import make_adapter_config_portable, save_delta
from arc_kit.model.folders import ADAPTER_FILES, MODEL_FILES, save_model
from arc_kit.model.loading import create_model, cut_to_limit, load_model
from arc_kit.model.optimization import (
    add_lora,
    build_optimizer,
    cosine_schedule,
    enable_activation_checkpointing,
    parameter_groups,
)
from arc_kit.model.training_data import PaddingCollator, SequenceDataset
from arc_kit.model.training_log import append_row, cut_log, plot_loss_curve, start_log
from arc_kit.outputs import (
    FolderKind,
    adopt_folder,
    claim_folder,
    kit_subfolder,
    remove_entry,
    remove_owned,
    replace_file,
    small_json,
    staged_into,
)
from arc_kit.provenance import run_info
from arc_kit.settings import MODEL_PRESETS, LoadSettings, TrainingSettings, training_preset
from arc_kit.text import HuggingFaceTokenizer, TaskEncoder

logger = logging.getLogger(__name__)


def _an_earlier_kits_training(folder: Path) -> bool:
    """A training run that a kit made before output folders had markers: a checkpoint, or its record (adopted only
    with --adopt: ``outputs``)."""
    if any((path / "progress.json").exists() for path in _checkpoints(folder / "checkpoints")):
        return True
    record = small_json(folder / "arc_kit.json")
    return isinstance(record, dict) and isinstance(record.get("training"), dict)


# what a checkpoint holds: accelerate's ``save_state`` files (model, optimizer, scheduler, sampler, data loader and
# the i-th of several ``_{i}``; a process's random states; the scaler; a registered object's), and its progress.json
CHECKPOINT_FILES = ("progress.json", "random_states_{n}.pkl", "scaler.pt", "custom_checkpoint_{n}.pkl",
                    "model.safetensors", "model_{n}.safetensors",
                    *(f"{name}{index}.bin" for name in ("pytorch_model", "optimizer", "scheduler", "sampler",
                                                        "dl_state_dict") for index in ("", "_{n}")))
# a training run's folder: its checkpoints, its log and curve, and the model it saves
TRAINING_KIND = FolderKind("training", owned=(*(f"checkpoints/step-{{n}}/{name}" for name in CHECKPOINT_FILES),
                                              "training_log.csv", "loss_curve.png", *MODEL_FILES, *ADAPTER_FILES),
                           resumable=True,
                           legacy=_an_earlier_kits_training, kept="its checkpoints (every --save-every steps)")


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


# ---------------------------------------------------------------------------------------------
# Checkpoints and the order of batches.

def _checkpoint_number(path: Path) -> int | None:
    """N of a checkpoint folder ``step-N`` (a real folder, not a link); None for any other entry."""
    match = re.fullmatch(r"step-([0-9]{1,12})", path.name)
    return int(match.group(1)) if match and path.is_dir() and not path.is_symlink() else None


def _checkpoints(folder: Path) -> list[Path]:
    """The checkpoint folders in ``folder``, oldest first."""
    return sorted((path for path in folder.glob("step-*") if _checkpoint_number(path) is not None),
                  key=_checkpoint_number)


def _save_checkpoint(accelerator, checkpoints: Path, at_step: int, save_every: int) -> None:
    """The accelerator's state at ``at_step``, and ``progress.json`` that marks it complete; the two newest kept.
    Written aside and renamed into place (``outputs.staged_into``): a link in the folder is never followed."""
    folder = checkpoints / f"step-{at_step}"
    if accelerator.is_main_process and (folder.is_symlink() or folder.exists()):  # a stopped run's, at this step
        _remove_checkpoint(checkpoints.parent, folder)
    accelerator.wait_for_everyone()
    with staged_into(folder) as staging:
        accelerator.save_state(str(staging))
    if accelerator.is_main_process:
        replace_file(folder / "progress.json", json.dumps({"step": at_step}))
        for old in _checkpoints(checkpoints):  # keep the two newest
            if old != folder and _checkpoint_number(old) < at_step - save_every:
                _remove_checkpoint(checkpoints.parent, old)


def _remove_checkpoint(out: Path, folder: Path) -> None:
    """Delete checkpoint ``folder`` of training run ``out`` by its layout (a link: the link itself)."""
    if folder.is_symlink():
        remove_entry(folder)
        return
    kept = remove_owned(out, TRAINING_KIND, below=f"checkpoints/{folder.name}")
    if kept:
        logger.warning("kept in %s what arc-kit did not make there: %s", folder, ", ".join(kept[:3]))


def _resume_point(accelerator, out: Path, steps: int, resume: bool) -> int:
    """The step to start at: the latest whole checkpoint's (its state loaded) when resuming, else 0. A checkpoint is
    whole when its progress.json (written last) and its model state are there.

    Checkpoints of an older run are removed when starting over, and the log's rows past the
    starting step are cut either way.
    """
    checkpoints = out / "checkpoints"
    first_step = 0
    done = [path for path in _checkpoints(checkpoints) if isinstance(small_json(path / "progress.json"), dict)
            and any((path / name).is_file() for name in ("model.safetensors", "pytorch_model.bin"))]  # whole
    latest = done[-1] if done and resume else None
    if latest is not None:
        accelerator.load_state(str(latest))
        first_step = _checkpoint_number(latest)
        if accelerator.is_main_process:
            logger.warning("resuming from %s (step %d of %d)", latest, first_step, steps)
    if accelerator.is_main_process:
        if latest is None:  # starting over: a later resume must not pick up an older run's checkpoints
            for old in _checkpoints(checkpoints):
                _remove_checkpoint(out, old)
        cut_log(out / "training_log.csv", first_step)  # no rows twice, none from an older run
    accelerator.wait_for_everyone()
    return first_step


class BatchOrder:
    """Batch sampler: optimizer step s, micro-batch a, process r take dataset items in a fixed layout.

    Items depend only on their index, so a resumed run (starting at ``first_step``) and a run on
    several processes see exactly the sequences an uninterrupted single run would. With
    ``length_of`` (item index -> tokens), each step's items are sorted by length before they are
    cut into micro-batches: the same sequences per step, less padding.
    """

    def __init__(self, settings: TrainingSettings, first_step: int, rank: int, world: int, length_of=None):
        self.settings, self.first_step, self.rank, self.world = settings, first_step, rank, world
        self.length_of = length_of

    def __iter__(self):
        size, accumulation = self.settings.lora.batch_size, self.settings.gradient_accumulation
        per_step = size * accumulation * self.world
        for step in range(self.first_step, self.settings.lora.steps):
            items = list(range(step * per_step, (step + 1) * per_step))
            if self.length_of is not None:
                items.sort(key=lambda index: (self.length_of(index), index))
            for micro in range(accumulation):
                start = (micro * self.world + self.rank) * size
                yield items[start:start + size]

    def __len__(self) -> int:
        return (self.settings.lora.steps - self.first_step) * self.settings.gradient_accumulation


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
    for every model, bounded by the maximum positions only (``loading.token_budget_of``).
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


class _TrainingLoop:
    """The loop over micro-batches: an optimizer step per accumulation, log rows, checkpoints, the time limit.

    It keeps the window of micro-batches since the last log row and the run's totals; ``run`` leaves
    ``step``, ``stopped_by``, ``total_tokens`` and ``last_loss`` for the result.
    """

    def __init__(self, accelerator, model, optimizer, scheduler, settings: TrainingSettings, *, out: Path,
                 started: float, first_step: int, progress: bool):
        from tqdm.auto import tqdm

        self.accelerator, self.model, self.optimizer, self.scheduler = accelerator, model, optimizer, scheduler
        self.settings, self.checkpoints, self.started = settings, out / "checkpoints", started
        self.log = out / "training_log.csv"
        if accelerator.is_main_process:
            start_log(self.log)
        self.bar = tqdm(total=settings.lora.steps, initial=first_step, desc="pretrain", unit="step",
                        disable=not (progress and accelerator.is_main_process))
        self.deadline = None if settings.minutes is None else started + 60 * settings.minutes
        self.step, self.total_tokens, self.last_loss, self.stopped_by = first_step, 0, None, "steps"
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
            if self.step % settings.log_every == 0 or self.step == settings.lora.steps:
                self._write_log_row()
            out_of_time = self._out_of_time()
            if self.step % settings.save_every == 0 or self.step == settings.lora.steps or out_of_time:
                _save_checkpoint(self.accelerator, self.checkpoints, self.step, settings.save_every)
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
             progress: bool = True, command: str = "pretrain", adopt: bool = False) -> PretrainResult:
    """Train a model (a folder, or a preset name for a fresh from-scratch model) and save it to ``out``.

    ``pools`` (and optional ``weights``, ``repeatable``) are the training pools, see
    ``training_data.pretraining_data``. A rerun with the same ``out`` resumes from the latest
    checkpoint; with ``settings.minutes`` the run stops cleanly in time, saving a checkpoint and a
    usable model. The sequences' token budget is cut to the model's positions (a warning says so). ``adopt``
    takes a training run that an earlier kit made without a marker as this one's (``outputs.adopt_folder``).
    """
    if settings.lora.steps is None and settings.sequences.sampler != "passes":
        raise ValueError("set steps: only the passes sequence sampler plans how many sequences there are")
    device = devices.resolve_device(device)  # an unknown device: one line, before the folder is made
    started = time.monotonic()
    source = _load_source(model_source, settings)  # a model that does not load: refused before the folder is made
    if adopt:
        adopt_folder(out, TRAINING_KIND, command)
    out = claim_folder(out, TRAINING_KIND, command)  # ``command`` (pretrain, sudoku train) names it in its marker
    accelerator = _start_accelerator(settings, device, out / "checkpoints")
    model, settings = _ready_to_train(source, settings)
    encoder = TaskEncoder(HuggingFaceTokenizer(source.tokenizer), max_len=settings.sequences.max_tokens)
    dataset, settings, plan = _planned_dataset(pools, encoder, settings, accelerator, weights, repeatable)
    model, optimizer, scheduler = _prepared_optimization(model, settings, accelerator)
    first_step = _resume_point(accelerator, out, settings.lora.steps, resume)
    loader = _batch_loader(dataset, encoder, settings, first_step, accelerator)

    info = run_info(settings=settings.to_json(), model_source=source.description, data=data_description,
                    plan=None if plan is None else asdict(plan),
                    processes=accelerator.num_processes, device=device,
                    mixed_precision=accelerator.mixed_precision, seeds={"training": settings.lora.training_seed},
                    optimizer=type(optimizer.optimizer).__name__)  # accelerate's wrapper around it
    loop = _TrainingLoop(accelerator, model, optimizer, scheduler, settings, out=out, started=started,
                         first_step=first_step, progress=progress)
    loop.run(loader)
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
