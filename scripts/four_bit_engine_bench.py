"""The engine benchmark over 4-bit weights: a model folder quantized by transformers, the engine against
transformers' forward, 16 lanes.

The model (default: the shipped one) is loaded as the kit loads it, saved whole to a temporary
folder and loaded back with ``BitsAndBytesConfig(load_in_4bit=True)`` (nf4, double quantization,
float32 compute; ``--quant-type``, ``--no-double``), on the CPU as on a GPU. Then
``engine_bench.bench_engine`` runs on it (a rank-32 test-time LoRA attached: QLoRA), and, with
``--full-precision-too``, on the model as loaded, for the cost of the 4 bits. ``--fusion`` adds
the timing behind ``four_bit``'s choice of one bitsandbytes matmul per layer: three matmuls (query,
key, value of a Llama-3.2-3B-shaped layer, 16 rows) against one over their concatenated packed
weights, taking turns.

    OMP_NUM_THREADS=1 python scripts/four_bit_engine_bench.py --tasks 1 --full-precision-too --fusion
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def quantized_copy(model, quant_type: str, double: bool, compute_dtype=None):
    """``model`` saved and loaded back in bitsandbytes 4 bits, as transformers quantizes it (computing in
    ``compute_dtype``, default float32)."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    compute_dtype = compute_dtype or torch.float32
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=double,
                                bnb_4bit_compute_dtype=compute_dtype)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        device = next(model.parameters()).device
        return AutoModelForCausalLM.from_pretrained(folder, quantization_config=config, dtype=compute_dtype,
                                                    device_map=str(device), trust_remote_code=False).eval()


def fusion_lines(turns: int = 20) -> list[str]:
    """Median milliseconds of three 4-bit matmuls against one over the concatenated packed weights."""
    import bitsandbytes
    import torch
    from bitsandbytes.functional import quantize_4bit

    generator = torch.Generator().manual_seed(0)
    hidden, rows = 3072, (3072, 1024, 1024)  # Llama-3.2-3B's query, key and value
    weights = [torch.randn(count, hidden, generator=generator) * 0.02 for count in rows]
    inputs = torch.randn(16, hidden, generator=generator)

    def separate(parts):
        return lambda: torch.cat([bitsandbytes.matmul_4bit(inputs, data.t(), quant_state=state)
                                  for data, state in parts], dim=-1)

    calls = {f"three matmuls, double quantization {nested}": separate(
        [quantize_4bit(weight, quant_type="nf4", compress_statistics=nested) for weight in weights])
        for nested in (False, True)}
    data, state = quantize_4bit(torch.cat(weights), quant_type="nf4", compress_statistics=False)
    calls["one matmul over the concatenated weights"] = lambda: bitsandbytes.matmul_4bit(inputs, data.t(),
                                                                                      quant_state=state)
    times: dict[str, list[float]] = {name: [] for name in calls}
    with torch.no_grad():
        for _ in range(turns):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - started)
    return [f"fusion: {name}: {statistics.median(values[2:]) * 1e3:.1f} ms" for name, values in times.items()]


def main() -> None:
    from arc_kit.data.datasets import load_tasks
    from arc_kit.experiments.bench import environment
    from arc_kit.experiments.engine_bench import bench_engine
    from arc_kit.model.folders import default_model_path
    from arc_kit.model.loading import LoadSettings, load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: the shipped model)")
    parser.add_argument("--dataset", default="arc-agi-1/evaluation")
    parser.add_argument("--tasks", type=int, default=5, help="the first N tasks by id (default: %(default)s)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quant-type", choices=("nf4", "fp4"), default="nf4")
    parser.add_argument("--no-double", action="store_true", help="no double quantization")
    parser.add_argument("--full-precision-too", action="store_true", help="also the model as loaded")
    parser.add_argument("--fusion", action="store_true", help="also three 4-bit matmuls against one")
    args = parser.parse_args()
    loaded = load_model(str(args.model or default_model_path()), LoadSettings(device=args.device))
    encoder = loaded.encoder()
    tasks = [task for task in load_tasks(args.dataset, None).tasks()
             if len(encoder.encode_prompt(task.train, task.test[0].input, max_len=10**6)) <= 4096][:args.tasks]
    kind = f"{args.quant_type}{'' if args.no_double else ', double quantization'}, float32 compute"
    print(f"{environment()} | 4-bit engine benchmark ({kind})", flush=True)
    models = [(quantized_copy(loaded.model, args.quant_type, not args.no_double), f"the model in 4 bits ({kind})")]
    if args.full_precision_too:
        models.append((loaded.model, "the model as loaded"))
    for model, label in models:
        for line in bench_engine(model, encoder, tasks, label=label).lines():
            print(line, flush=True)
    if args.fusion:
        for line in fusion_lines():
            print(line, flush=True)


if __name__ == "__main__":
    main()
