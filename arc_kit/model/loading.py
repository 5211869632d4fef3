"""Models: building the from-scratch presets with the 64-symbol vocabulary, and loading any causal LM offline.

``load_model`` reads the three kinds of model folder that ``folders`` tells apart: an ordinary Hugging Face
folder (a from-scratch preset, a merged fine-tune, a shrunk pretrained model), a peft LoRA adapter on the base
folder its config names (merged in, except on 4-bit weights), and a named base plus what training added
(``deltas``), the base built or found in the cache (``bases``) and the delta merged in, so that the result is
a plain model (``merge_delta`` writes it out as an ordinary folder). Before a weight is read,
``checks.check_before_load`` refuses in one line what would fail or hang; a full-vocabulary folder is shrunk
to the authors' set as it loads (``shrinking``: nothing written); weights stored in 4 bits load on the CPU
too. This module knows how to build, save and load models (the names of ``folders`` and ``deltas`` that
others need are handed on from here); it knows nothing of tasks beyond the vocabulary, nor of training.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit.model import devices
from arc_kit.model.bases import build_base, built_folder
from arc_kit.model.checks import check_before_load, weight_files
from arc_kit.model.deltas import apply_delta, save_delta
from arc_kit.model.optimization import quiet_peft
from arc_kit.model.folders import (
    BUILT_MODEL_KIND,
    DELTA_INDEX,
    MODEL_KIND,
    ModelFolderError,
    checked_model_folder,
    default_model_path,
    is_delta_folder,
    load_tokenizer,
    read_json,
    read_weights,
    refuse_custom_code,
    save_model,
)
from arc_kit.outputs import OutputRefused, check_folder, claim_folder, inside
from arc_kit.model.shrinking import format_problem, kept_at_load, shrink_both
from arc_kit.settings import DEFAULT_TOKEN_BUDGET, MODEL_PRESETS, LoadSettings
from arc_kit.text import BOS, EOS, PAD, HuggingFaceTokenizer, TaskEncoder, TextFormat, Vocabulary

logger = logging.getLogger(__name__)


def build_tokenizer(vocabulary: Vocabulary = Vocabulary()):
    """A ``transformers`` fast tokenizer over the 64 symbols that loads offline with AutoTokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {BOS, EOS, PAD}
    vocab = {symbol: index for index, symbol in enumerate(vocabulary.symbols)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    # Longest symbols first, then any single character: "+/-=O" stays one token.
    multi = sorted((s for s in vocabulary.symbols if len(s) > 1 and s not in specials), key=len, reverse=True)
    pattern = "|".join([*map(re.escape, multi), r"[\s\S]"])
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                        clean_up_tokenization_spaces=False, model_max_length=1 << 20)
    tokenizer.add_bos_token = False  # the TaskEncoder places bos itself
    return tokenizer


