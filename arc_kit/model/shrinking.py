"""Shrinking a pretrained model's vocabulary to the tokens the text format needs.

A pretrained tokenizer merges digits into multi-digit tokens, which makes grids needlessly hard.
Shrinking keeps a small set of single-character tokens plus the special tokens, selects those rows
of the input embeddings and of the output head, rewrites the tokenizer to the new ids (with no
merges, so text can only split into those characters) and remaps every token id in the model's
config and generation config. The result is an ordinary model folder.

Two kept sets (``kept=``):
- ``"authors"`` (the default): what the method's authors kept, so that a model shrunk here is
  id-compatible with their released adapters: the characters A-Z, a-z, 0-9, ``!?.:,;*+/-=`` and the
  newline, every special token (the post-processor's too) and every ``*_token_id`` of the configs,
  minus the unknown token; the tokenizer's normaliser is dropped. Ids keep their old order.
- ``"minimal"``: only the characters the text format writes, plus the special tokens.

A tied output head is untied: with a few dozen rows left the copy costs nothing,
and the paper's recipe trains the embeddings and the head as separate modules.

Supported tokenizers: fast tokenizers whose model is BPE (byte-level as in Llama 3, Mistral NeMo,
Qwen, GPT-2, SmolLM2) or WordLevel, where each needed character is one token. Anything else fails
with a message naming the characters that could not be kept. The authors' released checkpoints are
already shrunk and need none of this; a folder that is not is shrunk in memory as it loads
(``kept_at_load``, ``loading``). Knows nothing of training or tasks.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from arc_kit.data.jsonio import check_regular_file
from arc_kit.model import devices
from arc_kit.model.folders import JSON_BYTES, MODEL_KIND, checked_configs, first_line, load_tokenizer
from arc_kit.names import listed
from arc_kit.outputs import OutputRefused, check_folder, claim_folder, inside, replace_file, small_json, staged_into
from arc_kit.text import TextFormat

KEPT_SETS = ("authors", "minimal")
AUTHORS_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!?.:,;*+/-=\n"


def needed_characters(text_format: TextFormat = TextFormat()) -> list[str]:
    """Every character the format can write, digits included, in a stable order."""
    text = "0123456789" + text_format.row_separator + text_format.end_of_example + text_format.input_prefix + \
        text_format.output_prefix + text_format.preprompt
    return sorted(set(text))


def _single_token(tokenizer, character: str) -> tuple[int | None, str]:
    """(id, '') when ``character`` is exactly one token of its own, else (None, why not)."""
    try:
        ids = tokenizer(character, add_special_tokens=False)["input_ids"]
    except Exception as error:  # a WordLevel tokenizer without an unknown token raises for a missing word
        return None, f"{character!r} -> no token (the tokenizer said: {first_line(error)[:80]})"
    if len(ids) != 1:
        return None, f"{character!r} -> {len(ids)} tokens"
    if ids[0] == tokenizer.unk_token_id or tokenizer.decode(ids) != character:
        # The unknown token, or a token that also carries a prefix (such as a space), is no stand-in.
        return None, f"{character!r} -> {tokenizer.convert_ids_to_tokens(ids[0])!r}, not the character"
    return ids[0], ""


def _post_processor_special_ids(node: Any) -> set[int]:
    """Every id named in a tokenizer.json post-processor's special tokens, recursively."""
    if isinstance(node, list):
        return set().union(*map(_post_processor_special_ids, node))
    if not isinstance(node, dict):
        return set()
    special = node.get("special_tokens") if isinstance(node.get("special_tokens"), dict) else {}
    found = {int(i) for entry in special.values() for i in entry.get("ids", [])}
    return found.union(*map(_post_processor_special_ids, node.values()))


def _token_id_fields(config) -> dict[str, Any]:
    """The ``*_token_id`` fields of a config (a transformers config or a dict; anything else has none) that are set."""
    fields = config.to_dict() if hasattr(config, "to_dict") else config
    return {key: value for key, value in fields.items() if key.endswith("token_id") and value is not None} \
        if isinstance(fields, dict) else {}


