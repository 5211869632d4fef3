"""Shrinking a pretrained model's vocabulary: a real byte-level BPE tokenizer and a tiny Llama, built here.

The tokenizer is trained in the test (``tokenizers``) on the text of a few ARC training tasks and some
English, so that digits merge into multi-digit tokens as in Llama 3 or Qwen; its special tokens sit at
the end of the vocabulary, so that every id really moves. The shrunk model is checked against the
original one: its logits must be the original logits restricted to the kept token columns.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from arc_kit.cli import main
from arc_kit.data.datasets import load_tasks
from arc_kit.model.loading import create_model, load_model, save_model
from arc_kit.model.shrinking import (
    needed_characters,
    shrink_model_folder,
    shrink_tokenizer,
    shrink_vocabulary,
    tokens_to_keep,
)
from arc_kit.text import PREPROMPT, HuggingFaceTokenizer, TaskEncoder, TextFormat, Vocabulary

ENGLISH = [
    "The quick brown fox jumps over the lazy dog, 1234 times in 2024.",
    "Input grids and Output grids: rows of 10 colours, 0000 and 1111 and 5555.",
    "In 1999 there were 365 days, 52 weeks and 12 months; we counted 100, 200 and 300.",
    "Abstraction and reasoning: a puzzle of patterns + rules / examples - noise = answer.",
]
SPECIALS = ("<s>", "</s>", "<pad>")
FORMAT = TextFormat()
# The characters the authors keep (the authors' kept set), written out here rather than taken from the kit.
AUTHORS_KEPT = "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "abcdefghijklmnopqrstuvwxyz" "0123456789" "!?.:,;*+/-=" "\n"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("arc-agi-1/training").tasks()


def task_texts(tasks, count: int) -> list[str]:
    return [FORMAT.task_text(t.train, t.test[0].input, t.test[0].output, bos="", eos="") for t in tasks[:count]]


def train_byte_level_bpe(texts: list[str], vocab_size: int = 500, full_alphabet: bool = True,
                         unk_token: str | None = None, normalizer=None) -> PreTrainedTokenizerFast:
    """A byte-level BPE like Llama 3's: ByteLevel pre-tokenizer and decoder, <s> added by a template;
    ``normalizer`` (a ``tokenizers.normalizers`` one) is set after training."""
    backend = Tokenizer(models.BPE(unk_token=unk_token))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=[unk_token] if unk_token else [],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if full_alphabet else [])
    backend.train_from_iterator(texts, trainer)
    backend.add_special_tokens(list(SPECIALS))  # after training: the highest ids
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", backend.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   **({"unk_token": unk_token} if unk_token else {}))


def tiny_llama(tokenizer, tied: bool, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


@pytest.fixture(scope="module")
def bpe(tasks):
    return train_byte_level_bpe(task_texts(tasks, 8) + ENGLISH * 4)


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def shrunk(request, bpe):
    """(original model, original tokenizer, shrunk model, shrunk tokenizer, kept ids, tied after shrinking).

    An untied original, and a tied one, whose head gets its own copy of the kept rows (never tied after).
    """
    tied = request.param
    original = tiny_llama(bpe, tied)
    assert (original.get_output_embeddings().weight is original.get_input_embeddings().weight) == tied
    model, tokenizer, keep = shrink_vocabulary(copy.deepcopy(original), bpe)
    return original, bpe, model.eval(), tokenizer, keep, False


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)[None]).logits[0]


def sample_sequences(tasks, encoder: TaskEncoder, count: int = 4) -> list[np.ndarray]:
    """Real tasks as training sequences (every train pair and the first test pair), with this encoder."""
    chosen = [task for task in tasks if sum(p.input.size + p.output.size for p in task.train) < 400][:count]
    return [encoder.encode_training([*task.train, task.test[0]]).ids for task in chosen]


# ---------------------------------------------------------------------------------------------
# the premise: a real BPE merges digits, so grids cannot be encoded one cell per token

def test_the_trained_bpe_merges_digits(bpe):
    ids = bpe("0000\n1111\n", add_special_tokens=False)["input_ids"]
    assert len(ids) < 10
    assert bpe("12", add_special_tokens=True)["input_ids"][0] == bpe.bos_token_id
    assert min(bpe.convert_tokens_to_ids(list(SPECIALS))) > 400
    # Each digit alone is one token, so an encoder can be built, but its cell-by-cell ids are not the
    # tokenizer's reading of the same text: the model would see grids it was never trained on.
    encoder = TaskEncoder(HuggingFaceTokenizer(bpe), TextFormat(use_bos=False))
    grid = np.array([[0, 0, 0, 0], [1, 1, 1, 1]])
    assert encoder.encode_grid(grid).tolist() != bpe("0000\n1111", add_special_tokens=False)["input_ids"]


def test_an_unshrunk_model_folder_is_shrunk_as_it_loads_as_arc_kit_shrink_would(pretrained_folder, tmp_path, tasks):
    before = {path.name: path.read_bytes() for path in pretrained_folder.iterdir()}
    loaded = load_model(pretrained_folder, device="cpu")
    shrunk = load_model(shrink_model_folder(pretrained_folder, tmp_path / "shrunk"), device="cpu")
    assert len(loaded.tokenizer) == len(shrunk.tokenizer) == loaded.model.config.vocab_size < 100
    grid = np.array([[1, 2], [3, 4]])
    assert loaded.encoder().encode_grid(grid).tolist() == shrunk.encoder().encode_grid(grid).tolist()
    for ids in sample_sequences(tasks, shrunk.encoder(), count=2):
        torch.testing.assert_close(logits(loaded.model, ids), logits(shrunk.model, ids), rtol=0, atol=1e-6)
    assert {path.name: path.read_bytes() for path in pretrained_folder.iterdir()} == before  # nothing written


def test_needed_characters_are_what_the_format_writes():
    characters = needed_characters()
    assert characters == sorted(set("0123456789\nI+/-=O" + PREPROMPT))
    assert all(len(character) == 1 for character in characters)
    custom = needed_characters(TextFormat(input_prefix="in:", output_prefix="\nout:", row_separator="|"))
    assert custom == sorted(set("0123456789|\nin:out" + PREPROMPT))


def single_token_id(tokenizer, character: str) -> int | None:
    """The id of ``character`` when the tokenizer reads it as one token of its own, else None."""
    ids = tokenizer(character, add_special_tokens=False)["input_ids"]
    return ids[0] if len(ids) == 1 and tokenizer.decode(ids) == character else None


def test_tokens_to_keep_minimal_is_one_per_character_plus_specials(bpe):
    keep = tokens_to_keep(bpe, kept="minimal")
    assert keep == sorted(set(keep))
    singles = {bpe.convert_ids_to_tokens(i) for i in keep} - set(SPECIALS)
    assert len(singles) == len(needed_characters())
    for character in needed_characters():
        (token_id,) = bpe(character, add_special_tokens=False)["input_ids"]
        assert token_id in keep and bpe.decode([token_id]) == character
    assert set(bpe.convert_tokens_to_ids(list(SPECIALS))) <= set(keep)
    assert len(keep) == len(needed_characters()) + len(SPECIALS)


def test_tokens_to_keep_by_default_is_the_authors_set(bpe):
    """The default keeps every character of the authors' set that is one token, not only those the format writes."""
    keep = tokens_to_keep(bpe)
    assert keep == sorted(set(keep)) == tokens_to_keep(bpe, kept="authors")
    authors = {single_token_id(bpe, character) for character in AUTHORS_KEPT} - {None}
    assert len(authors) > len(needed_characters())  # the trained BPE has every byte: the sets really differ
    specials = set(bpe.convert_tokens_to_ids(list(SPECIALS)))
    assert set(keep) == authors | specials
    assert set(tokens_to_keep(bpe, kept="minimal")) < set(keep)
    assert {bpe.decode([i]) for i in set(keep) - specials} == set(AUTHORS_KEPT)  # every one of them, nothing else


