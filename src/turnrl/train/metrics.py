"""Run outputs: metrics.jsonl, TensorBoard events, sample trajectories, a progress display."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from turnrl.types import Trajectory


def read_jsonl(path: Path | str) -> list[dict]:
    """The records of a run's ``metrics.jsonl`` or ``samples.jsonl``; [] if it does not exist."""
    path = Path(path)
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln] if path.exists() else []


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
        "hack_rate": sum(bool(t.flags) for t in trajs) / n,
        "truncation_rate": sum(t.truncated for t in trajs) / n,
        "episode/turns_mean": mean("turns"),
        "episode/tokens_mean": mean("tokens"),
        "episode/action_tokens_mean": mean("action_tokens"),
        "episode/parse_errors_mean": mean("parse_errors"),
        "time/env_s_mean": mean("time/env_s"),
    }
    for t in trajs:
        key = f"termination/{t.termination.value}"
        out[key] = out.get(key, 0.0) + 1.0 / n
    return out


def sample_record(t: Trajectory, renderer) -> dict:
    return {
        "task_id": t.task_id,
        "reward": t.reward,
        "termination": t.termination.value,
        "flags": t.flags,
        "error": t.error,
        "messages": [{"role": m["role"], "content": m["content"][:2000]} for m in t.messages[1:]],
    }


class MetricsWriter:
    def __init__(self, run_dir: Path, truncate_from: int = 0) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.samples = run_dir / "samples.jsonl"
        # On resume, drop records of steps that will be redone (the step a kill interrupted).
        for path in (self.path, self.samples):
            if path.exists():
                keep = [
                    ln
                    for ln in path.read_text().splitlines()
                    if ln and json.loads(ln)["step"] <= truncate_from
                ]
                path.write_text("".join(k + "\n" for k in keep))
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, metrics: dict[str, float], samples: list[Trajectory], renderer) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
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
