"""Bug-fixing tasks generated from the built-in corpus (SWE-smith style).

Each corpus module ``corpus/<name>.py`` has a passing suite ``corpus/test_<name>.py``. A task
injects one or more AST mutations (:mod:`turnrl.envs.code.mutations`) into the module, runs the
whole suite with pytest and keeps the mutant only if some tests now fail: those are
FAIL_TO_PASS, the rest PASS_TO_PASS. The agent sees the buggy module and a *visible* subset of
the tests; grading runs the *hidden* whole suite.

Visible tests: a random ``visible_fraction`` of the test functions, always including at least
one FAIL_TO_PASS test, so the agent can reproduce the failure it must fix (as in a bug report
with a failing test). The rest of the FAIL_TO_PASS tests may be hidden, which is what makes
special-casing the visible tests fail on the hidden suite.

Tiers (so a tiny model has an easy tier to learn on):

0. generated, not drawn from the corpus: see :mod:`turnrl.envs.code.micro`;
1. one-line operator, comparison, boolean or constant bug in a short module (<= 40 lines);
2. one other single-line mutation: off-by-one, negated condition, wrong return value,
   dropped statement (any module);
3. two or three mutations in different functions of one module.

Splits hold out whole modules: a "test" task's module never appears in "train".

Generating runs pytest hundreds of times (minutes), so the library ships
``data/code_tasks.jsonl`` made by ``scripts/generate_code_tasks.py`` and :func:`load_tasks`
reads it.
"""

from __future__ import annotations

import ast
import random
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.envs.code.mutations import Mutant, apply_mutants, mutants
from turnrl.envs.code.pytest_results import run_pytest
from turnrl.types import Task

__all__ = [
    "CORPUS_DIR",
    "DATA_PATH",
    "TIER_KINDS",
    "CorpusModule",
    "generate_tasks",
    "load_corpus",
    "load_tasks",
    "materialize",
    "run_pytest",
    "split_modules",
    "visible_test_file",
]

CORPUS_DIR = Path(__file__).parent / "corpus"
DATA_PATH = Path(__file__).parent / "data" / "code_tasks.jsonl"
SPLITS = ("train", "test")
TIER_KINDS: dict[int, tuple[str, ...]] = {
    1: ("arith_op", "compare_op", "bool_op", "constant"),
    2: ("off_by_one", "negate_condition", "wrong_return", "drop_statement"),
}
TIER1_MAX_LINES = 40  # a 40-line module is ~300 tokens: fits a tiny model's context
PER_TEST_TIMEOUT_S = 2.0  # a mutant that makes any test this slow (endless loop) is dropped
PAYLOAD_KEYS = (
    "repo",
    "visible_tests",
    "hidden_tests",
    "fail_to_pass",
    "pass_to_pass",
    "gold_patch",
    "tier",
    "mutations",
    "module",
)


@dataclass(frozen=True)
class CorpusModule:
    """A correct module and its passing test suite."""

    name: str
    source: str
    tests: str

    @property
    def path(self) -> str:
        return f"{self.name}.py"

    @property
    def test_path(self) -> str:
        return f"test_{self.name}.py"

    @property
    def short(self) -> bool:
        return len(self.source.splitlines()) <= TIER1_MAX_LINES


def load_corpus(corpus_dir: Path = CORPUS_DIR) -> list[CorpusModule]:
    """Every ``<name>.py`` with a ``test_<name>.py`` beside it, sorted by name."""
    modules = []
    for test_file in sorted(corpus_dir.glob("test_*.py")):
        name = test_file.stem[len("test_") :]
        source_file = corpus_dir / f"{name}.py"
        if source_file.exists():
            modules.append(CorpusModule(name, source_file.read_text(), test_file.read_text()))
    return modules


def split_modules(names: Iterable[str], seed: int, test_fraction: float = 0.2) -> set[str]:
    """The held-out ("test") module names: a seeded ``test_fraction`` of them."""
    ordered = sorted(names)
    random.Random(f"split/{seed}").shuffle(ordered)
    return set(ordered[: max(1, round(test_fraction * len(ordered)))])


