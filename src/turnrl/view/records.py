"""Trajectory records: exactly which tokens a step trained on, with which advantage.

Two files in the run directory, both appended once per training step:

* ``trajectories/step-NNNNNNNN.jsonl.gz``: one JSON line per recorded trajectory, with arrays
  aligned to its tokens (ids, decoded text, loss mask, behaviour and trainer logprobs, importance
  ratios, advantages) and its turns (spans, per-turn reward, anchor, tool calls), ending reason and
  flags. A sample is recorded, not every episode: ``record_groups`` whole groups per step (the
  episodes GRPO compares with each other, groups whose rewards differ first) and every flagged
  episode. The folder is capped at ``records_mb``; over the cap, older steps are thinned first,
  so recent steps stay complete while a sparse trace of the early run is kept.
* ``episodes.jsonl``: one short row for every episode of every step (task, tier, reward,
  success, ending, flags), for per-task and per-tier success and the viewer's filters.

Arrays hold ``null`` where a value does not exist: trainer logprobs and ratios of rows the
trainer skipped (all-zero advantages), or every per-token value the trainer did not pass on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from turnrl.files import append_jsonl, read_gz_jsonl, read_jsonl, rewrite_jsonl, write_gz_jsonl
from turnrl.types import Trajectory

RECORDS_DIR = "trajectories"
EPISODES = "episodes.jsonl"
PER_TOKEN = ("advantages", "trainer_logprobs", "ratios")  # keys of train_on_batch's per_token
_STEP_FILE = re.compile(r"step-(\d+)\.jsonl\.gz$")


def step_file(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / RECORDS_DIR / f"step-{step:08d}.jsonl.gz"


def record_steps(run_dir: Path) -> list[int]:
    """Steps that still have records (thinning removes some), ascending."""
    folder = Path(run_dir) / RECORDS_DIR
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _STEP_FILE.search(p.name)))


def read_step(run_dir: Path, step: int) -> list[dict]:
    """The records of one step; [] when it has none (never recorded, or thinned away). A file
    cut short gives the records before the cut (:func:`turnrl.files.read_gz_jsonl`)."""
    path = step_file(run_dir, step)
    if not path.exists():
        return []
    return read_gz_jsonl(path)


def choose(trajs: list[Trajectory], groups: int) -> list[int]:
    """Batch indices to record: ``groups`` whole groups, then every flagged or failed episode.

    Groups whose rewards differ come first: only they carry a group-relative advantage, so they
    are what the step actually trained on; ties keep batch order."""
    members: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        members.setdefault(t.group_id, []).append(i)
    ranked = sorted(members.values(), key=lambda ix: len({trajs[i].reward for i in ix}) < 2)
    keep = {i for ix in ranked[:groups] for i in ix}
    keep |= {i for i, t in enumerate(trajs) if t.flags or t.error}
    return sorted(keep)


def _floats(x: torch.Tensor | list[float]) -> list[float | None]:
    values = x.tolist() if isinstance(x, torch.Tensor) else x
    return [None if math.isnan(v) else round(v, 4) for v in values]


def encode(
    t: Trajectory,
    index: int,
    step: int,
    per_token: Mapping[str, torch.Tensor],
    token_text: Callable[[int], str],
    tier: Any = None,
) -> dict[str, Any]:
    """One trajectory as a JSON-able record; ``per_token`` tensors are ``[B, T]`` over the batch
    and row ``index`` is this trajectory."""
    n = len(t.token_ids)
    rec: dict[str, Any] = {
        "step": step,
        "i": index,
        "task": t.task_id,
        "tier": tier,
        "group": t.group_id,
        "reward": t.reward,
        "success": t.metrics.get("success"),
        "proxy": t.metrics.get("proxy_success"),
        "end": t.termination.value,
        "error": t.error,
        "flags": list(t.flags),
        "prompt_len": t.prompt_len,
        "ids": list(t.token_ids),
        "text": [token_text(i) for i in t.token_ids],
        "mask": list(t.loss_mask),
        "behavior_lp": _floats(t.behavior_logprobs),
        "versions": list(t.policy_versions),
        "segment_starts": list(t.segment_starts),  # where a rewritten context begins
    }
    for key in PER_TOKEN:
        rec[key] = _floats(per_token[key][index, :n]) if key in per_token else [None] * n
    acted = [a for a, m in zip(rec["advantages"], t.loss_mask) if m and a is not None]
    rec["advantage"] = round(sum(acted) / len(acted), 4) if acted else None  # mean over actions
    rec["turns"] = [
        {
            "action": [u.action_start, u.action_end],
            "obs": [u.obs_start, u.obs_end],
            "reward": u.reward,
            "anchor": None if u.anchor is None else repr(u.anchor)[:300],
            "calls": [{"name": c.name, "arguments": c.arguments} for c in u.tool_calls],
            "parse_error": u.parse_error,
            "malformed": u.malformed,
            "version": u.policy_version,
        }
        for u in t.turns
    ]
    return rec


def episode_row(t: Trajectory, index: int, step: int, tier: Any, recorded: bool) -> dict:
    return {
        "step": step,
        "i": index,
        "task": t.task_id,
        "tier": tier,
        "group": t.group_id,
        "reward": round(t.reward, 4),
        "success": t.metrics.get("success"),
        "end": t.termination.value,
        "flags": list(t.flags),
        "turns": len(t.turns),
        "rec": recorded,
    }


def thin(folder: Path, max_bytes: float) -> list[Path]:
    """Delete step files until the folder fits ``max_bytes``; returns what was deleted.

    Always from the older half, and there the step with the fewest trailing zero bits first
    (odd steps, then steps = 2 mod 4, ...), so what survives of the early run stays spread
    evenly; the newest step is never deleted."""
    files = sorted(
        (int(m.group(1)), p) for p in folder.iterdir() if (m := _STEP_FILE.search(p.name))
    )
    sizes = {p: p.stat().st_size for _, p in files}
    total, removed = sum(sizes.values()), []
    while total > max_bytes and len(files) > 1:
        older = files[: max(1, len(files) // 2)]
        k = min(range(len(older)), key=lambda j: ((older[j][0] & -older[j][0]), older[j][0]))
        _, path = files.pop(k)
        total -= sizes[path]
        path.unlink()
        removed.append(path)
    return removed


class RecordWriter:
    """Writes each step's trajectory records and episode rows (see the module docstring)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        record_groups: int,
        records_mb: float,
        token_text: Callable[[int], str],
        tiers: Mapping[str, Any] | None = None,
        truncate_from: int = 0,
    ) -> None:
        self.folder = Path(run_dir) / RECORDS_DIR
        self.episodes = Path(run_dir) / EPISODES
        self.record_groups, self.max_bytes = record_groups, records_mb * 2**20
        self.tiers = dict(tiers or {})
        self._text: dict[int, str] = {}
        self._decode = token_text
        self.folder.mkdir(parents=True, exist_ok=True)
        # On resume, drop what belongs to steps that will be redone.
        for step in record_steps(run_dir):
            if step > truncate_from:
                step_file(run_dir, step).unlink()
        if self.episodes.exists():
            keep = [r for r in read_jsonl(self.episodes) if r["step"] <= truncate_from]
            rewrite_jsonl(self.episodes, keep)

    def token_text(self, token_id: int) -> str:
        if token_id not in self._text:
            self._text[token_id] = self._decode(token_id)
        return self._text[token_id]

    def write(
        self,
        step: int,
        trajs: list[Trajectory],
        per_token: Mapping[str, torch.Tensor] | None = None,
    ) -> list[dict]:
        """Record step ``step`` (trajectories in batch order, as the ``[B, T]`` tensors of
        ``per_token`` are); returns the records written."""
        chosen = choose(trajs, self.record_groups)
        records = [
            encode(
                trajs[i],
                i,
                step,
                per_token or {},
                self.token_text,
                self.tiers.get(trajs[i].task_id),
            )
            for i in chosen
        ]
        if records:
            write_gz_jsonl(step_file(self.folder.parent, step), records)
            thin(self.folder, self.max_bytes)
        recorded = set(chosen)
        append_jsonl(
            self.episodes,
            (
                episode_row(t, i, step, self.tiers.get(t.task_id), i in recorded)
                for i, t in enumerate(trajs)
            ),
        )
        return records
