"""Models: small from-scratch presets with the 64-symbol vocabulary, and loading any causal LM offline.

A model directory is always an ordinary Hugging Face one (``config.json``, safetensors weights,
tokenizer files), so a from-scratch preset, a merged fine-tune, a vocabulary-shrunk pretrained
model and a base model plus a LoRA adapter all load through ``load_model``. This module knows
how to build and load models; it knows nothing of tasks beyond the vocabulary, nor of training.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit import devices
from arc_kit.text_format import BOS, EOS, PAD, HuggingFaceTokenizer, TaskEncoder, TextFormat, Vocabulary

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
                 max_positions: int = 8192, **overrides):
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
    max_seq_length: int = 8192  # unsloth wants to know


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

    def encoder(self, text_format: TextFormat = TextFormat(), max_len: int = 8192) -> TaskEncoder:
        """A TaskEncoder over this model's tokenizer (fails clearly if it is not vocabulary-shrunk)."""
        tokenizer = self.grid_tokenizer
        # The encoder writes grids cell by cell; a tokenizer that merges digits would read them otherwise.
        rows = ["0123456789", "9876543210", "00112233445566778899"]
        sample = text_format.row_separator.join(rows)
        expected = sum(map(len, rows)) + (len(rows) - 1) * len(tokenizer.encode(text_format.row_separator))
        found = len(tokenizer.encode(sample))
        if found != expected:
            raise ValueError(f"the tokenizer of {self.path} writes {sample!r} as {found} tokens, not one per digit; "
                             "shrink its vocabulary first (arc-kit shrink)")
        return TaskEncoder(tokenizer, text_format, max_len)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def load_model(path: str | os.PathLike, settings: LoadSettings = LoadSettings(), **overrides) -> LoadedModel:
    """Load a model folder (checkpoint, merged fine-tune, or LoRA adapter on a base) with its tokenizer.

    Keyword overrides replace fields of ``settings``: ``load_model(path, device="cpu")``.
    """
    import dataclasses

    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = dataclasses.replace(settings, **overrides)
    path = Path(path)
    if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"{path} is not a model folder (no config.json or adapter_config.json)")
    device = devices.resolve_device(settings.device)
    dtype = devices.resolve_dtype(settings.dtype, device)
    backend = devices.resolve_backend(settings.backend)
    adapter_config = _read_json(path / "adapter_config.json")
    base_path = path
    if adapter_config:
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
        model = AutoModelForCausalLM.from_pretrained(base_path, **arguments)
        if adapter_config:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, path, is_trainable=False)
        if not device.startswith("cuda"):
            model = model.to(device)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    model.eval()
    return LoadedModel(model, tokenizer, path, device, dtype, backend, bool(adapter_config))


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def model_info(loaded: LoadedModel) -> dict:
    """What a run should record about the model it used."""
    return {"path": str(loaded.path), "device": loaded.device, "dtype": str(loaded.dtype), "backend": loaded.backend,
            "adapter": loaded.is_adapter, "parameters": parameter_count(loaded.model),
            "arc_kit": _read_json(loaded.path / "arc_kit.json").get("preset")}


__all__ = ["PRESETS", "LoadSettings", "LoadedModel", "build_tokenizer", "create_model", "load_model",
           "model_info", "parameter_count", "save_model"]