def test_the_kept_ids_keep_their_old_order(bpe):
    """The authors number the kept tokens in the order of their old ids (their shrinking code maps
    ``{old: new for new, old in enumerate(sorted(keep))}``), so a model shrunk here lines up with
    theirs row for row; the specials, last in this tokenizer, stay last."""
    model = tiny_llama(bpe, tied=False)
    _, tokenizer, keep = shrink_vocabulary(model, bpe)
    assert keep == sorted(keep)
    old_order = sorted((bpe.convert_tokens_to_ids(token), token) for token in bpe.convert_ids_to_tokens(keep))
    assert tokenizer.convert_ids_to_tokens(list(range(len(keep)))) == [token for _, token in old_order]
    assert tokenizer.convert_ids_to_tokens(list(range(len(keep) - 3, len(keep)))) == list(SPECIALS)
    digits = [tokenizer.convert_tokens_to_ids(d) for d in "0123456789"]
    assert digits == sorted(digits) and all(b == a + 1 for a, b in zip(digits, digits[1:]))  # as in the BPE


def test_the_authors_set_drops_a_normaliser_that_would_change_the_text(tasks):
    """A lowercasing normaliser reads "A" as "a": with it, the format's capitals are no tokens of their own;
    the authors' set drops it, keeps the capitals, and the shrunk tokenizer writes them as they are."""
    tokenizer = train_byte_level_bpe(task_texts(tasks, 4) + ENGLISH, vocab_size=300,
                                     normalizer=normalizers.Lowercase())
    read = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert read("A") == read("a")
    with pytest.raises(ValueError, match="'A'"):
        tokens_to_keep(tokenizer, kept="minimal")  # keeps the normaliser, so "A" cannot be kept
    model = tiny_llama(tokenizer, tied=False)
    model, shrunk, keep = shrink_vocabulary(model, tokenizer)
    assert json.loads(shrunk.backend_tokenizer.to_str())["normalizer"] is None
    assert tokenizer.backend_tokenizer.normalizer is not None  # the original is left as it was
    ids = shrunk("ABab", add_special_tokens=False)["input_ids"]
    assert len(ids) == 4 and len(set(ids)) == 4 and shrunk.decode(ids) == "ABab"
    encoder = TaskEncoder(HuggingFaceTokenizer(shrunk))
    assert shrunk.decode(encoder.preprompt.tolist()) == PREPROMPT  # capitals and small letters apart


