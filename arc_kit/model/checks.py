"""A model folder checked before anything is allocated: its config's sizes, its weights files, its pickles.

Each refusal is one line: a config size that is no positive whole number or that no real model has
(``MAX_SIZES``: a config with 100000 layers is refused at once, where transformers would allocate for
minutes); weights missing or cut short (every shard an index names, every safetensors header against
its file); a pickled ``.bin`` that is not plain tensors (read with ``torch.load(weights_only=True)``;
the message never suggests the unsafe way round); a config that does not fit its weights' embedding;
weights larger than this machine's memory. A folder's description (``description``) asks them for every
caller: the load, a pool's driver, ``arc-kit check-model``.

Knows files, headers and shapes; builds no model, and knows nothing of tokenizers, memory beyond
the weights (``memory``) or tasks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from arc_kit.model.devices import UnsupportedSetupError
from arc_kit.model.folders import ModelFolderError, first_line, read_json
from arc_kit.model.memory import GIB, Architecture

# Far above every released model (the largest have ~130 layers, hidden 16384 to 25600, 262k tokens),
# far below what would hang a machine allocating it.
MAX_SIZES = {"num_hidden_layers": 1024, "hidden_size": 131_072, "intermediate_size": 1_048_576,
             "num_attention_heads": 4096, "num_key_value_heads": 4096, "head_dim": 16_384, "vocab_size": 4_194_304,
             "max_position_embeddings": 1 << 26}
REQUIRED_SIZES = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")


def _size(config: dict, name: str, where: Path, default: int | None = None) -> int | None:
    """``config[name]`` as a checked positive size (``default`` when absent); ModelFolderError in one line."""
    value = config.get(name, default)
    if value is None and default is None and name not in REQUIRED_SIZES:
        return None
    if type(value) is not int or value < 1:  # type: rejects True and 12.0 as well as strings and None
        raise ModelFolderError(f"{where}: {name} is {value!r}, not a positive whole number")
    if value > MAX_SIZES[name]:
        raise ModelFolderError(f"{where}: {name} is {value:,}, more than any model the kit can run has "
                               f"(at most {MAX_SIZES[name]:,}): the config is damaged or not a causal LM's")
    return value


def _quantization(config: dict) -> str | None:
    """What a config's quantization_config says, in a few words; None when it has none."""
    quantization = config.get("quantization_config")
    if not quantization:
        return None
    if not isinstance(quantization, dict):
        return f"unreadable quantization_config {quantization!r}"
    method = quantization.get("quant_method", "unknown")
    if method == "bitsandbytes" and (quantization.get("load_in_4bit") or quantization.get("_load_in_4bit")):
        return f"bitsandbytes 4-bit {quantization.get('bnb_4bit_quant_type', 'fp4')}"
    if method == "bitsandbytes" and (quantization.get("load_in_8bit") or quantization.get("_load_in_8bit")):
        return "bitsandbytes 8-bit"
    return f"{method} {quantization.get('bits', '')}-bit".replace(" -bit", "")


def architecture_of(config: dict, where: str | os.PathLike = "config.json") -> Architecture:
    """The checked sizes of ``config`` (a config.json's dict; a multimodal one's ``text_config``)."""
    where = Path(where)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers, hidden = _size(text, "num_hidden_layers", where), _size(text, "hidden_size", where)
    heads = _size(text, "num_attention_heads", where)
    kv_heads = _size(text, "num_key_value_heads", where, default=heads)
    if heads % kv_heads:
        raise ModelFolderError(f"{where}: {heads} attention heads cannot share {kv_heads} key-value heads evenly")
    head_dim = _size(text, "head_dim", where)  # None where the config leaves it out
    if head_dim is None:
        if hidden % heads:
            raise ModelFolderError(f"{where}: hidden_size {hidden} is not a multiple of its {heads} heads")
        head_dim = hidden // heads
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", True))
    model_type = str(text.get("model_type") or config.get("model_type") or "unknown")
    return Architecture(model_type, layers, hidden, _size(text, "intermediate_size", where), heads, kv_heads, head_dim,
                        _size(text, "vocab_size", where), bool(tied), _size(text, "max_position_embeddings", where),
                        bool(text.get("attention_bias", model_type == "qwen2")), model_type == "qwen3",
                        _quantization(config))


# ---------------------------------------------------------------------------------------------
# The weights files.

@dataclass(frozen=True)
class WeightFiles:
    """A folder's weights: their kind, the files, and what each tensor is (name -> (dtype, shape))."""

    kind: str  # "safetensors" or "bin"
    files: tuple[Path, ...]
    tensors: dict[str, tuple[str, tuple[int, ...]]]

    @property
    def size(self) -> int:
        return sum(path.stat().st_size for path in self.files)


