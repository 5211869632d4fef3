"""Shrinking a pretrained model's vocabulary to the tokens the text format needs.

A pretrained tokenizer merges digits into multi-digit tokens, which makes grids needlessly hard.
Shrinking keeps only the single-character tokens that the format writes (digits, the row
separator, the prefixes, the pre-prompt letters) plus the special tokens, selects those rows of
the input embeddings and of the output head, rewrites the tokenizer to the new ids (with no
merges, so text can only split into those characters) and remaps every token id in the model's
config and generation config. The result is an ordinary model folder.

Supported tokenizers: fast tokenizers whose model is BPE (byte-level as in Llama 3, Mistral NeMo,
Qwen, GPT-2) or WordLevel, where each needed character is one token. Anything else fails with a
message naming the characters that could not be kept. The authors' released checkpoints are
already shrunk and need none of this. Knows nothing of training or tasks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from arc_kit.text_format import TextFormat


def needed_characters(text_format: TextFormat = TextFormat()) -> list[str]:
    """Every character the format can write, digits included, in a stable order."""
    text = "0123456789" + text_format.row_separator + text_format.end_of_example + text_format.input_prefix + \
        text_format.output_prefix + text_format.preprompt
    return sorted(set(text))


def tokens_to_keep(tokenizer, text_format: TextFormat = TextFormat()) -> list[int]:
    """Old ids to keep, ascending: one token per needed character, plus every special token."""
    kept, failures, said = set(), [], ""
    for character in needed_characters(text_format):
        try:
            ids = tokenizer(character, add_special_tokens=False)["input_ids"]
        except Exception as error:  # a WordLevel tokenizer without an unknown token raises for a missing word
            failures.append(f"{character!r} -> no token")
            said = f" (the tokenizer said: {error})"
            continue
        if len(ids) != 1:
            failures.append(f"{character!r} -> {len(ids)} tokens")
        elif ids[0] == tokenizer.unk_token_id or tokenizer.decode(ids) != character:
            # The unknown token, or a token that also carries a prefix (such as a space), is no stand-in.
            failures.append(f"{character!r} -> {tokenizer.convert_ids_to_tokens(ids[0])!r}, not the character")
        else:
            kept.add(ids[0])
    if failures:
        raise ValueError("cannot shrink this tokenizer: these characters are not single tokens: "
                         + ", ".join(failures) + said)
    kept.update(i for i in tokenizer.all_special_ids if i is not None)
    return sorted(kept)


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
    if isinstance(node, dict):
        node = dict(node)
        if isinstance(node.get("special_tokens"), dict):
            tokens = {}
            for name, entry in node["special_tokens"].items():
                ids = [mapping[i] for i in entry.get("ids", []) if i in mapping]
                if ids:
                    tokens[name] = {**entry, "ids": ids}
            node["special_tokens"] = tokens
        for key in ("sep", "cls"):  # BERT/RoBERTa-style processors: [token, id]
            if isinstance(node.get(key), list) and len(node[key]) == 2 and node[key][1] in mapping:
                node[key] = [node[key][0], mapping[node[key][1]]]
        return {key: _remap_post_processor(value, mapping) if key != "special_tokens" else value
                for key, value in node.items()}
    if isinstance(node, list):
        return [_remap_post_processor(item, mapping) for item in node]
    return node


def shrink_tokenizer(tokenizer, keep: list[int]):
    """A new fast tokenizer holding only the ``keep`` tokens, renumbered 0..len(keep)-1, with no merges."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    mapping = {old: new for new, old in enumerate(keep)}
    data = json.loads(tokenizer.backend_tokenizer.to_str())
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
    special = {name: getattr(tokenizer, name) for name in ("bos_token", "eos_token", "pad_token", "unk_token")
               if getattr(tokenizer, name, None) is not None}
    special = {name: token for name, token in special.items()
               if tokenizer.convert_tokens_to_ids(token) in mapping}
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
    """Keep only the ``keep`` rows of the input embeddings and output head; remap config token ids."""
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
            if tied:
                new_head = torch.nn.Linear(head.in_features, len(keep), bias=head.bias is not None,
                                           device=head.weight.device, dtype=head.weight.dtype)
                new_head.weight = new_embeddings.weight
            else:
                new_head = torch.nn.Linear(head.in_features, len(keep), bias=head.bias is not None,
                                           device=head.weight.device, dtype=head.weight.dtype)
                new_head.weight.copy_(head.weight.index_select(0, index.to(head.weight.device)))
            if head.bias is not None:
                new_head.bias.copy_(head.bias.index_select(0, index.to(head.bias.device)))
            model.set_output_embeddings(new_head)
    for config in (model.config, getattr(model, "generation_config", None)):
        if config is None:
            continue
        for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "unk_token_id"):
            if getattr(config, name, None) is not None:
                setattr(config, name, _remap_ids(getattr(config, name), mapping))
    model.config.vocab_size = len(keep)
    text_config = getattr(model.config, "text_config", None)
    if text_config is not None and hasattr(text_config, "vocab_size"):
        text_config.vocab_size = len(keep)


def shrink_vocabulary(model, tokenizer, text_format: TextFormat = TextFormat()):
    """Shrink a model and its tokenizer in one go; returns ``(model, new_tokenizer, kept_old_ids)``."""
    keep = tokens_to_keep(tokenizer, text_format)
    new_tokenizer = shrink_tokenizer(tokenizer, keep)
    shrink_model(model, keep)
    if new_tokenizer.pad_token is None and new_tokenizer.eos_token is not None:
        new_tokenizer.pad_token = new_tokenizer.eos_token
    return model, new_tokenizer, keep


def shrink_model_folder(source: str | os.PathLike, destination: str | os.PathLike,
                        text_format: TextFormat = TextFormat(), dtype: str = "auto") -> Path:
    """Load a pretrained model folder on the CPU, shrink it, and save the result as a new folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arc_kit import devices  # noqa: F401  (stays offline)

    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    tokens_to_keep(tokenizer, text_format)  # a tokenizer that cannot be shrunk fails before the weights load
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=True)
    model, tokenizer, keep = shrink_vocabulary(model, tokenizer, text_format)
    destination = Path(destination)
    model.save_pretrained(destination)
    tokenizer.save_pretrained(destination)
    (destination / "arc_kit.json").write_text(json.dumps(
        {"shrunk_from": str(source), "kept_token_ids": keep, "vocab_size": len(keep)}, indent=2) + "\n")
    return destination
