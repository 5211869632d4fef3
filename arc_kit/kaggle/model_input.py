"""A Kaggle Model as the notebook's model: its handle, and finding the folder Kaggle mounts it in.

A Kaggle Model is addressed ``OWNER/MODEL/FRAMEWORK/VARIATION/VERSION`` (the kaggle client's
``model_sources``: ``username/model-slug/framework/variation-slug/version-number``); a notebook that
has it as an input sees its files below ``/kaggle/input/`` as ``MODEL/FRAMEWORK/VARIATION/VERSION/``
(lower case). ``ModelHandle.parse`` reads a handle (the version may be left out: the newest is
taken); ``find_model_input`` finds the model folder below an input root, by the handle or, without
one, as the one model there; ``notebook_model`` is the notebook's rule for its model, and
``overridden_model`` says loudly when the notebook's MODEL replaces the dataset's own. Mount paths are
those Kaggle documents and public notebooks show; they were not tried from here (no Kaggle account
is reachable from the kit's machines), so the search also looks deeper than the documented layout.

Knows Kaggle's model handles and folders; knows nothing of loading or checking a model.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

MODEL_SOURCE_FILE = "model-source.json"  # in the dataset: the Kaggle Model it was built for
MODEL_MARKERS = ("config.json", "adapter_config.json")
SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MOST_DEPTH = 8  # folders below the input root searched for a model


@dataclass(frozen=True)
class ModelHandle:
    """``OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]``."""

    owner: str
    model: str
    framework: str
    variation: str
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> ModelHandle:
        """The handle in ``text``; ValueError in one line that shows the expected form."""
        parts = str(text).strip().strip("/").split("/")
        if len(parts) not in (4, 5) or not all(SLUG.fullmatch(part) and ".." not in part and len(part) <= 50
                                               for part in parts[:4]):
            raise ValueError(f"{text!r} is no Kaggle Model handle: expected OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] "
                             "(as on the model's page, e.g. someone/arc-model/transformers/8b-4bit/1)")
        version = None
        if len(parts) == 5:
            if not parts[4].isdigit() or int(parts[4]) < 1:
                raise ValueError(f"{text!r}: the version ({parts[4]!r}) must be a whole number from 1")
            version = int(parts[4])
        return cls(*parts[:4], version)

    def __str__(self) -> str:
        return "/".join([self.owner, self.model, self.framework, self.variation]
                        + ([str(self.version)] if self.version else []))

    @property
    def mount_parts(self) -> tuple[str, ...]:
        """The folder names Kaggle mounts it under, lower case: model, framework, variation (and version)."""
        return tuple(part.lower() for part in (self.model, self.framework, self.variation)) + \
            ((str(self.version),) if self.version else ())


def model_folders(root: str | os.PathLike, skip: Path | None = None) -> list[Path]:
    """Every folder below ``root`` (``MOST_DEPTH`` deep) that holds a model's config, ``skip`` and below left out."""
    root, found = Path(root), []
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        depth = len(here.relative_to(root).parts)
        subfolders[:] = sorted(name for name in subfolders if not name.startswith(".") and depth < MOST_DEPTH
                               and (skip is None or here / name != skip))
        if any(marker in files for marker in MODEL_MARKERS):
            found.append(here)
    return found


def _mount_version(folder: Path, root: Path, handle: ModelHandle) -> int | None:
    """The number of the version folder after the run of ``handle``'s mount parts in ``folder``'s path (below
    ``root``; 0 when no version folder follows), or None when the path holds no such run."""
    names, parts = [name.lower() for name in folder.relative_to(root).parts], handle.mount_parts
    for start in range(len(names) - len(parts) + 1):
        if tuple(names[start:start + len(parts)]) == parts:
            after = names[start + 3:start + 4]
            return int(after[0]) if after and after[0].isdigit() else 0
    return None


def find_model_input(root: str | os.PathLike, handle: ModelHandle | None = None, skip: Path | None = None) -> Path:
    """The model folder below ``root``: the Kaggle Model of ``handle`` (its newest version when it names none),
    or the one folder holding a model; FileNotFoundError in one line when there is none or, without a handle,
    several."""
    root = Path(root)
    candidates = model_folders(root, skip)
    if handle is None:
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise FileNotFoundError(f"no model below {root} (no folder there holds a config.json): attach your "
                                    "Kaggle Model to the notebook, or set MODEL")
        shown = ", ".join(str(path) for path in candidates[:3])
        raise FileNotFoundError(f"{len(candidates)} models below {root} ({shown}, ...): set MODEL to the folder or "
                                "to the Kaggle Model's handle")
    versions = {path: version for path in candidates if (version := _mount_version(path, root, handle)) is not None}
    if not versions:
        raise FileNotFoundError(f"the Kaggle Model {handle} is not below {root} (no folder "
                                f"{'/'.join(handle.mount_parts)}/ holding a config.json): add it to the notebook's "
                                "inputs (Add Input > Models), or check the handle")
    return max(versions, key=lambda path: (versions[path], -len(path.parts)))


def notebook_model(given: str | os.PathLike | None, dataset: str | os.PathLike | None,
                   input_root: str | os.PathLike) -> Path:
    """The model the submission notebook runs: ``given`` (a folder, or a Kaggle Model handle); else the
    dataset's ``model/``; else the Kaggle Model named in the dataset's ``model-source.json``; else the one
    model folder below ``input_root``."""
    dataset = Path(dataset) if dataset is not None else None
    if given:
        try:  # a handle, unless a folder of that name is here
            handle = None if Path(given).exists() else ModelHandle.parse(str(given))
        except ValueError:
            handle = None
        return Path(given) if handle is None else find_model_input(input_root, handle)
    if dataset is not None and any((dataset / "model" / marker).exists() for marker in MODEL_MARKERS):
        return dataset / "model"
    handle = None
    if dataset is not None and (dataset / MODEL_SOURCE_FILE).is_file():
        handle = ModelHandle.parse(json.loads((dataset / MODEL_SOURCE_FILE).read_text())["model_source"])
    return find_model_input(input_root, handle, skip=dataset)


def overridden_model(given: str | os.PathLike | None, dataset: str | os.PathLike | None,
                     input_root: str | os.PathLike) -> str | None:
    """The notebook's loud line when ``given`` (its MODEL) replaces the model the dataset carries (its ``model/`` or
    its Kaggle Model); None when MODEL is not set, names that same model, or the dataset carries none."""
    if not given or dataset is None:
        return None
    try:
        own = notebook_model(None, dataset, input_root)
    except FileNotFoundError:
        return None
    chosen = notebook_model(given, dataset, input_root)
    if chosen.resolve() == own.resolve():
        return None
    return (f"WARNING: MODEL = {str(given)!r} is run ({chosen}), not the model the dataset carries ({own}): the "
            "submission will be that model's")
