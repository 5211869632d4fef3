"""What a Kaggle image holds, and the wheels a dataset must add to it so that the kit runs offline.

An ``ImageManifest`` lists an image's packages and versions, its Python and the wheel platforms
its pip accepts. One comes from the list Kaggle publishes with its image (``manifest_from_freeze``:
a ``pip freeze`` of the CPU image; the GPU image holds the same versions with torch's CUDA build),
or from a notebook run on the image itself (the recipe cell in ``kaggle_dataset/README.md``).
``resolve_wheels`` puts into a folder a wheel of every requirement the image lacks or holds at a
version the requirement rejects, then of theirs, each with the reason it is there (``ShippedWheel``),
for the image's Python and platform. Packages the image's CUDA stack is made of (torch and its kin)
are never shipped: a second torch in the wheels would replace the image's CUDA build, so a
requirement on another one is an error in one line. This module knows wheels, pip and version
specifiers; nothing of models.
"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from arc_kit.data.jsonio import check_regular_file, read_file
from arc_kit.data.tasks import InvalidDataError
from arc_kit.outputs import copy_file, kit_subfolder

LIST_BYTES = 1 << 24  # the most an image manifest or a pip freeze list may hold (Kaggle's: ~20 kB)
METADATA_BYTES = 1 << 22  # the most a wheel's METADATA may hold (the largest are ~100 kB)

# bitsandbytes (4-bit loading, 8-bit AdamW) and unsloth, for users who bring a large model in 4 bits
GPU_EXTRAS = ("bitsandbytes>=0.45", "unsloth")
# What the GPU image holds beyond the CPU image's list: what torch's CUDA build requires (torch 2.10.0's
# Linux wheel pins triton 3.6.0; its nvidia-* libraries are of no concern to the kit's resolution)
CUDA_BUILD_PACKAGES = {"2.10.0": {"triton": "3.6.0"}}
# Never shipped: the image's own builds, tied to its CUDA (a wheel of one would replace them)
NEVER_SHIPPED = ("torch", "torchvision", "torchaudio", "triton")
# The wheel platforms pip accepts on Kaggle's image (Ubuntu 22.04: glibc 2.35, x86-64), the legacy names last
LINUX_PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)), "manylinux2014_x86_64",
                   "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")


@dataclass(frozen=True)
class ImageManifest:
    """What a Kaggle image has: package versions, Python, wheel platforms (recorded there, or Kaggle's list)."""

    packages: dict[str, str]  # canonical name (PEP 503) -> version
    python: str
    platforms: tuple[str, ...] = ()
    recorded: str = ""
    source: str = ""

    @classmethod
    def read(cls, path: str | os.PathLike) -> ImageManifest:
        """The manifest in ``path``; ValueError in one line when it is not one (or no regular file, or larger than
        any manifest: ``LIST_BYTES``)."""
        if not Path(path).exists():
            raise FileNotFoundError(f"no image manifest at {path}")
        text = _read_small(path, "Kaggle image manifest")
        try:
            data = json.loads(text)
            packages = {canonicalize_name(name): str(version) for name, version in data["packages"].items()}
            return cls(packages, str(data["python"]), tuple(data.get("platforms") or ()), str(data.get("recorded", "")),
                       str(data.get("source") or path))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
            raise ValueError(f"{path} is no image manifest ({type(error).__name__}: {error}); write one with "
                             "`arc-kit kaggle image` or the recipe in kaggle_dataset/README.md") from None

    def to_json(self) -> dict:
        return {"recorded": self.recorded, "source": self.source, "python": self.python,
                "platforms": list(self.platforms), "packages": dict(sorted(self.packages.items()))}

    def satisfies(self, requirement) -> bool:
        """True when the image has a version of ``requirement`` (a ``packaging`` Requirement) that it accepts."""
        version = self.packages.get(canonicalize_name(requirement.name))
        if version is None:
            return False
        try:
            return requirement.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False


def manifest_from_freeze(path: str | os.PathLike, python: str = "3.12", *, gpu: bool = True,
                         recorded: str = "", platforms: tuple[str, ...] = LINUX_PLATFORMS) -> ImageManifest:
    """The manifest of the image whose ``pip freeze`` is in ``path`` (Kaggle's ``installed_cpu_packages.txt``).

    ``gpu``: the GPU image, which holds the same versions with torch's CUDA build: a ``+cpu`` local
    version is dropped. Lines that pin no version (``name @ url``, comments) are left out.
    """
    packages = {}
    for line in _read_small(path, "pip freeze list").decode("utf-8", "replace").splitlines():
        name, separator, version = line.strip().partition("==")
        if separator and name and not name.startswith("#"):
            packages[canonicalize_name(name)] = version.split("+")[0] if gpu and version.endswith("+cpu") else version
    if not packages:
        raise ValueError(f"{path} holds no `name==version` line: not a pip freeze")
    if gpu:
        packages = {**CUDA_BUILD_PACKAGES.get(packages.get("torch", ""), {}), **packages}
    return ImageManifest(packages, python, tuple(platforms), recorded, f"{Path(path).name} (pip freeze)"
                         + (", GPU image (torch's CUDA build)" if gpu else ""))


@dataclass(frozen=True)
class ShippedWheel:
    """A wheel in the dataset and why it is there (one line)."""

    path: Path
    reason: str


def _read_small(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``LIST_BYTES``; ValueError in one line for anything else (a
    FIFO, a device, a folder, a file larger than any ``what``)."""
    try:
        return read_file(path, LIST_BYTES, what)
    except InvalidDataError as error:
        raise ValueError(f"{path}: {error.problems[0]}" if error.source else error.problems[0]) from None


def check_wheel(path: Path) -> Path:
    """``path`` when it is a wheel: a regular file named as one (NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl), a zip
    archive holding its ``.dist-info/METADATA`` of a sane size; ValueError in one line for anything else."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        raise ValueError(f"{path} is not named as a wheel is (NAME-VERSION-PYTHON-ABI-PLATFORM.whl)") from None
    _metadata_of(path)
    return path


def _metadata_of(wheel: Path) -> str:
    """The text of a wheel's ``METADATA``; ValueError in one line when ``wheel`` is no wheel (a FIFO, random bytes,
    a zip without it, a member larger than any metadata)."""
    try:
        check_regular_file(wheel, "wheel")
    except InvalidDataError as error:
        raise ValueError(error.problems[0]) from None
    try:
        with zipfile.ZipFile(wheel) as archive:
            found = [item for item in archive.infolist() if item.filename.endswith(".dist-info/METADATA")]
            if not found or found[0].file_size > METADATA_BYTES:
                raise ValueError(f"{wheel} is no wheel: it holds no .dist-info/METADATA of a wheel's size")
            return archive.read(found[0]).decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as error:
        raise ValueError(f"{wheel} is no wheel (a zip archive): {error}") from None


def wheel_requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` headers of a wheel's metadata (ValueError in one line for a file that is no wheel)."""
    return [line.strip() for line in email.message_from_string(_metadata_of(wheel)).get_all("Requires-Dist", [])]


def resolve_wheels(requirements: list[str], folder: Path, image: ImageManifest,
                   asked_by: str = "arc_kit") -> list[ShippedWheel]:
    """Put into ``folder`` a wheel of every requirement the image lacks (or has too old), and of theirs.

    A wheel already in ``folder`` (an extra wheel, say) that fits is used as it is; the rest come from
    ``pip download --no-deps`` for the image's Python and platforms (offline: RuntimeError in one
    line). Returns the wheels the image needs, in the order they were resolved, each with its reason.
    """
    environment = {"python_version": ".".join(image.python.split(".")[:2]), "python_full_version": image.python,
                   "extra": "", "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                   "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    queue, seen, needed = [(line, asked_by) for line in requirements], set(), []
    while queue:
        line, parent = queue.pop(0)
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue  # an extra's, or another Python's or platform's
        name = canonicalize_name(requirement.name)
        if name in seen or image.satisfies(requirement):
            continue
        if name in NEVER_SHIPPED:
            found = image.packages.get(name, "none")
            raise RuntimeError(f"{parent} needs {requirement}, the image has {name} {found}: the kit never ships a "
                               f"second {name} (it would replace the image's CUDA build); choose a version of {parent} "
                               "made for the image's")
        seen.add(name)
        wheel = wheel_in(folder, requirement) or download_wheel(requirement, folder, image)
        have = image.packages.get(name)
        why = f"the image has {have}, {parent} needs {requirement.specifier}" if have else \
            f"not on the image (needed by {parent})"
        needed.append(ShippedWheel(wheel, why))
        queue.extend((child, requirement.name) for child in wheel_requirements(wheel))
    return needed


def wheel_in(folder: Path, requirement) -> Path | None:
    """A wheel in ``folder`` that satisfies ``requirement`` (the first by name), or None."""
    for path in sorted(folder.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if canonicalize_name(name) == canonicalize_name(requirement.name) and \
                requirement.specifier.contains(version, prereleases=True):
            return path
    return None


def download_wheel(requirement, folder: Path, image: ImageManifest) -> Path:
    """``pip download --no-deps`` of ``requirement`` for the image into ``folder``; the wheel."""
    target = ["--only-binary=:all:", "--python-version", ".".join(image.python.split(".")[:2])]
    for platform_tag in image.platforms:
        target += ["--platform", platform_tag]
    with tempfile.TemporaryDirectory(prefix="arc-kit-download-") as scratch:  # aside, then copied into the folder
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
                   *(target if image.platforms else []), "--dest", scratch, str(requirement)]
        result = subprocess.run(command, capture_output=True, text=True)
        wheel = wheel_in(Path(scratch), requirement) if result.returncode == 0 else None
        if wheel is None:  # nothing, a source archive or the wrong thing
            raise RuntimeError(f"cannot download a wheel of {requirement} (offline?): put one in the --extra-wheels "
                               "folder and build again")
        return copy_file(wheel, kit_subfolder(folder) / wheel.name)
