"""A competitor's own model: every folder format the kit takes loads and solves, and check-model refuses what
would fail on Kaggle, in one line.

Each format is a tiny replica built here with random weights and the files and config keys of the real
thing: the authors' releases (a vocabulary shrunk their way, a fast tokenizer JSON with empty merges and no
tokenizer.model, a config.json with a bitsandbytes quantization_config, weights stored in 4 bits), a
full-vocabulary Llama / Mistral / Qwen2 / Qwen3 folder (a byte-level BPE that merges digits, as theirs do:
shrunk as it loads, nothing written), a base plus a peft adapter, and a folder holding only
``pytorch_model.bin``. So that solving takes seconds, each replica's embeddings and head are set to write
"7", a newline and eos after the output prefix (its layers stay random and small beside the embeddings):
every stage (test-time training, generation, scoring, selection) sees real candidates: the 1x1 grid 7 in each
augmented view, its colour mapped back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_kaggle import make_wheel
from test_shrinking import ENGLISH, FORMAT, train_byte_level_bpe
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BitsAndBytesConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

from arc_kit import __version__
from arc_kit.cli import main
from arc_kit.data.datasets import load_tasks
from arc_kit.data.submission import submission_problems
from arc_kit.kaggle.model_input import MODEL_SOURCE_FILE, ModelHandle, find_model_input, notebook_model
from arc_kit.method.solver import Solver
from arc_kit.model.checks import architecture_of
from arc_kit.model.loading import load_model
from arc_kit.model.memory import parameters, weight_bytes
from arc_kit.model.shrinking import save_shrunk
from arc_kit.run.model_check import check_model
from arc_kit.run.record_json import to_json
from arc_kit.run.jobs import solve
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings

TASK_IDS = ["66e6c45b", "be03b35f"]  # two small ARC-AGI-1 evaluation tasks (one test input each)
SETTINGS = SolveSettings(sampler=SamplerSettings("dfs", threshold=0.1, max_forward_calls=50), inference_augmentations=2,
                         scoring_augmentations=2, ttt=TEST_TIME_TRAINING.replace(steps=1), max_len=2048)
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=8192, tie_word_embeddings=False)
CONFIGS = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("arc-agi-1/evaluation").select(TASK_IDS)


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE that merges digits (Llama 3's, Mistral NeMo's and Qwen's kind), specials at the end."""
    training = load_tasks("arc-agi-1/training").tasks()[:8]
    texts = [FORMAT.task_text(t.train, t.test[0].input, t.test[0].output, bos="", eos="") for t in training]
    return train_byte_level_bpe(texts + ENGLISH * 4)


def single_id(tokenizer, text: str) -> int:
    (token,) = tokenizer(text, add_special_tokens=False)["input_ids"]
    return token


def writes_seven(model, tokenizer, seed: int = 0):
    """The model, set to write "7", a newline and eos after the output prefix's last character ("O").

    Each token's embedding is a random direction of length 100, far above what the random layers add, so the
    last hidden state points along the current token's embedding; the head's row of each next token is the
    current token's direction.
    """
    chain = [("O", "7"), ("7", "\n"), ("\n", None)]
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight
        embeddings.copy_(torch.randn(embeddings.shape, generator=generator))
        embeddings.mul_(100 / embeddings.norm(dim=1, keepdim=True))
        head = model.get_output_embeddings().weight
        head.zero_()
        for current, following in chain:
            row = tokenizer.eos_token_id if following is None else single_id(tokenizer, following)
            head[row] += embeddings[single_id(tokenizer, current)] / 100 * 20
    return model


