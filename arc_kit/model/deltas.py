"""A named base plus what training added: the delta's shards, written after training and merged in on load.

``save_delta`` writes what a peft model adds to a base of ``bases.BASES`` (the LoRA adapter and the
fully trained embedding and head rows) as a peft adapter config and safetensors shards of under
16 MiB, with ``delta.json`` naming the base and the shards; ``apply_delta`` puts the shards that
``description`` read from ``delta.json`` back on the built base. The adapter config holds only the keys that
the oldest peft the kit supports knows (``portable_adapter_config``): a newer peft writes keys of its own
features, which an older one (Kaggle's image has 0.18.1) reads with a warning to upgrade. This module knows
the delta's files; it knows nothing of where the base comes from (``bases``, ``loading``), of devices, nor of
training.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from arc_kit.model.folders import DELTA_INDEX, ModelFolderError, first_line, read_json
from arc_kit.model.optimization import quiet_peft
from arc_kit.outputs import remove_entry, replace_file, staged_into

DELTA_SHARD_BYTES = 15 * 2**20  # each shard stays under 16 MiB (Kaggle, transfers, git)
SHARD_NAME = re.compile(r"delta-[0-9]{5}-of-[0-9]{5}\.safetensors")  # the delta's shards, by their exact form
# LoraConfig's fields in peft 0.17.0, the oldest peft the kit supports (pyproject: peft>=0.17), read from
# its source (peft/tuners/lora/config.py and peft/config.py), less runtime_config, which peft never saves.
# peft 0.18.1 (Kaggle's image) knows all of them and adds alora_invocation_tokens, arrow_config,
# ensure_weight_tying and peft_version; 0.21 adds kasa_config, lora_ga_config, monteclora_config,
# use_bdlora and velora_config.
OLDEST_PEFT = "0.17.0"
OLDEST_PEFT_LORA_KEYS = frozenset((
    "alpha_pattern", "auto_mapping", "base_model_name_or_path", "bias", "corda_config", "eva_config",
    "exclude_modules", "fan_in_fan_out", "inference_mode", "init_lora_weights", "layer_replication",
    "layers_pattern", "layers_to_transform", "loftq_config", "lora_alpha", "lora_bias", "lora_dropout",
    "megatron_config", "megatron_core", "modules_to_save", "peft_type", "qalora_group_size", "r", "rank_pattern",
    "revision", "target_modules", "target_parameters", "task_type", "trainable_token_indices", "use_dora",
    "use_qalora", "use_rslora"))


def save_delta(model, tokenizer, path: str | os.PathLike, base: str, info: dict | None = None,
               max_shard_bytes: int = DELTA_SHARD_BYTES, dtype=None) -> Path:
    """Write what peft ``model`` adds to the built base ``base`` (a name of ``bases.BASES``): adapter config,
    weight shards, tokenizer, info; ``dtype`` (a torch dtype) stores the weights in another precision (default: as
    they are)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    path = Path(path)
    for old in path.glob("delta-*-of-*.safetensors"):  # an earlier save's shards (its count may differ)
        if SHARD_NAME.fullmatch(old.name):
            remove_entry(old)
    state = get_peft_model_state_dict(model)
    shards, size = [{}], 0  # a peft model's state is never empty
    for name, tensor in state.items():
        tensor = tensor.detach().to("cpu", dtype=dtype or tensor.dtype).contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes > max_shard_bytes:
            raise ValueError(f"{name} alone holds {nbytes / 2**20:.1f} MiB, over the shard size")
        if size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    names = [f"delta-{number:05d}-of-{len(shards):05d}.safetensors" for number in range(1, len(shards) + 1)]
    with staged_into(path) as staging:  # every file renamed into place: a link there is never followed
        for name, shard in zip(names, shards):
            save_file(shard, str(staging / name), metadata={"format": "pt"})
        config = model.peft_config[model.active_adapter]
        config.base_model_name_or_path = None  # the base is named in delta.json, built where the delta is used
        config.save_pretrained(str(staging))
        make_adapter_config_portable(staging)
        tokenizer.save_pretrained(staging)
    replace_file(path / DELTA_INDEX, json.dumps({"base": base, "shards": names}, indent=2) + "\n")
    if info is not None:
        replace_file(path / "arc_kit.json", json.dumps({**info, "base": base}, indent=2, default=str) + "\n")
    return path


def portable_adapter_config(saved: dict, defaults: dict) -> dict:
    """``saved`` (a LoraConfig's dict) with only the keys peft ``OLDEST_PEFT`` knows, sorted; ``defaults`` are
    the installed peft's default values. ValueError when a key left out is set otherwise than its default:
    an older peft would then read an adapter of another kind without a word."""
    dropped = {key: value for key, value in saved.items() if key not in OLDEST_PEFT_LORA_KEYS}
    changed = sorted(key for key, value in dropped.items() if key != "peft_version" and value != defaults.get(key))
    if changed:
        raise ValueError(f"the adapter sets {', '.join(changed)}, which peft {OLDEST_PEFT} (the oldest the kit "
                         "supports) cannot read: train without it, or raise the kit's peft requirement")
    return {key: sorted(value) if isinstance(value, (set, frozenset)) else value
            for key, value in sorted(saved.items()) if key in OLDEST_PEFT_LORA_KEYS}


def make_adapter_config_portable(folder: str | os.PathLike) -> Path:
    """Rewrite the ``adapter_config.json`` that peft saved in ``folder`` so that peft ``OLDEST_PEFT`` and every
    later one read it without a warning (``portable_adapter_config``); the weights beside it are not touched."""
    from peft import LoraConfig

    target = Path(folder) / "adapter_config.json"
    saved = portable_adapter_config(read_json(target), LoraConfig().to_dict())
    return replace_file(target, json.dumps(saved, indent=2) + "\n")


def apply_delta(model, path: str | os.PathLike, shards: Sequence[Path]):
    """The base ``model`` with the delta of folder ``path`` merged into its weights: a plain model. ``shards``: the
    files its delta.json names (``description.ModelFolder.own_weights``, which checks their names)."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(path)
    config = LoraConfig.from_pretrained(str(path))  # peft reads the adapter's config: no code of the folder's
    state = {}
    for shard in shards:
        try:
            state.update(load_file(str(shard)))
        except Exception as error:  # safetensors raises its own error types for damaged files
            raise ModelFolderError(f"cannot read {shard}: {first_line(error)}") from None
    with quiet_peft(model):
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
    return wrapped.merge_and_unload()
