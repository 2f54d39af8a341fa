"""The code env: fix a bug in a small Python repo with file tools, a sandboxed shell and the
visible tests, then submit; the hidden tests decide the reward (see ``grader.py``).

Each episode gets a fresh temporary workspace holding the buggy repo and the visible tests only:
no ``.git`` (nothing to mine), no hidden tests, no grader. File tools run in-process on paths
validated to stay inside the workspace; ``run`` and ``run_tests`` execute in the sandbox. Every
command is recorded for the exploit screener.
"""

from __future__ import annotations

import dataclasses
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from turnrl.envs.base import ToolEnv, ToolError, ToolOutput
from turnrl.envs.code import grader
from turnrl.envs.code.expert import CodeExpert
from turnrl.envs.code.micro import micro_tasks
from turnrl.envs.code.pytest_results import PYTEST_ENV
from turnrl.envs.code.run_cache import RunCache, tree_digest
from turnrl.envs.code.tasks import load_tasks, materialize, visible_test_file
from turnrl.envs.scripted import DoNothingAgent
from turnrl.sandbox import Limits, run_in_sandbox
from turnrl.types import RewardResult, Task

INSTRUCTIONS = (
    "You fix a bug in a small Python repository: read the code, run the visible tests, edit "
    "the code, check with run_tests(), then submit(). Fix the code, not the tests: hidden "
    "tests grade your fix."
)

# Noise that would make identical states look different (GiGPO anchors) or waste tokens.
_ADDRESS_RE = re.compile(r" at 0x[0-9a-f]+")
_TIMING_RE = re.compile(r" in \d+(?:\.\d+)?s\b")
_SEPARATOR_RE = re.compile(r"^_{3,} (.+?) _{3,}$")


def clip(text: str, max_chars: int, hint: str = "", *, tail: bool = False) -> str:
    """Fit ``text`` in ``max_chars`` with a visible truncation marker, keeping the head (or,
    with ``tail``, the head and the tail, where tracebacks and summaries end)."""
    if len(text) <= max_chars:
        return text
    marker = f"\n... [truncated {len(text) - max_chars} chars{hint}]\n"
    room = max(0, max_chars - len(marker))
    if tail:
        return text[: room // 2] + marker + text[len(text) - (room - room // 2) :]
    return text[:room] + marker.rstrip("\n")


def compact_pytest_output(output: str) -> str:
    """pytest ``-q --tb=short`` output with the decoration removed: failing test names, the
    code lines of each traceback and the ``E`` lines, then the summary."""
    lines: list[str] = []
    for raw in output.splitlines():
        line = _TIMING_RE.sub("", _ADDRESS_RE.sub("", raw.rstrip()))
        stripped = line.strip()
        if not stripped or set(stripped) <= {"^", "~", " "} or stripped == "E":
            continue  # blank lines, caret underlines, empty "E" lines
        if stripped.startswith("===") and stripped.endswith("==="):
            inner = stripped.strip("= ")
            if inner in ("FAILURES", "ERRORS", "short test summary info", "warnings summary"):
                continue
            line = inner
        elif m := _SEPARATOR_RE.match(stripped):
            name = m.group(1)
            line = f"{name}:" if name.startswith("ERROR") else f"FAILED {name}:"
        elif stripped.startswith(("E    +", "E      +")) and "where" in stripped:
            continue  # pytest's "+ where x = f(...)" introspection: long, rarely needed
        lines.append(line)
    return "\n".join(lines)


def _read(file: Path, path: str) -> str:
    try:
        return file.read_text(errors="replace")
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror or e}") from None


