"""Every notebook's .py (the source) and .ipynb are in sync, and every notebook runs headless (one kernel, shared)."""

import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.util import run_sync

pytestmark = pytest.mark.processes  # each notebook in a kernel of its own
NOTEBOOK_FOLDER = Path(__file__).resolve().parents[1] / "notebooks"
SOURCES = sorted(NOTEBOOK_FOLDER.glob("*.py"))


def _cells(notebook):
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def test_there_are_notebooks():
    assert SOURCES, f"no notebooks in {NOTEBOOK_FOLDER}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_pair_in_sync(source):
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"{paired.name} is missing: run `make notebooks`"
    from_source = jupytext.read(source)
    committed = nbformat.read(paired, as_version=4)
    assert _cells(from_source) == _cells(committed), f"{paired.name} differs from {source.name}: run `make notebooks`"


class SharedKernel:
    """One Jupyter kernel for every notebook of this file (each kernel pays seconds importing torch and the kit):
    each notebook starts with ``%reset -f``, so that no notebook sees another's variables (one that forgot an import
    fails as in a fresh kernel); a notebook that fails takes the kernel with it, and the next one gets a fresh one."""

    def __init__(self):
        self.manager = None  # nbclient's kernel manager, once the first notebook has started the kernel

    def run(self, notebook) -> None:
        """Execute ``notebook`` (raises on a cell's error) with ``notebooks/`` as the working folder."""
        notebook.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
        client = NotebookClient(notebook, timeout=600, kernel_name="python3", km=self.manager,
                                resources={"metadata": {"path": str(NOTEBOOK_FOLDER)}})
        environment = {**os.environ, "ARC_KIT_SMOKE": "1",  # notebooks shrink their work under this flag
                       "MPLBACKEND": "Agg"}
        try:
            client.execute(cleanup_kc=False, env=environment)  # env: for the kernel, when this call starts it
        except BaseException:
            self.manager = client.km
            self.close()
            raise
        self.manager = client.km
        client.kc.stop_channels()

    def close(self) -> None:
        if self.manager is not None and self.manager.has_kernel:
            run_sync(self.manager.shutdown_kernel)(now=True)
        self.manager = None


@pytest.fixture(scope="module")
def kernel():
    shared = SharedKernel()
    yield shared
    shared.close()


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_notebook_runs(source, kernel):
    notebook = jupytext.read(source)
    kernel.run(notebook)
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors
    printed = "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
                      if output.get("output_type") == "stream")
    assert "IProgress" not in printed and "TqdmWarning" not in printed  # the kit's bars work without ipywidgets
    if source.stem == "explore":  # the model at work: its candidate cell found candidates to show
        found = re.search(r"found (\d+) candidates for test 0", printed)
        assert found and int(found.group(1)) > 0, printed[-2000:]
