"""Training sequences: draw examples from a pool, augment, encode, mask the loss to the outputs.

A *pool* is the list of pairs that belong to one task: the generated RE-ARC examples of a
training task, or a task's own train (and known test) pairs. ``SequenceDataset`` draws sequences
from pools with one of the two samplers of ``SequenceSettings``: ``passes``, the authors', whose
plan is laid out like their epochs (a pool's sequences spread evenly over the run, in random order
within each stretch; ``SequenceDataset.summary`` says how often examples recur), or ``random``, the
kit's earlier one. Either way the last pair plays the test, the sequence gets a random augmentation
(symmetry, colours, order) and is encoded with loss only on the outputs (not the first, by default:
``LoraTrainingSettings.mask_first_output``). Test-time training uses leave-one-out sequences of one
task's train pairs instead (``sample_leave_one_out``). ``BatchOrder`` lays the items out over the optimizer steps,
micro-batches and processes of a run.

Every draw takes an explicit ``numpy.random.Generator``; ``SequenceDataset`` item ``i`` is drawn
from the generator seeded ``(seed, i)`` (its place in the plan from generators seeded by the
seed alone), so a dataset is reproducible, resumable and splits across processes without
coordination. Needs torch only for the Dataset and the collator.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.datasets import load_re_arc, load_tasks
from arc_kit.data.difficulty import drop_easiest
from arc_kit.data.grids import MAX_SIDE
from arc_kit.data.tasks import Pair, TaskSet
from arc_kit.names import listed, shown
from arc_kit.settings import DataSettings, SequenceSettings, TrainingSettings
from arc_kit.text import Encoded, TaskEncoder, TaskTooLongError

logger = logging.getLogger(__name__)


def pools_from_tasks(tasks: TaskSet) -> dict[str, tuple[Pair, ...]]:
    """One pool per task: its train pairs, plus its test pairs where their outputs are known."""
    return {task.id: (*task.train, *(pair for pair in task.test if pair.output is not None)) for task in tasks.tasks()}


def sample_sequence(pool: Sequence[Pair], rng: np.random.Generator, encoder: TaskEncoder,
                    settings: SequenceSettings = SequenceSettings(), *, mask_first_output: bool = True) -> Encoded:
    """Draw k distinct pairs in random order, augment them, encode with the loss on the outputs."""
    return sample_examples(pool, rng, encoder, settings, mask_first_output=mask_first_output)[0]


def sample_examples(pool: Sequence[Pair], rng: np.random.Generator, encoder: TaskEncoder,
                    settings: SequenceSettings = SequenceSettings(), *,
                    mask_first_output: bool = True) -> tuple[Encoded, tuple[int, ...]]:
    """``sample_sequence``, and the pool indices of its pairs in the order written (before the budget)."""
    if len(pool) < 2:
        raise ValueError("a pool needs at least 2 pairs (one example and one test)")
    high = min(settings.max_pairs, len(pool))
    low = min(settings.min_pairs, high)
    count = int(rng.integers(low, high + 1))
    chosen = [int(i) for i in rng.choice(len(pool), size=count, replace=False)]
    augmentation = Augmentation.random(rng, count, keep_background=settings.fixed_background)
    encoded = encoder.encode_training(augmentation.apply_pairs([pool[i] for i in chosen]),
                                      mask_first_output=mask_first_output, max_len=settings.max_tokens)
    return encoded, tuple(augmentation.reorder(chosen))


def sample_leave_one_out(train: Sequence[Pair], rng: np.random.Generator, encoder: TaskEncoder, *, held_out: int,
                         symmetry: int | None = None, mask_first_output: bool = True,
                         keep_background: bool = False) -> Encoded:
    """A test-time-training sequence: train pair ``held_out`` last, as the test, the others before it in random
    order; the whole sequence in a symmetry (``symmetry``, or a random one) and random colours, within the
    encoder's token budget."""
    if len(train) < 2:
        raise ValueError("leave-one-out needs at least 2 train pairs")
    others = [train[i] for i in rng.permutation(len(train)) if i != held_out]
    augmentation = Augmentation.random(rng, None, symmetry=symmetry, keep_background=keep_background)
    return encoder.encode_training(augmentation.apply_pairs(others + [train[held_out]]),
                                   mask_first_output=mask_first_output)


