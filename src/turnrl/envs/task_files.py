"""Tasks from data: ``env.tasks=FILE.jsonl`` (or a Hugging Face ``datasets`` name or directory).

One task per row, a JSON object. Its top-level keys ``id``, ``split``, ``env`` and ``payload``
are the :class:`~turnrl.types.Task` fields; every one is optional:

- ``payload``: the env-specific problem (an object). Without it, the row's other keys are the
  payload, so ``{"question": "2 + 3", "answer": 5}`` is a whole task.
- ``id``: a string (or integer); default ``<file stem>-<line>`` (``<name>-<split>-<row>`` for
  a dataset).
- ``split``: ``train`` or ``test``; default a stable hash of the id (or of the payload when
  the row has no id), about 20 % ``test`` (:func:`turnrl.envs.base.hash_split`), so adding or
  reordering rows never moves a task between splits.
- ``env``: recorded on the task; default the env's name.

Every bad row is reported by its line number, all together, before any work starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turnrl.envs.base import hash_split
from turnrl.types import Task

FIELDS = ("id", "split", "env", "payload")
SPLITS = ("train", "test")


class TaskFileError(ValueError):
    """Every bad row of a tasks source, one line each: ``FILE:LINE: problem``."""


def check_tasks_source(source: str) -> str:
    """What a run records for ``env.tasks``: a file as its absolute path (``turnrl eval`` and
    ``--resume`` from another directory read the same file), a dataset name as it is. Raises
    :class:`TaskFileError` listing every bad row."""
    path = Path(source).expanduser()
    recorded = str(path.resolve()) if _is_json_lines(path) else source
    tasks = read_tasks(recorded, "env")
    for split in SPLITS:
        if not any(t.split == split for t in tasks):
            raise TaskFileError(
                f"{source}: no {split!r} rows (training samples 'train', held-out evaluation "
                f'uses \'test\'); give some rows "split": "{split}"'
            )
    return recorded


def read_tasks(source: str, env: str) -> list[Task]:
    """The tasks of a JSONL file, or of a ``datasets`` dataset (a saved directory or a name)."""
    path = Path(source).expanduser()
    if _is_json_lines(path):
        if not path.is_file():
            raise TaskFileError(f"{source}: no such file")
        lines = path.read_text(encoding="utf-8").splitlines()
        rows = [
            (f"{path.name}:{i}", f"{path.stem}-{i}", line)
            for i, line in enumerate(lines, 1)
            if line.strip()
        ]
        return _tasks(rows, env, source)
    return _tasks(_dataset_rows(source), env, source)


def _is_json_lines(path: Path) -> bool:
    return path.suffix in (".jsonl", ".json") or path.is_file()


def _tasks(rows: list[tuple[str, str, Any]], env: str, source: str) -> list[Task]:
    """``rows``: (where, default id, raw row) each."""
    tasks, problems, seen = [], [], {}
    for where, default_id, raw in rows:
        try:
            task = _row_task(raw, env, default_id)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if task.id in seen:
            problems.append(f"{where}: duplicate id {task.id!r} (first at {seen[task.id]})")
            continue
        seen[task.id] = where
        tasks.append(task)
    if problems:
        raise TaskFileError("\n".join(problems))
    if not tasks:
        raise TaskFileError(f"{source}: no tasks (every row is empty)")
    return tasks


def _row_task(raw: Any, env: str, default_id: str) -> Task:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"a task must be a JSON object, got {type(raw).__name__}")
    if "payload" in raw:
        extra = sorted(set(raw) - set(FIELDS))
        if extra:
            raise ValueError(
                f"unknown field(s) {', '.join(extra)} beside 'payload' (a task has {', '.join(FIELDS)})"
            )
        payload = raw["payload"]
        if not isinstance(payload, dict):
            raise ValueError(f"'payload' must be an object, got {type(payload).__name__}")
    else:
        payload = {k: v for k, v in raw.items() if k not in FIELDS}
        if not payload:
            raise ValueError("no payload: the row has no 'payload' and no other fields")
    task_id = raw.get("id", default_id)
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or task_id == "":
        raise ValueError(f"'id' must be a non-empty string, got {task_id!r}")
    task_id = str(task_id)
    key = task_id if "id" in raw else json.dumps(payload, sort_keys=True)
    split = raw.get("split", hash_split(key))
    if split not in SPLITS:
        raise ValueError(f"'split' must be 'train' or 'test', got {split!r}")
    task_env = raw.get("env", env)
    if not isinstance(task_env, str):
        raise ValueError(f"'env' must be a string, got {task_env!r}")
    return Task(task_id, task_env, payload, split)


def _dataset_rows(source: str) -> list[tuple[str, str, Any]]:
    """Rows of a ``datasets`` dataset: a directory saved by ``save_to_disk`` or anything
    ``load_dataset`` takes. Its ``train``/``test`` splits become the tasks' splits unless a
    row names its own."""
    try:
        import datasets
    except ImportError:
        raise TaskFileError(
            f"{source}: not a .jsonl file, and loading a dataset needs the 'datasets' package "
            "(pip install datasets)"
        ) from None
    try:
        if Path(source).is_dir() and any(
            (Path(source) / f).exists() for f in ("dataset_dict.json", "dataset_info.json")
        ):
            data = datasets.load_from_disk(source)
        else:
            data = datasets.load_dataset(source)
    except Exception as e:
        raise TaskFileError(f"{source}: cannot load dataset ({type(e).__name__}: {e})") from None
    parts = data.items() if isinstance(data, dict) else [(None, data)]
    rows, stem = [], Path(source).name or "row"
    for split, part in parts:
        if split is not None and split not in SPLITS:
            continue  # a validation split: neither what training samples nor the held-out set
        for i, row in enumerate(part):
            row = dict(row)
            if split is not None:
                row.setdefault("split", split)
            rows.append((f"{source}[{split or 'rows'}]:{i}", f"{stem}-{split or 'row'}-{i}", row))
    return rows


class FileTasks:
    """A family whose tasks are the rows of a file; everything else is the env's own family.
    ``tasks(split, n)`` is the first ``n`` rows of that split, in file order (the trainer
    samples from them by its seed)."""

    def __init__(self, family: Any, tasks: list[Task]) -> None:
        self.family, self.rows, self.name = family, tasks, family.name

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        chosen = [t for t in self.rows if t.split == split]
        return chosen[:n] if n else chosen

    def __getattr__(self, name: str) -> Any:  # expert, baseline, make_env, close, ...
        if name == "family":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.family, name)
