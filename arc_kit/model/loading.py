"""Models: building the from-scratch presets with the 64-symbol vocabulary, and loading any causal LM offline.

``load_model`` reads the three kinds of model folder that ``description`` tells apart: an ordinary Hugging Face
folder (a from-scratch preset, a merged fine-tune, a shrunk pretrained model), a peft LoRA adapter on the base
folder its config names (merged in, except on 4-bit weights), and a named base plus what training added
(``deltas``), the base built or found in the cache (``bases``) and the delta merged in, so that the result is
a plain model (``merge_delta`` writes it out as an ordinary folder). The folder is what
``description.read_model_folder`` says of it (read once per process: its kind, base, tokenizer, token budget);
before a weight is read, what would fail or hang is refused in one line (its weights checked whole, their size
against the device's memory); a full-vocabulary folder is shrunk to the authors' set as it loads
(``shrinking``: nothing written); weights stored in 4 bits load on the CPU too. This module knows how to build,
save and load models (the names of ``folders`` and ``deltas`` that others need are handed on from here); it
knows nothing of tasks beyond the vocabulary, nor of training.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit.model import devices
from arc_kit.model.bases import build_base
from arc_kit.model.checks import check_fits_machine
from arc_kit.model.deltas import apply_delta, save_delta
from arc_kit.model.description import ModelFolder, read_model_folder
from arc_kit.model.memory import weight_bytes
from arc_kit.model.optimization import quiet_peft
from arc_kit.model.folders import (
    BUILT_MODEL_KIND,
    MODEL_KIND,
    ModelFolderError,
    default_model_path,
    is_delta_folder,
    read_weights,
    save_model,
)
from arc_kit.outputs import OutputRefused, check_folder, claim_folder, inside
from arc_kit.model.shrinking import format_problem, shrink_both, shrink_model
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
    """A model ready for use, with its tokenizer, its folder's description and what it was loaded as."""

    model: Any
    tokenizer: Any  # the transformers tokenizer
    folder: ModelFolder  # what the folder is (``description.read_model_folder``): its kind, base, token budget
    device: str
    dtype: Any
    backend: str

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def is_adapter(self) -> bool:
        return self.folder.is_adapter

    def token_budget(self, requested: int | None = None) -> int:
        """The folder's token budget (``ModelFolder.token_budget``): ``requested`` cut to what the model takes."""
        return self.folder.token_budget(requested)

    def encoder(self, text_format: TextFormat = TextFormat(), max_len: int | None = None) -> TaskEncoder:
        """A TaskEncoder over this model's tokenizer within ``max_len`` tokens (default: the model's budget).

        The encoder writes grids cell by cell: a tokenizer that merges digits (not vocabulary-shrunk) is refused.
        """
        problem = format_problem(self.tokenizer, text_format)
        if problem is not None:
            raise ValueError(f"the tokenizer of {self.path}: {problem}; shrink its vocabulary first (arc-kit shrink)")
        return TaskEncoder(HuggingFaceTokenizer(self.tokenizer), text_format,
                           self.token_budget() if max_len is None else max_len)


def load_model(path: str | os.PathLike, settings: LoadSettings = LoadSettings(), **overrides) -> LoadedModel:
    """Load a model folder (checkpoint, merged fine-tune, LoRA adapter on a base, or base plus delta).

    Keyword overrides replace fields of ``settings``: ``load_model(path, device="cpu")``.
    """
    settings = settings.replace(**overrides)
    plan = _plan_load(path, settings)
    folder = plan.folder
    keep = folder.kept_ids  # first: a broken tokenizer file, or one that cannot be made to fit, named before weights
    if plan.backend == "unsloth":
        model, tokenizer = _load_with_unsloth(plan, settings)
        if keep is not None:
            model, tokenizer = shrink_both(model, tokenizer, keep)
    else:
        model = _load_with_transformers(plan, settings)
        tokenizer = folder.tokenizer  # the folder's, shrunk as the model is
        if keep is not None:
            shrink_model(model, keep)
    if keep is not None:  # a full vocabulary: cut to the authors' set in memory, nothing written
        logger.info("%s: vocabulary shrunk as it loaded, to %d tokens (the authors' set)", folder.path, len(keep))
    model.eval()
    return LoadedModel(model, tokenizer, folder, plan.device, plan.dtype, plan.backend)


@dataclass(frozen=True)
class _LoadPlan:
    """What ``load_model`` settles before it reads any weights: the folder (its base built), device, dtype, backend."""

    folder: ModelFolder  # read again once a delta's base is built: its config is then the base's
    device: str
    dtype: Any
    backend: str


