"""``turnrl audit``: how far can a task set's tests be trusted? Mutation testing.

For each task: take the gold solution, inject single-line mutants with the code env's mutation
operators (:func:`turnrl.envs.code.mutations.mutants`), run the test suites on each mutant and
count which suites notice (some test that passes on the gold solution now fails, errors, times
out or goes missing):

- ``c_visible``: share of mutants the proxy tests catch: the tests the training reward reads
  (a task's ``training_tests`` when it has them, else its ``visible_tests``);
- ``c_hidden``: share the hidden suite catches (the ground truth; mutants it misses are
  equivalent or untested, i.e. not wrong by the definition of success);
- ``c``: share of *truly wrong* mutants (caught by the hidden suite) the proxy catches.

Which mutants: by default those of the *kinds the env draws the task's bugs from* (the task's
tier, :data:`turnrl.envs.code.tasks.TIER_KINDS`; every kind for tier 3, which mixes kinds, and
for tasks without a tier). The wrong solutions a policy submits are mostly the task's own bug left
in place or half-fixed, so that is the population whose catch rate predicts the gap; mutants of
other kinds can be caught at a quite different rate (on the weak-tests variant, all kinds
over-predict c by 6-13 points). ``kinds=`` / ``--kinds`` picks others.

With true success ``p``, a wrong solution passes the proxy with probability ``1 - c``, so the
expected proxy success is ``p + (1 - p)(1 - c)`` and the predicted gap between proxy reward and
true success is ``(1 - p)(1 - c)`` (exact when the policy's wrong solutions are caught like
random mutants; RL tends to seek the uncaught ones, so read it as a lower bound late in a run).

Speed: tasks sharing a gold solution and hidden suite (all tasks of one corpus module) share
their mutants and runs; a proxy file that is the hidden file with test functions removed is
read off the hidden run. Runs go through a fork server: one Python imports pytest once and
forks a child per mutant, which cuts the per-run start-up from ~1 s to a few ms of CPU.
Mutants are of trusted gold code, so they run without the sandbox, under rlimits and a
per-test timeout.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from turnrl.envs.code.exploits import is_test_path
from turnrl.envs.code.mutations import MUTATION_KINDS, Mutant, mutants
from turnrl.envs.code.pytest_results import PER_TEST_TIMEOUT_PLUGIN, PYTEST_ENV, parse_junit
from turnrl.envs.code.tasks import TIER_KINDS
from turnrl.types import Task

P_VALUES = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)
JUNIT_NAME = ".audit-junit.xml"


def predicted_gap(p: float, c: float) -> float:
    """Expected proxy success minus true success: (p + (1 - p)(1 - c)) - p."""
    return (1.0 - p) * (1.0 - c)


def tier_kinds(task: Task) -> tuple[str, ...]:
    """The mutation kinds the env draws ``task``'s bugs from: its tier's, or every kind (tier 3
    mixes kinds; a hand-made task has no tier)."""
    return tuple(TIER_KINDS.get(task.payload.get("tier"), MUTATION_KINDS))


def parse_kinds(text: str) -> tuple[str, ...] | None:
    """``--kinds``: ``tier`` (each task's tier kinds: None), ``all``, or a comma list."""
    if text.strip() == "tier":
        return None
    if text.strip() == "all":
        return MUTATION_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(MUTATION_KINDS))
    if not kinds or unknown:
        raise ValueError(
            f"--kinds: expected 'tier', 'all' or a comma list of {', '.join(MUTATION_KINDS)}; "
            f"got {text!r}"
        )
    return kinds


@dataclass
class TaskAudit:
    task_id: str
    proxy: str  # which tests the proxy reward reads: "training_tests" or "visible_tests"
    mutants: int
    caught_visible: int
    caught_hidden: int
    caught_both: int  # caught by the hidden suite and by the proxy tests
    error: str | None = None
    kinds: tuple[str, ...] = ()  # the mutation kinds drawn from

    @property
    def c_visible(self) -> float | None:
        return self.caught_visible / self.mutants if self.mutants else None

    @property
    def c_hidden(self) -> float | None:
        return self.caught_hidden / self.mutants if self.mutants else None

    @property
    def c(self) -> float | None:
        return self.caught_both / self.caught_hidden if self.caught_hidden else None