def materialize(task: Task, dest: Path, *, hidden: bool) -> None:
    """Write the buggy repo plus the visible (or, for grading, the hidden) tests to ``dest``."""
    payload = task.payload
    files = {**payload["repo"], **payload["hidden_tests" if hidden else "visible_tests"]}
    for rel, content in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def load_tasks(split: str, path: Path = DATA_PATH) -> list[Task]:
    """The shipped, pre-generated tasks of one split ("train" or "test")."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    with open(path) as f:
        tasks = [Task.from_json(line) for line in f if line.strip()]
    return [t for t in tasks if t.split == split]


def visible_test_file(tests_source: str, keep: set[str]) -> str:
    """The test file with every top-level test function not in ``keep`` removed."""
    lines = tests_source.splitlines(keepends=True)
    drop: set[int] = set()
    for node in ast.parse(tests_source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test") and node.name not in keep:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                drop.update(range(first - 1, node.end_lineno))  # type: ignore[arg-type]
    kept = [line for i, line in enumerate(lines) if i not in drop]
    # Collapse the blank runs left behind to at most two lines.
    out: list[str] = []
    for line in kept:
        if not line.strip() and len(out) >= 2 and not out[-1].strip() and not out[-2].strip():
            continue
        out.append(line)
    return "".join(out).rstrip() + "\n"


# -- generation -----------------------------------------------------------------------------


def _run_suite(module: CorpusModule, source: str) -> dict[str, str] | None:
    """Per-test outcomes of the whole suite against ``source``; None if the run hung."""
    with tempfile.TemporaryDirectory(prefix="turnrl-mutant-") as tmp:
        work = Path(tmp)
        (work / module.path).write_text(source)
        (work / module.test_path).write_text(module.tests)
        try:
            return run_pytest(work, timeout=120.0, per_test_timeout=PER_TEST_TIMEOUT_S)
        except TimeoutError:
            return None


@dataclass
class _Verified:
    mutants: list[Mutant]
    source: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]


def _verify(module: CorpusModule, chosen: list[Mutant], all_tests: list[str]) -> _Verified | None:
    """Keep a mutant only if the suite ran to completion and some test failed."""
    source = apply_mutants(module.source, chosen)
    outcomes = _run_suite(module, source)
    if outcomes is None or set(outcomes) != set(all_tests):
        return None  # hung, crashed at collection, or stopped by the per-test timeout
    fail = [t for t in all_tests if outcomes[t] != "passed"]
    if not fail:
        return None  # an equivalent (or untested) mutant
    return _Verified(chosen, source, fail, [t for t in all_tests if outcomes[t] == "passed"])


def _module_tasks(
    module: CorpusModule,
    seed: int,
    quota: Mapping[int, int],
    visible_fraction: float,
    split: str,
) -> list[Task]:
    rng = random.Random(f"{seed}/{module.name}")
    baseline = _run_suite(module, module.source)
    if not baseline or any(v != "passed" for v in baseline.values()):
        raise RuntimeError(f"corpus module {module.name} does not pass its own tests: {baseline}")
    all_tests = sorted(baseline)
    candidates = list(mutants(module.source, rng))
    tried: dict[int, _Verified | None] = {}  # candidate index -> verification result

    def single(i: int) -> _Verified | None:
        if i not in tried:
            tried[i] = _verify(module, [candidates[i]], all_tests)
        return tried[i]

    verified: dict[int, list[_Verified]] = {1: [], 2: [], 3: []}
    for tier in (1, 2):
        if quota.get(tier, 0) == 0 or (tier == 1 and not module.short):
            continue
        for i, m in enumerate(candidates):
            if len(verified[tier]) >= quota[tier]:
                break
            if m.kind in TIER_KINDS[tier] and (v := single(i)) is not None:
                verified[tier].append(v)
    n3 = quota.get(3, 0)
    if n3 > 0:
        # Tier 3 combines verified single mutants from different functions; verify more
        # candidates (any kind) until the pool is big enough to mix.
        for i in range(len(candidates)):
            pool = [v.mutants[0] for v in tried.values() if v is not None]
            if len(pool) >= 2 * n3 + 4 and len({m.function for m in pool}) >= 3:
                break
            single(i)
        pool = [v.mutants[0] for v in tried.values() if v is not None]
        seen: set[frozenset[tuple[int, str | None]]] = set()
        for _ in range(4 * n3):
            if len(verified[3]) >= n3:
                break
            chosen: list[Mutant] = []
            k = 3 if rng.random() < 0.3 else 2
            for m in rng.sample(pool, len(pool)):
                if all(m.function != c.function and m.line != c.line for c in chosen):
                    chosen.append(m)
                if len(chosen) == k:
                    break
            if len(chosen) < 2:
                break  # fewer than two functions with killable mutants
            key = frozenset((m.line, m.mutated_line) for m in chosen)
            if key in seen:
                continue
            seen.add(key)
            v = _verify(module, sorted(chosen, key=lambda m: m.line), all_tests)
            if v is not None:
                verified[3].append(v)
    tasks = []
    for tier in (1, 2, 3):
        for i, v in enumerate(verified[tier]):
            tasks.append(_make_task(module, v, tier, i, split, visible_fraction, rng, all_tests))
    return tasks


def _make_task(
    module: CorpusModule,
    v: _Verified,
    tier: int,
    index: int,
    split: str,
    visible_fraction: float,
    rng: random.Random,
    all_tests: list[str],
) -> Task:
    names = [t.split("::")[-1] for t in all_tests]
    fail_names = [t.split("::")[-1] for t in v.fail_to_pass]
    k = min(len(names), max(1, round(visible_fraction * len(names))))
    first = rng.choice(fail_names)  # at least one failing test is visible
    rest = [n for n in names if n != first]
    keep = {first, *rng.sample(rest, k - 1)}
    payload: dict[str, Any] = {
        "repo": {module.path: v.source},
        "visible_tests": {module.test_path: visible_test_file(module.tests, keep)},
        "hidden_tests": {module.test_path: module.tests},
        "fail_to_pass": v.fail_to_pass,
        "pass_to_pass": v.pass_to_pass,
        "gold_patch": {module.path: module.source},
        "tier": tier,
        "mutations": [m.describe() for m in v.mutants],
        "module": module.name,
    }
    return Task(
        id=f"code-{module.name}-t{tier}-{index:02d}", env="code", payload=payload, split=split
    )


def generate_tasks(
    seed: int,
    n_per_module: int | Mapping[int, int],
    tiers: Iterable[int] = (1, 2, 3),
    visible_fraction: float = 0.5,
    *,
    corpus_dir: Path = CORPUS_DIR,
    test_fraction: float = 0.2,
    workers: int = 2,
) -> list[Task]:
    """Generate and verify tasks: up to ``n_per_module`` per tier per module (an int, or a
    ``{tier: n}`` mapping) of tiers 1-3. Deterministic given ``seed`` and the corpus."""
    if not 0.0 <= visible_fraction <= 1.0:
        raise ValueError(f"visible_fraction must be in [0, 1], got {visible_fraction}")
    tiers = tuple(tiers)
    if not set(tiers) <= {1, 2, 3}:
        raise ValueError(f"tiers must be a subset of (1, 2, 3) (tier 0 is generated), got {tiers}")
    if isinstance(n_per_module, int):
        quota = {t: n_per_module for t in tiers}
    else:
        quota = {t: int(n_per_module.get(t, 0)) for t in tiers}
    corpus = load_corpus(corpus_dir)
    held_out = split_modules([m.name for m in corpus], seed, test_fraction)
    jobs = [(m, quota, "test" if m.name in held_out else "train") for m in corpus]

    def one(job: tuple[CorpusModule, dict[int, int], str]) -> list[Task]:
        module, tier_quota, split = job
        return _module_tasks(module, seed, tier_quota, visible_fraction, split)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        per_module = list(pool.map(one, jobs))
    return [task for tasks in per_module for task in tasks]
