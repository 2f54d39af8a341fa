"""Run outputs: metrics.jsonl, TensorBoard events, sample trajectories, a progress display."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from turnrl.types import TerminationReason, Trajectory, is_hack

logger = logging.getLogger("turnrl")

# A step where more than this share of episodes ended in ENV_ERROR or TIMEOUT gets a console
# warning: such episodes carry no reward signal, and a broken env otherwise trains silently.
ERROR_WARN_SHARE = 0.1


def read_jsonl(path: Path | str) -> list[dict]:
    """The records of a run's ``metrics.jsonl`` or ``samples.jsonl``; [] if it does not exist.

    These files are append-only, so a crash mid-write leaves at most a torn last line: it is
    dropped with a warning naming the file. A bad line anywhere else raises ValueError."""
    path = Path(path)
    if not path.exists():
        return []
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    out = []
    for i, ln in enumerate(lines):
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError as e:
            if i < len(lines) - 1:
                raise ValueError(
                    f"{path}: line {i + 1} is not JSON ({e.msg}); only a torn last line is "
                    "expected after a crash: remove or fix that line"
                ) from None
            logger.warning(
                f"warning: {path}: dropped a torn last line ({len(ln)} characters, the run "
                "stopped mid-write)"
            )
    return out


def ending_warning(trajs: list[Trajectory], step: int) -> str | None:
    """A console line when env errors and timeouts pass ``ERROR_WARN_SHARE`` of a step's
    episodes, quoting the first error; None otherwise."""
    bad = [
        t
        for t in trajs
        if t.termination in (TerminationReason.ENV_ERROR, TerminationReason.TIMEOUT)
    ]
    if not trajs or len(bad) / len(trajs) <= ERROR_WARN_SHARE:
        return None
    counts = {r.value: sum(t.termination is r for t in bad) for r in TerminationReason}
    parts = ", ".join(f"{n} {r}" for r, n in counts.items() if n)
    first = next((t.error for t in bad if t.error), "no message")
    return (
        f"warning: step {step}: {len(bad)}/{len(trajs)} episodes ended early ({parts}); "
        f"first: {first[:300]}"
    )


def trajectory_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Rollout diagnostics of one step; proxy and true success side by side (reward drift)."""
    n = max(len(trajs), 1)

    def mean(key: str) -> float:
        return sum(t.metrics.get(key, 0.0) for t in trajs) / n

    out = {
        "reward/mean": sum(t.reward for t in trajs) / n,
        "success/true": mean("success"),
        "success/proxy": mean("proxy_success")
        if any("proxy_success" in t.metrics for t in trajs)
        else mean("success"),
        "hack_rate": sum(is_hack(t.flags) for t in trajs) / n,  # tampering, not findings
        "truncation_rate": sum(t.truncated for t in trajs) / n,
        "episode/turns_mean": mean("turns"),
        "episode/tokens_mean": mean("tokens"),
        "episode/action_tokens_mean": mean("action_tokens"),
        "episode/parse_errors_mean": mean("parse_errors"),
        "episode/segments_mean": mean("segments"),  # > 1 where a context strategy rewrote it
        "time/env_s_mean": mean("time/env_s"),
    }
    for reason in TerminationReason:  # every ending, 0 included: the curves stay continuous
        out[f"termination/{reason.value}"] = sum(t.termination is reason for t in trajs) / n
    return out


def sample_record(t: Trajectory, renderer) -> dict:
    return {
        "task_id": t.task_id,
        "reward": t.reward,
        "termination": t.termination.value,
        "flags": t.flags,
        "error": t.error,
        "messages": [
            {"role": m["role"], "content": str(m.get("content") or "")[:2000]}
            for m in t.messages[1:]
        ],
    }


def count_resume(run_dir: Path) -> int:
    """Record one more resume of ``run_dir`` (in ``run_dir/resumes``); returns the count, which
    every metrics row carries as ``run/resumes``."""
    path = run_dir / "resumes"
    n = int(path.read_text() or 0) + 1 if path.exists() else 1
    path.write_text(f"{n}\n")
    return n