def create_model(preset: str = "micro", *, seed: int = 0, vocabulary: Vocabulary = Vocabulary(),
                 max_positions: int = DEFAULT_TOKEN_BUDGET, **overrides):
    """A fresh, randomly initialised Llama-style model and its tokenizer. ``overrides`` edit the config."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if preset not in MODEL_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(MODEL_PRESETS)}")
    settings = {**MODEL_PRESETS[preset], **overrides}
    config = LlamaConfig(vocab_size=vocabulary.vocab_size, max_position_embeddings=max_positions,
                         bos_token_id=vocabulary.bos_id, eos_token_id=vocabulary.eos_id,
                         pad_token_id=vocabulary.pad_id, tie_word_embeddings=False, rope_theta=10000.0,
                         attention_bias=False, mlp_bias=False, **settings)
    with torch.random.fork_rng(devices=[]):  # initialisation draws from the seed; the global state is kept
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.update(bos_token_id=vocabulary.bos_id, eos_token_id=vocabulary.eos_id,
                                   pad_token_id=vocabulary.pad_id)
    return model, build_tokenizer(vocabulary)


def create_model_folder(preset: str, out: str | os.PathLike, *, seed: int = 0, overwrite: bool = False) -> int:
    """Write a fresh, untrained from-scratch model folder; its number of parameters. ``out`` is new, empty, or
    (with ``overwrite``) a folder create-model made (``outputs.claim_folder``): never a model trained since."""
    check_folder(out, BUILT_MODEL_KIND, "create-model", overwrite=overwrite)  # before any work
    model, tokenizer = create_model(preset, seed=seed)
    claim_folder(out, BUILT_MODEL_KIND, "create-model", overwrite=overwrite)  # --overwrite: only what it writes
    save_model(model, tokenizer, out, {"preset": preset, "seed": seed, "trained": False})
    return parameter_count(model)


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

    def token_budget(self, requested: int | None = None) -> int:
        """``token_budget_of`` this model, whose maximum positions its config says."""
        max_positions = getattr(self.model.config, "max_position_embeddings", None)
        return token_budget_of(self.path, requested, max_positions=max_positions)

    def encoder(self, text_format: TextFormat = TextFormat(), max_len: int | None = None) -> TaskEncoder:
        """A TaskEncoder over this model's tokenizer within ``max_len`` tokens (default: the model's budget).

        The encoder writes grids cell by cell: a tokenizer that merges digits (not vocabulary-shrunk) is refused.
        """
        problem = format_problem(self.tokenizer, text_format)
        if problem is not None:
            raise ValueError(f"the tokenizer of {self.path}: {problem}; shrink its vocabulary first (arc-kit shrink)")
        return TaskEncoder(HuggingFaceTokenizer(self.tokenizer), text_format,
                           self.token_budget() if max_len is None else max_len)


def token_budget_of(path: str | os.PathLike, requested: int | None = None, *, max_positions: int | None = None) -> int:
    """The token budget to use with a model folder: ``requested`` (default ``DEFAULT_TOKEN_BUDGET``, the
    authors' cap for every model) cut to the model's maximum positions (``max_positions``, else its config's,
    or its base's; none when its files do not say), with a one-line warning when cut.

    The ``token_budget`` that training records in arc_kit.json (the length a model trained on) does
    not bound it: a model may be asked for more than it trained on (room for a 30x30 answer, say).
    """
    path = Path(path)
    if max_positions is None:
        config = read_json(path / "config.json")
        if not config and is_delta_folder(path):
            config = read_json(built_folder(read_json(path / DELTA_INDEX)["base"]) / "config.json")
        max_positions = config.get("max_position_embeddings")
    return cut_to_limit(requested or DEFAULT_TOKEN_BUDGET, int(max_positions) if max_positions else None, str(path))


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


def load_encoder(path: str | os.PathLike, text_format: TextFormat = TextFormat(),
                 max_len: int | None = None) -> TaskEncoder:
    """A TaskEncoder from a model folder's tokenizer alone (no weights): for counting tokens.

    A full vocabulary is shrunk as ``load_model`` shrinks it, so that both count and number tokens alike.
    """
    path = checked_model_folder(path)
    tokenizer = load_tokenizer(path)
    keep = None if is_delta_folder(path) or (path / "adapter_config.json").exists() else kept_at_load(path, tokenizer)
    if keep is not None:
        _, tokenizer = shrink_both(None, tokenizer, keep)
    return TaskEncoder(HuggingFaceTokenizer(tokenizer), text_format,
                       token_budget_of(path) if max_len is None else max_len)


def check_loadable(path: str | os.PathLike, settings: LoadSettings = LoadSettings()) -> None:
    """What ``load_model`` would refuse before it reads a weight, asked here without loading (a pool's driver, whose
    workers load the model): the folder, an adapter's base, the weights there and whole; no device's memory (the
    workers' to judge). A base plus a delta is left to its load (its base is the kit's own build)."""
    path = checked_model_folder(path)
    adapter_config = {} if is_delta_folder(path) else read_json(path / "adapter_config.json")
    if not is_delta_folder(path):
        base_path = adapter_base(path, adapter_config, settings.base_model) if adapter_config else path
        check_before_load(base_path, path if adapter_config else None, device=None)


def load_model(path: str | os.PathLike, settings: LoadSettings = LoadSettings(), **overrides) -> LoadedModel:
    """Load a model folder (checkpoint, merged fine-tune, LoRA adapter on a base, or base plus delta).

    Keyword overrides replace fields of ``settings``: ``load_model(path, device="cpu")``.
    """
    settings = settings.replace(**overrides)
    plan = _plan_load(path, settings)
    tokenizer = load_tokenizer(plan.tokenizer_path)  # first: a broken tokenizer file is named before weights load
    plain = not (plan.is_delta or plan.is_adapter)
    keep = kept_at_load(plan.path, tokenizer) if plain else None  # a tokenizer that cannot be made to fit: now
    if plan.backend == "unsloth":
        model, tokenizer = _load_with_unsloth(plan, settings)
    else:
        model = _load_with_transformers(plan, settings)
    if keep is not None:  # a full vocabulary: cut to the authors' set in memory, nothing written
        model, tokenizer = shrink_both(model, tokenizer, keep)
        logger.info("%s: vocabulary shrunk as it loaded, to %d tokens (the authors' set)", plan.path, len(keep))
    model.eval()
    return LoadedModel(model, tokenizer, plan.path, plan.device, plan.dtype, plan.backend, plan.is_adapter)


@dataclass(frozen=True)
class _LoadPlan:
    """What ``load_model`` settles before it reads any weights: the folders, the device, dtype and backend."""

    path: Path  # the model folder asked for
    base_path: Path  # where the weights are read: the folder itself, an adapter's base or a delta's built base
    tokenizer_path: Path
    device: str
    dtype: Any
    backend: str
    is_delta: bool
    is_adapter: bool
    quantized_on_disk: bool


def _plan_load(path: str | os.PathLike, settings: LoadSettings) -> _LoadPlan:
    """The folders, device, dtype and backend to load with; every refusal raised before a weight is read."""
    path = checked_model_folder(path)
    device = devices.resolve_device(settings.device)
    dtype = devices.resolve_dtype(settings.dtype, device)
    backend = devices.resolve_backend(settings.backend, device)
    delta = is_delta_folder(path)
    adapter_config = {} if delta else read_json(path / "adapter_config.json")
    base_path = path
    if delta:
        base_path = Path(settings.base_model) if settings.base_model else build_base(  # the base given, or built
            read_json(path / DELTA_INDEX)["base"], weights=settings.base_weights,
            download=settings.download_base)
        if backend == "unsloth" and settings.backend == "unsloth":
            raise devices.UnsupportedSetupError(f"{path} is a base plus a delta, which loads through transformers; "
                                                "use backend='transformers' (or 'auto')")
        backend = "transformers"
    elif adapter_config:
        base_path = adapter_base(path, adapter_config, settings.base_model)
    quantized_on_disk = "quantization_config" in read_json(base_path / "config.json")
    _check_quantization(path, delta, quantized_on_disk, settings, device)
    if not delta:  # a delta's base is the kit's own build
        check_before_load(base_path, path if adapter_config else None, device, dtype.itemsize,
                          four_bit=quantized_on_disk or settings.quantization == "4bit")
    if not device.startswith("cuda") and backend == "unsloth":
        raise devices.UnsupportedSetupError("unsloth runs on a GPU only; use device='cuda' or backend='transformers'")
    tokenizer_path = path if (path / "tokenizer_config.json").exists() else base_path
    return _LoadPlan(path, base_path, tokenizer_path, device, dtype, backend, delta, bool(adapter_config),
                     quantized_on_disk)


def adapter_base(path: Path, adapter_config: dict, named: str | None = None,
                 advice: str = "pass base_model=...") -> Path:
    """The base model folder the adapter in ``path`` goes on: ``named``, else the one its config names;
    FileNotFoundError in one line ending in ``advice`` when that is no local model folder, and the
    refusal of ``refuse_custom_code`` for a base that asks to run code of its own."""
    named = named or adapter_config.get("base_model_name_or_path")
    if not named:  # never Path(""), which is the working folder
        raise FileNotFoundError(f"the adapter in {path} names no base model; {advice}")
    base_path = Path(named)
    if not (base_path / "config.json").exists():
        raise FileNotFoundError(f"the adapter in {path} needs its base model, {str(base_path)!r} is not a local "
                                f"model folder; {advice}")
    refuse_custom_code(base_path)  # the adapter's own folder was checked by checked_model_folder
    return base_path


def _check_quantization(path: Path, delta: bool, quantized_on_disk: bool, settings: LoadSettings,
                        device: str) -> None:
    """Refuse a 4-bit delta; check that 4-bit can run here (quantizing as it loads needs a GPU) when it is asked for."""
    if delta and (settings.quantization or quantized_on_disk):
        raise devices.UnsupportedSetupError(f"{path} is a base plus a delta, merged on load; 4-bit needs a merged "
                                            "folder first (arc-kit base merge)")
    if quantized_on_disk:
        devices.require_4bit(on_cpu=not device.startswith("cuda"))
        if not device.startswith("cuda"):
            logger.warning("%s: %s", path, devices.FOUR_BIT_ON_CPU)
    elif settings.quantization == "4bit":
        devices.require_4bit()


def _load_with_unsloth(plan: _LoadPlan, settings: LoadSettings):
    """(model, tokenizer) through unsloth's ``FastLanguageModel``."""
    from unsloth import FastLanguageModel

    return FastLanguageModel.from_pretrained(
        str(plan.path), dtype=plan.dtype, load_in_4bit=settings.quantization == "4bit" or plan.quantized_on_disk,
        max_seq_length=settings.max_seq_length, local_files_only=True, trust_remote_code=False)


def _load_with_transformers(plan: _LoadPlan, settings: LoadSettings):
    """The model through transformers (its dtype, attention, 4-bit quantization), with a delta merged in or an
    adapter put on, on the plan's device."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    arguments: dict[str, Any] = dict(dtype=plan.dtype, attn_implementation=settings.attention, local_files_only=True)
    if settings.quantization == "4bit" and not plan.quantized_on_disk:
        arguments["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=plan.dtype)
    placed = plan.device.startswith("cuda") or plan.quantized_on_disk  # 4-bit weights are placed as they load
    if placed:
        arguments["device_map"] = {"": plan.device}
    model = read_weights(AutoModelForCausalLM, plan.base_path, arguments)
    if plan.is_delta:
        model = apply_delta(model, plan.path)
    elif plan.is_adapter:  # merged into 16- or 32-bit weights (a plain model, which the engine runs and test-time
        from peft import PeftModel  # training puts its own adapter on); kept apart on 4-bit ones (rounding would lose it)

        with quiet_peft(model):
            model = PeftModel.from_pretrained(model, plan.path, is_trainable=False)
        if not (plan.quantized_on_disk or settings.quantization):
            model = model.merge_and_unload()
    if not placed:
        model = model.to(plan.device)
    return keep_four_bit_layout(model)


def keep_four_bit_layout(model):
    """``model`` with its bitsandbytes 4-bit layers kept in their stored layout on the CPU.

    bitsandbytes 0.50, on a CPU with AVX512-BF16, repacks a 4-bit layer's weight in place for its own
    CPU kernel at the layer's first inference forward: the engine, which reads the stored layout,
    would then read another one, and the repacking fails outright for a layer narrower than one
    quantization block. The flag it checks is turned off; other layers and machines are untouched.
    """
    for module in model.modules():
        if getattr(module, "support_avx512bf16_for_cpu", False):
            module.support_avx512bf16_for_cpu = False
    return model


# ---------------------------------------------------------------------------------------------
# A named base plus what training added.

MERGED_SHARD_SIZE = "5GB"  # a merged folder in as few files as it needs (the Hugging Face Hub's limit for one file)
FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # safetensors' names (pickles: torch's)


def merge_delta(path: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write a base-plus-delta folder as an ordinary, merged model folder ``out``: new, empty, or (with
    ``overwrite``) one that base merge made (``outputs.claim_folder``); never the source's own folder. The weights
    are merged in float32 and stored once in the type the source stores them in (``stored_dtype``: bf16 in, bf16
    out), in as few files as they need."""
    import torch

    if inside(path, out):
        raise OutputRefused(f"{path} lies inside {out}: writing there would replace the model being merged; give "
                            "another destination")
    check_folder(out, MODEL_KIND, "base merge", overwrite=overwrite, option="the destination")
    loaded = load_model(path, device="cpu")
    dtype = stored_dtype(Path(path))
    claim_folder(out, MODEL_KIND, "base merge", overwrite=overwrite, option="the destination")
    info = read_json(Path(path) / "arc_kit.json")
    return save_model(loaded.model.to(getattr(torch, dtype)), loaded.tokenizer, out,
                      {**info, "merged_from": str(path)}, max_shard_size=MERGED_SHARD_SIZE)


def stored_dtype(path: Path) -> str:
    """The narrowest float type of the weights a folder stands for, as stored: a delta's shards and its built base's,
    an adapter's and its base's, or the folder's own ("float32" where it stores none); a tie goes to the base's."""
    if is_delta_folder(path):
        folders = [(built_folder(read_json(path / DELTA_INDEX)["base"]), "model"), (path, "model")]
    elif (path / "adapter_config.json").exists():
        folders = [(adapter_base(path, read_json(path / "adapter_config.json")), "model"), (path, "adapter_model")]
    else:
        folders = [(path, "model")]
    found = [FLOAT_TYPES.get(kind, kind) for folder, stem in folders
             for kind, _ in weight_files(folder, stem).tensors.values()]
    floats = [kind for kind in found if kind in FLOAT_TYPES.values()] or ["float32"]
    return min(floats, key=lambda kind: kind == "float32")  # the first of the narrowest: a tie goes to the base's


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def model_info(loaded: LoadedModel) -> dict:
    """What a run should record about the model it used."""
    return {"path": str(loaded.path), "device": loaded.device, "dtype": str(loaded.dtype), "backend": loaded.backend,
            "adapter": loaded.is_adapter, "parameters": parameter_count(loaded.model),
            "arc_kit": read_json(loaded.path / "arc_kit.json").get("preset")}


__all__ = ["DEFAULT_TOKEN_BUDGET", "MODEL_PRESETS", "LoadSettings", "LoadedModel", "ModelFolderError", "adapter_base",
           "apply_delta", "build_tokenizer", "check_loadable", "create_model", "create_model_folder", "cut_to_limit",
           "default_model_path", "is_delta_folder", "load_encoder", "load_model", "merge_delta", "model_info",
           "parameter_count", "save_delta", "save_model", "token_budget_of"]
