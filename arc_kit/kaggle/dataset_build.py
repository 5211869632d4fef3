"""The Kaggle dataset that carries the kit, and the notebook folder that submits with it.

``build_dataset`` assembles the folder uploaded as a Kaggle dataset: the package as a wheel, the
wheels of whatever the kit needs that the competition image lacks or holds too old (resolved by
``wheelhouse`` against an ``ImageManifest``: by default ``kaggle_dataset/kaggle-image.json``, made
from the list Kaggle publishes), a base's package when the model is a base plus a delta, bitsandbytes
and unsloth on request (``gpu_extras``), any extra wheels, a model, ``dataset-metadata.json`` and a
README; beside it, a notebook folder (``submission.ipynb`` and ``kernel-metadata.json``) that
``kaggle kernels push`` takes as it is. Both name their owner: given, else the user's Kaggle
configuration; never a placeholder. Every wheel comes with the reason it is there. Both folders are
new, empty or made by an earlier build (``outputs``; replaced only with ``overwrite``), and the model
never lies inside the dataset folder: the build never deletes or overwrites what it did not make, the
shipped ``kaggle_dataset/`` included. This module
knows files, wheels and Kaggle's metadata; the competition run is ``kaggle``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from arc_kit.kaggle.wheelhouse import GPU_EXTRAS, ImageManifest, ShippedWheel, resolve_wheels, wheel_requirements
from arc_kit.model.bases import locate_wheel
from arc_kit.model.loading import DELTA_INDEX, default_model_path, is_delta_folder
from arc_kit.outputs import FolderKind, OutputRefused, check_folder, claim_folder, inside
from arc_kit.provenance import __version__

ROOT = Path(__file__).resolve().parents[2]
IMAGE_MANIFEST = ROOT / "kaggle_dataset" / "kaggle-image.json"  # made by `arc-kit kaggle image` from Kaggle's list
KERNEL_TEMPLATE = ROOT / "kaggle_dataset" / "kernel-metadata.json"
OWNER_FIELD = "OWNER"  # what the template holds where the build writes the owner
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "arc_kit.json", "training_log.csv", "loss_curve.png",
               "adapter_config.json", "delta.json", "plan.json", "training_call.log")
LICENCE = "other"  # Kaggle's name for "other (specified in description)": the parts have their own licences
DATASET_LICENCES = ("Licences: the arc_kit wheel is MIT (its LICENSE file); every other wheel keeps its own "
                    "licence (in its metadata); the model's weights derive from its base model and keep that "
                    "model's licence (SmolLM2-135M-Instruct: Apache-2.0).")


# what a build writes in the dataset folder and in the notebook folder beside it: all that --overwrite replaces
DATASET_KIND = FolderKind("Kaggle dataset", owned=("wheels", "model", "dataset-metadata.json", "README.md",
                                                   "submission.ipynb"), kept="a dataset folder, maybe incomplete")
NOTEBOOK_KIND = FolderKind("Kaggle notebook", owned=("submission.ipynb", "kernel-metadata.json"),
                           kept="a notebook folder, maybe incomplete")


@dataclass
class DatasetBuild:
    """What ``build_dataset`` wrote: the dataset folder, the notebook folder, and each wheel with its reason."""

    folder: Path
    notebook: Path
    wheels: list[ShippedWheel] = field(default_factory=list)
    image: str = ""  # where the image manifest came from


def kaggle_owner(given: str | None = None) -> str:
    """The Kaggle user name: ``given``, else $KAGGLE_USERNAME, else ``username`` in the API token file.

    The token file is ``$KAGGLE_CONFIG_DIR/kaggle.json`` or ``~/.kaggle/kaggle.json`` (where the
    kaggle client looks). ValueError in one line when none says.
    """
    if given:
        return given
    if os.environ.get("KAGGLE_USERNAME"):
        return os.environ["KAGGLE_USERNAME"]
    folder = Path(os.environ.get("KAGGLE_CONFIG_DIR") or Path.home() / ".kaggle")
    try:
        username = json.loads((folder / "kaggle.json").read_text()).get("username")
    except (OSError, ValueError, AttributeError):
        username = None
    if not username:
        raise ValueError(f"no Kaggle user name: pass --owner NAME, or put your API token in {folder / 'kaggle.json'} "
                         "(kaggle.com > Settings > API > Create New Token)")
    return str(username)


def _setuptools_ready() -> bool:
    """True when a setuptools that builds this project (64 or newer) is importable here."""
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 64


def build_wheel(destination: str | os.PathLike) -> Path:
    """Build the arc_kit wheel from this checkout into ``destination`` (no dependencies)."""
    if not (ROOT / "pyproject.toml").exists():
        raise FileNotFoundError("build_dataset needs an arc_kit checkout (pyproject.toml beside the package)")
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    before = set(destination.glob("*.whl"))
    # Built from a clean copy: in the checkout, setuptools reuses its build/ folder, whose copies of
    # modules deleted or renamed since would ship in the wheel.
    with tempfile.TemporaryDirectory(prefix="arc-kit-wheel-") as scratch:
        source = Path(scratch) / "source"
        shutil.copytree(ROOT / "arc_kit", source / "arc_kit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (ROOT / name).exists():
                shutil.copy2(ROOT / name, source / name)
        # With setuptools at hand no network is needed; else pip fetches it (Python 3.12 venvs lack it).
        isolation = ["--no-build-isolation"] if _setuptools_ready() else []
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
                        "--wheel-dir", str(destination), str(source)], check=True)
    built = [path for path in destination.glob("arc_kit-*.whl") if path not in before] or \
        sorted(destination.glob(f"arc_kit-{__version__}-*.whl"))
    if not built:
        raise RuntimeError("pip wheel reported success but left no arc_kit wheel")
    return built[0]


def build_dataset(out: str | os.PathLike, model: str | os.PathLike | None = None, *, owner: str | None = None,
                  slug: str = "arc-kit", title: str = "arc-kit", extra_wheels: str | os.PathLike | None = None,
                  image_manifest: str | os.PathLike | None = None, gpu_extras: bool = False,
                  overwrite: bool = False) -> DatasetBuild:
    """Assemble the Kaggle dataset folder ``out`` (wheels/, model/, metadata, README) and its notebook folder.

    ``wheels/`` holds the kit, the wheels in ``extra_wheels``, the base's package for a base-plus-delta
    model, and every package the kit (and, with ``gpu_extras``, bitsandbytes and unsloth) needs that
    the image of ``image_manifest`` (default ``IMAGE_MANIFEST``) lacks or has too old, with theirs.
    The notebook folder is ``out`` with ``-notebook`` appended. ``owner``: see ``kaggle_owner``. Both folders
    are new, empty, or (with ``overwrite``) an earlier build's, whose own files are replaced; else, or when
    the model lies inside either, OutputRefused before anything is written.
    """
    out, owner = Path(out), kaggle_owner(owner)
    model = Path(model) if model is not None else default_model_path()
    notebook_folder = out.parent / f"{out.name}-notebook"
    delta = is_delta_folder(model)
    if not (model / "config.json").exists() and not delta:
        raise FileNotFoundError(f"{model} is not a model folder")
    for folder in (out, notebook_folder):
        if inside(model, folder) or inside(folder, model):
            raise OutputRefused(f"the model {model} and the folder {folder} overlap: the build would replace the "
                                "model it copies; build into another --out, or copy the model elsewhere first")
    image = ImageManifest.read(image_manifest or IMAGE_MANIFEST)  # FileNotFoundError in one line when absent
    check_folder(out, DATASET_KIND, "kaggle build", overwrite=overwrite)
    check_folder(notebook_folder, NOTEBOOK_KIND, "kaggle build", overwrite=overwrite,
                 option=f"--out (its notebook folder, {notebook_folder.name})")
    claim_folder(out, DATASET_KIND, "kaggle build", overwrite=overwrite)
    claim_folder(notebook_folder, NOTEBOOK_KIND, "kaggle build", overwrite=overwrite,
                 option=f"--out (its notebook folder, {notebook_folder.name})")
    wheels = out / "wheels"
    kit = build_wheel(wheels)
    shipped = [ShippedWheel(kit, "the kit itself")]
    extras = {path.name for path in Path(extra_wheels).glob("*.whl")} if extra_wheels else set()
    for name in sorted(extras):
        shutil.copy2(Path(extra_wheels) / name, wheels / name)
    if delta:  # the base is built on Kaggle from its package's wheel (a carrier of the weights), read with gguf
        base = json.loads((model / DELTA_INDEX).read_text())["base"]
        base_wheel = locate_wheel(base)
        shutil.copy2(base_wheel, wheels / base_wheel.name)
        shipped.append(ShippedWheel(wheels / base_wheel.name, f"carries the weights of the base {base} (built on "
                                                                "Kaggle on first use, offline)"))
    requirements = [line for line in wheel_requirements(kit) if "extra ==" not in line]
    shipped += resolve_wheels(requirements, wheels, image)
    if gpu_extras:
        shipped += resolve_wheels(list(GPU_EXTRAS), wheels, image, asked_by="--gpu-extras")
    named = {wheel.path.name for wheel in shipped}
    shipped += [ShippedWheel(wheels / name, "from --extra-wheels") for name in sorted(extras - named)]
    _copy_model(model, out / "model")
    _write_metadata(out, owner, slug, title, kit, model)
    notebook = _write_notebook_folder(notebook_folder, owner, slug)
    return DatasetBuild(out, notebook, shipped, image.source)


def _copy_model(model: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in model.iterdir():
        if path.suffix == ".safetensors" or path.name in MODEL_FILES or path.name.endswith(".safetensors.index.json"):
            shutil.copy2(path, target / path.name)


def _write_metadata(out: Path, owner: str, slug: str, title: str, kit: Path, model: Path) -> None:
    """``dataset-metadata.json``, the README, and the notebook (also in the dataset, for uploading by hand)."""
    notebook = ROOT / "notebooks" / "submission.ipynb"
    if notebook.exists():
        shutil.copy2(notebook, out / "submission.ipynb")
    metadata = {"title": title, "id": f"{owner}/{slug}", "licenses": [{"name": LICENCE}],
                "subtitle": "arc_kit: product-of-experts ARC solver, its wheel and a model",
                "description": DATASET_LICENCES, "keywords": ["arc-prize", "abstraction-and-reasoning"]}
    (out / "dataset-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    (out / "README.md").write_text(DATASET_README.format(version=__version__, wheel=kit.name, model=model.name,
                                                         licences=DATASET_LICENCES) + "\n")


def _write_notebook_folder(folder: Path, owner: str, slug: str) -> Path:
    """The folder ``kaggle kernels push -p`` takes: the notebook and its metadata, the owner filled in."""
    folder.mkdir(parents=True, exist_ok=True)
    metadata = json.loads(KERNEL_TEMPLATE.read_text())
    metadata["id"] = metadata["id"].replace(OWNER_FIELD, owner)
    metadata["dataset_sources"] = [f"{owner}/{slug}"]
    metadata["code_file"] = "submission.ipynb"
    shutil.copy2(ROOT / "notebooks" / "submission.ipynb", folder / "submission.ipynb")
    (folder / "kernel-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return folder


DATASET_README = """# arc-kit {version}

The arc_kit package and a model, for ARC Prize notebooks that run without internet.

- `wheels/{wheel}`: the package, plus every package it needs that the competition image lacks (resolved
  against the image's package list) and any extra wheels added when the dataset was built; the notebook
  installs them all at once, offline (`pip install --no-index --no-deps --find-links wheels wheels/*.whl`).
- `model/`: the model (from `{model}`): config and safetensors weights, or a named base plus the trained
  delta (`delta.json`, `adapter_config.json`, `delta-*.safetensors`; the base is built on first use from
  its package's wheel in `wheels/`), the tokenizer, and how it was trained (`arc_kit.json`,
  `training_log.csv`, `loss_curve.png`).
- `submission.ipynb`: the competition notebook; attach this dataset and the competition, then run it.

{licences}

Made with `arc-kit kaggle build`; see kaggle_dataset/README.md in the arc_kit repository."""
