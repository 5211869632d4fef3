"""The model folder on disk: what makes a folder one, its JSON files, and reading its files with one-line errors.

A model folder is an ordinary Hugging Face folder (``config.json``, safetensors weights, tokenizer files), a
peft adapter folder (``adapter_config.json``), or a named base plus a delta (``delta.json`` beside an adapter
config, written by ``loading.save_delta``); ``arc_kit.json`` records what the kit knows of it. This module
reads and writes those files, names the one to blame when a folder is broken (``ModelFolderError``), refuses a
folder that asks to run code of its own (``auto_map``: every transformers and peft call of the kit also passes
``trust_remote_code=False``, so no prompt can ever ask), names the code files a folder holds (``code_files``:
never imported, never copied), and finds the model the kit ships. ``MODEL_KIND`` and ``BUILT_MODEL_KIND`` are
a model folder as an output (``outputs``): their layouts, by exact name, are what the commands that write one
(shrink and base merge, create-model) may replace. It knows nothing of how a model is built, merged or placed
on a device (``loading``), nor of tasks; what a folder is, read once for every caller, is ``description``'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from arc_kit.model import devices
from arc_kit.outputs import FolderKind, replace_file, staged_into

DELTA_INDEX = "delta.json"  # lists the shards of a base-plus-delta folder
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
# Every file a model folder the kit writes may hold, by its exact name (shards numbered): what a model is read with
# (weights, configs, tokenizer files), the adapter of a LoRA fine-tune beside its merged weights, a base plus a
# delta, and the kit's record of it. A folder's layout (``outputs``): what --overwrite replaces, and what kaggle
# build ships of a model.
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model-{n}-of-{n}.safetensors",
               "model.safetensors.index.json", *TOKENIZER_FILES, "tokenizer.model", "vocab.json", "merges.txt",
               "chat_template.jinja", "chat_template.json", "arc_kit.json", "adapter_config.json",
               "adapter_model.safetensors", DELTA_INDEX, "delta-{n}-of-{n}.safetensors")
# a training run's adapter (``training``): no model folder of the commands below holds one
ADAPTER_FILES = ("adapter/adapter_config.json", "adapter/adapter_model.safetensors", "adapter/README.md")
# the layouts of the model folders the commands write, each only what its command writes (``save_model``): a model
# that create-model builds (its weights, configs, its fast tokenizer, the kit's record), and one that shrink or
# base merge saves (any tokenizer's files then: a loaded model's own); neither holds an adapter nor a delta
BUILT_FILES = ("config.json", "generation_config.json", "model.safetensors", "model-{n}-of-{n}.safetensors",
               "model.safetensors.index.json", *TOKENIZER_FILES, "arc_kit.json")
BUILT_MODEL_KIND = FolderKind("model", owned=BUILT_FILES, kept="a model folder, maybe incomplete")
MODEL_KIND = FolderKind("model", owned=tuple(name for name in MODEL_FILES if not name.startswith(("adapter", "delta"))),
                        kept="a model folder, maybe incomplete")
JSON_BYTES = 1 << 26  # the most a model folder's JSON file may hold (a large tokenizer.json holds ~20 MB)
CUSTOM_CODE_FILES = ("config.json", "tokenizer_config.json", "adapter_config.json", "preprocessor_config.json")
# what a model is read with whole (configs, tokenizer files, indexes): each at most JSON_BYTES
TEXT_FILES = tuple(name for name in MODEL_FILES if not name.endswith(".safetensors"))
# the files one of which holds a tokenizer's vocabulary (the rest only configure it)
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "*.tiktoken")


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
    """Save weights (safetensors, sharded), config, tokenizer, and ``info`` as ``arc_kit.json``; every file written
    aside first and renamed over its name (``outputs.staged_into``: a link there is replaced, never followed)."""
    path = Path(path)
    with staged_into(path) as staging:  # the folder made where missing
        model.save_pretrained(staging, max_shard_size=max_shard_size)
        tokenizer.save_pretrained(staging)
    if info is not None:
        replace_file(path / "arc_kit.json", json.dumps(info, indent=2, default=str) + "\n")
    return path


def read_json(path: Path) -> dict:
    """A model folder's JSON file ({} when absent); ModelFolderError naming the file when it is broken, no regular
    file (a FIFO a read would wait on, a device) or larger than any such file (``JSON_BYTES``)."""
    if not path.exists():
        return {}
    if not path.is_file():  # a folder, or a FIFO that a read would wait on forever
        raise ModelFolderError(f"cannot read {path}: it is no regular file")
    if path.stat().st_size > JSON_BYTES:
        raise ModelFolderError(f"cannot read {path}: it holds {path.stat().st_size:,} bytes, more than any model "
                               f"folder's JSON file ({JSON_BYTES:,})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ModelFolderError(f"cannot read {path}: {first_line(error)}") from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"cannot read {path}: it holds {type(data).__name__}, expected a JSON object")
    return data


def refuse_custom_code(folder: Path) -> dict[str, dict]:
    """``folder``'s config, tokenizer, adapter and preprocessor configs, by name ({} each when absent);
    ModelFolderError in one line when one asks for code of its own (``auto_map``: transformers would import the
    folder's Python files): arc-kit never runs it."""
    configs = {}
    for name in CUSTOM_CODE_FILES:
        configs[name] = read_json(folder / name)
        if configs[name].get("auto_map"):
            raise ModelFolderError(f"{folder / name} asks to run code of its own (auto_map): arc-kit never runs a "
                                   "model folder's code; use a model whose architecture transformers ships")
    return configs


def code_files(folder: Path) -> list[str]:
    """The Python files in ``folder`` (a ``modeling_llama.py`` a model's author left there), by name: the kit never
    imports them (nothing asks it to, ``refuse_custom_code``) and never copies them (``MODEL_FILES``)."""
    return sorted(path.name for path in folder.glob("*.py") if path.is_file())


def load_tokenizer(folder: Path):
    """``AutoTokenizer`` from ``folder``, offline; ModelFolderError in one line naming a broken tokenizer file, or
    saying that there is none."""
    devices.stay_offline()  # before transformers is imported: it reads the variables then
    from transformers import AutoTokenizer

    if not any(any(folder.glob(pattern)) for pattern in VOCABULARY_FILES):
        raise ModelFolderError(f"no tokenizer files: {folder} holds none of {', '.join(VOCABULARY_FILES)}; copy "
                               "the tokenizer files of the model it was made from into it")
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
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


def checked_configs(path: str | os.PathLike) -> dict[str, dict]:
    """The configs of model folder ``path`` (``refuse_custom_code``'s), read once it is checked: FileNotFoundError
    when it is no model folder, ModelFolderError in one line when it is damaged or asks for code of its own.

    Checked before transformers sees it: a name that is no local folder would be read as a hub id,
    and offline that fails with a message about connecting to huggingface.co; a FIFO or a device in it would
    be waited on or read forever, and a config or tokenizer file larger than any (``JSON_BYTES``) would fill the
    memory; a config that asks for the folder's own code is refused (``refuse_custom_code``).
    """
    path = Path(path)
    if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"{path} is not a model folder (no config.json or adapter_config.json)")
    odd = [entry for entry in path.iterdir() if not (entry.is_file() or entry.is_dir())]
    if odd:  # a FIFO or a device, which transformers would wait on or read forever
        raise ModelFolderError(f"{odd[0]} is neither a file nor a folder (a FIFO, a device, a broken link?)")
    large = [entry for entry in path.iterdir() if entry.name in TEXT_FILES and entry.stat().st_size > JSON_BYTES]
    if large:  # a tokenizer reads its files whole: a "bomb" of gigabytes would fill the memory
        raise ModelFolderError(f"{large[0]} holds {large[0].stat().st_size:,} bytes, more than any such file "
                               f"({JSON_BYTES:,}): the folder is damaged")
    return refuse_custom_code(path)


def read_weights(auto_class, folder: Path, arguments: dict):
    """``from_pretrained`` with a broken folder reported in one line that names the file."""
    devices.stay_offline()
    from safetensors import SafetensorError  # a truncated, empty or corrupt weights file

    try:
        return auto_class.from_pretrained(folder, **arguments, trust_remote_code=False)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        if isinstance(error, devices.UnsupportedSetupError):
            raise
        raise ModelFolderError(f"cannot load the model in {folder}: {first_line(error)}") from None