def test_the_authors_set_keeps_config_ids_and_drops_the_unknown_token(tasks):
    tokenizer = train_byte_level_bpe(task_texts(tasks, 4) + ENGLISH, vocab_size=300, unk_token="<unk>")
    unknown = tokenizer.unk_token_id
    assert unknown is not None and unknown in tokenizer.all_special_ids
    assert unknown in tokens_to_keep(tokenizer, kept="minimal")
    assert unknown not in tokens_to_keep(tokenizer)
    (extra,) = tokenizer("0000", add_special_tokens=False)["input_ids"]  # merged digits: kept only when named
    assert extra not in tokens_to_keep(tokenizer)
    assert extra in tokens_to_keep(tokenizer, configs=({"sep_token_id": extra},))
    assert extra not in tokens_to_keep(tokenizer, kept="minimal", configs=({"sep_token_id": extra},))
    with pytest.raises(ValueError, match="unknown kept set"):
        tokens_to_keep(tokenizer, kept="smallest")


# ---------------------------------------------------------------------------------------------
# shrink_vocabulary

def test_shrunk_tokenizer_writes_one_kept_token_per_character(shrunk, tasks):
    _, original_tokenizer, _, tokenizer, keep, _ = shrunk
    assert len(tokenizer) == len(keep)
    assert tokenizer.convert_ids_to_tokens(list(range(len(keep)))) == original_tokenizer.convert_ids_to_tokens(keep)
    character_id = {original_tokenizer.decode([old]): new for new, old in enumerate(keep)}
    encoder = TaskEncoder(HuggingFaceTokenizer(tokenizer))
    for task in tasks[:6]:
        pairs = [*task.train, task.test[0]]
        text = FORMAT.task_text(task.train, task.test[0].input, task.test[0].output, bos="", eos="")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert ids == [character_id[character] for character in text]
        assert tokenizer.decode(ids) == text
        # Through the encoder, specials included: the text with <s> and </s> spelled out, token for token.
        full = FORMAT.task_text(task.train, task.test[0].input, task.test[0].output, bos="<s>", eos="</s>")
        encoded = encoder.encode_training(pairs, mask_first_output=False)
        assert encoded.ids.tolist() == tokenizer(full, add_special_tokens=False)["input_ids"]
        assert encoded.ids[0] == tokenizer.bos_token_id and encoded.ids[-1] == tokenizer.eos_token_id
        assert all(len(tokenizer.decode([i])) == 1 for i in encoded.ids if i not in tokenizer.all_special_ids)


