"""A model folder read once per process: what it is, the model it builds, its budget, tokenizer and weights.

``read_model_folder(path)`` is where every caller learns about a model folder (a run's choice of tasks, the
load, the solver's token budget, a pool's driver, the Kaggle job, the tables, the estimate, check-model, kaggle
build): its kind (an ordinary folder, a peft adapter on a base, a named base plus a delta), the config of the
model it builds (its own, its adapter's base's, its delta's base's) and so the architecture and the token
budget, the weights' format (stored in 4 bits or not, the float type they are stored in), the tokenizer (shrunk
to the authors' set where the load shrinks the model) and the weights, there and whole. The configs are read at
once, the rest when first asked, and all of it is kept: a second caller reads nothing. A description is kept
while its folder's listing (and its base's) is unchanged: a folder written since, or a base built since, is
read again.

The safety rules are ``folders``' and ``checks``': the folder checked before transformers sees it (a FIFO, a
file larger than any, a folder or base that asks to run code of its own: refused in one line), the weights
checked whole. Knows files; builds no model and places nothing on a device (``loading``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from arc_kit.model.bases import built_folder
from arc_kit.model.checks import (
    WeightFiles,
    architecture_of,
    check_against_weights,
    checked_architecture,
    safetensors_tensors,
    weight_files,
)
from arc_kit.model.deltas import SHARD_NAME
from arc_kit.model.folders import (
    DELTA_INDEX,
    ModelFolderError,
    checked_configs,
    is_delta_folder,
    load_tokenizer,
    read_json,
    refuse_custom_code,
)
from arc_kit.model.memory import Architecture
from arc_kit.model.shrinking import kept_at_load, shrink_both
from arc_kit.settings import DEFAULT_TOKEN_BUDGET
from arc_kit.text import HuggingFaceTokenizer, TaskEncoder, TextFormat

logger = logging.getLogger(__name__)

KEPT = 16  # the descriptions a process keeps (the least recently asked for go first)
# A folder changed this recently is read again at the next ask: a file rewritten within one tick of the file
# system's clock (milliseconds, two seconds on FAT) keeps its size and time (git's "racily clean" entries).
RECENT_NS = 2 * 10**9
LOAD_ADVICE = "pass base_model=..."  # what an adapter whose base is not here is told by default


@dataclass(frozen=True, eq=False)
class ModelFolder:
    """A model folder as the kit reads it (``read_model_folder``); what is not read at once is read when first asked."""

    path: Path  # as the caller named it (messages and records name it so)
    kind: str  # "plain" (an ordinary folder), "adapter" (a peft adapter on a base) or "delta" (a named base plus one)
    configs: dict = field(repr=False)  # its config, tokenizer, adapter and preprocessor configs ({} each when absent)
    delta_index: dict = field(repr=False)  # a delta's delta.json ({} for the others)
    base_model: str | None  # the base a load names instead of the folder's own (``LoadSettings.base_model``)
    base_configs: dict = field(repr=False)  # an adapter's or a delta's base's configs ({} while it is not here)
    stamp: tuple = field(repr=False)  # the folder's listing, where its base is and that one's: what keeps it valid

    @property
    def is_delta(self) -> bool:
        return self.kind == "delta"

    @property
    def is_adapter(self) -> bool:
        return self.kind == "adapter"

    @property
    def adapter_config(self) -> dict:
        return self.configs["adapter_config.json"] if self.is_adapter else {}

    @property
    def base_name(self) -> str | None:
        """A delta's named base (a name of ``bases.BASES``); None for the other kinds."""
        return self.delta_index["base"] if self.is_delta else None

    def base(self, advice: str = LOAD_ADVICE) -> Path:
        """Where the weights are read: the folder itself, an adapter's base (the one a load names, else its config's;
        FileNotFoundError in one line ending in ``advice`` when that is no local model folder) or a delta's base (the
        one a load names, else the kit's build of it, built or not)."""
        if self.kind == "plain":
            return self.path
        if self.is_delta:
            return _base_location(self.kind, self.delta_index, self.configs, self.base_model)
        named = self.base_model or self.adapter_config.get("base_model_name_or_path")
        if not named:  # never Path(""), which is the working folder
            raise FileNotFoundError(f"the adapter in {self.path} names no base model; {advice}")
        if not (Path(named) / "config.json").exists():
            raise FileNotFoundError(f"the adapter in {self.path} needs its base model, {str(named)!r} is not a local "
                                    f"model folder; {advice}")
        return Path(named)

    @property
    def config(self) -> dict:
        """The config of the model it builds: its own, or its base's ({} while an adapter's or a delta's base is not
        here)."""
        return self.configs["config.json"] if self.kind == "plain" else self.base_configs.get("config.json", {})

    @property
    def config_path(self) -> Path:
        """The file ``config`` was read from (or would be)."""
        if self.kind == "plain" or not self.base_configs:
            return self.path / "config.json"
        return self.base() / "config.json"

    @property
    def architecture(self) -> Architecture:
        """The checked sizes of ``config`` (``checks.architecture_of``; ModelFolderError in one line)."""
        return architecture_of(self.config, self.config_path)

    @property
    def quantized_on_disk(self) -> bool:
        """The weights' format: stored quantized (the authors' 4-bit releases; its config says how), or not."""
        return "quantization_config" in self.config

    def token_budget(self, requested: int | None = None) -> int:
        """The token budget to use with this model: ``requested`` (default ``DEFAULT_TOKEN_BUDGET``, the authors'
        cap for every model) cut to its maximum positions (its config's, or its base's; none when they do not
        say), with a one-line warning when cut.

        The ``token_budget`` that training records in arc_kit.json (the length a model trained on) does
        not bound it: a model may be asked for more than it trained on (room for a 30x30 answer, say).
        """
        limit = self.config.get("max_position_embeddings")
        return cut_to_limit(requested or DEFAULT_TOKEN_BUDGET, int(limit) if limit else None, str(self.path))

    @property
    def tokenizer_folder(self) -> Path:
        """Where its tokenizer is: the folder, unless an adapter's or a delta's folder holds none (then its base)."""
        return self.path if self.kind == "plain" or (self.path / "tokenizer_config.json").exists() else self.base()

    @cached_property
    def _tokenizers(self) -> tuple:
        """(the tokenizer as stored, the ids the load keeps or None, the tokenizer as the kit uses it)."""
        stored = load_tokenizer(self.tokenizer_folder)
        keep = kept_at_load(self.path, stored) if self.kind == "plain" else None  # ValueError: can be neither
        return stored, keep, stored if keep is None else shrink_both(None, stored, keep)[1]

    @property
    def stored_tokenizer(self):
        """The tokenizer as its files hold it (ModelFolderError in one line naming a broken file, or none)."""
        return self._tokenizers[0]

    @property
    def kept_ids(self) -> list[int] | None:
        """The ids a full vocabulary is shrunk to as it loads (``shrinking.kept_at_load``); None when it is not."""
        return self._tokenizers[1]

    @property
    def tokenizer(self):
        """The tokenizer as the kit uses it (shrunk where the load shrinks the model), shared: read, never change it."""
        return self._tokenizers[2]

    def encoder(self, text_format: TextFormat = TextFormat(), max_len: int | None = None) -> TaskEncoder:
        """A TaskEncoder over its tokenizer within ``max_len`` tokens (default: its token budget): no weights read."""
        return TaskEncoder(HuggingFaceTokenizer(self.tokenizer), text_format,
                           self.token_budget() if max_len is None else max_len)

    @cached_property
    def base_weights(self) -> WeightFiles:
        """The weights the model is built from (its own, or its base's), there and whole (``checks.weight_files``)."""
        return weight_files(self.base())

    @cached_property
    def own_weights(self) -> WeightFiles:
        """What the folder itself holds, there and whole: an ordinary folder's weights, an adapter's, a delta's
        shards (each one that delta.json names)."""
        if self.is_adapter:
            return weight_files(self.path, stem="adapter_model")
        if not self.is_delta:
            return self.base_weights
        shards = self.delta_index.get("shards")
        if not isinstance(shards, list) or not all(isinstance(name, str) and SHARD_NAME.fullmatch(name)
                                                   for name in shards):
            raise ModelFolderError(f"{self.path / DELTA_INDEX} names no shards, or shards not named as the kit names "
                                   "them (delta-00001-of-00002.safetensors)")
        files = tuple(self.path / name for name in shards)
        return WeightFiles("safetensors", files, {name: what for path in files
                                                  for name, what in safetensors_tensors(path).items()})

    def check_weights(self) -> Architecture | None:
        """What a load refuses before it reads a weight, each in one line: a config the kit cannot read or whose
        quantization it does not load, weights missing, cut short, unsafe or of another config, an adapter's own
        weights likewise; a delta's shards there and whole (its base is the kit's own build). The architecture
        (None for a delta); no device's memory (``loading``'s)."""
        if self.is_delta:
            _ = self.own_weights  # its shards, there and whole
            return None
        base = self.base()
        architecture = checked_architecture(self.config, base)
        check_against_weights(architecture, self.base_weights, base / "config.json")
        _ = self.own_weights  # an adapter's own weights, there and whole
        return architecture

    @cached_property
    def stored_dtype(self) -> str:
        """The narrowest float type of the weights it stands for, as stored: its own, or its base's and its adapter's
        or delta's ("float32" where it stores none); a tie goes to the base's."""
        weights = [self.base_weights] if self.kind == "plain" else [self.base_weights, self.own_weights]
        floats = [FLOAT_TYPES.get(kind, kind) for files in weights for kind, _ in files.tensors.values()]
        floats = [kind for kind in floats if kind in FLOAT_TYPES.values()] or ["float32"]
        return min(floats, key=lambda kind: kind == "float32")  # the first of the narrowest: a tie goes to the base's

    @cached_property
    def record(self) -> dict:
        """What the kit recorded of it (its arc_kit.json; {} when there is none)."""
        return read_json(self.path / "arc_kit.json")


FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # safetensors' names (pickles: torch's)


def read_model_folder(path: str | os.PathLike, base_model: str | os.PathLike | None = None) -> ModelFolder:
    """The description of model folder ``path`` (with ``base_model``, a load's base instead of its own): read now
    and checked (FileNotFoundError when it is no model folder, ModelFolderError naming a broken file), or the
    one this process read before while neither the folder's listing nor its base's has changed."""
    path = Path(path)
    base_model = str(base_model) if base_model else None
    key = (path, os.path.abspath(path), base_model)  # a relative path, from where it was asked
    kept = _DESCRIPTIONS.get(key)
    if kept is not None and _stamp(path, kept.kind, kept.delta_index, kept.configs, base_model) == kept.stamp:
        _DESCRIPTIONS.move_to_end(key)
        return kept
    described = _read(path, base_model)
    _DESCRIPTIONS.pop(key, None)
    if not _recent(described.stamp):
        _DESCRIPTIONS[key] = described
        while len(_DESCRIPTIONS) > KEPT:
            _DESCRIPTIONS.popitem(last=False)
    return described


_DESCRIPTIONS: OrderedDict[tuple, ModelFolder] = OrderedDict()


def _read(path: Path, base_model: str | None) -> ModelFolder:
    """A folder read: checked (``folders.checked_configs``), its kind, and its base's configs where the base is here
    (a base that asks to run code of its own refused)."""
    listing = _listing(path)  # before anything is read: a change while it is read is seen by the next caller
    configs = checked_configs(path)
    kind = "delta" if is_delta_folder(path) else "adapter" if configs["adapter_config.json"] else "plain"
    delta_index = read_json(path / DELTA_INDEX) if kind == "delta" else {}
    if kind == "delta" and not isinstance(delta_index.get("base"), str):
        raise ModelFolderError(f"{path / DELTA_INDEX} names no base: the folder is damaged")
    base = _base_location(kind, delta_index, configs, base_model)
    base_listing = _listing(base)
    base_configs = refuse_custom_code(base) if base is not None and (base / "config.json").exists() else {}
    return ModelFolder(path, kind, configs, delta_index, base_model, base_configs, (listing, base, base_listing))


