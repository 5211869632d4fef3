"""What this machine can do: devices, data types, bitsandbytes, unsloth; and staying offline.

Every question about the hardware goes through here, so that a request the machine cannot serve
(quantizing to 4 bits as a model loads without a GPU, unsloth without a GPU; weights already stored
in 4 bits do run on a CPU, through bitsandbytes' CPU kernels) fails early with a clear ``UnsupportedSetupError``
instead of a traceback from deep inside a library. ``stay_offline`` sets the Hugging Face variables
that keep every library off the network: the command line calls it first, and so does every function
that reads a model's files; importing this module changes nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from functools import lru_cache

OFFLINE_VARIABLES = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                     "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def stay_offline() -> None:
    """Make sure nothing tries to reach a model hub (a user's explicit setting wins); called before transformers
    or huggingface_hub is first imported, since they read the variables then."""
    for name, value in OFFLINE_VARIABLES.items():
        os.environ.setdefault(name, value)
    # bitsandbytes warns on import, on CPUs with AVX-512, that an optional CPU 4-bit kernel is missing;
    # its plain CPU kernels serve the kit's 4-bit folders on a CPU (tests, dry runs), so the warning only misleads.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


class UnsupportedSetupError(RuntimeError):
    """The machine cannot do what was asked (the message says what, and what to do instead)."""


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them: its own entries when it is set
    (physical ids or UUIDs, which a pool's Ray hands on as they are), else ``0 .. n-1`` for the GPUs torch counts."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


DEVICE_NAME = re.compile(r"auto|cpu|cuda(:[0-9]{1,3})?")  # the devices the kit places a model on


def check_device_name(device: str) -> str:
    """``device`` when it names a device the kit knows (auto, cpu, cuda, cuda:N); ValueError in one line else."""
    if not isinstance(device, str) or not DEVICE_NAME.fullmatch(device):
        raise ValueError(f"unknown device {str(device)[:40]!r}: expected auto, cpu, cuda or cuda:N")
    return device


def resolve_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' when a GPU is present, else 'cpu'; a CUDA device without a GPU, or a device the kit does
    not know, is an error."""
    check_device_name(device)
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device.startswith("cuda") and not cuda_available():
        raise UnsupportedSetupError(f"device {device!r} asked for, but this machine has no CUDA GPU; use 'cpu'")
    return device


def resolve_dtype(dtype: str, device: str):
    """'auto' -> bfloat16 on GPUs that have it, float16 on older GPUs (T4), float32 on the CPU."""
    import torch

    if dtype == "auto":
        if not device.startswith("cuda"):
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    # one of LoadSettings.dtype's choices: a torch dtype's name, or its short one
    return getattr(torch, {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype))


@lru_cache(maxsize=1)
def bitsandbytes_imports() -> bool:
    """True when bitsandbytes is installed and imports (its CPU kernels then run 4-bit weights)."""
    try:
        import bitsandbytes  # noqa: F401
    except Exception:  # not installed, or a broken native library, which shows up as any kind of error
        return False
    return True


def bitsandbytes_works() -> bool:
    """True when bitsandbytes imports and a CUDA GPU is there for its 4-bit and 8-bit kernels."""
    return cuda_available() and bitsandbytes_imports()


# Said where 4-bit weights are checked or loaded without a GPU (the figures: docs/results.md, "The engine over
# bitsandbytes 4-bit weights")
FOUR_BIT_ON_CPU = ("4-bit weights on a CPU run slower than 16-bit ones, as bitsandbytes unpacks every weight at every "
                   "call (on the kit's 2-core machines a decode step took 1.5 to 2.7 times as long, and a whole "
                   "short solve 5.6 times as long, docs/results.md); 4 bits are for a GPU's memory: "
                   "check such a model here on a task or two (arc-kit kaggle check --tasks 1), run it on the GPUs")


def require_4bit(on_cpu: bool = False) -> None:
    """4-bit can run here: quantizing as a model loads needs a GPU; ``on_cpu``, weights already stored in 4
    bits, needs bitsandbytes alone."""
    if on_cpu:
        if not bitsandbytes_imports():
            raise UnsupportedSetupError("this model's weights are stored in 4 bits (bitsandbytes), which is not "
                                        "installed or does not work here (pip install bitsandbytes; arc-kit kaggle "
                                        "build ships it for such a model)")
        return
    if not cuda_available():
        raise UnsupportedSetupError("4-bit loading needs a CUDA GPU (bitsandbytes); this machine has none. "
                                    "Load without quantization (quantization=None) on the CPU.")
    if not bitsandbytes_imports():
        raise UnsupportedSetupError("4-bit loading needs bitsandbytes, which is not installed or does not work "
                                    "here (pip install bitsandbytes)")


def resolve_backend(backend: str, device: str = "cuda") -> str:
    """'auto' -> 'unsloth' when it can work here (installed, never imported here, and the model goes to a GPU),
    else 'transformers'; 'unsloth' where it cannot is an error (``backend``: one of LoadSettings.backend's choices;
    ``device``: the resolved device the model is loaded on)."""
    if backend == "auto":
        on_gpu = device.startswith("cuda") and cuda_available()
        return "unsloth" if on_gpu and importlib.util.find_spec("unsloth") is not None else "transformers"
    if backend == "unsloth":
        if not cuda_available():
            raise UnsupportedSetupError("unsloth needs a CUDA GPU and this machine has none; use "
                                        "backend='transformers' (or 'auto')")
        if importlib.util.find_spec("unsloth") is None:
            raise UnsupportedSetupError("unsloth is not installed (pip install unsloth on a GPU machine); "
                                        "use backend='transformers' (or 'auto')")
        return "unsloth"
    return backend