def _plan_load(path: str | os.PathLike, settings: LoadSettings) -> _LoadPlan:
    """The folder, device, dtype and backend to load with; every refusal raised before a weight is read."""
    folder = read_model_folder(path, settings.base_model)
    device = devices.resolve_device(settings.device)
    dtype = devices.resolve_dtype(settings.dtype, device)
    backend = devices.resolve_backend(settings.backend, device)
    if folder.is_delta:
        if not settings.base_model:  # the base given, or built (found built) here
            build_base(folder.base_name, weights=settings.base_weights, download=settings.download_base)
            folder = read_model_folder(path)
        if backend == "unsloth" and settings.backend == "unsloth":
            raise devices.UnsupportedSetupError(f"{folder.path} is a base plus a delta, which loads through "
                                                "transformers; use backend='transformers' (or 'auto')")
        backend = "transformers"
    base = folder.base()  # an adapter's: there, or refused in one line
    _check_quantization(folder, settings, device)
    if not folder.is_delta:  # a delta's base is the kit's own build
        architecture = folder.check_weights()
        four_bit = folder.quantized_on_disk or settings.quantization == "4bit" or architecture.four_bit
        check_fits_machine(weight_bytes(architecture, dtype.itemsize, four_bit),
                           f"the model in {base} ({dtype.itemsize} bytes a weight)", device)
    if not device.startswith("cuda") and backend == "unsloth":
        raise devices.UnsupportedSetupError("unsloth runs on a GPU only; use device='cuda' or backend='transformers'")
    return _LoadPlan(folder, device, dtype, backend)


def _check_quantization(folder: ModelFolder, settings: LoadSettings, device: str) -> None:
    """Refuse a 4-bit delta; check that 4-bit can run here (quantizing as it loads needs a GPU) when it is asked for."""
    if folder.is_delta and (settings.quantization or folder.quantized_on_disk):
        raise devices.UnsupportedSetupError(f"{folder.path} is a base plus a delta, merged on load; 4-bit needs a "
                                            "merged folder first (arc-kit base merge)")
    if folder.quantized_on_disk:
        devices.require_4bit(on_cpu=not device.startswith("cuda"))
        if not device.startswith("cuda"):
            logger.warning("%s: %s", folder.path, devices.FOUR_BIT_ON_CPU)
    elif settings.quantization == "4bit":
        devices.require_4bit()


def _load_with_unsloth(plan: _LoadPlan, settings: LoadSettings):
    """(model, tokenizer) through unsloth's ``FastLanguageModel``."""
    from unsloth import FastLanguageModel

    return FastLanguageModel.from_pretrained(
        str(plan.folder.path), dtype=plan.dtype,
        load_in_4bit=settings.quantization == "4bit" or plan.folder.quantized_on_disk,
        max_seq_length=settings.max_seq_length, local_files_only=True, trust_remote_code=False)


def _load_with_transformers(plan: _LoadPlan, settings: LoadSettings):
    """The model through transformers (its dtype, attention, 4-bit quantization), with a delta merged in or an
    adapter put on, on the plan's device."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    folder = plan.folder
    arguments: dict[str, Any] = dict(dtype=plan.dtype, attn_implementation=settings.attention, local_files_only=True)
    if settings.quantization == "4bit" and not folder.quantized_on_disk:
        arguments["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=plan.dtype)
    placed = plan.device.startswith("cuda") or folder.quantized_on_disk  # 4-bit weights are placed as they load
    if placed:
        arguments["device_map"] = {"": plan.device}
    model = read_weights(AutoModelForCausalLM, folder.base(), arguments)
    if folder.is_delta:
        model = apply_delta(model, folder.path, folder.own_weights.files)
    elif folder.is_adapter:  # merged into 16- or 32-bit weights (a plain model, which the engine runs and test-time
        from peft import PeftModel  # training puts its own adapter on); kept apart on 4-bit ones (rounding would lose it)

        with quiet_peft(model):
            model = PeftModel.from_pretrained(model, folder.path, is_trainable=False)
        if not (folder.quantized_on_disk or settings.quantization):
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


def merge_delta(path: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write a base-plus-delta folder as an ordinary, merged model folder ``out``: new, empty, or (with
    ``overwrite``) one that base merge made (``outputs.claim_folder``); never the source's own folder. The weights
    are merged in float32 and stored once in the type the source stores them in (``ModelFolder.stored_dtype``: bf16
    in, bf16 out), in as few files as they need."""
    import torch

    if inside(path, out):
        raise OutputRefused(f"{path} lies inside {out}: writing there would replace the model being merged; give "
                            "another destination")
    check_folder(out, MODEL_KIND, "base merge", overwrite=overwrite, option="the destination")
    loaded = load_model(path, device="cpu")
    dtype = loaded.folder.stored_dtype
    claim_folder(out, MODEL_KIND, "base merge", overwrite=overwrite, option="the destination")
    return save_model(loaded.model.to(getattr(torch, dtype)), loaded.tokenizer, out,
                      {**loaded.folder.record, "merged_from": str(path)}, max_shard_size=MERGED_SHARD_SIZE)


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def model_info(loaded: LoadedModel) -> dict:
    """What a run should record about the model it used."""
    return {"path": str(loaded.path), "device": loaded.device, "dtype": str(loaded.dtype), "backend": loaded.backend,
            "adapter": loaded.is_adapter, "parameters": parameter_count(loaded.model),
            "arc_kit": loaded.folder.record.get("preset")}


__all__ = ["DEFAULT_TOKEN_BUDGET", "MODEL_PRESETS", "LoadSettings", "LoadedModel", "ModelFolderError", "apply_delta",
           "build_tokenizer", "create_model", "create_model_folder", "default_model_path", "is_delta_folder",
           "load_model", "merge_delta", "model_info", "parameter_count", "save_delta", "save_model"]