def full_vocabulary_model(kind: str, tokenizer, seed: int = 0):
    """A tiny randomly initialised model of ``kind`` over the whole BPE vocabulary (its rows padded to a multiple of
    64, as Qwen's and others' are: a model class's tokenizer may add a token of its own), writing 7s."""
    config = CONFIGS[kind](vocab_size=-(-(len(tokenizer) + 1) // 64) * 64, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                           **SIZES, **({"head_dim": 16} if kind == "qwen3" else {}))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    return writes_seven(model, tokenizer)


def save_full_vocabulary_folder(kind: str, tokenizer, folder: Path) -> Path:
    """What a Hugging Face download of such a model holds: config, generation config, safetensors, tokenizer."""
    full_vocabulary_model(kind, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_authors_release(kind: str, tokenizer, folder: Path, scratch: Path) -> Path:
    """A replica of the authors' releases: the vocabulary shrunk their way, then the weights stored in 4 bits
    by bitsandbytes (nf4, double quantization, bfloat16 compute), with the files they ship."""
    save_shrunk(full_vocabulary_model(kind, tokenizer), tokenizer, scratch)
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                      bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(scratch, quantization_config=quantization, device_map="cpu")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(scratch).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["torch_dtype"] = config.pop("dtype", "bfloat16")  # the key their transformers (4.4x) wrote
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                                "pad_token": "<pad>"}))
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def solves_two_tasks(folder: Path, tasks, out: Path) -> None:
    """The whole method on the two tasks from ``folder``: every task gets model work and 1x1 candidates."""
    loaded = load_model(folder, device="cpu")
    run = solve(tasks, Solver.from_loaded(loaded, SETTINGS), out, progress=False)
    assert submission_problems(json.loads((out / "submission.json").read_text()), tasks) == []
    for task_id, record in run.records.items():
        test = to_json(record)["test"][0]
        assert record.got_model_work and record.error is None and to_json(record)["ttt"]["steps"] == 1, task_id
        grids = [candidate["grid"] for candidate in test["candidates"]]  # 7 under each view's colours, mapped back
        assert grids and all(len(grid) == len(grid[0]) == 1 for grid in grids), (task_id, grids)
        assert test["attempts"][0] in grids


# -- each format loads and solves ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(CONFIGS))
def test_a_full_vocabulary_folder_is_shrunk_as_it_loads_and_solves_with_nothing_written(kind, bpe, tasks, tmp_path):
    folder = save_full_vocabulary_folder(kind, bpe, tmp_path / "downloads" / kind)
    before, beside = files_of(folder), sorted(path.name for path in folder.parent.iterdir())
    loaded = load_model(folder, device="cpu")
    assert loaded.model.config.vocab_size == len(loaded.tokenizer) < 100 < len(bpe)  # the authors' set
    assert loaded.model.config.model_type == kind
    solves_two_tasks(folder, tasks, tmp_path / "run")
    assert files_of(folder) == before and sorted(path.name for path in folder.parent.iterdir()) == beside


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "mistral"])  # the 3B Llama and the 8B Mistral NeMo releases
def test_the_authors_4bit_release_loads_on_the_cpu_and_solves(kind, bpe, tasks, tmp_path, caplog):
    from arc_kit.model.devices import FOUR_BIT_ON_CPU

    folder = save_authors_release(kind, bpe, tmp_path / f"{kind}-ARChitects-bnb-4bit", tmp_path / "shrunk")
    assert not (folder / "tokenizer.model").exists()
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    assert tokenizer["model"]["type"] == "BPE" and tokenizer["model"]["merges"] == []
    assert json.loads((folder / "config.json").read_text())["quantization_config"]["quant_method"] == "bitsandbytes"
    with caplog.at_level("WARNING", logger="arc_kit.model.loading"):
        loaded = load_model(folder, device="cpu")
    assert f"{folder}: {FOUR_BIT_ON_CPU}" in caplog.text  # the slowdown said where it starts
    assert type(loaded.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    stored = sum(tensor.numel() * tensor.element_size() for tensor in loaded.model.state_dict().values())
    estimated = weight_bytes(architecture_of(json.loads((folder / "config.json").read_text())), 4)  # float32 here
    assert abs(estimated - stored) < 0.05 * stored, (estimated, stored)  # check-model's weights, from the config
    solves_two_tasks(folder, tasks, tmp_path / "run")
    check = check_model(folder)
    assert check.go and check.four_bit and "engine: " in check.report(), check.report()
    assert f"warning: {FOUR_BIT_ON_CPU}" in check.lines  # no GPU here: check-model says it too


def test_a_base_plus_a_peft_adapter_folder_solves(bpe, tasks, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = save_shrunk(full_vocabulary_model("llama", bpe), bpe, tmp_path / "base")
    model = AutoModelForCausalLM.from_pretrained(base)
    adapter = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    adapter.save_pretrained(tmp_path / "adapter")
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp_path / "adapter")
    written = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert written["base_model_name_or_path"] == str(base)
    solves_two_tasks(tmp_path / "adapter", tasks, tmp_path / "run")
    assert check_model(tmp_path / "adapter").go


def test_a_folder_with_only_pytorch_model_bin_solves(bpe, tasks, tmp_path):
    model = full_vocabulary_model("qwen2", bpe)
    folder = tmp_path / "bin"
    model.config.save_pretrained(folder)
    bpe.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # plain tensors: read with weights_only=True
    assert not list(folder.glob("*.safetensors"))
    solves_two_tasks(folder, tasks, tmp_path / "run")


# -- check-model refuses what would fail on Kaggle, in one line ---------------------------------------------

@pytest.fixture(scope="module")
def good_folder(bpe, tmp_path_factory):
    return save_shrunk(full_vocabulary_model("llama", bpe), bpe, tmp_path_factory.mktemp("good") / "model")


class Evil:
    def __reduce__(self):
        return (print, ("this ran",))


def without_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def truncated(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:len(data) - 1000])


def absurd_layers(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 100000}))


def absurd_vocabulary(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 10 ** 12}))


def a_pickle_that_runs_code(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Evil()}, folder / "pytorch_model.bin")


def a_tokenizer_that_cannot_write_the_format(folder: Path) -> None:
    data = json.loads((folder / "tokenizer.json").read_text())
    data["model"]["vocab"] = {token: index for token, index in data["model"]["vocab"].items()
                              if token not in ("5", "7")}  # two digits gone: no grid can be written
    (folder / "tokenizer.json").write_text(json.dumps(data))


def without_tokenizer_files(folder: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)


REFUSALS = {without_weights: "holds no weights", truncated: "cut short", absurd_layers: "num_hidden_layers is 100,000",
            absurd_vocabulary: "vocab_size is 1,000,000,000,000", a_pickle_that_runs_code: "is not plain tensors",
            a_tokenizer_that_cannot_write_the_format: "cannot write the text format",
            without_tokenizer_files: "no tokenizer files: "}


@pytest.mark.parametrize("damage", list(REFUSALS), ids=lambda damage: damage.__name__)
def test_check_model_refuses_in_one_line_and_load_model_too(damage, good_folder, tmp_path, capsys):
    folder = Path(shutil.copytree(good_folder, tmp_path / "model"))
    damage(folder)
    assert main(["check-model", str(folder)]) == 1
    captured = capsys.readouterr()
    verdict = captured.out.strip().splitlines()[-1]
    assert verdict.startswith("no-go: ") and REFUSALS[damage] in verdict, captured.out
    assert "Traceback" not in captured.out + captured.err and "this ran" not in captured.out
    assert "weights_only=False" not in captured.out and "weights_only" not in verdict
    (tmp_path / "c.json").write_text(json.dumps({"t": {"train": [{"input": [[1]], "output": [[1]]}],
                                                       "test": [{"input": [[1]]}]}}))
    status = main(["solve", "--dataset", str(tmp_path / "c.json"), "--model", str(folder), "--out",
                   str(tmp_path / "run"), "--sampler", "greedy", "--ttt-steps", "1"])
    error = capsys.readouterr().err
    assert status == 1 and len(error.strip().splitlines()) == 1 and "Traceback" not in error, error
    assert REFUSALS[damage] in error and "this ran" not in error and "weights_only" not in error, error


