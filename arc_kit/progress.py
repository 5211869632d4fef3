"""A step counter that shows work is moving: long loops bump it, a watchdog reads it.

``tick()`` adds one to a process-wide counter; ``steps()`` reads it. ``count_forward_calls(model)``
hooks a torch module so that every forward pass of it (a test-time training step, transformers' own
forward) ticks; the decode engine, which never calls the model's forward, ticks through the step
callback its solver is given (``Solver(..., on_step=progress.tick)``). A pool's actor tells the
driver the counter when asked (``run.actors.SlotActor.steps``); a counter that stops moving means the
actor's solving is stuck or its process is stopped.

This module knows nothing of models beyond ``register_forward_hook``, nor of files or processes.
"""

from __future__ import annotations

import threading

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