def _base_location(kind: str, delta_index: dict, configs: dict, base_model: str | None) -> Path | None:
    """Where a folder's base is or would be (None for an ordinary folder, or an adapter that names none), no file
    read."""
    if kind == "plain":
        return None
    if kind == "delta":
        return Path(base_model) if base_model else built_folder(delta_index["base"])
    named = base_model or configs["adapter_config.json"].get("base_model_name_or_path")
    return Path(named) if named else None


def _stamp(path: Path, kind: str, delta_index: dict, configs: dict, base_model: str | None) -> tuple:
    """The folder's listing, where its base is and the base's listing: what a kept description is checked against."""
    base = _base_location(kind, delta_index, configs, base_model)
    return _listing(path), base, _listing(base)


def _recent(stamp: tuple) -> bool:
    """Whether an entry of the listings in ``stamp`` changed less than ``RECENT_NS`` ago."""
    times = [entry[3] for listing in (stamp[0], stamp[2]) for entry in listing if entry[3] is not None]
    return bool(times) and max(times) > time.time_ns() - RECENT_NS


def _listing(folder: Path | None) -> tuple:
    """What ``folder`` holds, by name, inode, size and modification time (no file opened); () when it is not there."""
    if folder is None:
        return ()
    try:
        with os.scandir(folder) as entries:
            return tuple(sorted((entry.name, *_status(entry)) for entry in entries))
    except OSError:
        return ()


def _status(entry: os.DirEntry) -> tuple:
    try:
        status = entry.stat()
    except OSError:  # a broken link: the check names it
        return None, None, None
    return status.st_ino, status.st_size, status.st_mtime_ns


def cut_to_limit(budget: int, limit: int | None, model: str) -> int:
    """``budget``, or ``limit`` when that is smaller (warned once per process and model): a model's
    maximum positions bound the budget, never set it."""
    if limit is None or budget <= limit:
        return int(budget)
    _warn_cut(int(budget), int(limit), model)
    return int(limit)


@functools.lru_cache(maxsize=None)
def _warn_cut(budget: int, limit: int, model: str) -> None:
    logger.warning("the token budget %d is more than %s takes (%d tokens): using %d", budget, model, limit, limit)
