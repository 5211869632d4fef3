"""The run report: one self-contained HTML file of what a run did, task by task, to read in any browser.

``write_report`` reads a run folder the kit wrote (a solve's, a dry run's, a Kaggle job's, or the
Kaggle working folder above one: ``estimates.find_run``): its ``run.json`` (the settings, the data set,
the model, where the run came from), its records (``record_json.read_records``) and its score where the answers
were known; the tasks' pairs come from the tasks given, else from the data set ``run.json`` names or the
pool's ``tasks.json`` (``estimates.run_tasks``), and a report without them still shows every record.
The page holds a summary (score, tasks, time, settings), then a section per task in the order the run
finished them: its train pairs and test inputs (``data.pictures``), then its record (``method.record_view``:
the attempts marked right or wrong, "no answer", the candidates with their probability under each
scoring augmentation, the time in training, search and scoring, the search's statistics). A few lines
of plain JavaScript sort the tasks and filter them (right, wrong, no answer, the slowest quarter).
Pictures are inline SVG; the page loads nothing from anywhere.

The file goes where nothing is, or over a report this module wrote (``is_report``: the page's
generator tag), never over another file (``outputs.claim_file``). A solve's outputs (``jobs.SolveOutputs``) write
one beside every run's submission. Knows run folders, records and tasks; knows nothing of models.
"""

from __future__ import annotations

import html
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from arc_kit.data.pictures import FONT, task_html
from arc_kit.data.tasks import InvalidDataError, TaskSet
from arc_kit.method.record_view import record_html, verdict_text
from arc_kit.method.records import TaskRecord
from arc_kit.names import shown
from arc_kit.outputs import claim_file, replace_file
from arc_kit.run.estimates import find_run, run_tasks
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import RECORDS_FILE, REPORT_FILE, RUN_FILE, RunFolderError, answered_by_model, read_run_info
from arc_kit.settings import SolveSettings

logger = logging.getLogger(__name__)
GENERATOR = "arc-kit report"  # the page's <meta name="generator">: how ``is_report`` knows a report of the kit's
STATUSES = (("right", "right"), ("wrong", "wrong"), ("no-answer", "no answer"), ("unknown", "solutions unknown"))


def status_of(record: TaskRecord) -> str:
    """right (every test output), wrong (one or more not), no-answer (no attempt of the model's), unknown."""
    if not answered_by_model(record):
        return "no-answer"
    if record.correct is None:
        return "unknown"
    return "right" if all(record.correct) else "wrong"


def write_report(run: str | os.PathLike, out: str | os.PathLike | None = None, *, tasks: TaskSet | None = None,
                 solutions: TaskSet | None = None) -> Path:
    """Write the report of the run in ``run`` to ``out`` (default: ``report.html`` in the run folder); its path.

    ``tasks`` (and ``solutions``, test outputs the tasks lack) draw the pairs; without them the run's data set is
    read where it loads here.
    """
    folder = find_run(run)
    out = Path(out) if out is not None else folder / REPORT_FILE
    claim_file(out, "report", own=is_report)  # before any work: a file of the user's is never replaced
    info = read_run_info(folder)
    records = read_records(folder / RECORDS_FILE)
    if tasks is None:
        try:
            tasks, _, _ = run_tasks(folder, info)
        except (RunFolderError, InvalidDataError, OSError, ValueError):
            tasks = None  # the records alone
    replace_file(out, report_html(records, info, tasks, solutions, title=str(folder)))
    return out


def write_report_quietly(run: str | os.PathLike, out: str | os.PathLike | None = None, **options) -> Path | None:
    """``write_report``, whose failure is logged, never raised: a run's report must never fail the run."""
    try:
        return write_report(run, out, **options)
    except Exception as error:  # noqa: BLE001 - a report is a nicety: the run's own files stand
        logger.warning("the run report could not be written: %s", error)
        return None