@dataclass
class AuditReport:
    tasks: list[TaskAudit]
    p_values: tuple[float, ...] = P_VALUES
    max_mutants: int = 0
    seed: int = 0
    kinds: tuple[str, ...] | None = None  # None: each task's tier kinds

    def _total(self, attr: str) -> int:
        return sum(getattr(t, attr) for t in self.tasks if t.error is None)

    @property
    def c_visible(self) -> float | None:
        n = self._total("mutants")
        return self._total("caught_visible") / n if n else None

    @property
    def c_hidden(self) -> float | None:
        n = self._total("mutants")
        return self._total("caught_hidden") / n if n else None

    @property
    def c(self) -> float | None:
        """Pooled over tasks: truly wrong mutants the proxy tests catch."""
        n = self._total("caught_hidden")
        return self._total("caught_both") / n if n else None

    def predicted_gap(self, p: float) -> float | None:
        return None if self.c is None else predicted_gap(p, self.c)

    def to_json(self) -> dict[str, Any]:
        def row(t: TaskAudit) -> dict[str, Any]:
            out = asdict(t)
            out.update(c_visible=t.c_visible, c_hidden=t.c_hidden, c=t.c)
            if t.c is not None:
                out["predicted_gap"] = {str(p): predicted_gap(p, t.c) for p in self.p_values}
            return out

        return {
            "overall": {
                "tasks": len(self.tasks),
                "errors": sum(t.error is not None for t in self.tasks),
                "mutants": self._total("mutants"),
                "c_visible": self.c_visible,
                "c_hidden": self.c_hidden,
                "c": self.c,
                "predicted_gap": {str(p): self.predicted_gap(p) for p in self.p_values},
                "formula": "gap(p) = (p + (1 - p)(1 - c)) - p = (1 - p)(1 - c)",
                "kinds": "tier" if self.kinds is None else list(self.kinds),
            },
            "max_mutants_per_task": self.max_mutants,
            "seed": self.seed,
            "tasks": [row(t) for t in self.tasks],
        }


# -- test identities --------------------------------------------------------------------------


def _test_functions(source: str) -> dict[str, str] | None:
    """Top-level test functions and test-class methods -> their source; None if unparseable."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            out[node.name] = ast.get_source_segment(source, node) or ""
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    item.name.startswith("test")
                ):
                    out[f"{node.name}::{item.name}"] = ast.get_source_segment(source, item) or ""
    return out


def derived_ids(proxy: Mapping[str, str], hidden: Mapping[str, str]) -> set[str] | None:
    """Node ids of the proxy tests if every proxy test is a verbatim copy of a hidden test in
    the same file (so the hidden run already holds its outcome); else None."""
    ids: set[str] = set()
    for path, source in proxy.items():
        if not path.endswith(".py") or path.rsplit("/", 1)[-1] == "conftest.py":
            continue
        if path not in hidden:
            return None
        mine, theirs = _test_functions(source), _test_functions(hidden[path])
        if mine is None or theirs is None:
            return None
        for name, text in mine.items():
            if theirs.get(name) != text:
                return None
            ids.add(f"{path}::{name}")
    return ids


def proxy_tests(task: Task) -> tuple[str, dict[str, str]]:
    payload = task.payload
    key = "training_tests" if payload.get("training_tests") else "visible_tests"
    return key, dict(payload[key])


# -- the fork server --------------------------------------------------------------------------

_DRIVER = (
    """\
import os, resource, signal, sys
import pytest

"""
    + PER_TEST_TIMEOUT_PLUGIN
    + """