def test_shrunk_model_logits_are_the_kept_columns_of_the_original(shrunk, tasks):
    original, _, model, tokenizer, keep, _ = shrunk
    keep_ids = torch.tensor(keep)
    for ids in sample_sequences(tasks, TaskEncoder(HuggingFaceTokenizer(tokenizer))):
        expected = logits(original, keep_ids[torch.from_numpy(ids)])[:, keep_ids]
        got = logits(model, ids)
        assert got.shape == (len(ids), len(keep))
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_shrunk_model_has_the_kept_rows_and_remapped_ids(shrunk):
    original, original_tokenizer, model, tokenizer, keep, tied = shrunk
    assert model.config.vocab_size == len(keep)
    embeddings, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert embeddings.shape == (len(keep), 32) and head.shape == (len(keep), 32)
    assert torch.equal(embeddings, original.get_input_embeddings().weight[keep])
    assert torch.equal(head, original.get_output_embeddings().weight[keep])
    assert (head is embeddings) == tied
    assert (head.data_ptr() == embeddings.data_ptr()) == tied  # untied: an own copy of the rows, not a view
    assert model.config.tie_word_embeddings == tied
    for name, token in (("bos", "<s>"), ("eos", "</s>"), ("pad", "<pad>")):
        new_id = keep.index(original_tokenizer.convert_tokens_to_ids(token))
        assert new_id < len(keep) and tokenizer.convert_tokens_to_ids(token) == new_id
        assert getattr(model.config, f"{name}_token_id") == new_id
        assert getattr(model.generation_config, f"{name}_token_id") == new_id
        assert getattr(tokenizer, f"{name}_token_id") == new_id


def test_shrunk_tokenizer_adds_bos_like_the_original(shrunk):
    _, original_tokenizer, _, tokenizer, keep, _ = shrunk
    original = original_tokenizer("I12", add_special_tokens=True)["input_ids"]
    ids = tokenizer("I12", add_special_tokens=True)["input_ids"]
    assert original[0] == original_tokenizer.bos_token_id
    assert ids == [tokenizer.bos_token_id, *tokenizer("I12", add_special_tokens=False)["input_ids"]]
    assert keep[ids[0]] == original[0] and len(ids) == 4


def test_shrunk_model_saves_and_reloads_with_plain_transformers(shrunk, tasks, tmp_path):
    _, _, model, tokenizer, keep, tied = shrunk
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert reloaded.config.vocab_size == len(keep) == len(reloaded_tokenizer)
    assert (reloaded.get_output_embeddings().weight is reloaded.get_input_embeddings().weight) == tied
    encoder = TaskEncoder(HuggingFaceTokenizer(tokenizer))
    reloaded_encoder = TaskEncoder(HuggingFaceTokenizer(reloaded_tokenizer))
    for ids in sample_sequences(tasks, encoder, count=2):
        torch.testing.assert_close(logits(reloaded, ids), logits(model, ids), rtol=0, atol=1e-6)
    for task in tasks[:3]:
        pairs = [*task.train, task.test[0]]
        np.testing.assert_array_equal(reloaded_encoder.encode_training(pairs).ids, encoder.encode_training(pairs).ids)
    assert reloaded_tokenizer("I12", add_special_tokens=True)["input_ids"] == \
        tokenizer("I12", add_special_tokens=True)["input_ids"]
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(reloaded.generation_config, name) == getattr(model.generation_config, name)


# ---------------------------------------------------------------------------------------------
# whole folders: shrink_model_folder and `arc-kit shrink`

@pytest.fixture(scope="module")
def pretrained_folder(bpe, tmp_path_factory):
    """A 'pretrained' model folder: the tiny Llama with tied embeddings and the BPE tokenizer."""
    folder = tmp_path_factory.mktemp("pretrained") / "model"
    model = tiny_llama(bpe, tied=True, seed=3)
    model.save_pretrained(folder)
    bpe.save_pretrained(folder)
    return folder


def check_shrunk_folder(source, destination, tasks):
    original = AutoModelForCausalLM.from_pretrained(source, local_files_only=True).eval()
    original_tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    info = json.loads((destination / "arc_kit.json").read_text())
    keep = info["kept_token_ids"]
    assert keep == tokens_to_keep(original_tokenizer) and info["vocab_size"] == len(keep)
    loaded = load_model(destination, device="cpu")
    encoder = loaded.encoder()
    keep_ids = torch.tensor(keep)
    for ids in sample_sequences(tasks, encoder, count=2):
        expected = logits(original, keep_ids[torch.from_numpy(ids)])[:, keep_ids]
        torch.testing.assert_close(logits(loaded.model, ids), expected, rtol=0, atol=1e-5)
    assert loaded.model.config.eos_token_id == keep.index(original_tokenizer.eos_token_id)


def test_shrink_model_folder_end_to_end(pretrained_folder, tmp_path, tasks):
    destination = shrink_model_folder(pretrained_folder, tmp_path / "shrunk")
    assert destination == tmp_path / "shrunk"
    assert list(destination.glob("*.safetensors"))
    check_shrunk_folder(pretrained_folder, destination, tasks)


