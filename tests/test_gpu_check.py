"""The GPU check (scripts/gpu_check.py) run here on the CPU at its smallest, so that the one device call it is
made for does not die on a typo; its time boxes; and the shipped base's parts (scripts/gpu_base_parts.py)
against hand-made GGUF blocks."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.processes
@pytest.mark.slow
def test_the_gpu_check_runs_every_stage_on_the_cpu_and_writes_every_figure(model_folder, tmp_path):
    check = _script("gpu_check")
    out = tmp_path / "out"
    assert check.main(["--device", "cpu", "--quick", "--bandwidth", "20", "--out", str(out),
                       "--model", str(model_folder)]) == 0
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["device"] == "cpu" and report["commit"] and report["quick"] is True
    for stage in ("engine", "drafts", "tasks"):
        assert report[stage]["status"] == "done", (stage, report[stage]["status"])
    assert report["fourbit"]["status"] in ("done", "skipped")
    throughput = report["engine"]["throughput"]
    for lanes in ("1_lane", "16_lanes"):
        assert throughput[f"tokens_per_second_{lanes}"] > 0
        assert throughput[f"floor_ratio_{lanes}"] == pytest.approx(
            throughput[f"ms_per_step_{lanes}"] / throughput[f"floor_ms_{lanes}"])
    agreement = report["engine"]["agreement"]
    assert agreement["same_candidates"] and agreement["candidates"] > 0 and agreement["largest_nll_difference"] < 1e-4
    drafts = report["drafts"]
    settings = drafts["settings"]
    assert list(settings) == ["none", "auto@7", "all@7", "auto@15", "all@15"] and drafts["caps"] == [7, 15]
    assert settings["none"]["engine_steps"] > settings["all@7"]["engine_steps"] > 0
    for name, figures in settings.items():
        assert not figures["differing"] and figures["draft_tokens_followed"] <= figures["draft_tokens"], name
        if name != "none":
            assert drafts["against_none"][name]["fewer_steps"] == pytest.approx(
                settings["none"]["engine_steps"] / figures["engine_steps"])
    tasks = report["tasks"]
    assert tasks["exit_status"] == 0 and tasks["tasks_run"] == 2 and len(tasks["per_task"]) == 2
    assert all(row["seconds"] > 0 and row["correct"] is not None for row in tasks["per_task"])
    estimate = tasks["kaggle_estimate"]
    assert estimate["count"] == 120 and estimate["gpus"] == "4x L4" and estimate["total_seconds"] > 0
    assert estimate["total_seconds"] == pytest.approx(sum(estimate["seconds_on_kaggle"].values()))
    assert (out / "records.jsonl").exists() and "== tasks: done" in (out / "gpu_check.log").read_text()


def test_the_gpu_check_writes_only_into_a_new_or_empty_folder_or_its_own_and_replaces_only_when_asked(
        model_folder, tmp_path, capsys, monkeypatch):
    check = _script("gpu_check")
    monkeypatch.setattr(check, "stage_engine", lambda check, facts: facts.update(measured=1))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    arguments = ["--device", "cpu", "--model", str(model_folder), "--stages", "engine", "--out"]
    assert check.main([*arguments, str(mine)]) == 1
    assert "holds files that arc-kit did not make (notes.txt)" in capsys.readouterr().err
    assert sorted(path.name for path in mine.iterdir()) == ["notes.txt"]
    out = tmp_path / "out"
    assert check.main([*arguments, str(out)]) == 0
    assert check.main([*arguments, str(out)]) == 1 and "pass --overwrite" in capsys.readouterr().err
    (out / "kept.txt").write_text("a user's file beside the check's")
    assert check.main([*arguments, str(out), "--overwrite"]) == 0
    assert (out / "kept.txt").read_text() == "a user's file beside the check's"
    assert json.loads((out / "gpu_check.json").read_text())["engine"]["measured"] == 1


@pytest.mark.processes
def test_a_stage_out_of_time_or_failing_is_said_and_the_next_one_starts(model_folder, tmp_path, monkeypatch):
    check = _script("gpu_check")
    monkeypatch.setattr(check, "MIN_STAGE_SECONDS", 0.1)
    monkeypatch.setattr(check, "stage_engine", lambda check, facts: time.sleep(60))

    def failing(check, facts):
        facts["measured"] = 1
        raise ValueError("a bad number")

    monkeypatch.setattr(check, "stage_drafts", failing)
    monkeypatch.setattr(check, "stage_fourbit", lambda check, facts: facts.update(measured=2))
    started = time.monotonic()
    check.main(["--device", "cpu", "--minutes", "0.1", "--out", str(tmp_path), "--model", str(model_folder),
                "--stages", "engine", "drafts", "fourbit"])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert time.monotonic() - started < 30
    assert report["engine"]["status"].startswith("out of time after")
    assert report["drafts"]["status"] == "failed: ValueError: a bad number" and report["drafts"]["measured"] == 1
    assert report["fourbit"] == {**report["fourbit"], "status": "done", "measured": 2}
    assert "Traceback" in (tmp_path / "gpu_check.log").read_text()


def _llama_cpp_row(row: int, head_dim: int) -> int:
    """The GGUF row of a Hugging Face query/key row: llama.cpp interleaves each head's two rotary halves."""
    head, within = divmod(row, head_dim)
    half, index = divmod(within, head_dim // 2)
    return head * head_dim + 2 * index + half


def test_the_base_parts_read_gguf_blocks_as_the_formulas_say():
    parts = _script("gpu_base_parts")
    rng = np.random.default_rng(0)
    scale, minimum = np.float16(0.0123), np.float16(-0.05)
    quants = rng.integers(0, 16, 32)
    block = np.concatenate([np.frombuffer(scale.tobytes() + minimum.tobytes(), np.uint8),
                            (quants[:16] | (quants[16:] << 4)).astype(np.uint8)])
    expected = [np.float32(scale) * np.float32(q) + np.float32(minimum) for q in quants]
    assert parts.dequantize(block, "Q4_1", (32,)).tolist() == expected
    signed = rng.integers(-128, 128, 32).astype(np.int8)
    block = np.concatenate([np.frombuffer(scale.tobytes(), np.uint8), signed.view(np.uint8)])
    assert parts.dequantize(block, "Q8_0", (32,)).tolist() == [np.float32(scale) * np.float32(q) for q in signed]
    heads, head_dim = 3, 8
    stored = rng.standard_normal((heads * head_dim, 5)).astype(np.float32)
    held = parts.unpermute(stored, heads)
    for row in range(heads * head_dim):
        assert (held[row] == stored[_llama_cpp_row(row, head_dim)]).all()


def test_the_base_parts_give_a_built_base_back_bit_for_bit_and_refuse_a_damaged_one(tmp_path):
    gguf = pytest.importorskip("gguf")
    from safetensors.numpy import load_file, save_file

    parts = _script("gpu_base_parts")
    rng = np.random.default_rng(1)
    hidden, heads, kv_heads, vocabulary, kept = 64, 2, 1, 8, [1, 4, 6]

    def q4_1(rows: int) -> np.ndarray:
        blocks = rng.integers(0, 256, (rows * hidden // 32, 20)).astype(np.uint8)
        blocks[:, 0:4] = np.frombuffer(np.float16([0.01, -0.04] * len(blocks)).tobytes(), np.uint8).reshape(-1, 4)
        return blocks.reshape(rows, -1)

    embedding = rng.integers(0, 256, (vocabulary * hidden // 32, 34)).astype(np.uint8)
    embedding[:, 0:2] = np.frombuffer(np.float16([0.02] * len(embedding)).tobytes(), np.uint8).reshape(-1, 2)
    raw = {"token_embd.weight": ("Q8_0", embedding.reshape(vocabulary, -1), (vocabulary, hidden)),
           "output_norm.weight": ("F32", rng.standard_normal(hidden).astype(np.float32), (hidden,)),
           "blk.0.attn_norm.weight": ("F32", rng.standard_normal(hidden).astype(np.float32), (hidden,)),
           "blk.0.ffn_norm.weight": ("F32", rng.standard_normal(hidden).astype(np.float32), (hidden,))}
    for name, rows in (("attn_q", hidden), ("attn_k", hidden // heads * kv_heads), ("attn_v", hidden // heads),
                       ("attn_output", hidden), ("ffn_gate", hidden), ("ffn_up", hidden), ("ffn_down", hidden)):
        raw[f"blk.0.{name}.weight"] = ("Q4_1", q4_1(rows), (rows, hidden))
    writer = gguf.GGUFWriter(tmp_path / "tiny.gguf", "llama")
    for name, (kind, data, shape) in raw.items():
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    def plain(name: str) -> np.ndarray:  # the reference: each weight by the formulas, one block at a time
        kind, data, shape = raw[name]
        return np.stack([parts.dequantize(row, kind, (hidden,)) for row in data.reshape(shape[0], -1)]) \
            if kind != "F32" else data

    built = {"model.embed_tokens.weight": plain("token_embd.weight")[kept],
             "lm_head.weight": plain("token_embd.weight")[kept], "model.norm.weight": plain("output_norm.weight")}
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for ours, theirs in names.items():
        weight = plain(f"blk.0.{theirs}.weight")
        if ours in ("self_attn.q_proj", "self_attn.k_proj"):
            weight = weight[[_llama_cpp_row(row, hidden // heads) for row in range(len(weight))]]
        built[f"model.layers.0.{ours}.weight"] = np.ascontiguousarray(weight)
    base = tmp_path / "base"
    base.mkdir()
    save_file(built, base / "model.safetensors", metadata={"format": "pt"})
    (base / "config.json").write_text(json.dumps({"num_attention_heads": heads, "num_key_value_heads": kv_heads}))
    (base / "arc_kit.json").write_text(json.dumps({"base": {"name": "tiny"}, "kept_token_ids": kept}))

    written = parts.pack(base, tmp_path / "tiny.gguf", tmp_path / "parts", part_bytes=4096)
    assert len(written) > 1 and all(path.parent.name == f"part-{index}" for index, path in enumerate(written, 1))
    back = parts.unpack(tmp_path / "parts", tmp_path / "back")
    assert {name: value.tolist() for name, value in load_file(back / "model.safetensors").items()} == \
        {name: value.tolist() for name, value in built.items()}
    assert json.loads((back / "arc_kit.json").read_text())["kept_token_ids"] == kept

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="is not empty: nothing unpacked"):
        parts.unpack(tmp_path / "parts", tmp_path / "full")
    damaged = bytearray(written[0].read_bytes())
    damaged[-1] ^= 0xFF  # the last byte of the part's last tensor
    written[0].write_bytes(bytes(damaged))
    with pytest.raises(SystemExit, match="the part is damaged"):
        parts.unpack(tmp_path / "parts", tmp_path / "again")
    written[0].unlink()  # the damaged one left out: one part of two
    with pytest.raises(SystemExit, match="carry the others too"):
        parts.unpack(tmp_path / "parts", tmp_path / "again")