class CodeEnv(ToolEnv):
    """One bug-fixing episode. Options come from ``CodeFamily``."""

    name = "code"
    tools = ("list_files", "read_file", "edit_file", "write_file", "run", "run_tests", "submit")

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        max_obs_chars: int = 2000,
        penalty: float = 0.0,
        run_cache: RunCache | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.max_obs_chars = max_obs_chars
        self.penalty = penalty
        # test runs shared with the family's other envs (None: every run is a fresh one)
        self.run_cache = run_cache or RunCache(0)
        self.task: Task | None = None
        self.workspace: Path | None = None
        self.commands: list[str] = []  # what the agent ran, for the exploit screener
        self.refused_paths: list[str] = []  # paths the file tools refused (escape attempts)
        self.submitted = False

    async def reset(self, task: Task) -> str:
        await self.close()
        payload = task.payload
        self.task = task
        self.workspace = Path(tempfile.mkdtemp(prefix="ws-"))
        materialize(task, self.workspace, hidden=False)
        self.commands, self.refused_paths, self.submitted = [], [], False
        self.instructions = INSTRUCTIONS
        # One file per line: a name at the start of a line is tokenized as the model writes it
        # in a tool call ("stats", not " stats"), so copying it is copying tokens.
        files = "\n".join(sorted({**payload["repo"], **payload["visible_tests"]}))
        statement = payload.get("statement") or "Some tests fail because of a bug in the code."
        return f"{statement}\nFiles:\n{files}\nFix the bug, check with run_tests(), then submit()."

    # ----------------------------------------------------------------------------- tools

    def list_files(self) -> str:
        """List the files in the repository."""
        return clip("\n".join(grader.walk_files(self._root())) or "(no files)", self.max_obs_chars)

    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        """Show a file with line numbers, optionally only lines start_line..end_line (1-based)."""
        file = self._path(path)
        if not file.is_file():
            raise ToolError(f"no such file: {path}")
        lines = _read(file, path).splitlines()
        start = max(1, start_line or 1)
        end = min(len(lines), end_line or len(lines))
        if start > max(end, 1) or (start_line and start_line > len(lines)):
            raise ToolError(f"{path} has {len(lines)} lines; asked for {start}..{end}")
        width = len(str(end))
        text = "\n".join(f"{i:>{width}}| {lines[i - 1]}" for i in range(start, end + 1))
        return clip(text or "(empty file)", self.max_obs_chars, "; read a line range")

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the exact text old (which must occur exactly once) with new."""
        file = self._path(path)
        if not file.is_file():
            raise ToolError(f"no such file: {path}")
        if not old:
            raise ToolError("old is empty; give the exact text to replace")
        text = _read(file, path)
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old text not found in {path}; read_file it and copy the text exactly")
        if count > 1:
            raise ToolError(
                f"old text occurs {count} times in {path}; include more lines to make it unique"
            )
        try:
            file.write_text(text.replace(old, new, 1))
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
        line = text[: text.index(old)].count("\n") + 1
        return f"Edited {path} at line {line}."

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file with content."""
        file = self._path(path)
        if file.is_dir():
            raise ToolError(f"{path} is a directory")
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(content)
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None
        return f"Wrote {path} ({content.count(chr(10)) + 1} lines)."

    async def run(self, command: str) -> str:
        """Run a shell command in the repository (sandboxed, no network)."""
        self.commands.append(command)
        result = await run_in_sandbox(command, self._root(), self.limits)
        status = "timed out" if result.timed_out else f"exit code {result.returncode}"
        if result.killed_reason and not result.timed_out:
            status += f" ({result.killed_reason})"
        body = clip(result.output.rstrip(), self.max_obs_chars - 40, tail=True)
        return f"{body}\n[{status}]" if body else f"[{status}]"

    async def run_tests(self) -> str:
        """Run the visible tests and show the failures."""
        tests = sorted(self.task.payload["visible_tests"]) if self.task else []
        command = [
            grader.PYTHON,
            "-m",
            "pytest",
            "-q",
            "--tb=short",
            "-rN",
            "--no-header",
            "-p",
            "no:cacheprovider",
            "-o",
            "console_output_style=classic",
            *tests,
        ]
        root = self._root()
        result = await self.run_cache.get(
            (tuple(command), self.limits, tree_digest(root)),
            lambda: run_in_sandbox(command, root, self.limits, env=dict(PYTEST_ENV)),
            keep=lambda r: r.finished,
        )
        if result.timed_out:
            text = clip(compact_pytest_output(result.output), self.max_obs_chars - 30, tail=True)
            return text + "\n[tests timed out]"
        text = compact_pytest_output(result.output) or "(no output)"
        return clip(text, self.max_obs_chars, tail=True)

    def submit(self) -> ToolOutput:
        """Submit the current code for grading and end the episode."""
        self.submitted = True
        return ToolOutput("Submitted.", done=True)

    # ------------------------------------------------------------------------- grading

    async def grade(self) -> RewardResult:
        if self.task is None or self.workspace is None:
            raise RuntimeError("grade() before reset()")
        result = await grader.grade_workspace(
            self.task,
            self.workspace,
            [*self.commands, *self.refused_paths],
            limits=self.limits,
            penalty=self.penalty,
            cache=self.run_cache,
        )
        result.components["submitted"] = float(self.submitted)
        result.info["commands"] = list(self.commands)
        return result

    async def close(self) -> None:
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None

    # ------------------------------------------------------------------------- helpers

    def _root(self) -> Path:
        if self.workspace is None:
            raise ToolError("no episode is running")
        return self.workspace

    def _path(self, path: str) -> Path:
        """Resolve a relative path inside the workspace; refuse anything that leaves it."""
        root = self._root()
        rel = Path(path)
        if not path or rel.is_absolute() or ".." in rel.parts:
            self.refused_paths.append(path)
            raise ToolError(f"path must be relative to the repository root: {path!r}")
        full = (root / rel).resolve()
        if not full.is_relative_to(root.resolve()):
            self.refused_paths.append(path)
            raise ToolError(f"path leaves the repository: {path!r}")
        if ".git" in rel.parts:
            self.refused_paths.append(path)
        return full


