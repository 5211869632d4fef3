"""The decoder's one forward pass in plain PyTorch: tokens at positions, over a static KV cache, on ``DecodeWeights``.

``forward(weights, cache, tokens, positions, cos, sin, swap, used)`` is every model pass of the
engine: row r of the cache is fed the run ``tokens[r]`` at positions ``positions[r]``,
``positions[r] + 1``, ... (a prompt's chunk at prefill, a DFS branch's token and its draft, an answer
after its prompt when scoring). Per layer it normalises, projects query, key and value with one
matmul, rotates queries and keys by their position (one batched matmul with a rotation per token,
made from the rope tables), writes each token's key and value at its position into the cache with
one ``index_put_`` (so feeding a token at position p is the rewind: what the row held at p and after
is never read before it is written again), attends with the query heads grouped over their key and
value head (never expanded) under a mask ``column <= position`` (and the layer's sliding window),
and runs the MLP with one matmul for gate and up; it gives the hidden states of the tokens fed, row
by row. The engine's step is one of two ends on it, each with its own shapes: ``padded_step_nlls``
(compiled) feeds every row a run of one length and attends to every column of the cache: nothing in
it branches on values, synchronises with the host or allocates by the data, so
``torch.compile(fullgraph=True)`` takes it whole (one graph per rows and run length); it returns
(rows, run, vocab). ``ragged_step_nlls`` (eager) feeds row r only its own ``lengths[r]`` tokens and
attends to the columns up to the furthest position fed: the matmuls, most of a step's cost, see only
each row's own tokens (attention alone takes the runs padded to the longest, its padded queries'
outputs dropped); it returns (tokens fed, vocab), row by row.

``rope_tables`` are made from the model's config (transformers' own rope-init function of its
``rope_type``: llama3, linear, yarn, ...), never read from a module, so a model whose modules were
patched (unsloth) decodes the same. The RMS norms' weights are folded into the matrices after them and
the attention scale into the queries (``weights``): what is left of a norm here is ``x * rsqrt(mean(x^2)
+ eps)``. A projection over 4-bit weights is a ``four_bit.FourBitProjection``, which applies itself; a
matrix packed for oneDNN (``weights``, eagerly on the CPU) goes to oneDNN's linear.

Cache layout: (layers, 2, rows, kv heads, capacity, head dim), keys then values, a row's positions
contiguous. Knows the decoder's arithmetic; knows nothing of lanes, buckets, searches or tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from arc_kit.method.answers import answer_log_probs


def normalized(hidden, eps: float):
    """``hidden`` RMS-normalised over its last dimension (in float32, as transformers does), no weight."""
    import torch

    if hidden.dtype == torch.float32:  # one call: what dispatch overhead an eager step saves matters
        return torch.rms_norm(hidden, hidden.shape[-1:], None, eps)
    wide = hidden.float()
    return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True).add_(eps))).to(hidden.dtype)


def rope_tables(config, head_dim: int, length: int, dtype, device):
    """(cos, sin), each (length, head dim): the config's rotary embedding at positions 0..length-1, as transformers
    computes it (inverse frequencies in float32, its attention scaling applied, then cast)."""
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    parameters = config.rope_parameters
    if parameters.get("rope_type", "default") == "default":
        inverse, scaling = 1.0 / (parameters["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float)
                                                               / head_dim)), 1.0
    else:
        inverse, scaling = ROPE_INIT_FUNCTIONS[parameters["rope_type"]](config)
    frequencies = torch.arange(length, device=device)[:, None].float() * inverse.to(device, torch.float)
    angles = torch.cat((frequencies, frequencies), dim=-1)
    return (angles.cos() * scaling).to(dtype).contiguous(), (angles.sin() * scaling).to(dtype).contiguous()


def half_swap(head_dim: int, dtype, device):
    """The signed permutation S with ``x @ S == rotate_half(x)`` (transformers' rope: (-x2, x1))."""
    import torch

    half = head_dim // 2
    swap = torch.zeros((head_dim, head_dim), dtype=dtype, device=device)
    index = torch.arange(half, device=device)
    swap[index + half, index] = -1.0
    swap[index, index + half] = 1.0
    return swap


def _biases(weights, positions, used: int, dtype) -> dict:
    """{window: (rows, run, used) additive mask}: 0 where column <= the token's position (and within the window)."""
    import torch

    columns = torch.arange(used, device=positions.device)[None, None, :]
    biases = {}
    for window in weights.windows:
        visible = columns <= positions[:, :, None]
        if window is not None:
            visible = visible & (columns > positions[:, :, None] - window)
        biases[window] = torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(
            ~visible, float("-inf"))
    return biases


def forward(weights, cache, tokens, positions, cos, sin, swap, used, lengths=None):
    """Hidden states (tokens fed, hidden; before the final norm), row by row, after row r feeds ``tokens[r]`` from
    ``positions[r]``.

    ``tokens``: (rows, run); ``positions``: (rows,). ``cache``: (layers, 2, rows, kv heads, capacity,
    head dim) (eagerly, a view of some rows of a larger one is fine), written in place at each
    token's position; ``cos``/``sin``: rope tables of at least ``capacity`` positions; ``swap``:
    ``half_swap``; ``used``: attend to columns [0, used), which must hold every token's position
    (the cache's capacity, under a compiler a dynamic size). A token sees the cache up to its own
    position: the run's earlier tokens, never its later ones. ``lengths`` (rows,), eagerly: row r
    feeds only ``tokens[r, :lengths[r]]`` (the rest is padding, neither computed nor written);
    without it every token is fed.
    """
    import torch
    import torch.nn.functional as F

    rows, run = tokens.shape
    heads, kv_heads, head_dim = weights.heads, weights.kv_heads, weights.head_dim
    group, query_width, rotated_heads = heads // kv_heads, heads * head_dim, heads + kv_heads
    device = tokens.device
    token_positions = positions[:, None] + torch.arange(run, device=device)[None, :]  # (rows, run)
    token_rows = torch.arange(rows, device=device)[:, None].expand(rows, run)
    fed = None if lengths is None else torch.nonzero(  # the real tokens among the rows * run slots
        (torch.arange(run, device=device)[None, :] < lengths[:, None]).reshape(-1)).squeeze(1)
    flat_tokens, flat_positions, flat_rows = (tensor.reshape(rows * run) if fed is None else tensor.reshape(-1)[fed]
                                              for tensor in (tokens, token_positions, token_rows))
    count = flat_tokens.shape[0]  # the tokens fed, row by row: the matmuls take them as one batch
    rotation = torch.diag_embed(cos[flat_positions]) + swap * sin[flat_positions][:, None, :]  # x @ rotation: rope
    # per row, the queries of a key-value head are its group's heads at each token of the run: (run * group) queries
    biases = {window: bias[:, None, :, None, :].expand(rows, 1, run, group, used).reshape(rows, 1, run * group, used)
              for window, bias in _biases(weights, token_positions, used, cos.dtype).items()}
    # (layer, key or value, row, kv head, position): one index_put_ per layer on the cache itself (not on a
    # view of it, which a compiler could only rewrite as a copy of the whole cache) writes each token's key and value
    layer_index = torch.arange(len(weights.layers), device=device)
    where = (torch.arange(2, device=device)[None, :, None], flat_rows[:, None, None],
             torch.arange(kv_heads, device=device)[None, None, :], flat_positions[:, None, None])
    keys, values = cache[:, 0, :, :, :used].unbind(0), cache[:, 1, :, :, :used].unbind(0)  # per layer: views
    hidden = weights.embed[flat_tokens]
    for index, layer in enumerate(weights.layers):
        mixed = linear(normalized(hidden, weights.eps), layer.qkv, layer.qkv_bias)  # (count, (H + 2K) * D)
        query_key = mixed[:, :rotated_heads * head_dim].view(count, rotated_heads, head_dim)
        if layer.query_norm is not None:  # Qwen3's RMS norm of each query and key head, with its weight
            query_key = torch.cat((layer.query_norm * normalized(query_key[:, :heads], weights.eps),
                                   layer.key_norm * normalized(query_key[:, heads:], weights.eps)), dim=1)
        rotated = torch.bmm(query_key, rotation)
        mixed[:, query_width:rotated_heads * head_dim] = rotated[:, heads:].reshape(count, -1)  # keys, rotated
        cache.index_put_((layer_index[index], *where), mixed[:, query_width:].view(count, 2, kv_heads, head_dim))
        # a row's query heads grouped by their key-value head (head h reads h // group): the group, at every token
        # of the run, plays the queries of one attention over that head's keys and values, never expanded; queries
        # carry the scale
        query = rotated[:, :heads] if fed is None else rotated.new_zeros((rows * run, heads, head_dim)).index_copy_(
            0, fed, rotated[:, :heads])  # ragged: the tokens fed at their slots, zeros in the padding's
        query = query.reshape(rows, run, kv_heads, group, head_dim).transpose(1, 2).reshape(
            rows, kv_heads, run * group, head_dim)
        attended = F.scaled_dot_product_attention(query, keys[index], values[index], attn_mask=biases[layer.window],
                                                  scale=1.0)
        attended = attended.view(rows, kv_heads, run, group, head_dim).transpose(1, 2).reshape(rows * run, query_width)
        hidden = _plus_linear(hidden, attended if fed is None else attended[fed], layer.output, layer.output_bias)
        gate, up = linear(normalized(hidden, weights.eps), layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
        hidden = _plus_linear(hidden, F.silu(gate).mul_(up), layer.down, layer.down_bias)
    return hidden


def padded_step_nlls(weights, cache, tokens, positions, cos, sin, swap, allowed, probabilities: str):
    """The compiled step: every row of ``cache`` fed its whole run ``tokens[r]`` (rows, run) from ``positions[r]``,
    every column of the cache attended (``forward``); the next-token NLLs after every token, (rows, run, vocab;
    float32), under ``allowed`` (the answer mask) and ``probabilities``."""
    hidden = forward(weights, cache, tokens, positions, cos, sin, swap, cache.shape[4])
    return -answer_log_probs(logits(weights, hidden), allowed, probabilities).view(*tokens.shape, -1)


def ragged_step_nlls(weights, cache, tokens, positions, lengths: Sequence[int], used: int, cos, sin, swap, allowed,
                     probabilities: str):
    """The eager step: row r of ``cache`` fed only ``tokens[r, :lengths[r]]`` (host ints) from ``positions[r]``,
    the columns [0, used) attended (``forward``); the next-token NLLs after each token fed, (sum(lengths), vocab;
    float32), row by row, under ``allowed`` and ``probabilities``."""
    import torch

    ragged = min(lengths) < tokens.shape[1]  # runs of one length: nothing to leave out
    fed = torch.tensor(list(lengths), device=tokens.device) if ragged else None
    hidden = forward(weights, cache, tokens, positions, cos, sin, swap, used, fed)
    return -answer_log_probs(logits(weights, hidden), allowed, probabilities)


def linear(inputs, weight, bias):
    """``inputs @ weight.T (+ bias)``: ``weight`` a matrix (packed or not) or a 4-bit projection (applies itself)."""
    import torch
    import torch.nn.functional as F

    if isinstance(weight, torch.Tensor):
        if weight.layout == torch._mkldnn:  # packed (``weights``)
            return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")
        return F.linear(inputs, weight, bias)
    result = weight(inputs)
    return result if bias is None else result + bias


def _plus_linear(hidden, inputs, weight, bias):
    """``hidden + inputs @ weight.T (+ bias)``: one addmm for a matrix (the residual added by the matmul)."""
    import torch

    if not isinstance(weight, torch.Tensor) or weight.layout == torch._mkldnn:
        return hidden + linear(inputs, weight, bias)
    result = torch.addmm(hidden, inputs, weight.t())
    return result if bias is None else result + bias


def logits(weights, hidden):
    """The output head's logits of hidden states (before the final norm, which is folded into the head)."""
    return linear(normalized(hidden, weights.eps), weights.head, weights.head_bias)