def is_report(path: Path) -> bool:
    """True when ``path`` is a page this module wrote (its generator tag, in its first kilobytes)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return f'<meta name="generator" content="{GENERATOR}">' in handle.read(4096)
    except OSError:
        return False


def report_html(records: Mapping[str, TaskRecord], info: Mapping, tasks: TaskSet | None = None,
                solutions: TaskSet | None = None, *, title: str = "") -> str:
    """The whole page (module docstring)."""
    records = dict(records)
    seconds = [record.timings.get("total", 0.0) for record in records.values()]
    slow_from = float(np.quantile(seconds, 0.75)) if len(seconds) > 1 else float("inf")
    sections = [_task_section(order, record, _task(record.task_id, tasks, solutions), slow_from)
                for order, record in enumerate(records.values())]
    return _PAGE.format(title=html.escape(title), generator=GENERATOR, font=FONT,
                        summary=summary_html(records, info, tasks is not None),
                        filters=_filters(records), tasks="".join(sections), script=_SCRIPT)


def _task(task_id: str, tasks: TaskSet | None, solutions: TaskSet | None):
    """The task with its test outputs where ``solutions`` knows them; None when no set holds it."""
    if solutions is not None and task_id in solutions:
        return solutions[task_id]
    return tasks[task_id] if tasks is not None and task_id in tasks else None


def _task_section(order: int, record: TaskRecord, task, slow_from: float) -> str:
    total = record.timings.get("total", 0.0)
    status = status_of(record)
    pairs = task_html(task, title="", show_tests=False) if task is not None else \
        '<div style="color:#666">(the task\'s pairs are not at hand: its data set does not load here)</div>'
    candidates = sum(len(test.candidates) for test in record.tests)
    attributes = {"status": status, "order": order, "id": record.task_id, "seconds": f"{total:.3f}",
                  "candidates": candidates, "slow": int(total >= slow_from)}
    data = " ".join(f'data-{key}="{html.escape(str(value), quote=True)}"' for key, value in attributes.items())
    badge = {"right": "#1a7f37", "wrong": "#cf222e", "no-answer": "#9a6700", "unknown": "#57606a"}[status]
    return (f'<section class="task" {data}><h2><span class="badge" style="background:{badge}">'
            f'{html.escape(verdict_text(record))}</span> {html.escape(shown(record.task_id))} '
            f'<small>{total:.1f} s, {candidates} candidate(s)</small></h2>'
            f'<details open><summary>train pairs</summary>{pairs}</details>{record_html(record, task, heading=False)}'
            '</section>')


def summary_html(records: Mapping[str, TaskRecord], info: Mapping, with_tasks: bool) -> str:
    """The page's top: score, tasks and what happened to them, time by part, settings, model, versions."""
    counts = {key: sum(status_of(record) == key for record in records.values()) for key, _ in STATUSES}
    known = [record for record in records.values() if record.correct is not None]
    score = (f"{sum(record.share_correct for record in known):g} of {len(known)} tasks right "
             f"({sum(map(sum, (r.correct for r in known)))} of {sum(len(r.correct) for r in known)} test outputs)"
             if known else "no solutions known")
    parts = {part: sum(record.timings.get(part, 0.0) for record in records.values())
             for part in ("ttt", "generation", "scoring", "total")}
    rows = [("score", score),
            ("tasks", f"{len(records)}: " + ", ".join(f"{counts[key]} {name}" for key, name in STATUSES
                                                      if counts[key])),
            ("time", f"{parts['total'] / 60:.1f} min over the tasks: training {parts['ttt']:.0f} s, search "
                     f"{parts['generation']:.0f} s, scoring {parts['scoring']:.0f} s"),
            ("settings", _settings_text(info)),
            ("data set", f"{info.get('dataset', 'not recorded')}" + ("" if with_tasks else " (not loaded here)")),
            ("model", _model_text(info.get("model"))),
            ("made by", f"arc-kit {info.get('arc_kit_version', '?')} (commit {info.get('git_commit') or '?'}), "
                        f"torch {info.get('torch', '?')}, transformers {info.get('transformers', '?')}, started "
                        f"{info.get('time', '?')}; this report {time.strftime('%Y-%m-%d %H:%M:%S %z')}")]
    table = "".join(f"<tr><th>{name}</th><td>{html.escape(str(value))}</td></tr>" for name, value in rows)
    settings = html.escape(json.dumps(info.get("settings", {}), indent=1))
    return (f'<table class="summary">{table}</table><details><summary>every setting ({RUN_FILE})</summary>'
            f"<pre>{settings}</pre></details>")


