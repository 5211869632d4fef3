"""How many decoding processes one GPU serves: token-by-token decoding speed of a SmolLM2-135M-shaped model.

Each process decodes ``--tokens`` tokens one at a time with a KV cache (what greedy decoding and
DFS do), after a 1024-token prompt. Run with ``--processes 1 4 8 12``: it prints the tokens per
second of one process and of all together, which says how many solver processes to run side by
side. Weights are random (speed does not depend on them).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time


def _decode(tokens: int, queue, barrier) -> None:
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    config = LlamaConfig(vocab_size=76, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192)
    model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    prompt = torch.randint(0, 76, (1, 1024), device="cuda")
    with torch.no_grad():
        for attempt in range(2):  # the first round warms up
            cache = DynamicCache()
            output = model(input_ids=prompt, past_key_values=cache, use_cache=True)
            token = output.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            if attempt:
                barrier.wait()  # every process decodes at the same time
            started = time.monotonic()
            for _ in range(tokens if attempt else 20):
                output = model(input_ids=token, past_key_values=output.past_key_values, use_cache=True)
                token = output.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
    queue.put((started, time.monotonic(), tokens))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4, 8, 12])
    parser.add_argument("--tokens", type=int, default=300)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    single = None
    for count in args.processes:
        queue, barrier = context.Queue(), context.Barrier(count)
        processes = [context.Process(target=_decode, args=(args.tokens, queue, barrier)) for _ in range(count)]
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