def tokens_to_keep(tokenizer, text_format: TextFormat = TextFormat(), kept: str = "authors",
                   configs: tuple = ()) -> list[int]:
    """Old ids to keep, ascending: the module docstring's set ``kept``, the ids of ``configs`` (the model's config
    and generation config) among them; ValueError naming the characters the format writes that are not one token."""
    if kept not in KEPT_SETS:
        raise ValueError(f"unknown kept set {kept!r}; expected one of {KEPT_SETS}")
    if kept == "authors" and tokenizer.backend_tokenizer.normalizer is not None:
        tokenizer = copy.deepcopy(tokenizer)  # a normaliser such as Llama 2's (prepend, spaces as "▁") makes "A"
        tokenizer.backend_tokenizer.normalizer = None  # read as "▁A": the authors drop it before shrinking
    required = [_single_token(tokenizer, character) for character in needed_characters(text_format)]
    failures = [why for token, why in required if token is None]
    if failures:
        raise ValueError("cannot shrink this tokenizer: these characters are not single tokens: " + listed(failures))
    keep = {token for token, _ in required} | set(tokenizer.all_special_ids)
    if kept == "authors":
        keep |= {_single_token(tokenizer, character)[0] for character in AUTHORS_CHARACTERS}  # None where not one
        keep |= _post_processor_special_ids(json.loads(tokenizer.backend_tokenizer.to_str()).get("post_processor"))
        values = [value for config in configs for value in _token_id_fields(config).values()]  # ints or lists
        keep |= {int(v) for value in values for v in (value if isinstance(value, list) else [value]) if v is not None}
        keep.discard(tokenizer.unk_token_id)
    keep.discard(None)
    return sorted(keep)


def _remap_ids(value: Any, mapping: dict[int, int]) -> Any:
    """A token id (or list of ids) in the new numbering; None where a token was not kept."""
    if isinstance(value, int):
        return mapping.get(value)
    if isinstance(value, list):
        mapped = [mapping.get(v) for v in value]
        return [v for v in mapped if v is not None] or None
    return value


def _remap_post_processor(node: Any, mapping: dict[int, int]) -> Any:
    """Rewrite the special-token ids inside a tokenizer.json post-processor, recursively."""
    if isinstance(node, list):
        return [_remap_post_processor(item, mapping) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: value if key == "special_tokens" else _remap_post_processor(value, mapping)
            for key, value in node.items()}
    if isinstance(node.get("special_tokens"), dict):
        node["special_tokens"] = {name: {**entry, "ids": ids} for name, entry in node["special_tokens"].items()
                                  if (ids := [mapping[i] for i in entry.get("ids", []) if i in mapping])}
    for key in ("sep", "cls"):  # BERT/RoBERTa-style processors: [token, id]
        if isinstance(node.get(key), list) and len(node[key]) == 2 and node[key][1] in mapping:
            node[key] = [node[key][0], mapping[node[key][1]]]
    return node