def mix_pools(groups: Mapping[str, tuple[Mapping[str, Sequence[Pair]], float]]
              ) -> tuple[dict[str, Sequence[Pair]], dict[str, float]]:
    """Merge groups of pools, ``{group: (pools, weight)}``, into pools named ``group/name`` and weights.

    Each group gets its share of the draws, split evenly among its pools: for example RE-ARC
    ``(pools, 0.8)`` and the ARC training tasks ``(pools, 0.2)``.
    """
    merged, weights = {}, {}
    for group, (pools, weight) in groups.items():
        usable = {name: pool for name, pool in pools.items() if len(pool) >= 2}
        for name, pool in usable.items():
            merged[f"{group}/{name}"] = pool
            weights[f"{group}/{name}"] = weight / len(usable)
    return merged, weights


@dataclass(frozen=True)
class TrainingData:
    """The pools of a pretraining run, their weights, the pools exempt from the pass limit, and one line
    saying what they are."""

    pools: dict[str, Sequence[Pair]]
    weights: dict[str, float]
    description: str
    repeatable: frozenset[str] = field(default_factory=frozenset)  # whole tasks: repeated, as the authors do


def pretraining_data(re_arc: str | None = None, data: DataSettings = DataSettings(), *,
                     allow_evaluation: bool = False, max_side: int = MAX_SIDE) -> TrainingData:
    """RE-ARC examples and/or ``data.task_sets`` as weighted pools (the initial fine-tune's data mix).

    The paper's mix (the default): RE-ARC alone. Task sets are mixed in as whole tasks (their train
    and known test pairs), sharing ``1 - data.re_arc_weight`` of the draws evenly; their pools are
    ``repeatable`` (the authors repeat mixed-in tasks 128 times: run_finetuning_Nemo-full.py in
    da-fr/arc-prize-2024). ``data.drop_easiest`` leaves out each RE-ARC task's easiest examples
    (``difficulty``). An evaluation set is refused unless ``allow_evaluation`` (it could no longer
    measure the model). ``max_side``: the most cells on a grid's side (``datasets.load_tasks``).
    """
    if not isinstance(data, DataSettings):
        raise TypeError(f"data must be DataSettings (task sets go in its task_sets), got {type(data).__name__}")
    task_sets = data.task_sets
    if not re_arc and not task_sets:
        raise ValueError("nothing to train on: give --re-arc PATH and/or --tasks NAME")
    groups, described = {}, []
    if re_arc:
        pools = load_re_arc(re_arc, max_side=max_side)
        if data.drop_easiest:
            pools = {name: drop_easiest(pool, data.drop_easiest) for name, pool in pools.items()}
        groups["re-arc"] = (pools, data.re_arc_weight if task_sets else 1.0)
        dropped = f", the easiest {data.drop_easiest:.0%} of each task left out" if data.drop_easiest else ""
        described.append(f"RE-ARC {re_arc} ({len(pools)} tasks, {sum(map(len, pools.values()))} pairs{dropped})")
    for name in task_sets:
        if "eval" in str(name).lower() and not allow_evaluation:
            raise ValueError(f"refusing to train on {name!r}, an evaluation set (--allow-evaluation-tasks)")
        tasks = load_tasks(name, max_side=max_side)
        weight = (1.0 - data.re_arc_weight if re_arc else 1.0) / len(task_sets)
        groups[str(name)] = (pools_from_tasks(tasks), weight)
        described.append(f"{name} ({len(tasks)} tasks)")
    pools, weights = mix_pools(groups)
    repeatable = frozenset(name for name in pools if not name.startswith("re-arc/"))
    return TrainingData(pools, weights, "; ".join(described), repeatable)


@dataclass(frozen=True)
class Drawn:
    """One item of a ``SequenceDataset`` as drawn: its pool, the examples written, the encoded sequence."""

    pool: int  # index into ``SequenceDataset.pools``
    examples: tuple[int, ...]  # pool indices of the pairs written, in sequence order (the last the test)
    encoded: Encoded


