"""An environment of the Kaggle image's package versions on this machine, and a notebook run in a copy of it.

``image_environment`` makes, once per set of versions (kept in the kit's cache), a virtual environment
holding what the kit and the submission notebook run on (``IMAGE_PACKAGES``: transformers, peft, ...,
nbclient, ipykernel) at the versions of the image's package list (``kaggle_dataset/kaggle-image.json``),
installed with uv from the package index, the image's versions as constraints. Simulated where this
machine is not Kaggle's: its Python is this one's (Kaggle's is 3.12), and torch is this environment's
build, linked in by a ``.pth`` file with its CUDA libraries if it has any (no index has the image's CUDA
build for every machine, and a CPU machine runs the CPU one). ``fresh_copy`` copies it for one run (hard
links where the file system allows: seconds, no space), so that the notebook installs a dataset's wheels
as on Kaggle into an environment of the image's packages alone, and the kept one never changes.
``start_notebook`` runs a notebook there through nbclient, its printed lines streamed as they come.

Knows uv, virtual environments and nbclient; nothing of models, datasets or tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from importlib.metadata import requires
from pathlib import Path

from arc_kit.model.devices import UnsupportedSetupError

# What the kit and the notebook run on; uv takes the rest of the image's versions as constraints.
IMAGE_PACKAGES = ("transformers", "tokenizers", "safetensors", "huggingface-hub", "peft", "accelerate", "numpy",
                  "pandas", "matplotlib", "tqdm", "filelock", "packaging", "jupytext", "nbclient", "nbformat",
                  "ipykernel", "jupyter-client", "pyyaml", "ray")  # ray: a run's workers, the image's own
NOT_PINNED = ("torch", "setuptools", "pip")  # torch is linked in; setuptools: torch 2.13's metadata asks for >= 77
# Linked from this environment rather than installed: torch and the libraries of its build (CUDA's, triton)
LINKED = ("torch", "torchgen", "functorch", "nvidia", "triton", "cuda")
COMPLETE = "complete"  # written last: an environment without it is rebuilt

# Run by the environment's Python (the kit is not installed there yet): the notebook through nbclient, every
# printed line passed on as it comes.
RUN_NOTEBOOK = """
import sys
import nbclient, nbformat

class Streaming(nbclient.NotebookClient):
    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        if msg.get("msg_type") == "stream":
            print(content.get("text", ""), end="", flush=True)
        elif msg.get("msg_type") == "error":
            print(f"the notebook raised in cell {cell_index}: {content.get('ename')}: {content.get('evalue')}",
                  flush=True)
        return super().output(outs, msg, display_id, cell_index)

notebook = nbformat.read(sys.argv[1], as_version=4)
Streaming(notebook, kernel_name="python3", timeout=None).execute()
"""


class ImageEnvironmentError(UnsupportedSetupError):
    """The image's environment cannot be made here (no uv, no index, a version that does not install): one line."""


def image_environment(root: str | os.PathLike, manifest: str | os.PathLike) -> Path:
    """The Python of the environment of ``manifest``'s versions below ``root`` (made once per set of versions)."""
    from filelock import FileLock

    packages = json.loads(Path(manifest).read_text())["packages"]  # as a constraints file, NOT_PINNED left out
    pins = "".join(f"{name}=={version}\n" for name, version in sorted(packages.items()) if name not in NOT_PINNED)
    # the versions, what it holds, and where the torch it links lives (a kept one whose links dangle is never reused)
    key = hashlib.sha256((pins + " ".join(IMAGE_PACKAGES) + sysconfig.get_paths()["purelib"]).encode()).hexdigest()[:12]
    folder = Path(root) / f"kaggle-image-{key}"
    python = folder / "bin" / "python"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / COMPLETE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            _make(folder, pins)
    return python


def _uv() -> list[str]:
    """How to call uv: this Python's module, else the one on the PATH; ImageEnvironmentError when there is none."""
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    if shutil.which("uv"):
        return [shutil.which("uv")]
    raise ImageEnvironmentError("the image's environment is made with uv, which is not installed here: pip install uv")


def _make(folder: Path, pins: str) -> None:
    """A virtual environment in ``folder``: this machine's torch linked in, the image's versions of the rest."""
    uv = _uv()
    python = folder / "bin" / "python"
    _run([*uv, "venv", "--quiet", "--seed", "--python", sys.executable, str(folder)], "make a virtual environment")
    site_packages = next((folder / "lib").glob("python*/site-packages"))  # a virtual environment's, on Linux or macOS
    linked = folder / "torch"
    linked.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.lower().startswith(LINKED) and not entry.name.endswith(".pth"):
            (linked / entry.name).symlink_to(entry)
    (site_packages / "torch_linked.pth").write_text(f"{linked}\n")
    (folder / "constraints.txt").write_text(pins)
    (folder / "overrides.txt").write_text('torch; python_version < "0"\n')  # linked in, never installed
    torch_needs = [line for line in requires("torch") or [] if "extra ==" not in line
                   and not line.lower().startswith(LINKED)]
    _run([*uv, "pip", "install", "--quiet", "--python", str(python), "-c", str(folder / "constraints.txt"),
          "--override", str(folder / "overrides.txt"), *IMAGE_PACKAGES, *torch_needs],
         "install the image's versions", env={**os.environ, "UV_CONSTRAINT": ""})
    (folder / COMPLETE).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))


def _run(command: list[str], what: str, **options) -> None:
    done = subprocess.run(command, capture_output=True, text=True, **options)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
        raise ImageEnvironmentError(f"cannot {what} with uv ({lines[-1].strip() if lines else done.returncode})")


def fresh_copy(python: Path, folder: str | os.PathLike) -> Path:
    """A copy of ``python``'s environment in ``folder`` (new), hard-linked where the file system allows; its Python.

    Installing into the copy replaces files, never writes into one: a linked file is left as it is in the kept
    environment. The copy's scripts name its own Python (a virtual environment's do, by path).
    """
    source, folder = python.parents[1], Path(folder)
    try:
        shutil.copytree(source, folder, symlinks=True, copy_function=os.link)
    except OSError:  # another file system: copied
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(source, folder, symlinks=True)
    for script in (folder / "bin").iterdir():
        try:  # a script whose text names the environment it was made in (an entry point's #! line)
            text = script.read_text() if script.is_file() and not script.is_symlink() else ""
        except (UnicodeDecodeError, OSError):
            continue
        if str(source) in text:
            script.unlink()  # a new file, not the linked one
            script.write_text(text.replace(str(source), str(folder)))
            script.chmod(0o755)
    return folder / "bin" / "python"


def package_versions(python: Path, names: tuple[str, ...]) -> dict[str, str]:
    """The versions of ``names`` in ``python``'s environment ("none" where one is not installed)."""
    script = ("import importlib.metadata as m, json, sys\nprint(json.dumps({name: next((found.version for found in "
              "m.distributions(name=name)), 'none') for name in sys.argv[1:]}))")
    done = subprocess.run([str(python), "-c", script, *names], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def start_notebook(python: Path, notebook: Path, environment: dict, cwd: Path) -> subprocess.Popen:
    """``notebook`` (an .ipynb) run through nbclient in ``python``'s environment, started; its printed lines on
    the process's stdout as they come (stderr merged in)."""
    return subprocess.Popen([str(python), "-c", RUN_NOTEBOOK, str(notebook)], cwd=cwd, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)  # a group of its own: stopped with its kernel and workers


def stop_notebook(running: subprocess.Popen) -> None:
    """Stop a notebook ``start_notebook`` started, its kernel and the kernel's children with it."""
    if running.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.pid, signal.SIGKILL)
    running.wait()