seconds, cpu, mem, junit = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# Warm-up: the first pytest.main imports most of pytest's plugins; do it once, before forking.
import tempfile
with tempfile.TemporaryDirectory() as warm:
    with open(os.path.join(warm, "test_warm.py"), "w") as f:
        f.write("def test_warm():\\n    assert 1 == 1\\n")
    pytest.main(["-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                 "--junitxml=" + os.path.join(warm, "w.xml"), "--rootdir", warm, warm])
for d in sys.argv[5:]:
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(d)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            pytest.main(
                ["-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                 "--junitxml=" + os.path.join(d, junit), "--rootdir", d, d],
                plugins=[PerTestTimeout(seconds)],
            )
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
"""
)


def run_many(
    dirs: Sequence[Path],
    *,
    workers: int = 2,
    per_test_timeout: float = 2.0,
    cpu_seconds: int = 20,
    memory_bytes: int = 2 << 30,
    timeout: float = 600.0,
) -> list[dict[str, str]]:
    """Per-test outcomes of pytest run in each of ``dirs`` (``{}`` where no report appeared:
    the run crashed or was killed). ``workers`` fork servers share the list."""
    dirs = list(dirs)
    chunks = [dirs[i::workers] for i in range(max(1, workers))]

    def serve(chunk: list[Path]) -> None:
        if not chunk:
            return
        argv = [str(per_test_timeout), str(cpu_seconds), str(memory_bytes), JUNIT_NAME]
        argv += [str(d) for d in chunk]
        proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, *argv],
            env={**os.environ, **PYTEST_ENV},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(serve, chunks))
    out = []
    for d in dirs:
        report = d / JUNIT_NAME
        try:
            out.append(parse_junit(report.read_text()) if report.exists() else {})
        except Exception:
            out.append({})
    return out


# -- the audit ---------------------------------------------------------------------------------


@dataclass
class _Group:
    """Tasks that share a gold solution and hidden suite, hence mutants and runs."""

    files: dict[str, str]  # gold repo
    hidden: dict[str, str]
    kinds: tuple[str, ...]  # mutation kinds
    tasks: list[Task] = field(default_factory=list)


def _gold_files(task: Task) -> dict[str, str]:
    payload = task.payload
    files = dict(payload["repo"])
    for path, text in payload["gold_patch"].items():
        if text is None:
            files.pop(path, None)  # the gold patch deletes it
        else:
            files[path] = text
    return files


def _group_key(
    files: Mapping[str, str], hidden: Mapping[str, str], kinds: Sequence[str] = ()
) -> str:
    blob = json.dumps([sorted(files.items()), sorted(hidden.items()), sorted(kinds)])
    return hashlib.sha1(blob.encode()).hexdigest()


def _sample_mutants(
    task: Task, files: Mapping[str, str], k: int, seed: int, kinds: Sequence[str]
) -> list[tuple[str, Mutant]]:
    """Up to ``k`` (path, mutant) pairs from the gold files the gold patch touches (non-test
    Python files), drawn uniformly from the mutation sites of ``kinds``."""
    rng = random.Random(f"audit/{seed}/{task.payload.get('module', task.id)}")
    pool: list[tuple[str, Mutant]] = []
    for path in sorted(task.payload["gold_patch"]):
        if path.endswith(".py") and path in files and not is_test_path(path):
            pool += [(path, m) for m in mutants(files[path], rng, kinds)]
    rng.shuffle(pool)
    return pool[:k]


def _caught(outcomes: Mapping[str, str], baseline_passing: set[str]) -> bool:
    return any(outcomes.get(t) != "passed" for t in baseline_passing)


def audit_tasks(
    tasks: Iterable[Task],
    *,
    max_mutants_per_task: int = 12,
    p_values: Sequence[float] = P_VALUES,
    seed: int = 0,
    workers: int = 2,
    per_test_timeout: float = 2.0,
    kinds: Sequence[str] | None = None,
) -> AuditReport:
    """Mutation-test the tasks' proxy and hidden suites (see the module docstring). ``kinds``:
    the mutation kinds to inject; None (default) = each task's tier kinds (:func:`tier_kinds`)."""
    errors = []
    if max_mutants_per_task < 1:
        errors.append(f"max_mutants_per_task must be >= 1, got {max_mutants_per_task}")
    if any(not 0.0 <= p <= 1.0 for p in p_values):
        errors.append(f"p_values must lie in [0, 1], got {list(p_values)}")
    if kinds is not None and (not kinds or set(kinds) - set(MUTATION_KINDS)):
        errors.append(f"kinds must be a non-empty subset of {MUTATION_KINDS}, got {kinds!r}")
    if errors:
        raise ValueError("; ".join(errors))
    tasks = list(tasks)
    groups: dict[str, _Group] = {}
    for task in tasks:
        files, hidden = _gold_files(task), dict(task.payload["hidden_tests"])
        task_kinds = tier_kinds(task) if kinds is None else tuple(kinds)
        key = _group_key(files, hidden, task_kinds)
        groups.setdefault(key, _Group(files, hidden, task_kinds)).tasks.append(task)

    root = Path(tempfile.mkdtemp(prefix="turnrl-audit-"))
    try:
        # One directory per (group, suite, variant): variant 0 is the gold, then the mutants.
        jobs: list[tuple[str, str, int]] = []  # (group key, suite key, variant)
        dirs: list[Path] = []
        plans: dict[str, tuple[list[Mutant], list[str], dict[str, dict[str, str]]]] = {}
        for gkey, group in groups.items():
            sampled = _sample_mutants(
                group.tasks[0], group.files, max_mutants_per_task, seed, group.kinds
            )
            muts, paths = [m for _, m in sampled], [p for p, _ in sampled]
            suites = {"hidden": group.hidden}
            for task in group.tasks:
                _, proxy = proxy_tests(task)
                if derived_ids(proxy, group.hidden) is None:
                    suites[_group_key({}, proxy)] = proxy
            plans[gkey] = (muts, paths, suites)
            for skey, tests in suites.items():
                for v in range(len(muts) + 1):
                    d = root / f"{len(dirs):05d}"
                    files = dict(group.files)
                    if v > 0:
                        files[paths[v - 1]] = muts[v - 1].mutated_source
                    for rel, text in {**files, **tests}.items():
                        (d / rel).parent.mkdir(parents=True, exist_ok=True)
                        (d / rel).write_text(text)
                    jobs.append((gkey, skey, v))
                    dirs.append(d)
        results = run_many(dirs, workers=workers, per_test_timeout=per_test_timeout)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    runs: dict[tuple[str, str], dict[int, dict[str, str]]] = {}
    for (gkey, skey, v), outcomes in zip(jobs, results):
        runs.setdefault((gkey, skey), {})[v] = outcomes

    audits: dict[str, TaskAudit] = {}
    for gkey, group in groups.items():
        muts = plans[gkey][0]
        hidden_runs = runs[(gkey, "hidden")]
        hidden_base = {t for t, s in hidden_runs[0].items() if s == "passed"}
        for task in group.tasks:
            key, proxy = proxy_tests(task)
            ids = derived_ids(proxy, group.hidden)
            if ids is not None:
                proxy_runs, proxy_base = hidden_runs, {t for t in ids if t in hidden_base}
            else:
                proxy_runs = runs[(gkey, _group_key({}, proxy))]
                proxy_base = {t for t, s in proxy_runs[0].items() if s == "passed"}
            error = None
            if not muts:
                error = "no mutation sites in the gold files"
            elif not hidden_base:
                error = "the gold solution passes no hidden test"
            audit = TaskAudit(task.id, key, 0, 0, 0, 0, error, group.kinds)
            if error is None:
                for v in range(1, len(muts) + 1):
                    h = _caught(hidden_runs[v], hidden_base)
                    p = bool(proxy_base) and _caught(proxy_runs[v], proxy_base)
                    audit.mutants += 1
                    audit.caught_hidden += h
                    audit.caught_visible += p
                    audit.caught_both += h and p
            audits[task.id] = audit
    return AuditReport(
        [audits[t.id] for t in tasks],
        tuple(p_values),
        max_mutants=max_mutants_per_task,
        seed=seed,
        kinds=None if kinds is None else tuple(kinds),
    )


# -- presentation and the command line --------------------------------------------------------


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_report(report: AuditReport, console: Any = None, max_rows: int = 200) -> None:
    """A rich table per task, then the overall rates and the predicted gap per p."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="mutation audit (c = share of wrong mutants the proxy tests catch)")
    for col in ("task", "proxy", "mutants", "c_visible", "c_hidden", "c"):
        table.add_column(col, justify="left" if col in ("task", "proxy") else "right")
    mid = report.p_values[len(report.p_values) // 2]
    table.add_column(f"gap@p={mid}", justify="right")
    for t in report.tasks[:max_rows]:
        gap = None if t.c is None else predicted_gap(mid, t.c)
        table.add_row(
            t.task_id,
            t.proxy.replace("_tests", ""),
            str(t.mutants) if t.error is None else f"[red]{t.error}[/red]",
            _fmt(t.c_visible),
            _fmt(t.c_hidden),
            _fmt(t.c),
            _fmt(gap),
        )
    if len(report.tasks) > max_rows:
        table.add_row(f"... {len(report.tasks) - max_rows} more", "", "", "", "", "", "")
    console.print(table)
    overall = Table(title="overall (pooled over mutants)")
    overall.add_column("tasks", justify="right")
    overall.add_column("mutants", justify="right")
    overall.add_column("c_visible", justify="right")
    overall.add_column("c_hidden", justify="right")
    overall.add_column("c", justify="right")
    for p in report.p_values:
        overall.add_column(f"gap@p={p}", justify="right")
    overall.add_row(
        str(len(report.tasks)),
        str(report._total("mutants")),
        _fmt(report.c_visible),
        _fmt(report.c_hidden),
        _fmt(report.c),
        *(_fmt(report.predicted_gap(p)) for p in report.p_values),
    )
    console.print(overall)
    used = sorted({t.kinds for t in report.tasks if t.kinds})
    console.print("mutation kinds: " + "; ".join(", ".join(k) for k in used))
    console.print("predicted gap(p) = (p + (1 - p)(1 - c)) - p = (1 - p)(1 - c)")


def audit_family_tasks(
    env: str = "code",
    options: Mapping[str, Any] | None = None,
    split: str = "test",
    n: int | None = None,
    seed: int = 0,
) -> list[Task]:
    """The tasks to audit: ``n`` tasks of ``split`` from an env family (``code`` or
    ``code-weak``, the weak-tests variant)."""
    options = dict(options or {})
    if env == "code-weak":
        from turnrl.envs.code.weak import WeakTestsCodeFamily

        family: Any = WeakTestsCodeFamily(**options)
    else:
        from turnrl.envs.registry import make_family

        family = make_family(env, options)
    try:
        return family.tasks(split, n, seed=seed)
    finally:
        family.close()


def run_audit(
    *,
    env: str = "code",
    options: Mapping[str, Any] | None = None,
    split: str = "test",
    n_tasks: int | None = None,
    max_mutants: int = 12,
    out: Path | str | None = None,
    seed: int = 0,
    workers: int = 2,
    kinds: Sequence[str] | None = None,
    console: Any = None,
) -> AuditReport:
    """What ``turnrl audit`` does: audit, print the tables, write JSON to ``out``."""
    tasks = audit_family_tasks(env, options, split, n_tasks, seed)
    report = audit_tasks(
        tasks, max_mutants_per_task=max_mutants, seed=seed, workers=workers, kinds=kinds
    )
    print_report(report, console)
    if out is not None:
        Path(out).write_text(json.dumps(report.to_json(), indent=2))
    return report