class MetricsWriter:
    """Appends one row per training step and per evaluation to ``metrics.jsonl`` (and a few
    sample trajectories to ``samples.jsonl``), mirrored to TensorBoard.

    ``resume_step`` is the step of the checkpoint a resumed run starts from (None: a new run).
    Rows after it belong to steps that will be redone and are dropped, so no step is written
    twice; a run resumed with no checkpoint (0) starts over, its step-0 evaluation included.
    """

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.samples = run_dir / "samples.jsonl"
        self.rows: list[dict] = []
        for path in (self.path, self.samples):
            rows = read_jsonl(path) if resume_step else []
            keep = [r for r in rows if r["step"] <= (resume_step or 0)]
            if path.exists():
                path.write_text("".join(json.dumps(r) + "\n" for r in keep))
            if path == self.path:
                self.rows = keep
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def has_eval(self, step: int) -> bool:
        return any(r["step"] == step and "eval/success" in r for r in self.rows)

    def best_eval(self) -> float:
        """The best held-out success after training began (-1 before any)."""
        return max(
            (r["eval/success"] for r in self.rows if "eval/success" in r and r["step"] > 0),
            default=-1.0,
        )

    def write(self, metrics: dict[str, float], samples: list[Trajectory], renderer) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        self.rows.append(metrics)
        step = int(metrics["step"])
        for k, v in metrics.items():
            if k != "step" and isinstance(v, int | float):
                self.tb.add_scalar(k, v, step)
        with self.samples.open("a") as f:
            for t in samples:
                f.write(json.dumps({"step": step, **sample_record(t, renderer)}) + "\n")
        self.tb.flush()

    def write_eval(
        self, step: int, metrics: dict[str, float], samples: list[Trajectory], renderer
    ) -> None:
        self.write({"step": step, **metrics}, samples, renderer)

    def close(self) -> None:
        self.tb.close()


def silence_library_progress() -> None:
    """No progress bars or info chatter from transformers and huggingface_hub in a run's
    output: they would interleave with the per-step lines (and fill log files with \r)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:
        return
    disable_progress_bars()


class Progress:
    """A rich progress bar (step, reward, success, time left) on a terminal; one plain line per
    step with --quiet or when the output goes to a file or pipe (a bar there shows only at the
    end, if at all)."""

    def __init__(
        self,
        total: int,
        start: int,
        quiet: bool,
        log: Callable[[str], None],
        terminal: bool | None = None,
    ) -> None:
        self.quiet, self.log, self.total = quiet, log, total
        self.t0, self.start = time.monotonic(), start
        self.bar = None
        terminal = sys.stdout.isatty() if terminal is None else terminal
        if not quiet and terminal and total > start:
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("[bold]step {task.completed}/{task.total}"),
                BarColumn(),
                TextColumn("{task.description}"),
                TimeRemainingColumn(),
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=total, completed=start)

    def update(self, step: int, m: dict[str, float]) -> None:
        text = f"reward {m['reward/mean']:.3f}  success {m['success/true']:.3f}  proxy {m['success/proxy']:.3f}  loss {m.get('loss', 0.0):.4f}"
        if self.bar is not None:
            self.bar.update(self.task, completed=step, description=text)
        else:
            per = (time.monotonic() - self.t0) / max(step - self.start, 1)
            self.log(f"step {step}/{self.total}  {text}  ({per * (self.total - step):.0f}s left)")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def clock(seconds: float) -> str:
    """A duration as a person reads it: 42s, 3m05s, 1h07m."""
    s = max(int(seconds + 0.5), 0)  # rounded half up
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


PHASE_EVERY_S = 5.0  # seconds between a set-up phase's progress lines


class PhaseProgress:
    """Progress lines for a long set-up phase (demonstrations, a warm-up, SFT): done/total,
    the caller's detail (epoch, loss), elapsed time and ETA. The first line comes once a second
    has passed and a second update came in, the next at most every ``every_s`` seconds, and a
    last one at the end if any came before (a phase shorter than a second shows none: its
    caller's own lines say enough). Plain lines, so a log file reads as a terminal does. The
    ETA is the rate since the first update times what is left: the first step pays one-time
    costs (allocations, cold caches) that can be several steps' worth. ``upper_bound``: the phase may
    stop early, so the ETA is a most."""

    def __init__(
        self,
        name: str,
        total: int,
        log: Callable[[str], None],
        *,
        every_s: float = PHASE_EVERY_S,
        upper_bound: bool = False,
    ) -> None:
        self.name, self.total, self.log = name, total, log
        self.every_s, self.upper_bound = every_s, upper_bound
        self.t0 = time.monotonic()
        self.first: tuple[float, int] | None = None  # (time, done) of the first update
        self.last: float | None = None  # when the last line was written

    def update(self, done: int, detail: str = "") -> None:
        now = time.monotonic()
        if self.first is None or done == self.first[1]:
            self.first = (now, done)
            return
        if self.last is None:
            if now - self.t0 < 1.0:
                return
        elif done < self.total and now - self.last < self.every_s:
            return
        self.last = now
        t1, done1 = self.first
        eta = (now - t1) / (done - done1) * (self.total - done)
        bound = "at most " if self.upper_bound and done < self.total else ""
        text = f"  {detail}" if detail else ""
        self.log(
            f"  {self.name} {done}/{self.total}{text}  elapsed {clock(now - self.t0)}  "
            f"ETA {bound}{clock(eta)}"
        )
