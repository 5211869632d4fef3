"""Models: the presets, saving and loading offline (with arc_kit and with plain transformers), the
tokenizer against the 64-symbol vocabulary, and clear errors for what this machine cannot do.

Every model is a ``micro`` one built in the test (the larger presets are only counted, on the meta
device); nothing is downloaded. Checks that need a CUDA GPU are marked ``gpu`` and skipped without one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from arc_kit.data.datasets import load_tasks
from arc_kit.model import devices
from arc_kit.model.description import read_model_folder
from arc_kit.model.loading import (DEFAULT_TOKEN_BUDGET, LoadedModel, build_tokenizer, create_model, load_model,
                                   merge_delta, model_info, save_model)
from arc_kit.settings import MODEL_PRESETS
from arc_kit.text import HuggingFaceTokenizer, TaskEncoder, TextFormat, Vocabulary

CUDA = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
cpu_only = pytest.mark.skipif(CUDA, reason="checks the errors of a machine without a CUDA GPU")

# The sizes the comments in settings.MODEL_PRESETS promise, in parameters with the 64-symbol vocabulary.
DOCUMENTED_SIZES = {"micro": 0.08e6, "tiny": 2.4e6, "small": 19e6, "base": 71e6}
TASK_IDS = ("007bbfb7", "0d3d703e", "3c9b0459")  # small real training tasks


@pytest.fixture(scope="module")
def tasks():
    training = load_tasks("arc-agi-1/training")
    return [training[task_id] for task_id in TASK_IDS]


@pytest.fixture(scope="module")
def micro():
    """A fresh micro model (eval mode) and its tokenizer."""
    model, tokenizer = create_model("micro", seed=1)
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def micro_folder(micro, tmp_path_factory):
    model, tokenizer = micro
    return save_model(model, tokenizer, tmp_path_factory.mktemp("micro") / "model", {"preset": "micro", "seed": 1})


@pytest.fixture(scope="module")
def sample_ids(tasks):
    """A real task's training sequence (two pairs) as a batch of one, in the 64-symbol vocabulary."""
    task = tasks[0]
    encoded = TaskEncoder(Vocabulary()).encode_training(list(task.train[:2]))
    return torch.from_numpy(encoded.ids)[None]


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def expected_parameter_count(config: LlamaConfig) -> int:
    """A Llama's parameters from its config: embeddings, attention, MLP and norms per layer, head."""
    hidden, head_dim = config.hidden_size, config.hidden_size // config.num_attention_heads
    attention = hidden * head_dim * (2 * config.num_attention_heads + 2 * config.num_key_value_heads)
    mlp = 3 * hidden * config.intermediate_size
    per_layer = attention + mlp + 2 * hidden
    head = 0 if config.tie_word_embeddings else config.vocab_size * hidden
    return config.vocab_size * hidden + config.num_hidden_layers * per_layer + hidden + head


# ---------------------------------------------------------------------------------------------
# presets

@pytest.mark.parametrize("preset", list(MODEL_PRESETS))
def test_every_preset_has_the_documented_size(preset):
    vocabulary = Vocabulary()
    config = LlamaConfig(vocab_size=vocabulary.vocab_size, tie_word_embeddings=False, **MODEL_PRESETS[preset])
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = LlamaForCausalLM(config)
    count = sum(parameter.numel() for parameter in model.parameters())
    assert count == expected_parameter_count(config)
    assert count == pytest.approx(DOCUMENTED_SIZES[preset], rel=0.1)
    assert config.hidden_size % config.num_attention_heads == 0
    assert config.num_attention_heads % config.num_key_value_heads == 0


def test_presets_grow_in_size():
    sizes = [DOCUMENTED_SIZES[preset] for preset in MODEL_PRESETS]
    assert list(MODEL_PRESETS) == ["micro", "tiny", "small", "base"]
    assert sizes == sorted(sizes)


@pytest.mark.parametrize("preset", ["micro", "tiny"])
def test_small_presets_build_with_the_vocabulary_ids(preset):
    model, tokenizer = create_model(preset)
    vocabulary = Vocabulary()
    assert sum(p.numel() for p in model.parameters()) == expected_parameter_count(model.config)
    assert model.config.vocab_size == len(tokenizer) == 64
    assert model.get_input_embeddings().weight.shape == (64, MODEL_PRESETS[preset]["hidden_size"])
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    for config in (model.config, model.generation_config):
        assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == \
            (vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == \
        (vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id)


def test_create_model_is_seeded_and_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first, _ = create_model("micro", seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    again, _ = create_model("micro", seed=5)
    other, _ = create_model("micro", seed=6)
    for (name, a), b, c in zip(first.state_dict().items(), again.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(first.parameters(), other.parameters()))


def test_create_model_rejects_unknown_presets_and_applies_overrides():
    with pytest.raises(ValueError, match="unknown preset 'huge'.*micro, tiny, small, base"):
        create_model("huge")
    model, _ = create_model("micro", num_hidden_layers=1, max_positions=512)
    assert model.config.num_hidden_layers == 1 and len(model.model.layers) == 1
    assert model.config.max_position_embeddings == 512


# ---------------------------------------------------------------------------------------------
# the tokenizer and the vocabulary

def test_tokenizer_encodes_the_format_like_the_vocabulary(micro, tasks):
    _, tokenizer = micro
    vocabulary = Vocabulary()
    assert tokenizer.convert_ids_to_tokens(list(range(64))) == list(vocabulary.symbols)
    for task in tasks:
        plain = TextFormat().task_text(task.train, task.test[0].input, task.test[0].output, bos="", eos="")
        ids = tokenizer(plain, add_special_tokens=False)["input_ids"]
        assert ids == vocabulary.encode(plain)
        assert tokenizer.decode(ids) == plain
        # With the special tokens spelled out, the text is the training sequence token for token.
        full = TextFormat().task_text(task.train, task.test[0].input, task.test[0].output)
        expected = TaskEncoder(vocabulary).encode_training([*task.train, task.test[0]], mask_first_output=False)
        assert tokenizer(full, add_special_tokens=False)["input_ids"] == expected.ids.tolist()


def test_tokenizer_keeps_the_output_marker_whole_and_adds_no_bos(micro):
    _, tokenizer = micro
    vocabulary = Vocabulary()
    ids = tokenizer("I12\n+/-=O3\n", add_special_tokens=False)["input_ids"]
    assert ids == vocabulary.encode("I12\n+/-=O3\n")
    assert tokenizer.convert_ids_to_tokens(ids)[4] == "+/-=O"
    assert tokenizer("12")["input_ids"] == [1, 2]  # the TaskEncoder places bos itself


def test_build_tokenizer_follows_a_custom_vocabulary():
    vocabulary = Vocabulary(symbols=(*"0123456789", "\n", "I", "+/-=O", "<bos>", "<eos>", "<pad>", "x", "xy"))
    tokenizer = build_tokenizer(vocabulary)
    assert len(tokenizer) == vocabulary.vocab_size
    text = "xyx0+/-=O\n"
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == vocabulary.encode(text)


# ---------------------------------------------------------------------------------------------
# saving and loading

def test_saved_folder_holds_safetensors_config_and_tokenizer(micro, micro_folder):
    model, _ = micro
    names = {path.name for path in micro_folder.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "arc_kit.json"} <= names
    assert not any(name.endswith((".bin", ".pt", ".pth")) for name in names)
    from safetensors.torch import load_file

    stored = {}
    for path in micro_folder.glob("*.safetensors"):
        stored.update(load_file(path))
    state = model.state_dict()
    assert set(stored) == set(state)
    for name, tensor in state.items():
        assert torch.equal(stored[name], tensor), name
    assert json.loads((micro_folder / "arc_kit.json").read_text()) == {"preset": "micro", "seed": 1}


def test_load_model_round_trip_gives_the_same_logits(micro, micro_folder, sample_ids):
    model, _ = micro
    loaded = load_model(micro_folder, device="cpu")
    assert isinstance(loaded, LoadedModel)
    assert loaded.device == "cpu" and loaded.backend == "transformers" and loaded.dtype == torch.float32
    assert not loaded.is_adapter and not loaded.model.training
    assert torch.equal(logits(loaded.model, sample_ids), logits(model, sample_ids))
    info = model_info(loaded)
    assert info["parameters"] == 82240 and info["arc_kit"] == "micro" and info["adapter"] is False


def test_plain_transformers_loads_the_folder_offline(micro, micro_folder, sample_ids, tasks):
    model, _ = micro
    plain = AutoModelForCausalLM.from_pretrained(micro_folder, local_files_only=True).eval()
    assert torch.equal(logits(plain, sample_ids), logits(model, sample_ids))
    tokenizer = AutoTokenizer.from_pretrained(micro_folder, local_files_only=True)
    vocabulary = Vocabulary()
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == \
        (vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id)
    for task in tasks:
        text = TextFormat().task_text(task.train, task.test[0].input, bos="", eos="")
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == vocabulary.encode(text)


def test_sharded_save_reloads_the_same_model(micro, tmp_path, sample_ids):
    model, tokenizer = micro
    folder = save_model(model, tokenizer, tmp_path / "sharded", max_shard_size="100KB")
    assert len(list(folder.glob("*.safetensors"))) > 1
    assert (folder / "model.safetensors.index.json").exists()
    loaded = load_model(folder, device="cpu")
    assert torch.equal(logits(loaded.model, sample_ids), logits(model, sample_ids))


def test_loaded_encoder_matches_the_vocabulary_encoder(micro_folder, tasks):
    loaded = load_model(micro_folder, device="cpu")
    encoder = loaded.encoder()
    assert isinstance(encoder.tokenizer, HuggingFaceTokenizer)
    reference = TaskEncoder(Vocabulary())
    for task in tasks:
        ours = encoder.encode_prompt(task.train, task.test[0].input)
        theirs = reference.encode_prompt(task.train, task.test[0].input)
        np.testing.assert_array_equal(ours.ids, theirs.ids)
        pairs = [*task.train, task.test[0]]
        np.testing.assert_array_equal(encoder.encode_training(pairs).labels, reference.encode_training(pairs).labels)
    assert encoder.max_len == 8192 and loaded.encoder(max_len=100).max_len == 100


def test_the_token_budget_is_the_authors_cap_for_every_model_cut_to_what_the_model_takes(tmp_path, caplog):
    """One budget, 8192 (the authors' max_tokens), whatever a model's positions; the positions only bound it,
    with a one-line warning when they cut it; the length a model trained on (its record) does not."""
    llama_like, tokenizer = create_model("micro", seed=1, max_positions=131072)  # Llama's 131,072 positions
    long = save_model(llama_like, tokenizer, tmp_path / "long", {"preset": "micro"})
    model, _ = create_model("micro", seed=1, max_positions=5000)
    recorded = save_model(model, tokenizer, tmp_path / "recorded", {"token_budget": 3000})
    plain = save_model(model, tokenizer, tmp_path / "plain", {"preset": "micro"})
    unsaid = tmp_path / "unsaid"  # a config that says no positions
    unsaid.mkdir()
    (unsaid / "config.json").write_text('{"model_type": "llama"}')
    long, plain, recorded, unsaid = map(read_model_folder, (long, plain, recorded, unsaid))
    assert DEFAULT_TOKEN_BUDGET == 8192
    assert long.token_budget() == 8192 and long.token_budget(200_000) == 131072
    assert long.token_budget(16384) == 16384 and long.token_budget(2048) == 2048
    assert unsaid.token_budget() == 8192 and unsaid.token_budget(99999) == 99999
    with caplog.at_level(logging.WARNING, logger="arc_kit.model.description"):
        assert plain.token_budget() == 5000 and plain.token_budget(4000) == 4000 and plain.token_budget(6000) == 5000
    assert any("6000 is more than" in record.getMessage() and "using 5000" in record.getMessage()
               for record in caplog.records)
    assert recorded.token_budget(9000) == 5000 and recorded.token_budget() == 5000  # trained on 3000: a record only
    loaded = load_model(recorded.path, device="cpu")
    assert loaded.token_budget() == 5000 and loaded.token_budget(1000) == 1000 and loaded.encoder().max_len == 5000
    assert load_model(long.path, device="cpu").encoder().max_len == 8192


def test_a_model_folder_is_read_once_until_it_changes(micro_folder, tmp_path, monkeypatch):
    """Every caller asks one description of a folder: a second ask reads no file, the load shares its tokenizer; a
    file written since makes the next ask read the folder again (at once while its files are seconds old)."""
    from arc_kit.model import description

    folder = Path(shutil.copytree(micro_folder, tmp_path / "model"))
    for path in folder.iterdir():  # an old folder, as a model is (a folder written just now is read at every ask)
        os.utime(path, (1e9, 1e9))
    first = read_model_folder(folder)
    assert first.kind == "plain" and first.token_budget() == first.config["max_position_embeddings"]
    with monkeypatch.context() as patched:
        patched.setattr(description, "_read", lambda *_: pytest.fail("the folder was read again"))
        assert read_model_folder(folder) is first and read_model_folder(str(folder)) is first
        assert load_model(folder, device="cpu").tokenizer is first.tokenizer
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 300}))
    again = read_model_folder(folder)
    assert again is not first and again.token_budget() == 300 and read_model_folder(folder) is not again