def weight_files(folder: str | os.PathLike, stem: str = "model") -> WeightFiles:
    """The checked weights of ``folder`` (``stem``: "model", or "adapter_model" for a peft adapter).

    Safetensors first (``{stem}.safetensors``, or the shards ``{stem}.safetensors.index.json`` names,
    or every ``*.safetensors`` when there is neither), else ``pytorch_{stem}.bin`` or its index's
    shards. ModelFolderError in one line when there are none, or one is missing, cut short or unsafe.
    """
    folder = Path(folder)
    prefix = "pytorch_" if stem == "model" else ""
    for kind, single, index in (("safetensors", f"{stem}.safetensors", f"{stem}.safetensors.index.json"),
                                ("bin", f"{prefix}{stem}.bin", f"{prefix}{stem}.bin.index.json")):
        files = _listed_files(folder, single, index)
        if not files and kind == "safetensors" and stem == "model":
            files = sorted(path for path in folder.glob("*.safetensors") if not path.name.startswith("adapter_"))
        if files:
            read = safetensors_tensors if kind == "safetensors" else _pickled_tensors
            return WeightFiles(kind, tuple(files), {name: what for path in files for name, what in read(path).items()})
    raise ModelFolderError(f"{folder} holds no weights ({stem}.safetensors, its shards, or pytorch_{stem}.bin): "
                           "copy the weights files into it")


def _listed_files(folder: Path, single: str, index: str) -> list[Path]:
    """The single file when it is there, else the shards that the index names (each must be there)."""
    if (folder / single).is_file():
        return [folder / single]
    if not (folder / index).exists():
        return []
    weight_map = read_json(folder / index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFolderError(f"cannot read {folder / index}: it has no weight_map")
    shards = sorted({str(name) for name in weight_map.values()})
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise ModelFolderError(f"{folder / index} names {len(shards)} shards and {len(missing)} are missing "
                               f"({missing[0]}, ...): copy the whole folder again")
    return [folder / name for name in shards]


def safetensors_tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor's (dtype, shape) from a safetensors header; a cut or damaged file in one line."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            return {name: (handle.get_slice(name).get_dtype(), tuple(handle.get_slice(name).get_shape()))
                    for name in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        why = first_line(error)
        if "not fully covered" in why or "incomplete" in why.lower():
            why = f"it is cut short ({path.stat().st_size:,} bytes, fewer than its header promises)"
        raise ModelFolderError(f"cannot read {path}: {why}: copy it again") from None


PLAIN_TENSORS_ONLY = ("the kit reads pickled weights as plain tensors only and will not run code from a file: "
                      "convert it to safetensors on a machine where you trust it, or get the safetensors files")


def _pickled_tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A ``.bin``'s tensors, read with ``weights_only=True`` (memory-mapped where the format allows)."""
    import pickle

    import torch

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:  # the legacy (non-zip) format cannot be memory-mapped
            if "mmap" not in str(error):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL ([\w.]+)", str(error)) or re.search(r"global[^\w]+([\w.]+)", str(error))
        what = f" (it calls {found.group(1)})" if found else ""
        raise ModelFolderError(f"{path} is not plain tensors{what}: {PLAIN_TENSORS_ONLY}") from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        why = first_line(error).split("weights_only")[0].rstrip(" ,.;(")  # cut before advice to turn safety off
        raise ModelFolderError(f"cannot read {path}: {why or type(error).__name__}: copy it again") from None
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise ModelFolderError(f"{path} holds a {type(state).__name__} that is not a name-to-tensor dict: "
                               f"{PLAIN_TENSORS_ONLY}")
    return {str(name): (str(value.dtype).removeprefix("torch."), tuple(value.shape)) for name, value in state.items()}


def check_against_weights(architecture: Architecture, weights: WeightFiles, where: str | os.PathLike) -> None:
    """The config's vocabulary and width against the input embedding's shape in the weights (one line)."""
    embedding = next((shape for name, (_, shape) in weights.tensors.items()
                      if name.endswith("embed_tokens.weight") and len(shape) == 2), None)
    if embedding is None:
        return  # another naming: transformers will say
    rows, width = embedding
    if (rows, width) != (architecture.vocab, architecture.hidden):
        raise ModelFolderError(f"{where} says vocab_size {architecture.vocab:,} and hidden_size "
                               f"{architecture.hidden:,}, the weights' embeddings are {rows:,} x {width:,}: the "
                               "config belongs to another model (copy the folder's own config.json)")


# ---------------------------------------------------------------------------------------------
# Sizes against this machine, and all of it before a load.

def check_fits_machine(needed: int, what: str, device: str = "cpu") -> None:
    """UnsupportedSetupError in one line when ``needed`` bytes are more than ``device``'s memory (the GPU's for a
    CUDA device, else the physical memory)."""
    import torch  # loaded already: only a model's load asks

    on_gpu = device.startswith("cuda")
    have = torch.cuda.get_device_properties(device).total_memory if on_gpu else \
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > have:
        where = "the GPU" if on_gpu else "this machine"
        raise UnsupportedSetupError(f"{what} needs about {needed / GIB:,.1f} GiB and {where} has "
                                    f"{have / GIB:,.1f} GiB: load it in 4 bits on a GPU (quantization='4bit'), "
                                    "or choose a smaller model (arc-kit check-model shows what it needs)")


def checked_architecture(config: dict, folder: Path) -> Architecture:
    """The architecture of ``config``, ``folder``'s config.json's; refused in one line when it has none, or holds
    a quantization the kit does not load."""
    if not config:
        raise ModelFolderError(f"{folder} has no config.json (or an empty one): it is no model folder")
    architecture = architecture_of(config, folder / "config.json")
    if architecture.quantization and not architecture.four_bit:
        raise UnsupportedSetupError(f"{folder} holds {architecture.quantization} weights; the kit loads unquantized "
                                    "or bitsandbytes 4-bit weights")
    return architecture
