"""Ray for a run: started quietly and bounded on this machine, or joined at an address; stopped, leaving nothing behind.

``ray_session`` is what a pool runs inside. A Ray already started in this process (a notebook's own
``ray.init``) is used as it is and left running. An ``address`` (``ray start --head`` on one node, ``ray start
--address HEAD:PORT`` on each other) is joined, once a Ray's GCS is seen to answer there: nothing listening, or
another program on the port, is one line. Otherwise the run starts a Ray of this machine's own: no dashboard, no
usage report, an object store of ``PoolSettings.object_store_megabytes`` (in /dev/shm only when that has room
for it, else on disk: a small /dev/shm never stops it), its processes tied to this one (they end with it, even
when it is killed), its files in a short folder of its own (a Unix socket's path takes at most 107 bytes) whose
logs are copied to the run folder's ``ray-logs/`` as the session ends (its log files, by name: ``LOG_FILES``),
its workers at the driver's priority (Ray's default ``worker_niceness`` of 15 would starve them beside any other
work; on a cluster an actor takes the driver's niceness itself where it may). However the session ends (the
run's end, an error, Ctrl-C, SIGTERM raised by the caller's handler), Ray is shut down and its folder removed.
For the session SIGTERM is held and handed to the caller's handler between Ray's calls (``Session``: Ray would
turn what a handler raises inside its calls into a KeyboardInterrupt); the caller's handler is back once it
ends. A Ray that is not installed or cannot start is ``UnsupportedSetupError``, in one line. ``Session.lost``
tells whether Ray itself is gone (its GCS, this node's raylet) without asking Ray anything: the pool's watchdog
looks once a poll.

``gpu_bundles`` reserves the cluster's GPUs, one bundle each (a placement group), and
``actor_options`` places an actor on a bundle's GPU or on a CPU: so the actors sharing a GPU share
the one the pool chose (Ray alone packs fractional GPUs onto the first GPU that has room). This
module knows Ray; nothing of tasks, models or records.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from arc_kit.model.devices import UnsupportedSetupError
from arc_kit.outputs import copy_file, kit_subfolder
from arc_kit.settings import PoolSettings

RAY_FLOOR = "2.55.1"  # Kaggle's image's (requirements.txt and pyproject.toml say the same)
LOGS_FOLDER = "ray-logs"  # in the run folder: the logs of a Ray the run started, a folder per session
# the log files of a session that ``_keep_logs`` copies, by name: what a run folder's layout names in ``ray-logs``
LOG_FILES = tuple(f"{LOGS_FOLDER}/session_{{n}}-{{n}}-{{n}}_{{n}}-{{n}}-{{n}}_{{n}}_{{n}}/{name}"
                  for name in ("*.log", "*.out", "*.err", "debug_state.txt"))
NAMESPACE = "arc-kit"
# No usage report (nothing leaves the machine); CPU actors are told CUDA_VISIBLE_DEVICES="" by the pool itself, as
# Ray's next versions expect (this also keeps Ray's warning about it quiet)
QUIET_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
SOCKET_PATH_ROOM = 107 - len("/session_2026-11-27_15-05-16_925117_1234567/sockets/plasma_store")
# what a gRPC server (Ray's GCS) answers a client's HTTP/2 preface with: a SETTINGS frame (type 4)
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_FRAME = 4


def import_ray():
    """The ``ray`` module, quieted; UnsupportedSetupError when it is not installed."""
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError as error:
        raise UnsupportedSetupError(f"several workers run on Ray, which does not import here ({error}): "
                                    f"pip install 'ray>={RAY_FLOOR}', or solve with one worker") from None
    return ray


class RayLostError(UnsupportedSetupError):
    """Ray itself lost mid-run (its GCS, or this node's raylet): the message says what, what was kept, how to go on."""


@dataclass
class Session:
    """A run's Ray: the ``ray`` module, and a SIGTERM only noted while the run's calls into Ray block (``ray.wait``
    turns what a handler raises into a KeyboardInterrupt, read as Ctrl-C), handed to the caller's own handler by
    ``check_signals``, which the run's loop calls between Ray's calls."""

    ray: Any
    caller: Any = None  # the SIGTERM handler before the session (None: not the main thread, nothing held)
    pending: int | None = None
    gcs: tuple[str, int] | None = None  # where Ray's GCS listens, and this node's raylet's socket (``lost``)
    raylet: str | None = None

    def lost(self) -> str | None:
        """What of Ray is gone, in a few words (its GCS, or this node's raylet), or None while both are there. Asks
        Ray nothing (a call into a Ray whose GCS is gone blocks, then Ray ends the process; its own health checks
        take 15 s and more to tell): a connection to the GCS's port, and the raylet's socket in the system's table
        of sockets (a connection there would be logged by the raylet each time)."""
        if self.gcs is not None:
            try:
                socket.create_connection(self.gcs, timeout=5).close()
            except OSError as error:
                return f"its GCS at {self.gcs[0]}:{self.gcs[1]} does not answer: {error.strerror or error}"
        if self.raylet is not None and not _listening(self.raylet):
            return "this node's raylet is gone"
        return None

    def hold(self, number: int, frame) -> None:
        self.pending = number

    def check_signals(self) -> None:
        """Act on a SIGTERM that came since the last look: the caller's handler (its default: exit, 143)."""
        if self.pending is not None:
            number, self.pending = self.pending, None
            if callable(self.caller):
                self.caller(number, None)
            else:
                sys.exit(128 + number)


@contextmanager
def ray_session(out: Path, *, address: str | None = None, cpus: int = 1, gpus: int = 0,
                settings: PoolSettings = PoolSettings()) -> Iterator[Session]:
    """Ray for one run (see the module's docstring): joined at ``address``, or this machine's own with ``cpus`` and
    ``gpus``; yields its ``Session``."""
    ray = import_ray()
    main = threading.current_thread() is threading.main_thread()
    session = Session(ray, signal.getsignal(signal.SIGTERM) if main else None)
    started = not ray.is_initialized()
    folder = None if address or not started else \
        Path(tempfile.mkdtemp(prefix="arc-kit-ray-", dir=_short_temporary_folder()))
    try:
        if started:
            _start(ray, address, folder, cpus, gpus, settings)
        session.gcs, session.raylet = _vitals(ray)
        if main:  # ray.init's own handler replaced too; an ignored SIGTERM stays ignored
            signal.signal(signal.SIGTERM, signal.SIG_IGN if session.caller is signal.SIG_IGN else session.hold)
        yield session
    finally:
        try:
            if started:
                ray.shutdown()
        finally:
            if main:
                signal.signal(signal.SIGTERM, session.caller if session.caller is not None else signal.SIG_DFL)
            if folder is not None:
                _keep_logs(folder, out / LOGS_FOLDER)
                shutil.rmtree(folder, ignore_errors=True)
            session.check_signals()  # one that came while the session ended


def _start(ray, address: str | None, folder: Path | None, cpus: int, gpus: int, settings: PoolSettings) -> None:
    """``ray.init``: joining ``address``, or starting this machine's own Ray in ``folder``."""
    options = {"log_to_driver": False, "logging_level": logging.ERROR, "namespace": NAMESPACE}
    if address:
        check_address(address)
        options["address"] = address
    else:
        store = settings.object_store_megabytes * 2**20
        options.update(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=False,
                       object_store_memory=store, _temp_dir=str(folder),
                       _plasma_directory=_plasma_directory(store, folder),
                       _system_config={"worker_niceness": 0})  # its workers at the driver's priority, not Ray's 15
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray's tips about its future defaults
            ray.init(**options)
    except Exception as error:  # noqa: BLE001 - whatever stops Ray is said in one line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UnsupportedSetupError(f"Ray could not {'join ' + address if address else 'start'}: {reason}") from None


def _vitals(ray) -> tuple[tuple[str, int] | None, str | None]:
    """(the GCS's host and port, this node's raylet's socket) of the Ray joined, for ``Session.lost``; None for what
    cannot be told (a Ray client's ``ray://``, a system with no table of sockets)."""
    gcs = raylet = None
    with suppress(Exception):  # a Ray client, or a Ray of another shape: nothing watched
        context = ray.get_runtime_context()
        host, _, port = context.gcs_address.rpartition(":")
        gcs = (host.strip("[]"), int(port))
        node = context.get_node_id()
        raylet = next(entry["RayletSocketName"] for entry in ray.nodes() if entry["NodeID"] == node)
    return gcs, raylet if raylet and _listening(raylet) else None


def _listening(path: str) -> bool:
    """Whether a process holds the Unix socket ``path`` open, as Linux's table of sockets says (True elsewhere)."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            return any(line.rstrip("\n").endswith(" " + path) for line in table)
    except OSError:
        return True


def _short_temporary_folder() -> str:
    """The system's temporary folder when Ray's sockets fit below it, else /tmp."""
    folder = tempfile.gettempdir()
    return folder if len(folder) + len("/arc-kit-ray-xxxxxxxx") <= SOCKET_PATH_ROOM else "/tmp"


def _plasma_directory(store_bytes: int, folder: Path) -> str:
    """/dev/shm when it has room for the object store (and a margin), else the session's folder on disk."""
    with suppress(OSError):
        if shutil.disk_usage("/dev/shm").free >= 1.25 * store_bytes:
            return "/dev/shm"
    return str(folder)


def check_address(address: str, timeout: float = 5.0) -> None:
    """UnsupportedSetupError in one line unless a Ray's GCS (a gRPC server) answers at ``address`` (HOST:PORT;
    ``auto`` and ``ray://`` addresses are left to Ray)."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UnsupportedSetupError(f"--address {address!r}: expected HOST:PORT, the head's `ray start --head "
                                    "--port PORT`")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as connection:
            connection.settimeout(timeout)
            connection.sendall(HTTP2_PREFACE)
            reply = connection.recv(9)
    except OSError as error:
        raise UnsupportedSetupError(f"no Ray answers at {address} ({error.strerror or error}): start one there "
                                    f"first (ray start --head --port {port})") from None
    if len(reply) < 4 or reply[3] != SETTINGS_FRAME:
        raise UnsupportedSetupError(f"something that is no Ray answers at {address}: is the port another "
                                    "program's?")


def _keep_logs(folder: Path, logs: Path) -> None:
    """Copy the session's log files from Ray's ``folder`` to ``logs/<session>`` in the run folder (never through a
    link); a failure is a warning, never the run's end."""
    try:
        session = (folder / "session_latest").resolve()
        target = kit_subfolder(logs / session.name, within=logs.parent)  # a link there (or above) is refused
        for path in sorted((session / "logs").glob("*")):
            if path.is_file() and not path.is_symlink() and any(fnmatch(path.name, name.rpartition("/")[2])
                                                                for name in LOG_FILES):
                copy_file(path, target / path.name, within=logs.parent)
    except (OSError, ValueError) as error:  # ValueError: outputs.OutputRefused
        logging.getLogger(__name__).warning("Ray's logs were not kept (%s); they are lost with %s", error, folder)


def gpu_bundles(ray, gpus: int, timeout: float):
    """A placement group holding one bundle of each of ``gpus`` GPUs (None without GPUs); UnsupportedSetupError
    when the cluster does not grant them within ``timeout`` seconds (others hold them)."""
    if not gpus:
        return None
    from ray.util.placement_group import placement_group

    group = placement_group([{"GPU": 1}] * gpus, strategy="PACK")
    ready, _ = ray.wait([group.ready()], timeout=timeout)
    if not ready:
        raise UnsupportedSetupError(f"Ray did not grant the pool the cluster's {gpus} GPU(s) within {timeout:.0f} s: "
                                    "something else holds them")
    return group


def actor_options(gpu: int | None, bundles, fraction: float) -> dict:
    """Ray's options for an actor on GPU ``gpu`` (a bundle of ``bundles``, ``fraction`` of it) or on one CPU."""
    common = {"max_concurrency": 2, "max_restarts": 0}  # one call solves while another reads its steps
    if gpu is None:
        return {**common, "num_cpus": 1, "num_gpus": 0,
                "runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}}
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {**common, "num_cpus": 0, "num_gpus": fraction,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(bundles, placement_group_bundle_index=gpu)}
