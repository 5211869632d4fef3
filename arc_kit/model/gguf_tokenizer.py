"""The tokenizer a GGUF file describes, built from its metadata with the ``tokenizers`` library alone.

A GGUF file has no ``tokenizer.json``: it stores the vocabulary, the merges, each token's type and
the special token ids as metadata under llama.cpp's key names. transformers reads them too, but how
depends on its version: 5.0.0 turns a byte-level (``gpt2``) vocabulary such as SmolLM2's into a
CodeLlama tokenizer with five extra tokens past the model's rows, byte fallback and a bos added to
every text, so that shrinking the vocabulary fails (``IndexError: index out of range in self``).
This module builds the byte-level BPE the file describes the way llama.cpp reads it, and the way
transformers 5.6 and later build it: the same vocabulary and merges, GPT-2's byte-level split (the
one the bases' files name; another split, such as Llama 3's, is refused), control tokens as special
added tokens, user-defined ones as plain added tokens, and bos, eos, pad and unk from the file's ids.

It knows GGUF metadata and the ``tokenizers`` library; nothing of models, weights or caches.
Other tokenizer kinds (SentencePiece ``llama``, ``t5``) are refused in one line.
"""

from __future__ import annotations

import os

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types (gguf.TokenType)
GPT2_SPLITS = ("default", "gpt2", "smollm", None)  # the ``tokenizer.ggml.pre`` values that split as GPT-2 does

SPECIAL_IDS = {"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
               "pad_token": "tokenizer.ggml.padding_token_id", "unk_token": "tokenizer.ggml.unknown_token_id"}


class UnsupportedTokenizerError(ValueError):
    """The GGUF file describes a tokenizer this module does not build (the message says which, in one line)."""


def gguf_tokenizer(path: str | os.PathLike):
    """The ``transformers`` fast tokenizer of the GGUF file at ``path`` (see the module docstring)."""
    from gguf import GGUFReader
    from transformers import PreTrainedTokenizerFast

    metadata = {name: field.contents() for name, field in GGUFReader(str(path)).fields.items()
                if name.startswith("tokenizer.ggml.")}  # llama.cpp's tokenizer keys, as Python values
    backend = byte_level_backend(metadata, path)
    tokens = metadata["tokenizer.ggml.tokens"]
    special = {name: tokens[int(metadata[key])] for name, key in SPECIAL_IDS.items()
               if key in metadata and 0 <= int(metadata[key]) < len(tokens)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False, **special)
    tokenizer.add_bos_token = bool(metadata.get("tokenizer.ggml.add_bos_token", False))
    tokenizer.add_eos_token = bool(metadata.get("tokenizer.ggml.add_eos_token", False))
    return tokenizer


def byte_level_backend(metadata: dict, path: str | os.PathLike = "the file"):
    """A ``tokenizers.Tokenizer``: byte-level BPE over the file's tokens and merges, its added tokens marked."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    kind, split = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.pre")
    if kind != "gpt2":
        raise UnsupportedTokenizerError(f"{path} holds a {kind!r} tokenizer; only byte-level BPE ('gpt2') GGUF "
                                        "tokenizers are supported")
    if split not in GPT2_SPLITS:
        raise UnsupportedTokenizerError(f"{path} splits text as {split!r}, which this kit does not know; known: "
                                        f"{', '.join(s for s in GPT2_SPLITS if s)}")
    alphabet = bytes_to_unicode()  # GPT-2's byte -> printable character map, in which byte-level tokens are spelled
    spelled = set(alphabet.values())
    tokens = list(metadata["tokenizer.ggml.tokens"])
    vocab = {token if set(token) <= spelled else "".join(alphabet[byte] for byte in token.encode("utf-8")): index
             for index, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ")) for merge in metadata.get("tokenizer.ggml.merges", [])]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, continuing_subword_prefix="", end_of_word_suffix="",
                                   fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    backend.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    backend.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1")
    types = list(metadata.get("tokenizer.ggml.token_type") or [])
    # A control token spelled outside the byte alphabet is a llama.cpp mislabel: no text can hold it.
    control = [token for token, kind in zip(tokens, types) if kind == CONTROL and set(token) <= spelled]
    backend.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in control])
    user = [token for token, kind in zip(tokens, types) if kind == USER_DEFINED and token in vocab]
    backend.add_tokens([AddedToken(token, normalized=False, special=False) for token in user])
    return backend
