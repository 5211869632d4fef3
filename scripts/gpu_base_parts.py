"""The shipped model's base, carried to a device machine in parts small enough for its 64 MiB a call.

The built base (``arc-kit base build smollm2-135m``: 106M float32 weights, 425 MB) comes from a
llama.cpp Q4_1 GGUF file; every weight is a dequantized 4-bit (layers) or 8-bit (embedding) block,
so the raw blocks are all a copy needs: about 67 MB, the kept embedding rows alone of the 49152.
``pack`` writes them as safetensors parts of at most ``--part-mib`` MiB each, ``part-N/base-N.safetensors``,
each folder to carry in a call of its own (uint8 blocks, the
shape and sha256 of every float32 tensor, and the folder's small files in each part's metadata), and
checks here that ``unpack`` gives back every tensor bit for bit; ``--out`` follows the kit's output rule
(``arc_kit.outputs``: new, empty or an earlier pack's, whose parts alone are replaced; nothing written through a
link). ``unpack`` (on the device) turns
the parts found into the built base folder in the kit's cache (``ARC_KIT_CACHE``), each tensor
checked against its sha256; it fails in one line when a part is missing.

Knows the two GGUF block layouts this base uses (Q4_1, Q8_0; F32 as it is), and that GGUF stores a
Llama's query and key rows permuted for its rotary layout; knows nothing of the kit's solving.

    python scripts/gpu_base_parts.py pack --out .gpu        # here: .gpu/part-1/base-1.safetensors, ...
    python scripts/gpu_base_parts.py unpack .gpu            # there: the base in $ARC_KIT_CACHE/bases/
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from arc_kit.outputs import FolderKind

BLOCK = 32  # weights per GGUF block, both layouts
BLOCK_BYTES = {"Q4_1": 20, "Q8_0": 34}  # fp16 scale (+ fp16 minimum for Q4_1), then the 32 quantized weights
SMALL_FILES = ("arc_kit.json", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
PART_MIB = (1.0, 64.0)  # the sizes a part may have: a device call carries at most 64 MiB
# the pack's output folder as the kit's output rule sees it (``arc_kit.outputs``): its parts, by their exact form
PARTS_KIND = FolderKind("base parts", owned=("part-{n}/base-{n}.safetensors",), resumable=True)


def dequantize(blocks: np.ndarray, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """Float32 weights of ``shape`` from raw GGUF blocks (uint8, ``BLOCK_BYTES[kind]`` a block), in GGUF's order."""
    if kind == "F32":
        return blocks.view(np.float32).reshape(shape)
    rows = blocks.reshape(-1, BLOCK_BYTES[kind])
    scale = rows[:, :2].copy().view(np.float16).astype(np.float32)
    if kind == "Q8_0":
        return (scale * rows[:, 2:].view(np.int8).astype(np.float32)).reshape(shape)
    minimum = rows[:, 2:4].copy().view(np.float16).astype(np.float32)
    packed = rows[:, 4:]
    quants = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)  # low nibbles first
    return (scale * quants + minimum).reshape(shape)


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """A query or key matrix as a Hugging Face Llama holds it, from GGUF's rotary-interleaved rows."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def tensor_of(entry: dict, blocks: np.ndarray) -> np.ndarray:
    """The float32 tensor a manifest entry describes, from its raw blocks."""
    weight = dequantize(blocks, entry["kind"], tuple(entry["shape"]))
    if entry.get("heads"):
        weight = unpermute(weight, entry["heads"])
    return np.ascontiguousarray(weight)


def digest(weight: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(weight, dtype=np.float32).tobytes()).hexdigest()


def _gguf_name(name: str) -> str:
    """The GGUF tensor a Hugging Face Llama weight comes from (the head: the embedding, tied in the file)."""
    table = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    if name in table:
        return table[name]
    layer, rest = name.removeprefix("model.layers.").split(".", 1)
    parts = {"input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
             "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
             "self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output",
             "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down"}
    return f"blk.{layer}.{parts[rest]}.weight"


def entries(base: Path, gguf_path: Path):
    """(name, manifest entry, raw blocks) of every tensor of the built base, checked against it."""
    from gguf import GGUFReader
    from safetensors.numpy import load_file

    config = json.loads((base / "config.json").read_text())
    kept = json.loads((base / "arc_kit.json").read_text())["kept_token_ids"]
    tensors = {tensor.name: tensor for tensor in GGUFReader(gguf_path).tensors}
    built = load_file(base / "model.safetensors")
    for name, weight in built.items():
        try:
            source = tensors[_gguf_name(name)]
        except (KeyError, ValueError):
            raise SystemExit(f"{name}: no tensor of {gguf_path.name} is known to hold it; nothing written") from None
        kind = source.tensor_type.name
        raw = np.asarray(source.data).view(np.uint8).reshape(-1)
        if source.name == "token_embd.weight":
            raw = raw.reshape(-1, raw.size // int(source.shape[1]))[kept].reshape(-1)
        heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
        entry = {"kind": kind, "shape": list(weight.shape), "sha256": digest(weight),
                 "heads": next((count for part, count in heads.items() if f".{part}." in name), 0)}
        if not np.array_equal(tensor_of(entry, raw), weight):
            raise SystemExit(f"{name}: the blocks of {source.name} do not give the built weight back; nothing written")
        yield name, entry, raw


def pack(base: Path, gguf_path: Path, out: Path, part_bytes: int) -> list[Path]:
    """Parts of at most ``part_bytes`` each in ``out``; every tensor checked to come back bit for bit first. ``out``
    follows the kit's output rule (``arc_kit.outputs``): new, empty or an earlier pack's, whose parts are replaced;
    each part written aside and renamed into place, never through a link."""
    from safetensors.numpy import save

    from arc_kit.outputs import claim_folder, kit_subfolder, replace_file

    small = {name: (base / name).read_text() for name in SMALL_FILES if (base / name).exists()}
    parts: list[tuple[dict, dict]] = [({}, {})]
    size = 0
    for name, entry, raw in entries(base, gguf_path):
        if size and size + raw.nbytes > part_bytes:
            parts.append(({}, {}))
            size = 0
        parts[-1][0][name], parts[-1][1][name] = raw, entry
        size += raw.nbytes
    claim_folder(out, PARTS_KIND, "gpu_base_parts pack", clear=True)  # an earlier pack's parts go, nothing else
    written = []
    for index, (arrays, manifest) in enumerate(parts, start=1):
        path = kit_subfolder(out / f"part-{index}") / f"base-{index}.safetensors"
        replace_file(path, save(arrays, metadata={"manifest": json.dumps(manifest), "small_files": json.dumps(small),
                                                  "parts": str(len(parts))}))
        written.append(path)
    return written


def unpack(folder: Path, destination: Path | None = None) -> Path:
    """The built base folder from the parts in ``folder`` (default place: the kit's cache); every tensor checked."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save

    from arc_kit.outputs import replace_file

    paths = sorted(folder.glob("**/base-*.safetensors"))
    if not paths:
        raise SystemExit(f"no base-*.safetensors parts in {folder}")
    tensors, small, expected = {}, {}, None
    for path in paths:
        with safe_open(path, "np") as part:
            metadata = part.metadata()
            expected, small = int(metadata["parts"]), json.loads(metadata["small_files"])
            for name, entry in json.loads(metadata["manifest"]).items():
                weight = tensor_of(entry, part.get_tensor(name))
                if digest(weight) != entry["sha256"]:
                    raise SystemExit(f"{path.name}: {name} does not match its sha256; the part is damaged")
                tensors[name] = torch.from_numpy(weight)
    if len(paths) != expected:
        raise SystemExit(f"{len(paths)} of the base's {expected} parts in {folder}: carry the others too")
    if destination is None:
        from arc_kit.model.bases import built_folder, is_built

        name = json.loads(small["arc_kit.json"])["base"]["name"]
        destination = built_folder(name)
        if is_built(destination, name):  # built here already, by the kit or an earlier unpack: kept as it is
            return destination
    if destination.exists() and any(destination.iterdir()):
        raise SystemExit(f"{destination} is not empty: nothing unpacked into it")
    destination.mkdir(parents=True, exist_ok=True)
    replace_file(destination / "model.safetensors", save(tensors, metadata={"format": "pt"}))
    for name in SMALL_FILES:  # by the names it knows: a part's metadata never names a file elsewhere
        if name in small:
            replace_file(destination / name, small[name])
    return destination


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="the built base as parts (here)")
    packing.add_argument("--out", type=Path, required=True)
    packing.add_argument("--part-mib", type=float, default=36.0,
                         help=f"the most MiB a part holds, {PART_MIB[0]:g} to {PART_MIB[1]:g} (default: 36)")
    unpacking = commands.add_parser("unpack", help="the built base from its parts (on the device)")
    unpacking.add_argument("folder", type=Path)
    unpacking.add_argument("--destination", type=Path, help="default: the kit's cache")
    args = parser.parse_args(argv)
    if args.command == "pack":
        from arc_kit.model.bases import build_base, locate_weights
        from arc_kit.outputs import OutputRefused, check_folder

        if not PART_MIB[0] <= args.part_mib <= PART_MIB[1]:  # NaN too: checked before anything is built or written
            parser.error(f"--part-mib must lie between {PART_MIB[0]:g} and {PART_MIB[1]:g}, got {args.part_mib:g}")
        try:
            check_folder(args.out, PARTS_KIND, "gpu_base_parts pack")
        except OutputRefused as refusal:
            raise SystemExit(f"gpu_base_parts pack: {refusal}") from None

        base = build_base("smollm2-135m")
        gguf_path = locate_weights("smollm2-135m", download=True)
        for path in pack(base, gguf_path, args.out, int(args.part_mib * 2**20)):
            print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    else:
        print(f"built {unpack(args.folder, args.destination)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
