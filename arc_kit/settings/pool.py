"""The settings of a run's pool of Ray actors: when the driver gives up on an actor, and the bounds Ray starts under.

The pool itself is ``run.pool``'s (its actors ``run.actors``', Ray's start and stop ``run.ray_session``'s);
this module needs only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

from arc_kit.settings.base import Settings, setting


@dataclass(frozen=True)
class PoolSettings(Settings):
    """When the driver gives up on an actor and what it does then; how big a Ray it starts."""

    hang_seconds: float = setting(300.0, "a task this long past its own deadline is hung (the solver checks its "
                                         "deadline between steps, so a healthy one stops well within this)", at_least=0)
    stall_seconds: float = setting(120.0, "an actor running a task whose engine has made no step for this long is "
                                          "hung: stopped (SIGSTOP), deadlocked, or stuck in a loop", at_least=0)
    load_seconds: float = setting(900.0, "an actor that has not loaded its model this long after it was asked to "
                                         "is hung (or waits for resources the cluster lacks)", at_least=0)
    stop_seconds: float = setting(120.0, "with a deadline but no stop time, actors still running this long after "
                                         "the deadline are stopped", at_least=0)
    restarts: int = setting(2, "times a slot whose actor died or hung gets a fresh one", at_least=0)
    retries: int = setting(1, "times the task of an actor that died or hung goes back to the queue before it gets "
                              "fallback answers", at_least=0)
    poll_seconds: float = setting(1.0, "how long the driver waits for news from its actors before it looks at the "
                                       "clock and their steps again", above=0)
    object_store_megabytes: int = setting(256, "the object store of a Ray the run starts itself (tasks, records and "
                                               "model pieces on their way; in /dev/shm when it has room, else on "
                                               "disk)", at_least=80)
    chunk_megabytes: int = setting(16, "a model file reaches an actor on another node in pieces of this size",
                                   at_least=1)
