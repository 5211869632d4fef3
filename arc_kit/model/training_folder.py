"""A training run's folder: its kind (what it holds, what a rerun resumes), its checkpoints, where a rerun starts.

``TRAINING_KIND`` is the folder (``outputs``): the checkpoints ``checkpoints/step-N`` (accelerate's files by name, the
two newest kept, ``progress.json`` marking one complete), the log and its curve, and the model saved at the end.
``save_checkpoint`` writes one aside and renames it into place; ``resume_point`` loads the latest when resuming, or
clears an older run's. This module knows the folder's layout and accelerate's state; nothing of what is trained.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from arc_kit.model.folders import ADAPTER_FILES, MODEL_FILES
from arc_kit.model.training_log import cut_log
from arc_kit.outputs import FolderKind, remove_entry, remove_owned, replace_file, small_json, staged_into

logger = logging.getLogger(__name__)


# what a checkpoint holds: accelerate's ``save_state`` files (model, optimizer, scheduler, sampler, data loader and
# the i-th of several ``_{i}``; a process's random states; the scaler; a registered object's), and its progress.json
CHECKPOINT_FILES = ("progress.json", "random_states_{n}.pkl", "scaler.pt", "custom_checkpoint_{n}.pkl",
                    "model.safetensors", "model_{n}.safetensors",
                    *(f"{name}{index}.bin" for name in ("pytorch_model", "optimizer", "scheduler", "sampler",
                                                        "dl_state_dict") for index in ("", "_{n}")))
# a training run's folder: its checkpoints, its log and curve, and the model it saves
TRAINING_KIND = FolderKind("training", owned=(*(f"checkpoints/step-{{n}}/{name}" for name in CHECKPOINT_FILES),
                                              "training_log.csv", "loss_curve.png", *MODEL_FILES, *ADAPTER_FILES),
                           resumable=True, kept="its checkpoints (every --save-every steps)")


def _checkpoint_number(path: Path) -> int | None:
    """N of a checkpoint folder ``step-N`` (a real folder, not a link); None for any other entry."""
    match = re.fullmatch(r"step-([0-9]{1,12})", path.name)
    return int(match.group(1)) if match and path.is_dir() and not path.is_symlink() else None


def _checkpoints(folder: Path) -> list[Path]:
    """The checkpoint folders in ``folder``, oldest first."""
    return sorted((path for path in folder.glob("step-*") if _checkpoint_number(path) is not None),
                  key=_checkpoint_number)


def save_checkpoint(accelerator, checkpoints: Path, at_step: int, save_every: int) -> None:
    """The accelerator's state at ``at_step``, and ``progress.json`` that marks it complete; the two newest kept.
    Written aside and renamed into place (``outputs.staged_into``): a link in the folder is never followed."""
    folder = checkpoints / f"step-{at_step}"
    if accelerator.is_main_process and (folder.is_symlink() or folder.exists()):  # a stopped run's, at this step
        remove_checkpoint(checkpoints.parent, folder)
    accelerator.wait_for_everyone()
    with staged_into(folder) as staging:
        accelerator.save_state(str(staging))
    if accelerator.is_main_process:
        replace_file(folder / "progress.json", json.dumps({"step": at_step}))
        for old in _checkpoints(checkpoints):  # keep the two newest
            if old != folder and _checkpoint_number(old) < at_step - save_every:
                remove_checkpoint(checkpoints.parent, old)


def remove_checkpoint(out: Path, folder: Path) -> None:
    """Delete checkpoint ``folder`` of training run ``out`` by its layout (a link: the link itself)."""
    if folder.is_symlink():
        remove_entry(folder)
        return
    kept = remove_owned(out, TRAINING_KIND, below=f"checkpoints/{folder.name}")
    if kept:
        logger.warning("kept in %s what arc-kit did not make there: %s", folder, ", ".join(kept[:3]))


def resume_point(accelerator, out: Path, steps: int, resume: bool) -> int:
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
                remove_checkpoint(out, old)
        cut_log(out / "training_log.csv", first_step)  # no rows twice, none from an older run
    accelerator.wait_for_everyone()
    return first_step
