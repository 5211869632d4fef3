"""A step counter that shows work is moving (long loops bump it, a watchdog reads it), and the kit's progress bars.

``tick()`` adds one to a process-wide counter; ``steps()`` reads it. ``count_forward_calls(model)``
hooks a torch module so that every forward pass of it (a test-time training step, transformers' own
forward) ticks; the decode engine, which never calls the model's forward, ticks through the step
callback its solver is given (``Solver(..., on_step=progress.tick)``). A pool's actor tells the
driver the counter when asked (``run.actors.SlotActor.steps``); a counter that stops moving means the
actor's solving is stuck or its process is stopped.

``progress_bar`` is the one place the kit makes a progress bar (tqdm's): Jupyter's widget where ipywidgets is
installed, else a text bar, which works in a terminal and in Jupyter alike (``tqdm.auto`` would warn
"IProgress not found" in Jupyter without ipywidgets); off a terminal (a notebook, a log file) it is
redrawn at most every ``QUIET_SECONDS``, so that the lines a loop prints beside it stay readable (in
Jupyter the bar goes to stdout, where those lines go, so that the notebook shows them in order). The
warning that a library's own ``tqdm.auto`` gives in Jupyter without ipywidgets (huggingface_hub imports
it) is silenced as this module is imported (``arc_kit`` imports it first): its bars work as text there.

This module knows nothing of models beyond ``register_forward_hook``, nor of files or processes.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import warnings

# tqdm.auto's advice to install ipywidgets, given once as it is imported in Jupyter: its text bars work without them
warnings.filterwarnings("ignore", message="IProgress not found")
_lock = threading.Lock()
_steps = 0


def tick(count: int = 1) -> None:
    """``count`` more steps of work done (cheap: call it as often as a loop turns)."""
    global _steps
    with _lock:
        _steps += count


def steps() -> int:
    """The steps done so far in this process."""
    return _steps


def count_forward_calls(model) -> object:
    """Tick on every forward pass of ``model`` (a ``torch.nn.Module``); the hook's handle (``.remove()``)."""
    return model.register_forward_hook(lambda module, inputs, output: tick())


QUIET_SECONDS = 10.0  # the least time between two redraws of a bar that is not on a terminal


def progress_bar(iterable=None, **options):
    """A tqdm bar over ``iterable`` (``options`` are tqdm's) that suits where it is shown (the module's docstring)."""
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    if not sys.stderr.isatty():
        options.setdefault("mininterval", QUIET_SECONDS)
    if "ipykernel" in sys.modules:  # in Jupyter on the stream of the lines ``tqdm.write`` prints: they read in order
        options.setdefault("file", sys.stdout)
    return tqdm(iterable, **options)
