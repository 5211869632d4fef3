"""The decoder's forward pass in plain PyTorch over ``DecodeWeights``: one decode step, and a multi-token pass.

``decode_step`` is the fixed-shape step of the fast engine: every row of a lane bucket feeds a run of
tokens (one in a plain DFS step; a branch token and its draft in a speculative one) at consecutive
positions from its own start; per layer it normalises, projects query, key and value with one
matmul, rotates queries and keys by their position (one batched matmul with a per-token rotation
matrix made once per step from the model's own rope tables), writes each token's key and value at
its position into the static cache with one ``index_put_``, attends with the query heads grouped
over their key and value head (never expanded) under a mask ``column <= position`` (and the
layer's sliding window), and runs the MLP with one matmul for gate and up. It ends with the
next-token NLLs of every token under ``answers.answer_log_probs``. It has no Python branches on
values, no host synchronisation and no allocation that depends on the data, so
``torch.compile(fullgraph=True)`` takes it whole (one graph per rows and run length); eagerly,
``used`` (the columns any token can see) limits attention to the columns in use.

``forward_tokens`` is the eager multi-token pass of prompts (the DFS's first pass, the scorer's
prompts) and answers: tokens at given positions, optionally after a stored prefix (rows of a
prompt cache with their valid lengths), handing each layer's new keys and values to ``store``.
It returns the last hidden states before the final norm; ``logits`` finishes them.

The RMS norms before attention, before the MLP and before the head have their weights folded into
the matrices that follow, and the attention scale into the queries (``decode_weights``); what is
left here of a norm is ``x * rsqrt(mean(x^2) + eps)``. Over 4-bit weights a projection is a
``four_bit.FourBitProjection``, which applies its norm weight, scale and LoRA itself (``linear``).

Cache layout: per layer (2, rows, kv heads, capacity, head dim), keys then values: the grouped-query
layout, with a row's positions contiguous. Knows the decoder's arithmetic; knows nothing of lanes,
buckets, searches or tasks.
"""

from __future__ import annotations

from arc_kit.method.answers import answer_log_probs


def normalized(hidden, eps: float):
    """``hidden`` RMS-normalised over its last dimension (in float32, as transformers does), no weight."""
    import torch

    if hidden.dtype == torch.float32:  # one call: what dispatch overhead an eager step saves matters
        return torch.rms_norm(hidden, hidden.shape[-1:], None, eps)
    wide = hidden.float()
    return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True).add_(eps))).to(hidden.dtype)


def head_normalized(states, weight, eps: float):
    """Qwen3's per-head RMS norm of queries or keys (..., heads, head dim), with its weight."""
    return weight * normalized(states, eps)


def rope_tables(weights, length: int):
    """(cos, sin), each (length, head dim): the model's own rotary embedding at positions 0..length-1."""
    import torch

    positions = torch.arange(length, device=weights.device)[None]
    probe = torch.zeros(1, dtype=weights.dtype, device=weights.device)
    with torch.no_grad():
        cos, sin = weights.rotary(probe, positions)
    return cos[0].to(weights.dtype).contiguous(), sin[0].to(weights.dtype).contiguous()


def half_swap(head_dim: int, dtype, device):
    """The signed permutation S with ``x @ S == rotate_half(x)`` (transformers' rope: (-x2, x1))."""
    import torch

    half = head_dim // 2
    swap = torch.zeros((head_dim, head_dim), dtype=dtype, device=device)
    index = torch.arange(half, device=device)
    swap[index + half, index] = -1.0
    swap[index, index + half] = 1.0
    return swap


def rotate_half(states):
    import torch

    half = states.shape[-1] // 2
    return torch.cat((-states[..., half:], states[..., :half]), dim=-1)


def _step_biases(weights, positions, used: int, dtype) -> dict:
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


