"""How many decoding processes one GPU serves: token-by-token decoding speed of a SmolLM2-135M-shaped model.

Each process decodes ``--tokens`` tokens one at a time with a KV cache (what greedy decoding and
DFS do), after a 1024-token prompt. Run with ``--processes 1 4 8 12``: it prints the tokens per
second of one process and of all together, which says how many solver processes to run side by
side. Weights are random (speed does not depend on them). ``--device cpu`` runs the same on the
CPU (one thread per process); ``--overhead-only`` shrinks every layer to width 64, keeping the 30
layers, so what is left of a token's time is the framework's per-layer overhead.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _decode(tokens: int, device: str, overhead_only: bool, queue, barrier) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from arc_kit.method.transformers_forward import call_with_cache

    torch.set_num_threads(1)
    shape = (dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
             if overhead_only else
             dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3))
    config = LlamaConfig(vocab_size=76, num_hidden_layers=30, max_position_embeddings=8192, **shape)
    model = LlamaForCausalLM(config).to(device, torch.bfloat16 if device == "cuda" else torch.float32).eval()
    prompt = torch.randint(0, 76, (1024,)).tolist()
    with torch.no_grad():
        for attempt in range(2):  # the first round warms up
            logits, cache = call_with_cache(model, None, prompt)
            token = int(logits[-1].argmax())
            _synchronize(device)
            if attempt:
                barrier.wait()  # every process decodes at the same time
            started = time.monotonic()
            for _ in range(tokens if attempt else 20):
                logits, cache = call_with_cache(model, cache, [token])
                token = int(logits[-1].argmax())
            _synchronize(device)
    queue.put((started, time.monotonic(), tokens))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4, 8, 12])
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--overhead-only", action="store_true", help="layers of width 64: the per-token overhead")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    single = None
    for count in args.processes:
        queue, barrier = context.Queue(), context.Barrier(count)
        work = (args.tokens, args.device, args.overhead_only, queue, barrier)
        processes = [context.Process(target=_decode, args=work) for _ in range(count)]
        for process in processes:
            process.start()
        results = [queue.get() for _ in processes]
        for process in processes:
            process.join()
        start, end = min(r[0] for r in results), max(r[1] for r in results)
        total = sum(r[2] for r in results) / (end - start)
        single = single or total
        print(f"{count:3d} processes: {total:8.1f} tokens/s together, {total / count:7.1f} each, "
              f"{total / single:5.2f}x one process", flush=True)


if __name__ == "__main__":
    main()
