"""Packing files into checked parts and reassembling them (arc_kit.data.parts)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arc_kit.data.parts import PartsError, pack, sha256_of, unpack


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    source = tmp_path / "source"
    (source / "folder" / "inner").mkdir(parents=True)
    (source / "big.bin").write_bytes(rng.bytes(10_000))
    (source / "folder" / "a.txt").write_text("hello\n")
    (source / "folder" / "inner" / "b.bin").write_bytes(rng.bytes(3_333))
    return source


def test_parts_are_capped_and_reassemble_to_the_same_files(files, tmp_path):
    manifest = pack([files / "big.bin", files / "folder"], tmp_path / "parts", "thing", part_bytes=4096)
    parts = sorted((tmp_path / "parts").glob("thing.part[0-9][0-9][0-9]"))
    assert len(parts) >= 4 and all(p.stat().st_size <= 4096 for p in parts)
    record = json.loads(manifest.read_text())
    assert [p["file"] for p in record["parts"]] == [p.name for p in parts]
    out = unpack(manifest, tmp_path / "out")
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in out) == [
        "big.bin", "folder/a.txt", "folder/inner/b.bin"]
    for relative in ("big.bin", "folder/a.txt", "folder/inner/b.bin"):
        assert sha256_of(tmp_path / "out" / relative) == sha256_of(files / relative)


def test_parts_found_in_other_folders(files, tmp_path):
    manifest = pack([files / "big.bin"], tmp_path / "parts", "thing", part_bytes=4096)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    last = sorted((tmp_path / "parts").glob("thing.part[0-9][0-9][0-9]"))[-1]
    last.rename(moved / last.name)
    with pytest.raises(PartsError, match="missing"):
        unpack(manifest, tmp_path / "out")
    unpack(manifest, tmp_path / "out", [moved])
    assert sha256_of(tmp_path / "out" / "big.bin") == sha256_of(files / "big.bin")


def test_a_damaged_part_is_named(files, tmp_path):
    manifest = pack([files / "big.bin"], tmp_path / "parts", "thing", part_bytes=4096)
    second = tmp_path / "parts" / "thing.part001"
    data = bytearray(second.read_bytes())
    data[100] ^= 0xFF
    second.write_bytes(bytes(data))
    with pytest.raises(PartsError, match="thing.part001"):
        unpack(manifest, tmp_path / "out")
    assert not (tmp_path / "out" / "big.bin").exists()


def test_repacking_leaves_no_stale_parts(files, tmp_path):
    pack([files / "big.bin", files / "folder"], tmp_path / "parts", "thing", part_bytes=2048)
    manifest = pack([files / "folder" / "a.txt"], tmp_path / "parts", "thing", part_bytes=2048)
    assert len(list((tmp_path / "parts").glob("thing.part[0-9][0-9][0-9]"))) == len(json.loads(manifest.read_text())["parts"])
    with pytest.raises(PartsError, match="nothing to pack"):
        pack([tmp_path / "absent"], tmp_path / "parts", "other")