def decode_step(weights, cache, tokens, positions, cos, sin, swap, allowed, probabilities: str, used: int | None):
    """Next-token NLLs (rows, run, vocab; float32) after each row feeds ``tokens[row]`` from ``positions[row]`` on.

    ``tokens``: (rows, run), a row's run fed at positions ``positions[row]``, ``positions[row] + 1``,
    ...; ``positions``: (rows,). ``cache``: (layers, 2, rows, kv heads, capacity, head dim) (a view
    of the first rows of a larger one is fine), written in place at each token's position;
    ``cos``/``sin``: rope tables of at least ``capacity`` positions; ``swap``: ``half_swap``;
    ``allowed``: the answer mask over the vocabulary; ``used``: attend to columns [0, used), which
    must hold every token's position (None: every column of the cache; compiled, so that one graph
    serves every capacity). A token sees the cache up to its own position: the run's earlier tokens,
    never its later ones.
    """
    import torch
    import torch.nn.functional as F

    (rows, run), used = tokens.shape, cache.shape[4] if used is None else used
    count = rows * run  # the step's tokens, row by row: the matmuls take them as one batch
    heads, kv_heads, head_dim = weights.heads, weights.kv_heads, weights.head_dim
    group, query_width, rotated_heads = heads // kv_heads, heads * head_dim, heads + kv_heads
    token_positions = positions[:, None] + torch.arange(run, device=positions.device)[None, :]  # (rows, run)
    flat_positions = token_positions.reshape(count)
    rotation = torch.diag_embed(cos[flat_positions]) + swap * sin[flat_positions][:, None, :]  # x @ rotation: rope
    # per row, the queries of a key-value head are its group's heads at each token of the run: (run * group) queries
    biases = {window: bias[:, None, :, None, :].expand(rows, 1, run, group, used).reshape(rows, 1, run * group, used)
              for window, bias in _step_biases(weights, token_positions, used, cos.dtype).items()}
    # (layer, key or value, row, kv head, position): one index_put_ per layer on the cache itself (not on a
    # view of it, which a compiler could only rewrite as a copy of the whole cache) writes each token's key and value
    device = tokens.device
    layer_index = torch.arange(len(weights.layers), device=device)
    where = (torch.arange(2, device=device)[None, None, :, None],
             torch.arange(rows, device=device)[:, None, None, None],
             torch.arange(kv_heads, device=device)[None, None, None, :], token_positions[:, :, None, None])
    keys, values = cache[:, 0, :, :, :used].unbind(0), cache[:, 1, :, :, :used].unbind(0)  # per layer: views
    hidden = weights.embed[tokens.reshape(count)]
    for index, layer in enumerate(weights.layers):
        mixed = linear(normalized(hidden, weights.eps), layer.qkv, layer.qkv_bias)  # (count, (H + 2K) * D)
        query_key = mixed[:, :rotated_heads * head_dim].view(count, rotated_heads, head_dim)
        if layer.query_norm is not None:
            query_key = torch.cat((head_normalized(query_key[:, :heads], layer.query_norm, weights.eps),
                                   head_normalized(query_key[:, heads:], layer.key_norm, weights.eps)), dim=1)
        rotated = torch.bmm(query_key, rotation)
        mixed[:, query_width:rotated_heads * head_dim] = rotated[:, heads:].reshape(count, -1)  # keys, rotated
        cache.index_put_((layer_index[index], *where), mixed[:, query_width:].view(rows, run, 2, kv_heads, head_dim))
        # a row's query heads grouped by their key-value head (head h reads h // group): the group, at every token
        # of the run, plays the queries of one attention over that head's keys and values, never expanded; queries
        # carry the scale
        query = rotated[:, :heads].reshape(rows, run, kv_heads, group, head_dim).transpose(1, 2).reshape(
            rows, kv_heads, run * group, head_dim)
        attended = F.scaled_dot_product_attention(query, keys[index], values[index], attn_mask=biases[layer.window],
                                                  scale=1.0)
        attended = attended.view(rows, kv_heads, run, group, head_dim).transpose(1, 2).reshape(count, query_width)
        hidden = _plus_linear(hidden, attended, layer.output, layer.output_bias)
        gate, up = linear(normalized(hidden, weights.eps), layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
        hidden = _plus_linear(hidden, F.silu(gate).mul_(up), layer.down, layer.down_bias)
    return -answer_log_probs(logits(weights, hidden), allowed, probabilities).view(rows, run, -1)


def linear(inputs, weight, bias):
    """``inputs @ weight.T (+ bias)``: ``weight`` a matrix, or a 4-bit projection (``four_bit``) that applies itself."""
    import torch
    import torch.nn.functional as F

    if isinstance(weight, torch.Tensor):
        return F.linear(inputs, weight, bias)
    result = weight(inputs)
    return result if bias is None else result + bias


def _plus_linear(hidden, inputs, weight, bias):
    """``hidden + inputs @ weight.T (+ bias)``: one addmm for a matrix (the residual added by the matmul)."""
    import torch

    if not isinstance(weight, torch.Tensor):
        return hidden + linear(inputs, weight, bias)
    result = torch.addmm(hidden, inputs, weight.t())
    return result if bias is None else result + bias


def logits(weights, hidden):
    """The output head's logits of hidden states (before the final norm, which is folded into the head)."""
    return linear(normalized(hidden, weights.eps), weights.head, weights.head_bias)


def _attention_mask(weights, positions, prefix_valid, window):
    """The boolean mask (rows, 1, tokens, prefix + tokens) of a multi-token pass, or None (plain causal)."""
    import torch

    if prefix_valid is None and window is None:
        return None
    rows, count = positions.shape
    key_positions, key_valid = positions, torch.ones_like(positions, dtype=torch.bool)
    if prefix_valid is not None:
        prefix_positions = torch.arange(prefix_valid.shape[1], device=positions.device).expand(rows, -1)
        key_positions = torch.cat((prefix_positions, positions), dim=1)
        key_valid = torch.cat((prefix_valid, key_valid), dim=1)
    visible = key_valid[:, None, :] & (key_positions[:, None, :] <= positions[:, :, None])
    if window is not None:
        visible = visible & (key_positions[:, None, :] > positions[:, :, None] - window)
    return visible[:, None]


def forward_tokens(weights, ids, positions, cos, sin, *, prefix=None, prefix_valid=None, store=None):
    """Hidden states (rows, tokens, hidden; before the final norm) of ``ids`` (rows, tokens) at ``positions``.

    ``prefix(layer)``: that layer's (keys, values), each (rows, kv heads, prefix length, head dim),
    stored at positions 0.. and valid where ``prefix_valid`` (rows, prefix length) is True; the
    tokens attend to it and causally to each other. ``store(layer, keys, values)`` receives each
    layer's new keys and values, (rows, kv heads, tokens, head dim). Padding after a row's real
    tokens is harmless: no real token attends to a later one. Eager only.
    """
    import torch
    import torch.nn.functional as F

    rows, count = ids.shape
    heads, kv_heads, head_dim = weights.heads, weights.kv_heads, weights.head_dim
    query_width, key_width = heads * head_dim, kv_heads * head_dim
    cos, sin = cos[positions][:, None], sin[positions][:, None]
    masks = {window: _attention_mask(weights, positions, prefix_valid, window)
             for window in weights.windows}
    hidden = weights.embed[ids]
    for index, layer in enumerate(weights.layers):
        mixed = linear(normalized(hidden, weights.eps), layer.qkv, layer.qkv_bias)
        query = mixed[..., :query_width].view(rows, count, heads, head_dim)
        keys = mixed[..., query_width:query_width + key_width].view(rows, count, kv_heads, head_dim)
        values = mixed[..., query_width + key_width:].view(rows, count, kv_heads, head_dim).transpose(1, 2)
        if layer.query_norm is not None:
            query = head_normalized(query, layer.query_norm, weights.eps)
            keys = head_normalized(keys, layer.key_norm, weights.eps)
        query, keys = query.transpose(1, 2), keys.transpose(1, 2)
        query = query * cos + rotate_half(query) * sin
        keys = keys * cos + rotate_half(keys) * sin
        if store is not None:
            store(index, keys, values)
        if prefix is not None:
            stored_keys, stored_values = prefix(index)
            keys, values = torch.cat((stored_keys, keys), dim=2), torch.cat((stored_values, values), dim=2)
        mask = masks[layer.window]
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=mask is None,
                                                  scale=1.0, enable_gqa=True)  # queries carry the attention scale
        hidden = hidden + linear(attended.transpose(1, 2).reshape(rows, count, query_width), layer.output,
                                 layer.output_bias)
        gate, up = linear(normalized(hidden, weights.eps), layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
        hidden = hidden + linear(F.silu(gate) * up, layer.down, layer.down_bias)
    return hidden
