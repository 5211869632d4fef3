"""The model folder on disk: what makes a folder one, its JSON files, and reading its files with one-line errors.

A model folder is an ordinary Hugging Face folder (``config.json``, safetensors weights, tokenizer
files), a peft adapter folder (``adapter_config.json``), or a named base plus a delta (``delta.json``
beside an adapter config, written by ``loading.save_delta``); ``arc_kit.json`` records what the kit
knows of it. This module reads and writes those files, names the one to blame when a folder is
broken (``ModelFolderError``), and finds the model the kit ships. ``MODEL_KIND`` is a model folder
as an output (``outputs``): what the commands that write one (create-model, shrink, base merge) may
replace. It knows nothing of how a model is built, merged or placed on a device (``loading``), nor
of tasks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from arc_kit.model import devices
from arc_kit.outputs import FolderKind

DELTA_INDEX = "delta.json"  # lists the shards of a base-plus-delta folder
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
# the files one of which holds a tokenizer's vocabulary (the rest only configure it)
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "*.tiktoken")
# what a command that writes a model folder writes there: what --overwrite replaces (a user's file beside it stays)
MODEL_KIND = FolderKind("model", owned=("*.safetensors", "*.safetensors.index.json", "config.json",
                                        "generation_config.json", *TOKENIZER_FILES, "tokenizer.model", "vocab.json",
                                        "merges.txt", "chat_template.jinja", "arc_kit.json", "adapter",
                                        "adapter_config.json", DELTA_INDEX), kept="a model folder, maybe incomplete")


class ModelFolderError(ValueError):
    """A model folder whose files are missing, truncated or corrupt (the message names it, in one line)."""


def is_delta_folder(path: str | os.PathLike) -> bool:
    """True for a folder written by ``save_delta``: a named base, an adapter config and shards."""
    path = Path(path)
    return (path / DELTA_INDEX).exists() and (path / "adapter_config.json").exists()


def default_model_path() -> Path:
    """The model the kit ships: $ARC_KIT_MODEL, else kaggle_dataset/model beside the package source."""
    if os.environ.get("ARC_KIT_MODEL"):
        return Path(os.environ["ARC_KIT_MODEL"])
    here = Path(__file__).resolve().parents[2] / "kaggle_dataset" / "model"
    if (here / "config.json").exists() or is_delta_folder(here):
        return here
    raise FileNotFoundError("no default model found: set ARC_KIT_MODEL or pass --model (the repository ships one "
                            "in kaggle_dataset/model)")


def save_model(model, tokenizer, path: str | os.PathLike, info: dict | None = None,
               max_shard_size: str = "16MB") -> Path:
    """Save weights (safetensors, sharded), config, tokenizer, and ``info`` as ``arc_kit.json``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, max_shard_size=max_shard_size)
    tokenizer.save_pretrained(path)
    if info is not None:
        (path / "arc_kit.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    return path


def read_json(path: Path) -> dict:
    """A model folder's JSON file ({} when absent); ModelFolderError naming the file when it is broken."""
    if not path.exists():
        return {}
    if not path.is_file():  # a folder, or a FIFO that a read would wait on forever
        raise ModelFolderError(f"cannot read {path}: it is no regular file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ModelFolderError(f"cannot read {path}: {str(error).splitlines()[0] or type(error).__name__}") from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"cannot read {path}: it holds {type(data).__name__}, expected a JSON object")
    return data


def load_tokenizer(folder: Path):
    """``AutoTokenizer`` from ``folder``, offline; ModelFolderError in one line naming a broken tokenizer file, or
    saying that there is none."""
    devices.stay_offline()  # before transformers is imported: it reads the variables then
    from transformers import AutoTokenizer

    if not any(any(folder.glob(pattern)) for pattern in VOCABULARY_FILES):
        raise ModelFolderError(f"no tokenizer files: {folder} holds none of {', '.join(VOCABULARY_FILES)}; copy "
                               "the tokenizer files of the model it was made from into it")
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - a damaged file raises anything from KeyError to a bare Exception
        for name in TOKENIZER_FILES:  # which file is to blame, where one can be named
            read_json(folder / name)  # not JSON, or no JSON object: named there
        if (folder / "tokenizer.json").exists():
            from tokenizers import Tokenizer

            try:
                Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as broken:  # noqa: BLE001 - tokenizers raises a bare Exception
                raise ModelFolderError(f"cannot read {folder / 'tokenizer.json'}: {first_line(broken)}") from None
        raise ModelFolderError(f"cannot load the tokenizer in {folder}: {first_line(error)}") from None


def first_line(error: BaseException) -> str:
    """The first line of an error's message, or its type's name when it has none."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def checked_model_folder(path: str | os.PathLike) -> Path:
    """``path`` as a Path, or FileNotFoundError when it is no model folder.

    Checked before transformers sees it: a name that is no local folder would be read as a hub id,
    and offline that fails with a message about connecting to huggingface.co.
    """
    path = Path(path)
    if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"{path} is not a model folder (no config.json or adapter_config.json)")
    odd = [entry for entry in path.iterdir() if not (entry.is_file() or entry.is_dir())]
    if odd:  # a FIFO or a device, which transformers would wait on or read forever
        raise ModelFolderError(f"{odd[0]} is neither a file nor a folder (a FIFO, a device, a broken link?)")
    return path


def read_weights(auto_class, folder: Path, arguments: dict):
    """``from_pretrained`` with a broken folder reported in one line that names the file."""
    devices.stay_offline()
    from safetensors import SafetensorError  # a truncated, empty or corrupt weights file

    try:
        return auto_class.from_pretrained(folder, **arguments)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        if isinstance(error, devices.UnsupportedSetupError):
            raise
        raise ModelFolderError(f"cannot load the model in {folder}: {first_line(error)}") from None


__all__ = ["DELTA_INDEX", "MODEL_KIND", "TOKENIZER_FILES", "ModelFolderError", "checked_model_folder",
           "default_model_path", "first_line", "is_delta_folder", "load_tokenizer", "read_json", "read_weights",
           "save_model"]
