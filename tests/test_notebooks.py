"""Every notebook's .py (the source) and .ipynb are in sync, and every notebook runs headless."""

from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

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


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_notebook_runs(source, monkeypatch):
    monkeypatch.setenv("ARC_KIT_SMOKE", "1")  # notebooks shrink their work under this flag
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = jupytext.read(source)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK_FOLDER)}})
    client.execute()
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors
