"""What a run records about where it came from: the package version, the git commit, the library versions.

Every run folder (a solve, a table, a training run) writes this beside its outputs, so that a number
can be traced to the code and libraries that made it. git is asked without its optional locks
(``--no-optional-locks``): a status that refreshes the index would take ``.git/index.lock`` for a
moment, and a commit the user makes at that moment would fail on it. Knows git and versions; nothing
of runs.
"""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

__version__ = "0.1.0"  # the kit's version (pyproject.toml reads it here); arc_kit hands it on


def git_commit(root: str | Path | None = None) -> str | None:
    """The commit of the arc_kit checkout this code runs from (or of ``root``), if it is one ('+dirty' with
    local changes); read without writing anything in ``.git`` (no lock taken)."""
    try:
        root = Path(__file__).resolve().parents[1] if root is None else Path(root)
        git = ["git", "--no-optional-locks"]
        result = subprocess.run([*git, "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if result.returncode == 0:
            dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                   capture_output=True, text=True, timeout=5).stdout.strip()
            return result.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def run_info(**extra) -> dict:
    """Versions, commit and time, plus ``extra``: what a run writes about itself."""
    import torch
    import transformers

    return {"arc_kit_version": __version__, "git_commit": git_commit(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "time": time.strftime("%Y-%m-%d %H:%M:%S %z"), **extra}
