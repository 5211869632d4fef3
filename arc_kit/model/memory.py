"""What a model needs in memory, computed from its config alone (nothing is allocated).

``Architecture`` holds the sizes that matter (``checks.architecture_of`` reads them from a
config.json; the planner's first guesses, ``run.expectations``, price the same shape); the functions
below size its weights as loaded (16-bit on a GPU, or 4-bit bitsandbytes with its block scales: the
linear layers are what 4 bits pack), test-time training at the paper's recipe and the engine's static
KV cache; ``needs`` puts them together, as ``arc-kit check-model`` shows them against ``GPUS`` (the
competition's and the usual cards). Estimates, not measurements: the activations are the tensors the
backward keeps (within 3% of those counted on SmolLM2-135M's shape, docs/results.md); the backward's
passing buffers and allocator slack are not counted (on the CPU the step's peak was about twice the
estimate without checkpointing, more with it).

Knows sizes and bytes; knows nothing of files (``checks``), devices or tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from arc_kit.settings import DEFAULT_TOKEN_BUDGET, TEST_TIME_TRAINING, LoraTrainingSettings, SolveSettings

GIB = 1 << 30

# What each card offers to a process (nvidia-smi's total: 23034, 15360 and 81559 MiB).
GPUS = {"L4": 23034 * (1 << 20), "T4": 15360 * (1 << 20), "H100": 81559 * (1 << 20)}
NOMINAL = {"L4": "24 GB", "T4": "16 GB", "H100": "80 GB"}
FOUR_BIT_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)  # nf4 values, double-quantized 8-bit absmax per 64, fp32 per 256 blocks
FOUR_BIT_MATRIX_BYTES = 4 * (256 + 16)  # and per matrix its two code tables (the nested one's 256, nf4's 16 floats)
FOUR_BIT = "bitsandbytes 4-bit nf4"  # the quantization 4-bit weights are packed in, as ``Architecture`` says it
ADAMW_BYTES = 4 + 4 + 8  # a trained float32 parameter: itself, its gradient, two moments


@dataclass(frozen=True)
class Architecture:
    """The sizes of a decoder-only transformer that set its memory, from its config."""

    model_type: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # the output head is the input embeddings
    max_positions: int | None = None
    attention_bias: bool = False  # q, k, v projections with biases (Qwen2)
    head_norms: bool = False  # q and k RMS norms per head (Qwen3)
    quantization: str | None = None  # None, or what the config's quantization_config says (``FOUR_BIT``)
    name: str = ""  # what a reader calls it (a folder's name, a published model's), where not its model_type

    @property
    def four_bit(self) -> bool:
        return (self.quantization or "").startswith("bitsandbytes 4-bit")

    def with_four_bit(self) -> Architecture:
        """The same model, its linear weights packed in 4 bits."""
        return replace(self, quantization=FOUR_BIT)

    def describe(self) -> str:
        """One line: the type and its sizes."""
        return (f"{self.model_type}: {self.layers} layers, hidden {self.hidden}, MLP {self.intermediate}, "
                f"{self.heads} heads ({self.kv_heads} for keys and values, {self.head_dim} wide), "
                f"vocabulary {self.vocab}{', tied head' if self.tied else ''}, "
                f"{self.max_positions or 'unknown'} positions")


@dataclass(frozen=True)
class ParameterCount:
    linear: int  # in the layers' projections: what 4-bit quantization packs
    other: int  # embeddings, head, norms, biases

    @property
    def total(self) -> int:
        return self.linear + self.other


def layer_linear_shapes(architecture: Architecture) -> list[tuple[int, int]]:
    """(in, out) of each linear projection of one layer: q, k, v, o, gate, up, down."""
    a = architecture
    query, key_value = a.heads * a.head_dim, a.kv_heads * a.head_dim
    return [(a.hidden, query), (a.hidden, key_value), (a.hidden, key_value), (query, a.hidden),
            (a.hidden, a.intermediate), (a.hidden, a.intermediate), (a.intermediate, a.hidden)]


def parameters(architecture: Architecture) -> ParameterCount:
    """The parameters of a Llama-family causal LM of these sizes (Mistral's, Qwen2's biases, Qwen3's head norms)."""
    a = architecture
    linear = a.layers * sum(inputs * outputs for inputs, outputs in layer_linear_shapes(a))
    per_layer = 2 * a.hidden  # the two RMS norms
    if a.attention_bias:
        per_layer += (a.heads + 2 * a.kv_heads) * a.head_dim
    if a.head_norms:
        per_layer += 2 * a.head_dim
    embeddings = a.vocab * a.hidden * (1 if a.tied else 2)
    return ParameterCount(linear, a.layers * per_layer + embeddings + a.hidden)


def weight_bytes(architecture: Architecture, value_bytes: int = 2, four_bit: bool | None = None) -> int:
    """The weights as loaded: ``value_bytes`` each (2 on a GPU), the linear layers packed when 4-bit."""
    count = parameters(architecture)
    packed = architecture.four_bit if four_bit is None else four_bit
    if not packed:
        return count.total * value_bytes
    matrices = architecture.layers * len(layer_linear_shapes(architecture))
    return int(count.linear * FOUR_BIT_BYTES + matrices * FOUR_BIT_MATRIX_BYTES + count.other * value_bytes)


def lora_parameters(architecture: Architecture, rank: int) -> int:
    """A rank-``rank`` LoRA on every linear projection of every layer."""
    return architecture.layers * sum(rank * (inputs + outputs) for inputs, outputs in layer_linear_shapes(architecture))


def activation_bytes(architecture: Architecture, tokens: int, value_bytes: int = 2, checkpointing: bool = False) -> int:
    """What a training step's backward keeps for ``tokens`` tokens: per layer the inputs of its norms,
    projections, attention and MLP (fused attention: no tokens x tokens matrix); with checkpointing, one
    hidden state per layer and one layer's worth. The logits in float32, three times (logits, softmax, grad)."""
    a = architecture
    per_token_layer = (4 * a.hidden + 2 * (a.heads + a.kv_heads) * a.head_dim + 4 * a.intermediate) * value_bytes
    layers = per_token_layer + (a.layers - 1) * a.hidden * value_bytes if checkpointing else a.layers * per_token_layer
    return tokens * (layers + 3 * 4 * a.vocab)


def training_bytes(architecture: Architecture, settings: LoraTrainingSettings = TEST_TIME_TRAINING,
                   tokens: int = DEFAULT_TOKEN_BUDGET, value_bytes: int = 2) -> int:
    """Test-time training beyond the weights: the LoRA (and the embeddings and head when trained) with
    AdamW's state in float32, and one batch's activations at ``tokens`` tokens."""
    trained = lora_parameters(architecture, settings.lora_rank)
    if settings.train_embeddings:
        trained += architecture.vocab * architecture.hidden * 2  # trained copies of the embeddings and the head
    activations = activation_bytes(architecture, tokens * settings.batch_size, value_bytes,
                                   settings.gradient_checkpointing)
    return trained * ADAMW_BYTES + activations


def kv_cache_bytes(architecture: Architecture, lanes: int, tokens: int, value_bytes: int = 2) -> int:
    """The engine's static cache for ``lanes`` searches of ``tokens`` positions."""
    a = architecture
    return a.layers * 2 * lanes * a.kv_heads * tokens * a.head_dim * value_bytes


@dataclass(frozen=True)
class MemoryNeeds:
    """A model's memory on a GPU at the default settings, in bytes, and what each part is."""

    rows: tuple[tuple[str, int], ...]  # (what, bytes), the weights first

    @property
    def total(self) -> int:
        return sum(size for _, size in self.rows)

    @property
    def to_run(self) -> int:
        """What must fit for the kit to run at all: the weights and the training (the cache shrinks with tasks)."""
        return sum(size for what, size in self.rows if not what.startswith(("KV cache", "engine's")))


def needs(architecture: Architecture, settings: SolveSettings = SolveSettings(), four_bit: bool | None = None,
          fast_engine: bool = True) -> MemoryNeeds:
    """The memory of ``architecture`` on a GPU (16-bit values) at ``settings``: weights (4-bit when the config
    says so or ``four_bit``), the engine's own tensors when it runs the model (a merged copy of 16-bit
    weights; over 4-bit ones, which it reads in place, what is not packed and its float32 LoRA pairs),
    test-time training at the token budget, and the KV cache of the default lanes (one per inference
    augmentation) at the token budget."""
    budget = min(settings.max_len or DEFAULT_TOKEN_BUDGET, architecture.max_positions or 1 << 62)
    packed = architecture.four_bit if four_bit is None else four_bit
    weights = weight_bytes(architecture, 2, packed)
    lanes = settings.inference_augmentations
    rows = [(f"weights ({'4-bit' if packed else '16-bit'})", weights)]
    if fast_engine and packed:  # the packed weights read in place: its own are what is not packed, and the LoRA's
        rows.append(("engine's norms, biases, LoRA (4-bit read in place)",
                     parameters(architecture).other * 2 + lora_parameters(architecture, settings.ttt.lora_rank) * 4))
    elif fast_engine:
        rows.append(("engine's copy of the weights", weights))
    if settings.test_time_training:
        rows.append((f"test-time training (r{settings.ttt.lora_rank}, {budget} tokens, kept for backward)",
                     training_bytes(architecture, settings.ttt, budget)))
    rows.append((f"KV cache ({lanes} lanes x {budget} tokens)", kv_cache_bytes(architecture, lanes, budget)))
    return MemoryNeeds(tuple(rows))


def memory_table(needs_: MemoryNeeds) -> list[str]:
    """The needs as a table: a row per part in GiB, then the total against each card of ``GPUS``."""
    cards = [f"{name} {NOMINAL[name]}" for name in GPUS]
    title = "memory, GiB (estimated from config.json)"
    width = max(len(title), *(len(what) for what, _ in needs_.rows)) + 2
    lines = [f"{title:<{width}}{'need':>7}" + "".join(f"{card:>13}" for card in cards)]
    lines += [f"{what:<{width}}{size / GIB:7.2f}" for what, size in needs_.rows]
    spare = [(GPUS[name] - needs_.total) / GIB for name in GPUS]
    lines.append(f"{'total (left on the card)':<{width}}{needs_.total / GIB:7.2f}"
                 + "".join(f"{left:>13.1f}" for left in spare))
    return lines


def count_text(count: int) -> str:
    """A parameter count in words a reader takes in at once: 8.03 B, 135 M, 84 K."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return str(count)