def _settings_text(info: Mapping) -> str:
    try:
        return SolveSettings.from_json(info["settings"]).description
    except (KeyError, TypeError, ValueError):
        return "not recorded"


def _model_text(model) -> str:
    if isinstance(model, Mapping):
        size = f", {model['parameters'] / 1e6:.3g}M parameters" if isinstance(model.get("parameters"), int) else ""
        return f"{model.get('path', '?')} ({model.get('device', '?')}, {model.get('dtype', '?')}{size})"
    return str(model or "not recorded")


def _filters(records: Mapping[str, TaskRecord]) -> str:
    boxes = "".join(f'<label><input type="checkbox" name="status" value="{key}" checked> {name}</label>'
                    for key, name in STATUSES)
    return (f'<div class="filters">show {boxes}<label><input type="checkbox" id="slow"> only the slowest quarter'
            '</label> sort by <select id="sort"><option value="order">the run\'s order</option><option value="id">'
            'task id</option><option value="seconds">time (slowest first)</option><option value="candidates">'
            f'candidates (most first)</option></select> <span id="count">{len(records)} tasks</span></div>')


_SCRIPT = """
const sections = Array.from(document.querySelectorAll("section.task"));
function update() {
  const shown = new Set(Array.from(document.querySelectorAll("input[name=status]:checked"), box => box.value));
  const slowOnly = document.getElementById("slow").checked;
  let count = 0;
  for (const section of sections) {
    const visible = shown.has(section.dataset.status) && (!slowOnly || section.dataset.slow === "1");
    section.hidden = !visible;
    count += visible;
  }
  document.getElementById("count").textContent = count + " of " + sections.length + " tasks shown";
}
function sortTasks() {
  const key = document.getElementById("sort").value;
  const value = section => key === "id" ? section.dataset.id : Number(section.dataset[key]);
  const sorted = sections.slice().sort((a, b) => {
    const [x, y] = [value(a), value(b)];
    if (key === "id") return x < y ? -1 : x > y ? 1 : 0;
    return key === "order" ? x - y : y - x;
  });
  const list = document.getElementById("tasks");
  for (const section of sorted) list.appendChild(section);
}
document.querySelectorAll("input").forEach(box => box.addEventListener("change", update));
document.getElementById("sort").addEventListener("change", sortTasks);
update();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="{generator}">
<title>arc-kit report: {title}</title>
<style>
body {{ {font}; margin: 16px 24px; color: #1f2328; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 15px; margin: 0 0 6px; }} small {{ color: #57606a; font-weight: 400; }}
table.summary th {{ text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }}
.filters {{ position: sticky; top: 0; background: #f6f8fa; padding: 8px; border: 1px solid #d0d7de; margin: 12px 0;
  z-index: 1; }}
.filters label {{ margin-right: 12px; }}
section.task {{ border: 1px solid #d0d7de; border-radius: 6px; padding: 10px; margin: 10px 0; }}
.badge {{ color: white; border-radius: 10px; padding: 1px 8px; font-size: 12px; }}
th {{ font-size: 11px; }} td {{ font-size: 12px; }}
</style></head>
<body><h1>arc-kit report: {title}</h1>
{summary}
{filters}
<div id="tasks">{tasks}</div>
<script>{script}</script>
</body></html>
"""