def test_a_loaded_model_generates_grid_tokens(micro_folder, tasks):
    loaded = load_model(micro_folder, device="cpu")
    prompt = loaded.encoder().encode_prompt(tasks[0].train, tasks[0].test[0].input)
    ids = torch.from_numpy(prompt.ids)[None]
    out = loaded.model.generate(ids, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(ids))
    assert out.shape == (1, ids.shape[1] + 5) or out[0, -1] == loaded.tokenizer.eos_token_id
    assert torch.equal(out[0, :ids.shape[1]], ids[0])


def test_adapter_folder_loads_on_its_base(micro_folder, tmp_path, sample_ids):
    from peft import LoraConfig, get_peft_model

    base = load_model(micro_folder, device="cpu").model
    torch.manual_seed(0)
    peft_model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear",
                                                 init_lora_weights=False))  # non-zero B: the adapter matters
    peft_model.save_pretrained(tmp_path / "adapter")
    expected = logits(peft_model.eval(), sample_ids)
    loaded = load_model(tmp_path / "adapter", device="cpu")
    assert loaded.is_adapter
    assert torch.allclose(logits(loaded.model, sample_ids), expected, atol=1e-6)
    assert not torch.allclose(expected, logits(load_model(micro_folder, device="cpu").model, sample_ids), atol=1e-3)
    # The tokenizer comes from the base model's folder.
    assert len(loaded.tokenizer) == 64
    merged = merge_delta(tmp_path / "adapter", tmp_path / "merged")  # base merge takes an adapter's folder too
    assert json.loads((merged / "config.json").read_text())["dtype"] == "float32"  # as its base and it store them
    assert torch.allclose(logits(load_model(merged, device="cpu").model, sample_ids), expected, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# clear errors

def assert_says(error: pytest.ExceptionInfo, *phrases: str):
    message = str(error.value)
    for phrase in phrases:
        assert phrase in message, message


@cpu_only
def test_4bit_without_a_gpu_is_an_unsupported_setup(micro_folder):
    with pytest.raises(devices.UnsupportedSetupError) as error:
        load_model(micro_folder, quantization="4bit")
    assert_says(error, "4-bit", "GPU", "quantization=None")


@cpu_only
def test_unsloth_without_a_gpu_is_an_unsupported_setup(micro_folder):
    with pytest.raises(devices.UnsupportedSetupError) as error:
        load_model(micro_folder, backend="unsloth")
    assert_says(error, "unsloth", "GPU", "backend='transformers'")


@cpu_only
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_an_unsupported_setup(micro_folder, device):
    with pytest.raises(devices.UnsupportedSetupError) as error:
        load_model(micro_folder, device=device)
    assert_says(error, device, "no CUDA GPU", "'cpu'")


def test_unsupported_setup_is_a_runtime_error_with_one_line():
    assert issubclass(devices.UnsupportedSetupError, RuntimeError)
    if not CUDA:
        with pytest.raises(devices.UnsupportedSetupError) as error:
            devices.require_4bit()
        assert "\n" not in str(error.value)


def test_unknown_settings_are_value_errors(micro_folder):
    with pytest.raises(ValueError, match="unknown quantization '8bit'"):
        load_model(micro_folder, quantization="8bit", device="cpu")
    with pytest.raises(ValueError, match="unknown backend 'vllm'"):
        load_model(micro_folder, backend="vllm", device="cpu")
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        load_model(micro_folder, dtype="float8", device="cpu")
    with pytest.raises(TypeError):
        load_model(micro_folder, precision="fp16")  # not a LoadSettings field: an error, never swallowed


def test_auto_settings_pick_the_cpu_here():
    if CUDA:
        pytest.skip("auto picks the GPU on this machine")
    assert devices.resolve_device("auto") == "cpu"
    assert devices.resolve_dtype("auto", "cpu") == torch.float32
    assert devices.resolve_backend("auto") == "transformers"
    assert devices.resolve_dtype("bf16", "cpu") == torch.bfloat16


def test_auto_backend_takes_unsloth_only_for_a_model_on_the_gpu(monkeypatch):
    """On a GPU machine with unsloth installed, a model loaded onto the CPU goes through transformers."""
    import importlib.util

    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: object() if name == "unsloth" else
                        found(name, *rest))
    assert devices.resolve_backend("auto", "cpu") == "transformers"
    assert devices.resolve_backend("auto", "cuda:0") == "unsloth"