def test_check_model_of_a_good_folder_says_go_with_the_memory_table(good_folder, capsys):
    assert main(["check-model", str(good_folder), "--gpu", "T4"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith(f"go: {good_folder} (llama") and "of a T4's 15.0)" in printed[-1]
    assert any(line.startswith("tokenizer: writes the text format one token a symbol") for line in printed)
    assert "engine: runs it" in printed
    header = next(line for line in printed if line.startswith("memory, GiB"))
    assert "L4 24 GB" in header and "T4 16 GB" in header and "H100 80 GB" in header


def test_check_model_says_a_full_vocabulary_is_shrunk_as_it_loads_with_one_parameter_count(bpe, tmp_path):
    import re

    folder = save_full_vocabulary_folder("qwen3", bpe, tmp_path / "qwen3")
    check = check_model(folder)
    assert check.go, check.report()
    assert "shrunk as it loads to the authors'" in check.report() and "nothing written" in check.report()
    counts = set(re.findall(r"([\d.]+ [KMB]) parameters", check.report()))
    assert len(counts) == 1, check.report()  # the architecture's line and the verdict count the same model
    config = json.loads((folder / "config.json").read_text())
    assert f"(of {config['vocab_size']:,} in its config, shrunk as it loads)" in check.report()


def eight_billion_folder(good_folder: Path, folder: Path) -> Path:
    """Mistral NeMo 8B's sizes (the authors' vocabulary of 77) with the tiny model's tokenizer, and for weights only
    the embeddings (zeros): enough for every check, which reads headers, never the whole model."""
    from safetensors.torch import save_file

    shutil.copytree(good_folder, folder)
    nemo = dict(model_type="mistral", architectures=["MistralForCausalLM"], num_hidden_layers=40, hidden_size=4096,
                intermediate_size=11520, num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=77,
                max_position_embeddings=8192, tie_word_embeddings=False, hidden_act="silu", torch_dtype="bfloat16")
    (folder / "config.json").write_text(json.dumps(nemo))
    save_file({"model.embed_tokens.weight": torch.zeros(77, 4096, dtype=torch.bfloat16)}, folder / "model.safetensors")
    return folder


def test_check_model_weighs_an_8b_against_the_gpus_and_says_what_would_fit(good_folder, tmp_path, capsys):
    folder = eight_billion_folder(good_folder, tmp_path / "nemo-8b")
    assert main(["check-model", str(folder)]) == 1  # 16-bit weights, training without checkpointing: not on an L4
    printed = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("architecture: mistral: 40 layers") and "7.34 B parameters" in line for line in printed)
    assert printed[-1].startswith("no-go: the weights and test-time training need") and "an L4 has 22.5" in printed[-1]
    assert "recompute test-time training's activations" in printed[-1]
    assert main(["check-model", str(folder), "--quantization", "4bit", "--ttt-checkpointing"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith(f"go: {folder} (mistral, 7.34 B parameters, 4-bit;"), printed[-1]
    assert any(line.startswith("warning: with the KV cache at the full budget") for line in printed)
    assert main(["check-model", str(folder), "--gpu", "H100"]) == 0  # 80 GB: room for the training as it is
    build = check_model(folder, strict_memory=False)  # kaggle build: it cannot know the notebook's settings
    assert build.go and any("in the notebook, recompute" in line for line in build.lines), build.report()


# -- what the docs say of 4 bits, engines and the check, against what the code does -----------------------------

ROOT = Path(__file__).resolve().parents[1]


def flat(path: Path) -> str:
    """A document's text with its line breaks and runs of spaces as single spaces."""
    return " ".join(path.read_text().split())


def test_the_readmes_check_model_example_is_what_check_model_says_of_the_8b_release_stand_in(good_folder, tmp_path):
    folder = eight_billion_folder(good_folder, tmp_path / "nemo-8b")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                                     "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(config))  # stored in 4 bits, as the release is
    readme = (ROOT / "kaggle_dataset" / "README.md").read_text()
    shown = readme[readme.index("architecture: mistral: 40 layers"):]
    shown = shown[:shown.index("```")].strip().splitlines()
    check = check_model(folder)
    assert shown == check.report().splitlines()[2:]  # the lines after the folder's own (its path, its files)
    assert "engine: runs it" in shown  # 4-bit weights on the engine, as both READMEs say
    assert "and the engine runs them so" in flat(ROOT / "kaggle_dataset" / "README.md")
    assert "in full precision or in bitsandbytes 4 bits" in flat(ROOT / "README.md")


def test_what_the_readmes_say_of_the_engines_models_and_memory_is_what_the_code_does():
    import re

    from arc_kit.method.weights import SUPPORTED_TYPES
    from arc_kit.model.memory import needs

    for path, pattern in ((ROOT / "README.md", r"It runs Llama-family models \(([^)]*)\), in full precision or in "
                                               r"bitsandbytes 4 bits"),
                          (ROOT / "kaggle_dataset" / "README.md",
                           r"The kit runs any Llama-family causal LM \(([^)]*)\)")):
        named = re.search(pattern, flat(path)).group(1).split(", ")
        assert {name.lower() for name in named} - {"smollm2"} == set(SUPPORTED_TYPES), path  # SmolLM2 is a Llama
    assert "The engine keeps a second copy of the weights (merged) in memory, except over 4-bit weights, where " \
           "it copies only the norms, biases and LoRA" in flat(ROOT / "README.md")
    nemo = architecture_of(dict(model_type="mistral", num_hidden_layers=40, hidden_size=4096, intermediate_size=11520,
                                num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=77,
                                max_position_embeddings=8192, tie_word_embeddings=False))
    sixteen, four = dict(needs(nemo).rows), dict(needs(nemo, four_bit=True).rows)
    assert sixteen["engine's copy of the weights"] == sixteen["weights (16-bit)"]
    assert four["engine's norms, biases, LoRA (4-bit read in place)"] < four["weights (4-bit)"] / 5


# -- the sizes behind the memory table ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(CONFIGS))
@pytest.mark.parametrize("tied", [False, True])
def test_the_parameter_count_from_the_config_is_the_models(kind, tied):
    config = CONFIGS[kind](vocab_size=77, **{**SIZES, "tie_word_embeddings": tied},
                           **({"head_dim": 16} if kind == "qwen3" else {}))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    counted = sum(parameter.numel() for parameter in model.parameters())  # tied: one tensor, counted once
    assert parameters(architecture_of(config.to_dict())).total == counted


# -- a Kaggle Model as the notebook's input ------------------------------------------------------------------

def test_a_kaggle_model_handle_reads_and_a_bad_one_is_refused_in_one_line():
    handle = ModelHandle.parse("someone/arc-model/Transformers/nemo-8b-4bit/3")
    assert (handle.owner, handle.model, handle.framework, handle.variation, handle.version) == \
        ("someone", "arc-model", "Transformers", "nemo-8b-4bit", 3)
    assert str(handle) == "someone/arc-model/Transformers/nemo-8b-4bit/3"
    assert handle.mount_parts == ("arc-model", "transformers", "nemo-8b-4bit", "3")
    assert ModelHandle.parse("someone/arc-model/transformers/tiny").version is None
    for bad in ("someone/arc-model", "a/b/c/d/e/f", "someone/arc-model/transformers/tiny/latest", "a/b c/d/e"):
        with pytest.raises(ValueError) as error:
            ModelHandle.parse(bad)
        assert "\n" not in str(error.value) and bad in str(error.value)


def mount(root: Path, parts: str, source: Path) -> Path:
    """A model folder where Kaggle mounts a Kaggle Model (``/kaggle/input/MODEL/FRAMEWORK/VARIATION/VERSION``)."""
    return Path(shutil.copytree(source, root / parts))


def test_the_notebook_finds_its_model_below_the_input(good_folder, tmp_path):
    root = tmp_path / "input"
    (root / "competitions" / "arc-prize-2026-arc-agi-2").mkdir(parents=True)
    dataset = root / "datasets" / "someone" / "arc-kit"
    (dataset / "wheels").mkdir(parents=True)
    first = mount(root, "arc-model/transformers/tiny/1", good_folder)
    assert notebook_model(None, dataset, root) == first  # the one model below the input
    newest = mount(root, "arc-model/transformers/tiny/2", good_folder)
    with pytest.raises(FileNotFoundError, match="2 models below .*: set MODEL"):
        notebook_model(None, dataset, root)
    (dataset / MODEL_SOURCE_FILE).write_text(json.dumps({"model_source": "someone/arc-model/transformers/tiny"}))
    assert notebook_model(None, dataset, root) == newest  # the dataset's handle, no version: the newest
    assert notebook_model("someone/arc-model/transformers/tiny/1", dataset, root) == first
    assert notebook_model(str(first), dataset, root) == first  # a folder
    with pytest.raises(FileNotFoundError, match=r"the Kaggle Model someone/arc-model/transformers/big is not below"):
        notebook_model("someone/arc-model/transformers/big", dataset, root)
    shutil.copytree(good_folder, dataset / "model")
    assert notebook_model(None, dataset, root) == dataset / "model"  # a model in the dataset comes first
    deeper = mount(tmp_path / "newer", "models/someone/arc-model/transformers/tiny/4", good_folder)
    assert find_model_input(tmp_path / "newer", ModelHandle.parse("someone/arc-model/transformers/tiny")) == deeper


def test_kaggle_build_of_a_no_go_model_stops_before_writing_anything(good_folder, tmp_path, capsys):
    folder = Path(shutil.copytree(good_folder, tmp_path / "model"))
    absurd_layers(folder)
    assert main(["kaggle", "build", "--out", str(tmp_path / "dataset"), "--model", str(folder), "--owner", "a"]) == 1
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("no-go: ") and "num_hidden_layers is 100,000" in printed[-1]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]  # no dataset, no notebook folder


@pytest.mark.processes
@pytest.mark.slow
def test_kaggle_build_for_a_kaggle_model_ships_no_model_and_names_it_in_the_kernel_metadata(good_folder, tmp_path,
                                                                                            capsys):
    local = Path(shutil.copytree(good_folder, tmp_path / "local-copy"))
    config = json.loads((local / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    (local / "config.json").write_text(json.dumps(config))  # its weights said to be 4-bit: bitsandbytes must ship
    extra = tmp_path / "extra"
    bitsandbytes = make_wheel(extra, "bitsandbytes", "0.50.2")
    out = tmp_path / "arc-kit"
    handle = "someone/arc-model/transformers/tiny-4bit/2"
    assert main(["kaggle", "build", "--out", str(out), "--owner", "someone", "--model-source", handle, "--model",
                 str(local), "--extra-wheels", str(extra)]) == 0
    printed = capsys.readouterr().out
    assert f"go: {local} (llama" in printed and "bitsandbytes 4-bit nf4" in printed
    assert f"  {bitsandbytes.name}: not on the image (needed by the model's 4-bit weights)\n" in printed
    assert not (out / "model").exists()
    assert json.loads((out / MODEL_SOURCE_FILE).read_text()) == {"model_source": handle}
    assert sorted(path.name for path in (out / "wheels").iterdir()) == sorted(
        [f"arc_kit-{__version__}-py3-none-any.whl", bitsandbytes.name])  # no base package, and no gguf: no base
    description = json.loads((out / "dataset-metadata.json").read_text())["description"]
    assert f"ships no model: the notebook reads the Kaggle Model {handle}" in description
    assert "Apache" not in description
    kernel = json.loads((tmp_path / "arc-kit-notebook" / "kernel-metadata.json").read_text())
    assert kernel["model_sources"] == [handle] and kernel["dataset_sources"] == ["someone/arc-kit"]
    assert f"the notebook reads the Kaggle Model `{handle}`" in (out / "README.md").read_text()
    assert files_of(local)  # the local copy: checked, never shipped
    # without the local copy nothing tells whether its weights are 4-bit: bitsandbytes ships all the same
    assert main(["kaggle", "build", "--out", str(out), "--owner", "someone", "--model-source", handle,
                 "--extra-wheels", str(extra), "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert f"  {bitsandbytes.name}: not on the image (needed by the Kaggle Model {handle}, not here to check: its " \
           "weights may be in 4 bits)\n" in printed


def test_a_kaggle_model_without_its_version_is_refused_before_anything_is_written(tmp_path, capsys):
    assert main(["kaggle", "build", "--out", str(tmp_path / "arc-kit"), "--owner", "someone", "--model-source",
                 "someone/arc-model/transformers/tiny"]) == 1
    error = capsys.readouterr().err.strip()
    assert error == ("arc-kit kaggle: error: --model-source someone/arc-model/transformers/tiny names no version: the "
                     "notebook's model_sources takes someone/arc-model/transformers/tiny/VERSION (the number on the "
                     "model's page, 1 for a first upload)")
    assert list(tmp_path.iterdir()) == []


def test_every_notebook_setting_and_its_environment_variable_is_in_the_readme_and_no_other():
    import re

    root = Path(__file__).resolve().parents[1]
    notebook = (root / "notebooks" / "submission.py").read_text()
    declared = re.findall(r'^([A-Z_]+) = setting\("([A-Z_]+)", ', notebook, flags=re.MULTILINE)
    readme = (root / "kaggle_dataset" / "README.md").read_text()
    table = readme[readme.index("| setting | environment variable |"):]
    table = table[:table.index("\n\n")]
    documented = [tuple(cell.strip().strip("`") for cell in line.split("|")[1:3]) for line in table.splitlines()[2:]]
    assert documented == [(name, f"ARC_KIT_{variable}") for name, variable in declared]
    assert len(declared) >= 10 and notebook.index("def setting(") < notebook.index("import glob")  # the top cell