@dataclass(frozen=True)
class PlanSummary:
    """What a passes plan holds: sequences per pool, how many passes it takes, and what the limit cut."""

    sequences: int
    pools: int
    fewest: int  # sequences of the pool with the fewest
    most: int  # and of the pool with the most
    asked: int  # sequences_per_task as the weights scale it, for the pool asking most
    cut: int  # pools that the pass limit gave fewer sequences than asked
    passes: int  # the most passes any pool's plan takes: each example appears at most this often
    pairs: int  # pairs per sequence (fewer in a pool smaller than that)

    def line(self) -> str:
        """One line for the log."""
        reuse = "each example at most once" if self.passes <= 1 else \
            f"examples reused: up to {self.passes} passes, each example at most once per pass"
        cut = f"; {self.cut} pool(s) cut short of {self.asked} by --max-passes" if self.cut else ""
        return (f"passes sampler: {self.sequences} sequences of {self.pairs} pairs from {self.pools} pools "
                f"({self.fewest}-{self.most} each), {reuse}{cut}")


class SequenceDataset:
    """A map-style torch dataset of sequences drawn from pools (see the module docstring).

    Pools with fewer than 2 pairs are left out. ``passes``: item ``i`` is the ``i``-th entry of the
    plan (``plan``), its augmentation drawn with ``np.random.default_rng((seed, i))``; ``length``
    defaults to the plan's size and may not exceed it (ValueError: more passes, or fewer items).
    ``repeatable`` pools are exempt from ``max_passes``. ``random``: item ``i`` picks a pool
    (uniformly, or by ``weights``) and draws ``sample_sequence`` with that generator; ``length``
    defaults to 1000. Every sequence's first output is left out of the loss unless ``mask_first_output`` is off.
    """

    def __init__(self, pools: Mapping[str, Sequence[Pair]], encoder: TaskEncoder,
                 settings: SequenceSettings = SequenceSettings(), *, weights: Mapping[str, float] | None = None,
                 seed: int = 0, length: int | None = None, repeatable: Collection[str] = (),
                 mask_first_output: bool = True):
        self.names = [name for name, pool in pools.items() if len(pool) >= 2]
        if not self.names:
            raise ValueError("no pool with at least 2 pairs to draw from")
        self.pools = [pools[name] for name in self.names]
        raw = np.array([1.0 if weights is None else float(weights[name]) for name in self.names])
        self.probabilities = raw / raw.sum()
        self.encoder, self.settings, self.seed, self.mask_first_output = encoder, settings, seed, mask_first_output
        self.planned: int | None = None  # sequences in the plan (passes only)
        if settings.sampler == "passes":
            self._lay_out_plan(set(repeatable))
            if length is not None and length > self.planned:
                raise ValueError(f"{length} sequences asked for, but the passes sampler plans {self.planned} ("
                                 f"{self.summary().line()}): ask for fewer steps, or allow more passes "
                                 f"(--max-passes)")
        self.length_total = length if length is not None else (self.planned or 1000)
        self._drawn: dict[int, Drawn] = {}  # drawn by ``length``, taken by ``sequence``
        self._unfit: Counter = Counter()  # pool index -> planned items that fitted the budget with no pair as the test

    def _lay_out_plan(self, repeatable: set[str]) -> None:
        """Each pool's count (its share of sequences_per_task x pools, at least one where its weight is not
        zero, at most max_passes passes unless repeatable), then the order: the r-th of a pool's n sequences
        sits at (r + 1/2) / n of the run, ties in random order (equal counts: the authors' epochs)."""
        settings = self.settings
        share = settings.sequences_per_task * len(self.pools) * self.probabilities
        self.asked = np.where(share > 0, np.maximum(1, np.rint(share)), 0).astype(np.int64)
        self.per_pass = np.array([max(1, len(pool) // settings.pairs) for pool in self.pools], dtype=np.int64)
        limited = np.array([name not in repeatable for name in self.names])
        self.counts = np.where(limited, np.minimum(self.asked, self.per_pass * settings.max_passes), self.asked)
        pool_of = np.repeat(np.arange(len(self.pools)), self.counts)
        round_of = np.concatenate([np.arange(count) for count in self.counts])
        place = (round_of + 0.5) / self.counts[pool_of]
        ties = np.random.default_rng((self.seed, 1, 0)).random(len(pool_of))
        order = np.lexsort((ties, place))
        self._plan_pool, self._plan_round = pool_of[order], round_of[order]
        self.planned = len(order)

    def summary(self) -> PlanSummary | None:
        """What the passes plan holds (None for the random sampler)."""
        if self.planned is None:
            return None
        counts = self.counts[self.counts > 0]
        passes = -(-self.counts // self.per_pass)
        return PlanSummary(int(self.planned), int(len(counts)), int(counts.min()), int(counts.max()),
                           int(self.asked.max()), int((self.counts < self.asked).sum()), int(passes.max()),
                           int(self.settings.pairs))

    def __len__(self) -> int:
        return self.length_total

    def plan(self, index: int) -> tuple[int, int, tuple[int, ...]]:
        """``passes``: (pool index, pass, indices of its examples in sequence order) of item ``index``.

        A pool's ``r``-th sequence is chunk ``r % per_pass`` of pass ``r // per_pass``, where a pass is
        a permutation of the pool's examples drawn from ``(seed, 2, pool, pass)`` and cut into
        ``per_pass = len(pool) // pairs`` chunks of ``pairs`` (a pool smaller than ``pairs`` gives
        one sequence of all its examples per pass); the last one plays the test. Items past the plan
        (``training.pretrain`` fills its last step so) repeat the plan's first ones.
        """
        if self.planned is None:
            raise ValueError("only the passes sampler has a plan")
        if index < 0:
            raise IndexError(f"item {index} is outside the plan")
        base = index % self.planned
        pool_index = int(self._plan_pool[base])
        sequence = int(self._plan_round[base])
        size = len(self.pools[pool_index])
        count = min(self.settings.pairs, size)
        pass_index, chunk = divmod(sequence, size // count)
        order = np.random.default_rng((self.seed, 2, pool_index, pass_index)).permutation(size)
        return pool_index, pass_index, tuple(int(i) for i in order[chunk * count:(chunk + 1) * count])

    def length(self, index: int) -> int:
        """Tokens in item ``index`` (drawn once: the item itself is then served from memory)."""
        if index not in self._drawn:
            if len(self._drawn) > 4096:  # items measured but never taken (another process's share)
                self._drawn.clear()
            self._drawn[index] = self.draw(index)
        return len(self._drawn[index].encoded)

    def sequence(self, index: int) -> tuple[str, Encoded]:
        """(pool name, encoded sequence) of item ``index``; see ``draw``."""
        drawn = self._drawn.pop(index, None) or self.draw(index)
        return self.names[drawn.pool], drawn.encoded

    def draw(self, index: int) -> Drawn:
        """Item ``index``: as planned (``passes``), else (or if the plan's pairs cannot fit) drawn at random."""
        if self.planned is not None:
            planned = self._draw_planned(index)
            if planned is not None:
                return planned
        return self._draw_random(index, np.random.default_rng((self.seed, index)))

    def _draw_planned(self, index: int) -> Drawn | None:
        """Item ``index`` as planned. If the test pair cannot fit the budget (or nothing is left to
        learn), another pair of the same sequence plays the test; None if none can."""
        pool_index, _, chosen = self.plan(index)
        pool = self.pools[pool_index]
        # a symmetry and colours (the pairs keep the order given), the same for every try
        augmentation = Augmentation.random(np.random.default_rng((self.seed, index)), None,
                                           keep_background=self.settings.fixed_background)
        for last in reversed(range(len(chosen))):
            order = [*chosen[:last], *chosen[last + 1:], chosen[last]]
            try:
                encoded = self.encoder.encode_training(augmentation.apply_pairs([pool[i] for i in order]),
                                                       mask_first_output=self.mask_first_output,
                                                       max_len=self.settings.max_tokens)
            except TaskTooLongError:
                continue
            if encoded.loss_mask.any():
                return Drawn(pool_index, tuple(order[i] for i in encoded.kept), encoded)
        self._unfit[pool_index] += 1
        if self._unfit.total() == 1:  # said once; the rest are counted (``unfit_line``)
            logger.warning("pool %s: a planned sequence does not fit %d tokens with any pair as the test; such "
                           "items are drawn at random from other pools (any more are counted, and said at the end)",
                           shown(self.names[pool_index]), self.settings.max_tokens)
        return None

    def unfit_line(self) -> str | None:
        """The planned items that fitted the budget with no pair as the test, in one line with their count and pools
        (the most first); None when every one fitted. Counted where they were drawn: this process's."""
        if not self._unfit:
            return None
        pools = listed(shown(self.names[index]) for index, _ in self._unfit.most_common())
        return (f"a planned sequence did not fit {self.settings.max_tokens} tokens with any pair as the test "
                f"x{self._unfit.total()}, in {len(self._unfit)} pool(s) ({pools}): drawn at random from other pools")

    def _draw_random(self, index: int, rng: np.random.Generator) -> Drawn:
        """Pick a pool, then ``sample_sequence``; a draw that does not fit the budget, or that the budget
        cut down to a single pair whose output is masked (nothing left to learn), is drawn again."""
        for _ in range(100):
            pool_index = int(rng.choice(len(self.pools), p=self.probabilities))
            try:
                encoded, order = sample_examples(self.pools[pool_index], rng, self.encoder, self.settings,
                                                 mask_first_output=self.mask_first_output)
            except TaskTooLongError:
                continue
            if encoded.loss_mask.any():
                return Drawn(pool_index, tuple(order[i] for i in encoded.kept), encoded)
        raise TaskTooLongError(f"item {index}: 100 draws in a row did not fit {self.settings.max_tokens} tokens")

    def __getitem__(self, index: int) -> dict:
        import torch

        _, encoded = self.sequence(index)
        return {"input_ids": torch.from_numpy(encoded.ids), "labels": torch.from_numpy(encoded.labels)}


class BatchOrder:
    """Batch sampler: optimizer step s, micro-batch a, process r take dataset items in a fixed layout.

    Items depend only on their index, so a resumed run (starting at ``first_step``) and a run on
    several processes see exactly the sequences an uninterrupted single run would. With
    ``length_of`` (item index -> tokens), each step's items are sorted by length before they are
    cut into micro-batches: the same sequences per step, less padding.
    """

    def __init__(self, settings: TrainingSettings, first_step: int, rank: int, world: int, length_of=None):
        self.settings, self.first_step, self.rank, self.world = settings, first_step, rank, world
        self.length_of = length_of

    def __iter__(self):
        size, accumulation = self.settings.lora.batch_size, self.settings.gradient_accumulation
        per_step = size * accumulation * self.world
        for step in range(self.first_step, self.settings.lora.steps):
            items = list(range(step * per_step, (step + 1) * per_step))
            if self.length_of is not None:
                items.sort(key=lambda index: (self.length_of(index), index))
            for micro in range(accumulation):
                start = (micro * self.world + self.rank) * size
                yield items[start:start + size]

    def __len__(self) -> int:
        return (self.settings.lora.steps - self.first_step) * self.settings.gradient_accumulation


@dataclass
class PaddingCollator:
    """Pads a batch on the right: pad id for inputs, -100 for labels, 0 in the attention mask."""

    pad_id: int
    multiple_of: int = 8  # pad lengths to a multiple of this (tensor cores like it)

    def __call__(self, items: list[dict]) -> dict:
        import torch
        from torch.nn.functional import pad
        from torch.nn.utils.rnn import pad_sequence

        extra = -max(len(item["input_ids"]) for item in items) % self.multiple_of

        def padded(rows: list, value: int):
            return pad(pad_sequence(rows, batch_first=True, padding_value=value), (0, extra), value=value)

        return {"input_ids": padded([item["input_ids"] for item in items], self.pad_id),
                "labels": padded([item["labels"] for item in items], -100),
                "attention_mask": padded([torch.ones(len(item["input_ids"]), dtype=torch.long) for item in items], 0)}