def test_a_folder_without_config_names_itself(tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as error:
        load_model(empty)
    assert_says(error, str(empty), "config.json")
    with pytest.raises(FileNotFoundError) as error:
        load_model(tmp_path / "missing")
    assert_says(error, str(tmp_path / "missing"))


@pytest.mark.parametrize("name", ["model", "someone/some-model"])
def test_a_name_that_is_no_folder_is_never_taken_for_a_hub_id(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative names resolve to nothing here
    for load in (load_model, read_model_folder):
        with pytest.raises(FileNotFoundError) as error:
            load(name)
        assert_says(error, name, "not a model folder")
        assert "huggingface.co" not in str(error.value)


@pytest.fixture
def orphan_adapter(micro_folder, tmp_path):
    """An adapter folder whose recorded base model folder does not exist."""
    from peft import LoraConfig, get_peft_model

    base = load_model(micro_folder, device="cpu").model
    adapter = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"))
    folder = tmp_path / "orphan"
    adapter.save_pretrained(folder)
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    assert config["base_model_name_or_path"] == str(micro_folder)
    config["base_model_name_or_path"] = str(tmp_path / "moved-away")
    config_path.write_text(json.dumps(config))
    return folder


def test_adapter_without_its_base_says_to_pass_base_model(orphan_adapter, micro_folder, tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_model(orphan_adapter, device="cpu")
    assert_says(error, str(orphan_adapter), "moved-away", "base_model=")
    loaded = load_model(orphan_adapter, device="cpu", base_model=str(micro_folder))
    assert loaded.is_adapter and len(loaded.tokenizer) == 64


def test_adapter_that_names_no_base_never_guesses_the_working_folder(orphan_adapter, micro_folder, monkeypatch):
    config_path = orphan_adapter / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = None
    config_path.write_text(json.dumps(config))
    monkeypatch.chdir(micro_folder)  # a model folder that must not be taken for the base
    with pytest.raises(FileNotFoundError) as error:
        load_model(orphan_adapter, device="cpu")
    assert_says(error, "base_model=")


# ---------------------------------------------------------------------------------------------
# the GPU (skipped without one)

@pytest.mark.gpu
@needs_gpu
def test_gpu_load_matches_the_cpu(micro_folder, sample_ids):
    on_cpu = load_model(micro_folder, device="cpu", dtype="float32")
    on_gpu = load_model(micro_folder, device="cuda", dtype="float32")
    assert on_gpu.device == "cuda" and next(on_gpu.model.parameters()).is_cuda
    assert torch.allclose(logits(on_gpu.model, sample_ids.cuda()).cpu(), logits(on_cpu.model, sample_ids), atol=1e-4)
    assert load_model(micro_folder).dtype in (torch.bfloat16, torch.float16)


@pytest.mark.gpu
@needs_gpu
def test_gpu_4bit_loads_or_says_why(micro_folder):
    if devices.bitsandbytes_works():
        loaded = load_model(micro_folder, quantization="4bit")
        assert loaded.device == "cuda"
    else:
        with pytest.raises(devices.UnsupportedSetupError, match="bitsandbytes"):
            load_model(micro_folder, quantization="4bit")


# ---------------------------------------------------------------------------------------------
# offline

@pytest.mark.processes
def test_importing_changes_no_variable_and_reading_a_model_turns_the_hub_off(micro_folder):
    """In a fresh interpreter without the variables: importing the kit sets none; reading a model folder sets them all
    (before transformers is imported, which reads them then), a user's own setting kept."""
    env = {name: value for name, value in os.environ.items() if name not in devices.OFFLINE_VARIABLES}
    env["TOKENIZERS_PARALLELISM"] = "true"  # a user's own setting wins
    script = ("import json, os, sys\n"
              "import arc_kit, arc_kit.cli, arc_kit.model.description, arc_kit.model.devices\n"
              "from arc_kit.model.devices import OFFLINE_VARIABLES\n"
              "imported = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}\n"
              "arc_kit.model.description.read_model_folder(sys.argv[1]).encoder()\n"
              "import huggingface_hub.constants as constants\n"
              "after = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}\n"
              "print(json.dumps([imported, after, constants.HF_HUB_OFFLINE]))\n")
    result = subprocess.run([sys.executable, "-c", script, str(micro_folder)], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    imported, after, hub_offline = json.loads(result.stdout.strip().splitlines()[-1])
    assert imported == {name: None for name in devices.OFFLINE_VARIABLES} | {"TOKENIZERS_PARALLELISM": "true"}
    assert after == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                     "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "true"}
    assert hub_offline is True


def test_offline_variables_are_set_in_this_process(micro_folder):
    import arc_kit

    load_model(micro_folder, device="cpu")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        assert os.environ.get(name) == "1"
    assert arc_kit.__version__


TOKENIZER_DAMAGE = {"tokenizer.json": '{"version": "1.0", "model":', "tokenizer.json unusable": '{"version": "1.0"}',
                    "tokenizer_config.json": '{"tokenizer_class": ', "tokenizer_config.json list": "[1, 2]"}


@pytest.mark.parametrize("damage", ["truncated", "empty", "corrupt", "config.json", *TOKENIZER_DAMAGE])
def test_a_damaged_model_folder_is_a_one_line_error_naming_it(micro_model, tmp_path, capsys, damage):
    import shutil

    from arc_kit.cli import main

    folder = Path(shutil.copytree(micro_model, tmp_path / "model"))
    weights = folder / "model.safetensors"
    if damage == "config.json":
        (folder / "config.json").write_text('{"model_type": "llama",')
    elif damage in TOKENIZER_DAMAGE:
        (folder / damage.split()[0]).write_text(TOKENIZER_DAMAGE[damage])
    else:
        data = weights.read_bytes()
        weights.write_bytes({"truncated": data[:len(data) // 2], "empty": b"", "corrupt": b"x" * 1000}[damage])
    (tmp_path / "c.json").write_text(json.dumps({"t": {"train": [{"input": [[1]], "output": [[1]]}],
                                                       "test": [{"input": [[1]]}]}}))
    status = main(["solve", "--dataset", str(tmp_path / "c.json"), "--out", str(tmp_path / "o"), "--model", str(folder),
                   "--sampler", "greedy", "--ttt-steps", "1", "--augmentations", "1", "--scoring-augmentations", "1"])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    named = str(folder / damage.split()[0]) if ".json" in damage else f"cannot read {weights}"  # before any load
    assert str(folder) in err and named in err, err