def test_arc_kit_shrink_command(pretrained_folder, tmp_path, tasks, capsys):
    status = main(["shrink", str(pretrained_folder), str(tmp_path / "by-cli")])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert f"wrote {tmp_path / 'by-cli'}" in captured.out
    check_shrunk_folder(pretrained_folder, tmp_path / "by-cli", tasks)


def test_arc_kit_shrink_of_an_unshrinkable_folder_is_one_line(tmp_path, capsys):
    model, tokenizer = create_model("micro")
    folder = save_model(model, tokenizer, tmp_path / "micro")
    capsys.readouterr()
    status = main(["shrink", str(folder), str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert status == 1
    assert "Traceback" not in captured.err and "'+'" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_arc_kit_shrink_of_a_folder_without_tokenizer_files_says_check_models_line(pretrained_folder, tmp_path,
                                                                                   capsys):
    import shutil

    folder = shutil.copytree(pretrained_folder, tmp_path / "no-tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)
    assert main(["check-model", str(folder)]) == 1
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["shrink", str(folder), str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err.strip()
    assert verdict.startswith("no-go: no tokenizer files: ")
    assert error == f"arc-kit shrink: error: {verdict.removeprefix('no-go: ')}"  # not transformers' advice
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# what cannot be shrunk, and what needs no shrinking

def test_a_vocabulary_that_cannot_be_shrunk_is_said_in_one_short_line():
    """A tokenizer that raises for every character it lacks (a word-level one without an unknown token): each
    failure cut to its first words, the list to its first ones and a count."""
    backend = Tokenizer(models.WordLevel(vocab={"a": 0, "<s>": 1}, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    with pytest.raises(ValueError) as error:
        tokens_to_keep(PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>"))
    message = str(error.value)
    assert len(message) <= 300 and "\n" not in message and message.endswith(" more"), message
    assert message.startswith("cannot shrink this tokenizer: these characters are not single tokens: '\\n' -> no "
                              "token (the tokenizer said: WordLevel error: Missing [UNK] token")

def test_a_character_missing_from_the_vocabulary_is_named(tasks):
    texts = [text.replace("/", "") for text in task_texts(tasks, 4) + ENGLISH]
    tokenizer = train_byte_level_bpe(texts, vocab_size=200, full_alphabet=False)
    assert tokenizer("/", add_special_tokens=False)["input_ids"] == []
    with pytest.raises(ValueError, match=r"'/' -> 0 tokens") as error:
        tokens_to_keep(tokenizer)
    assert "'0'" not in str(error.value)  # only the characters that fail are named


def test_a_character_that_is_only_unknown_is_named(tasks):
    texts = [text.replace("O", "") for text in task_texts(tasks, 4) + [e.replace("O", "") for e in ENGLISH]]
    tokenizer = train_byte_level_bpe(texts, vocab_size=200, full_alphabet=False, unk_token="<unk>")
    assert tokenizer("O", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id]
    with pytest.raises(ValueError, match=r"'O'"):
        tokens_to_keep(tokenizer)


def test_the_micro_tokenizer_has_no_single_plus_and_says_so():
    _, tokenizer = create_model("micro")
    with pytest.raises(ValueError, match=r"'\+'") as error:
        tokens_to_keep(tokenizer)
    assert "'0'" not in str(error.value)


def test_other_tokenizer_models_are_refused(bpe):
    data = json.loads(bpe.backend_tokenizer.to_str())
    data["model"] = {"type": "WordPiece", "unk_token": "<s>", "continuing_subword_prefix": "##",
                     "max_input_chars_per_word": 100, "vocab": data["model"]["vocab"]}
    wordpiece = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), bos_token="<s>",
                                        eos_token="</s>")
    with pytest.raises(ValueError, match="WordPiece"):
        shrink_tokenizer(wordpiece, [0, 1])


def test_an_already_shrunk_model_needs_no_shrinking(tmp_path, tasks):
    model, tokenizer = create_model("micro")
    loaded = load_model(save_model(model, tokenizer, tmp_path / "micro"), device="cpu")
    encoder = loaded.encoder()
    reference = TaskEncoder(Vocabulary())
    for task in tasks[:3]:
        np.testing.assert_array_equal(encoder.encode_prompt(task.train, task.test[0].input).ids,
                                      reference.encode_prompt(task.train, task.test[0].input).ids)
    assert encoder.tokenizer.vocab_size == 64