def resplit_visible(task: Task, fraction: float) -> Task:
    """The task with a new visible subset: ``fraction`` of the hidden suite's tests, always at
    least one FAIL_TO_PASS test (the failure to reproduce). Deterministic per task id."""
    payload = task.payload
    ids = [*payload["fail_to_pass"], *payload["pass_to_pass"]]
    rng = random.Random(f"visible-{task.id}-{fraction}")
    k = min(len(ids), max(1, round(fraction * len(ids))))
    first = rng.choice(payload["fail_to_pass"])
    keep = {first, *rng.sample([t for t in ids if t != first], k - 1)}
    visible = {
        path: visible_test_file(text, {t.split("::")[-1] for t in keep if t.split("::")[0] == path})
        for path, text in payload["hidden_tests"].items()
        if path.endswith(".py") and any(t.split("::")[0] == path for t in keep)
    }
    return dataclasses.replace(task, payload={**payload, "visible_tests": visible})


def bug_holdout_split(tiers: tuple[int, ...]) -> list[Task]:
    """All tasks of ``tiers`` re-split per module: a quarter of each module's tasks (at least
    one, chosen deterministically by id) become ``test``, the rest ``train``."""
    by_module: dict[str, list[Task]] = {}
    for t in load_tasks("train") + load_tasks("test"):
        if t.payload.get("tier", 1) in tiers:
            by_module.setdefault(t.payload["module"], []).append(t)
    out = []
    for module, ts in sorted(by_module.items()):
        ts.sort(key=lambda t: t.id)
        random.Random(f"holdout-{module}").shuffle(ts)
        n_test = max(1, len(ts) // 4) if len(ts) > 1 else 0
        out += [
            dataclasses.replace(t, split="test" if i < n_test else "train")
            for i, t in enumerate(ts)
        ]
    return out


class CodeFamily:
    """Options:

    * ``tiers``: task difficulty tiers to use (0 micro, 1 easy .. 3 hard), default 1-3; tier 0
      (generated one-function modules, :mod:`turnrl.envs.code.micro`) is for tiny models, as
      in the default run;
    * ``penalty``: reward of an episode with an exploit flag (default 0.0);
    * ``max_obs_chars``: cap on one observation, with a visible truncation marker;
    * ``limits``: sandbox limits for the agent's commands, a dict of ``Limits`` fields (the
      grader gives the hidden suite 3x the wall clock and CPU);
    * ``visible_fraction``: re-draw each task's visible tests as this fraction of the suite
      (None keeps the generated split). Lower means more drift between proxy and true success.
    * ``holdout``: what the test split of tiers 1-3 holds out. ``"module"`` (default): whole
      modules the train split never shows. ``"bug"``: every module appears in both splits, but
      a quarter of each module's bugs (at least one) are test-only, so a test task's bug and fix
      are never seen in training while the surrounding code is (a known repository, a new bug).
    """

    name = "code"

    def __init__(
        self,
        tiers: tuple[int, ...] | list[int] = (1, 2, 3),
        penalty: float = 0.0,
        max_obs_chars: int = 2000,
        limits: dict[str, Any] | None = None,
        visible_fraction: float | None = None,
        holdout: str = "module",
    ) -> None:
        errors: list[str] = []
        if holdout not in ("module", "bug"):
            errors.append(f"holdout must be 'module' or 'bug', got {holdout!r}")
        if visible_fraction is not None and not 0.0 < visible_fraction <= 1.0:
            errors.append(f"visible_fraction must be in (0, 1] or None, got {visible_fraction}")
        tiers = tuple(tiers)
        if not tiers or any(t not in (0, 1, 2, 3) for t in tiers):
            errors.append(f"tiers must be a non-empty subset of (0, 1, 2, 3), got {tiers}")
        if not isinstance(penalty, int | float):
            errors.append(f"penalty must be a number, got {penalty!r}")
        if not isinstance(max_obs_chars, int) or max_obs_chars < 200:
            errors.append(f"max_obs_chars must be an int >= 200, got {max_obs_chars!r}")
        known = {f.name for f in dataclasses.fields(Limits)}
        unknown = sorted(set(limits or {}) - known)
        if unknown:
            errors.append(f"limits: unknown field(s) {unknown}; known: {sorted(known)}")
        if errors:
            raise ValueError("code env: " + "; ".join(errors))
        self.tiers = tiers
        self.penalty = float(penalty)
        self.max_obs_chars = max_obs_chars
        try:
            self.limits = Limits(**(limits or {}))
        except ValueError as e:
            raise ValueError(f"code env: limits: {e}") from None
        self.visible_fraction = visible_fraction
        self.holdout = holdout
        self.run_cache = RunCache()  # the envs' test runs, shared: see run_cache.py

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        """Generated tasks of ``split`` in the chosen tiers, shuffled by ``seed``, first ``n``."""
        if split not in ("train", "test"):
            raise ValueError(f"code env: split must be 'train' or 'test', got {split!r}")
        corpus_tiers = tuple(t for t in self.tiers if t > 0)
        if self.holdout == "module":
            pool = [t for t in load_tasks(split) if t.payload.get("tier", 1) in corpus_tiers]
        else:
            pool = [t for t in bug_holdout_split(corpus_tiers) if t.split == split]
        if 0 in self.tiers:  # generated; its test split has function names training never shows
            pool += micro_tasks(split)
        pool.sort(key=lambda t: t.id)
        random.Random(seed).shuffle(pool)
        pool = pool if n is None else pool[:n]
        if self.visible_fraction is not None:
            pool = [resplit_visible(t, self.visible_fraction) for t in pool]
        return pool

    def make_env(self) -> CodeEnv:
        return CodeEnv(
            limits=self.limits,
            max_obs_chars=self.max_obs_chars,
            penalty=self.penalty,
            run_cache=self.run_cache,
        )

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> CodeExpert:
        return CodeExpert(task, seed=seed, noise=noise, max_obs_chars=self.max_obs_chars)

    def baseline(self, task: Task) -> DoNothingAgent:
        return DoNothingAgent("submit")

    def close(self) -> None:
        self.run_cache = RunCache()  # drop the shared results; each env removes its workspace