def shrink_tokenizer(tokenizer, keep: list[int], drop_normalizer: bool = True):
    """A new fast tokenizer holding only the ``keep`` tokens, renumbered 0..len(keep)-1, with no merges."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    mapping = {old: new for new, old in enumerate(keep)}
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    if drop_normalizer:
        data["normalizer"] = None
    model = data["model"]
    if model["type"] not in ("BPE", "WordLevel"):
        raise ValueError(f"cannot shrink a {model['type']} tokenizer; BPE and WordLevel are supported")
    model["vocab"] = {token: mapping[old] for token, old in model["vocab"].items() if old in mapping}
    if model["type"] == "BPE":
        model["merges"] = []
    if model.get("unk_token") is not None and model["unk_token"] not in model["vocab"]:
        model["unk_token"] = None
    data["added_tokens"] = [{**entry, "id": mapping[entry["id"]]} for entry in data.get("added_tokens", [])
                            if entry["id"] in mapping]
    if data.get("post_processor") is not None:
        data["post_processor"] = _remap_post_processor(data["post_processor"], mapping)
    backend = Tokenizer.from_str(json.dumps(data))
    special = {name: token for name in ("bos_token", "eos_token", "pad_token", "unk_token")
               if (token := getattr(tokenizer, name, None)) is not None
               and tokenizer.convert_tokens_to_ids(token) in mapping}
    shrunk = PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False,
                                     model_max_length=tokenizer.model_max_length, **special)
    post_processor = shrunk.backend_tokenizer.post_processor  # the original's, remapped
    for flag in ("add_bos_token", "add_eos_token"):
        if hasattr(tokenizer, flag):
            setattr(shrunk, flag, getattr(tokenizer, flag))
    if post_processor is not None:  # transformers 5 rebuilds it from the flags alone when they are set
        shrunk.backend_tokenizer.post_processor = post_processor
    return shrunk


def shrink_model(model, keep: list[int]) -> None:
    """Keep only the ``keep`` rows of the input embeddings and output head (a tied head untied: the module
    docstring); remap config token ids."""
    import torch

    index = torch.tensor(keep, dtype=torch.long)
    mapping = {old: new for new, old in enumerate(keep)}
    embeddings = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embeddings.weight
    with torch.no_grad():
        new_embeddings = torch.nn.Embedding(len(keep), embeddings.embedding_dim, padding_idx=None,
                                            device=embeddings.weight.device, dtype=embeddings.weight.dtype)
        new_embeddings.weight.copy_(embeddings.weight.index_select(0, index.to(embeddings.weight.device)))
        model.set_input_embeddings(new_embeddings)
        if head is not None:
            new_head = torch.nn.Linear(head.in_features, len(keep), bias=head.bias is not None,
                                       device=head.weight.device, dtype=head.weight.dtype)
            new_head.weight.copy_(head.weight.index_select(0, index.to(head.weight.device)))
            if head.bias is not None:
                new_head.bias.copy_(head.bias.index_select(0, index.to(head.bias.device)))
            model.set_output_embeddings(new_head)
    text_config = getattr(model.config, "text_config", None)  # a multimodal model's
    if tied:
        model.config.tie_word_embeddings = False
        if text_config is not None and hasattr(text_config, "tie_word_embeddings"):
            text_config.tie_word_embeddings = False
    for config in (model.config, getattr(model, "generation_config", None)):
        for name, value in _token_id_fields(config).items():
            setattr(config, name, _remap_ids(value, mapping))
    model.config.vocab_size = len(keep)
    if text_config is not None and hasattr(text_config, "vocab_size"):
        text_config.vocab_size = len(keep)


def shrink_vocabulary(model, tokenizer, text_format: TextFormat = TextFormat(), kept: str = "authors"):
    """Shrink a model and its tokenizer in one go; returns ``(model, new_tokenizer, kept_old_ids)``."""
    keep = tokens_to_keep(tokenizer, text_format, kept,
                          configs=(model.config, getattr(model, "generation_config", None)))
    model, new_tokenizer = shrink_both(model, tokenizer, keep, drop_normalizer=kept == "authors")
    return model, new_tokenizer, keep


def shrink_both(model, tokenizer, keep: list[int], drop_normalizer: bool = True):
    """``(model, tokenizer)`` cut to the ``keep`` ids (the model in place; ``model`` None: the tokenizer alone)."""
    new_tokenizer = shrink_tokenizer(tokenizer, keep, drop_normalizer=drop_normalizer)
    if model is not None:
        shrink_model(model, keep)
    if new_tokenizer.pad_token is None and new_tokenizer.eos_token is not None:
        new_tokenizer.pad_token = new_tokenizer.eos_token
    return model, new_tokenizer


def format_problem(tokenizer, text_format: TextFormat = TextFormat()) -> str | None:
    """Why ``tokenizer`` cannot write the format's grids one token a cell (rows of digits and their
    separators); None when it can."""
    rows = ["0123456789", "9876543210", "00112233445566778899"]
    sample = text_format.row_separator.join(rows)
    separator = len(tokenizer(text_format.row_separator, add_special_tokens=False)["input_ids"])
    expected = sum(map(len, rows)) + (len(rows) - 1) * separator
    found = len(tokenizer(sample, add_special_tokens=False)["input_ids"])
    return None if found == expected else f"it writes {sample!r} as {found} tokens, not one per digit"


def kept_at_load(folder: str | os.PathLike, tokenizer, text_format: TextFormat = TextFormat()) -> list[int] | None:
    """The ids to keep when the model of ``folder`` is to be shrunk as it loads (the authors' set, its
    config's ids kept), or None when it needs no shrinking: it holds no more than that set already (the
    authors' releases, the kit's bases), or it writes the format and cannot be shrunk (the kit's own
    64-symbol vocabulary, whose output prefix is one token).

    ValueError in one line when the tokenizer can neither write the format nor be shrunk to it.
    """
    problem = format_problem(tokenizer, text_format)
    configs = tuple(small_json(Path(folder) / name, JSON_BYTES) for name in ("config.json", "generation_config.json"))
    try:
        keep = tokens_to_keep(tokenizer, text_format, "authors", configs=configs)
    except ValueError as error:
        if problem is None:
            return None  # a large vocabulary that writes the format: used as it is
        raise ValueError(f"the tokenizer of {folder} cannot write the text format ({problem}) and cannot be shrunk "
                         f"to it ({str(error).removeprefix('cannot shrink this tokenizer: ')})") from None
    return keep if len(keep) < len(tokenizer) else None


def shrink_model_folder(source: str | os.PathLike, destination: str | os.PathLike,
                        text_format: TextFormat = TextFormat(), dtype: str = "auto", kept: str = "authors",
                        overwrite: bool = False) -> Path:
    """Load a pretrained model folder on the CPU, shrink it, and save the result as a new folder: ``destination``
    is new, empty, or (with ``overwrite``) one that shrink made (``outputs.claim_folder``), never the source's."""
    devices.stay_offline()
    from transformers import AutoModelForCausalLM

    if inside(source, destination):
        raise OutputRefused(f"{source} lies inside {destination}: writing there would replace the model being shrunk; "
                            "give another destination")
    check_folder(destination, MODEL_KIND, "shrink", overwrite=overwrite, option="the destination")
    checked_configs(source)  # a FIFO in it, a broken config, or one that asks for the folder's own code: refused
    check_regular_file(Path(source) / "config.json", "model's config.json")  # an adapter's folder has none
    tokenizer = load_tokenizer(Path(source))  # none, or a broken file: check-model's line
    tokens_to_keep(tokenizer, text_format, kept)  # a tokenizer that cannot be shrunk fails before the weights load
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=True,
                                                 trust_remote_code=False)
    claim_folder(destination, MODEL_KIND, "shrink", overwrite=overwrite, option="the destination")
    return save_shrunk(model, tokenizer, destination, text_format, kept, {"shrunk_from": str(source)})


def save_shrunk(model, tokenizer, destination: str | os.PathLike, text_format: TextFormat = TextFormat(),
                kept: str = "authors", info: dict | None = None) -> Path:
    """Shrink a loaded model and tokenizer and save them as a model folder with ``arc_kit.json``."""
    model, tokenizer, keep = shrink_vocabulary(model, tokenizer, text_format, kept)
    destination = Path(destination)
    with staged_into(destination) as staging:  # every file renamed into place: a link there is never followed
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    record = {**(info or {}), "kept": kept, "kept_token_ids": keep, "vocab_size": len(keep)}
    replace_file(destination / "arc_kit.json", json.dumps(record, indent=2) + "\n")
    return destination
