"""The code env: tool behaviour, grading of honest and wrong fixes, the expert, the family."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

import turnrl
from turnrl.envs.code import CodeEnv, CodeFamily
from turnrl.envs.code.env import clip, compact_pytest_output, resplit_visible
from turnrl.envs.code.expert import CodeExpert, minimal_edits, wrong_variant
from turnrl.envs.code.grader import parse_summary
from turnrl.envs.code.run_cache import RunCache, tree_digest
from turnrl.envs.scripted import run_scripted
from turnrl.sandbox import sandbox_backend
from turnrl.types import Task, ToolCall

CALC_GOLD = """def add(a, b):
    return a + b


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
"""
CALC_BUG = CALC_GOLD.replace("return a + b", "return a - b")
VISIBLE = """import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_clamp():
    assert calc.clamp(5, 0, 3) == 3
"""
HIDDEN = (
    VISIBLE
    + """

def test_add_more():
    assert calc.add(10, 7) == 17


def test_clamp_low():
    assert calc.clamp(-4, 0, 3) == 0
"""
)


def calc_task() -> Task:
    return Task(
        "calc-1",
        "code",
        {
            "repo": {"calc.py": CALC_BUG},
            "visible_tests": {"test_calc.py": VISIBLE},
            "hidden_tests": {"test_calc.py": HIDDEN},
            "fail_to_pass": ["test_calc.py::test_add", "test_calc.py::test_add_more"],
            "pass_to_pass": ["test_calc.py::test_clamp", "test_calc.py::test_clamp_low"],
            "gold_patch": {"calc.py": CALC_GOLD},
            "tier": 1,
            "mutations": [],
            "module": "calc",
        },
    )


async def play(task: Task, calls: list[ToolCall], env: CodeEnv | None = None):
    """Run a fixed list of calls (then submit) and grade."""
    env = env or CodeEnv()
    plan = [*calls, ToolCall("submit", {})]
    agent = type("Scripted", (), {"act": lambda self, obs: plan.pop(0)})()
    return await run_scripted(env, task, agent)


async def started(task: Task | None = None) -> CodeEnv:
    env = CodeEnv()
    await env.reset(task or calc_task())
    return env


def step(env: CodeEnv, name: str, **arguments) -> str:
    return asyncio.run(env.step(ToolCall(name, arguments))).observation


# ------------------------------------------------------------------------------- tools


def test_reset_workspace_has_repo_and_visible_tests_only():
    async def go():
        env = await started()
        try:
            assert env.workspace is not None
            files = sorted(p.name for p in env.workspace.iterdir())
            assert files == ["calc.py", "test_calc.py"]
            assert (env.workspace / "test_calc.py").read_text() == VISIBLE
            assert "test_add_more" not in env.list_files()
            assert "run_tests()" in env.instructions and "submit()" in env.instructions
        finally:
            await env.close()
        assert env.workspace is None

    asyncio.run(go())


def test_read_file_numbers_lines_and_ranges():
    env = asyncio.run(started())
    try:
        full = step(env, "read_file", path="calc.py")
        assert full.splitlines()[1] == " 2|     return a - b"
        part = step(env, "read_file", path="calc.py", start_line=5, end_line=6)
        assert part == "5| def clamp(x, lo, hi):\n6|     if x < lo:"
        assert "has 10 lines" in step(env, "read_file", path="calc.py", start_line=40)
        assert "no such file" in step(env, "read_file", path="nope.py")
    finally:
        asyncio.run(env.close())


def test_edit_file_errors_absent_and_ambiguous():
    env = asyncio.run(started())
    try:
        assert "not found" in step(env, "edit_file", path="calc.py", old="return a * b", new="x")
        ambiguous = step(env, "edit_file", path="calc.py", old="return", new="x")
        assert "occurs 4 times" in ambiguous and ambiguous.startswith("Error")
        ok = step(env, "edit_file", path="calc.py", old="return a - b", new="return a + b")
        assert ok == "Edited calc.py at line 2."
        assert env.workspace is not None
        assert (env.workspace / "calc.py").read_text() == CALC_GOLD
    finally:
        asyncio.run(env.close())


@pytest.mark.parametrize("bad", ["../calc.py", "/etc/passwd", "a/../../x.py", ""])
def test_path_escape_rejected(bad):
    env = asyncio.run(started())
    try:
        assert step(env, "read_file", path=bad).startswith("Error: path")
        assert step(env, "write_file", path=bad, content="x").startswith("Error: path")
    finally:
        asyncio.run(env.close())


def test_symlink_out_of_workspace_rejected():
    env = asyncio.run(started())
    try:
        step(env, "run", command="ln -s /etc/passwd link")
        assert "leaves the repository" in step(env, "read_file", path="link")
    finally:
        asyncio.run(env.close())


def test_write_file_and_run_in_sandbox():
    env = asyncio.run(started())
    try:
        assert step(env, "write_file", path="pkg/notes.txt", content="hello\n").startswith("Wrote")
        out = step(env, "run", command="cat pkg/notes.txt; echo made > out.txt; exit 3")
        assert "hello" in out and out.endswith("[exit code 3]")
        assert env.workspace is not None and (env.workspace / "out.txt").read_text() == "made\n"
        assert env.commands == ["cat pkg/notes.txt; echo made > out.txt; exit 3"]
        if sandbox_backend() == "bwrap":
            assert step(env, "run", command="pwd").startswith("/workspace")
    finally:
        asyncio.run(env.close())


def test_run_tests_output_is_compact():
    env = asyncio.run(started())
    try:
        out = step(env, "run_tests")
        assert "FAILED test_add:" in out
        assert "E   assert -1 == 5" in out
        assert out.splitlines()[-1] == "1 failed, 1 passed"
        assert "0x" not in out and "====" not in out and len(out) < 300
        step(env, "edit_file", path="calc.py", old="return a - b", new="return a + b")
        assert step(env, "run_tests").splitlines()[-1] == "2 passed"
    finally:
        asyncio.run(env.close())


def test_compact_pytest_output_drops_decoration():
    raw = (
        ".F                                                     [100%]\n"
        "=================================== FAILURES ===================================\n"
        "__________________________________ test_add2 ___________________________________\n"
        "test_mod.py:5: in test_add2\n"
        "    assert mod.add(2, 2) == 5\n"
        "           ^^^^^^^^^^^^^^^^^\n"
        "E   assert 4 == 5\n"
        "E    +  where 4 = <function add at 0x7fa99afbd4e0>(2, 2)\n"
        "1 failed, 1 passed in 0.12s\n"
    )
    assert compact_pytest_output(raw) == (
        ".F                                                     [100%]\n"
        "FAILED test_add2:\n"
        "test_mod.py:5: in test_add2\n"
        "    assert mod.add(2, 2) == 5\n"
        "E   assert 4 == 5\n"
        "1 failed, 1 passed"
    )


def test_observations_are_clipped():
    big = Task("big", "code", {**calc_task().payload, "repo": {"calc.py": "x = 1\n" * 2000}})
    env = CodeEnv(max_obs_chars=300)
    asyncio.run(env.reset(big))
    try:
        out = step(env, "read_file", path="calc.py")
        assert len(out) <= 300 and "truncated" in out and "line range" in out
    finally:
        asyncio.run(env.close())


def test_hidden_tests_and_grader_not_readable_from_run():
    env = asyncio.run(started())
    try:
        out = step(env, "run", command="grep -rl test_add_more . /tmp /etc 2>/dev/null; echo end")
        assert out.startswith("end")
        if sandbox_backend() != "bwrap":
            pytest.skip("only bubblewrap hides the host filesystem")
        package = Path(turnrl.__file__).parent
        for target in (package / "envs/code/grader.py", package / "envs/code/data"):
            out = step(env, "run", command=f"ls {target}")
            assert "No such file" in out and "[exit code 2]" in out
        # Only the virtual environment (the interpreter) of the checkout is mounted, no sources.
        checkout = Path(sys.prefix).parent
        assert step(env, "run", command=f"ls -a {checkout}") == ".\n..\n.venv\n[exit code 0]"
    finally:
        asyncio.run(env.close())


# ----------------------------------------------------------------------------- grading


def test_honest_fix_rewarded_and_wrong_fix_not():
    async def go():
        task = calc_task()
        fam = CodeFamily()
        honest = await run_scripted(fam.make_env(), task, fam.expert(task))
        wrong = await play(
            task,
            [
                ToolCall(
                    "edit_file", {"path": "calc.py", "old": "return a - b", "new": "return b - a"}
                )
            ],
        )
        nothing = await run_scripted(fam.make_env(), task, fam.baseline(task))
        return honest.result, wrong.result, nothing.result

    honest, wrong, nothing = asyncio.run(go())
    assert (honest.reward, honest.success, honest.proxy_success, honest.flags) == (
        1.0,
        True,
        1.0,
        [],
    )
    assert honest.info["tests"] == dict.fromkeys(
        [
            "test_calc.py::test_add",
            "test_calc.py::test_add_more",
            "test_calc.py::test_clamp",
            "test_calc.py::test_clamp_low",
        ],
        "passed",
    )
    assert (wrong.reward, wrong.success, wrong.flags) == (0.0, False, [])
    assert wrong.components["fail_to_pass"] == 0.0 and wrong.components["pass_to_pass"] == 1.0
    assert (nothing.reward, nothing.success, nothing.proxy_success) == (0.0, False, 0.0)


def test_parse_summary():
    assert parse_summary("..F\n2 passed, 1 failed in 0.10s\n") == [2]
    assert parse_summary("no tests ran in 0.01s") == [0]
    assert parse_summary("....\n") == []
    assert parse_summary("4 passed in 0.1s\nF\n1 failed, 3 passed in 0.2s") == [4, 3]


# ------------------------------------------------------------------------------- expert


def test_minimal_edits_smallest_unique_old():
    buggy = "def f(x):\n    y = x\n    y = x\n    return y - 1\n"
    fixed = "def f(x):\n    y = x\n    y = x + 1\n    return y - 1\n"
    (edit,) = minimal_edits("f.py", buggy, fixed)
    # "y = x" occurs twice, so the edit is widened by the line before
    assert (edit.old, edit.new) == ("y = x\n    y = x", "y = x\n    y = x + 1")
    assert buggy.replace(edit.old, edit.new) == fixed
    dropped = "def f(x):\n    total = 0\n    return total\n"
    restored = "def f(x):\n    total = 0\n    total += x\n    return total\n"
    (edit,) = minimal_edits("f.py", dropped, restored)
    assert (edit.old, edit.new) == ("total = 0", "total = 0\n    total += x")


def test_expert_calls_and_noise():
    task = calc_task()
    calls = CodeExpert(task).plan
    assert [c.name for c in calls] == ["read_file", "run_tests", "edit_file", "run_tests", "submit"]
    assert calls[2].arguments == {"path": "calc.py", "old": " -", "new": " +"}
    plans = {tuple(c.name for c in CodeExpert(task, seed=s, noise=0.5).plan) for s in range(40)}
    assert len(plans) > 2  # noise produces several kinds of episode
    assert CodeExpert(task, seed=3, noise=0.5).plan == CodeExpert(task, seed=3, noise=0.5).plan
    import random

    assert wrong_variant("return a + b", random.Random(0)) == "return a - b"
    assert wrong_variant("pass", random.Random(0)) is None
    with pytest.raises(ValueError):
        CodeExpert(task, noise=2.0)


def test_expert_reads_windows_of_long_files():
    filler = "".join(f"X{i} = {i}\n" for i in range(300))
    payload = calc_task().payload
    long = Task(
        "long",
        "code",
        {
            **payload,
            "repo": {"calc.py": filler + CALC_BUG},
            "gold_patch": {"calc.py": filler + CALC_GOLD},
        },
    )
    reads = [c for c in CodeExpert(long).plan if c.name == "read_file"]
    assert [c.arguments for c in reads] == [{"path": "calc.py", "start_line": 294, "end_line": 310}]


# ------------------------------------------------------------------------------- family


def test_family_options_validated():
    with pytest.raises(ValueError, match="tiers.*limits"):
        CodeFamily(tiers=(4,), limits={"cpu": 1})
    fam = CodeFamily(tiers=[1], penalty=-1.0, limits={"wall_seconds": 5.0}, max_obs_chars=500)
    env = fam.make_env()
    assert (env.penalty, env.limits.wall_seconds, env.max_obs_chars) == (-1.0, 5.0, 500)
    assert fam.baseline(calc_task()).act("") == ToolCall("submit", {})


def _require_task_data() -> None:
    tasks = pytest.importorskip("turnrl.envs.code.tasks", reason="task generator not present")
    if not tasks.DATA_PATH.exists():
        pytest.skip(f"generated tasks not shipped yet ({tasks.DATA_PATH})")


def _generated(split: str, n: int) -> list[Task]:
    _require_task_data()
    return CodeFamily().tasks(split, n=n, seed=0)


def test_family_tasks_deterministic_and_disjoint():
    _require_task_data()
    fam = CodeFamily()
    train, test = fam.tasks("train"), fam.tasks("test")
    assert train and test and not {t.id for t in train} & {t.id for t in test}
    assert [t.id for t in fam.tasks("train", n=5, seed=1)] == [
        t.id for t in fam.tasks("train", n=5, seed=1)
    ]
    easy = CodeFamily(tiers=[1]).tasks("train")
    assert easy and all(t.payload["tier"] == 1 for t in easy)
    micro = CodeFamily(tiers=[0])
    micro_train, micro_test = micro.tasks("train"), micro.tasks("test")
    assert (
        micro_train and micro_test and not {t.id for t in micro_train} & {t.id for t in micro_test}
    )
    assert all(t.payload["tier"] == 0 for t in micro_train + micro_test)
    both = CodeFamily(tiers=[0, 1]).tasks("test")
    assert {t.payload["tier"] for t in both} == {0, 1}


@pytest.mark.slow
def test_expert_solves_micro_tasks():
    fam = CodeFamily(tiers=[0])
    tasks = fam.tasks("train", n=6) + fam.tasks("test", n=2)

    async def go():
        return await asyncio.gather(
            *(run_scripted(fam.make_env(), t, fam.expert(t), max_turns=8) for t in tasks)
        )

    assert all(e.result.success and not e.result.flags for e in asyncio.run(go()))


@pytest.mark.slow
def test_expert_solves_generated_tasks():
    """The scripted expert's honest fixes score 1 with no flag on >= 20 generated tasks."""
    tasks = _generated("train", 16) + _generated("test", 8)
    assert len(tasks) >= 20
    fam = CodeFamily()

    async def go():
        sem = asyncio.Semaphore(4)

        async def one(task):
            async with sem:
                return await run_scripted(fam.make_env(), task, fam.expert(task))

        return await asyncio.gather(*(one(t) for t in tasks))

    episodes = asyncio.run(go())
    bad = [
        (e.task.id, e.result.reward, e.result.flags, e.result.info["tests"])
        for e in episodes
        if not (e.result.reward == 1.0 and e.result.success and not e.result.flags)
    ]
    assert not bad, bad
    assert all(e.result.proxy_success == 1.0 for e in episodes)


def test_python_used_in_sandbox_is_ours():
    env = asyncio.run(started())
    try:
        out = step(env, "run", command="python -c 'import pytest, sys; print(sys.prefix)'")
        assert out.splitlines()[0] == sys.prefix
    finally:
        asyncio.run(env.close())


def test_clip_keeps_head_or_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(100))
    head = clip(text, 100)
    assert len(head) <= 100 and head.startswith("line 0") and "truncated" in head
    both = clip(text, 100, tail=True)
    assert len(both) <= 100 and both.startswith("line 0") and both.endswith("line 99\n")
    assert clip("short", 100) == "short"


def test_tool_schemas_and_file_errors():
    env = asyncio.run(started())
    try:
        names = [s["function"]["name"] for s in env.tool_schemas()]
        assert names == list(CodeEnv.tools)
        assert "Error: bad arguments" in step(env, "read_file", path="calc.py", start_line="x")
        assert "cannot write" in step(env, "write_file", path="calc.py/inner.py", content="x")
        assert step(env, "write_file", path=".", content="x").startswith("Error")
        step(env, "run", command="mkfifo pipe")
        assert "no such file" in step(env, "read_file", path="pipe")  # never blocks on a FIFO
    finally:
        asyncio.run(env.close())


def test_resplit_visible_keeps_a_failing_test():
    task = calc_task()
    one = resplit_visible(task, 0.01).payload["visible_tests"]["test_calc.py"]
    names = [line[4:].split("(")[0] for line in one.splitlines() if line.startswith("def test")]
    assert len(names) == 1 and f"test_calc.py::{names[0]}" in task.payload["fail_to_pass"]
    full = resplit_visible(task, 1.0).payload["visible_tests"]["test_calc.py"]
    assert all(f"def {t.split('::')[1]}(" in full for t in task.payload["pass_to_pass"])
    assert resplit_visible(task, 0.5) == resplit_visible(task, 0.5)
    with pytest.raises(ValueError, match="visible_fraction"):
        CodeFamily(visible_fraction=0.0)
    with pytest.raises(ValueError, match="limits"):
        CodeFamily(limits={"cpu_seconds": 0})


def test_bug_holdout_keeps_modules_but_never_test_bugs():
    family = CodeFamily(tiers=[1], holdout="bug")
    train, test = family.tasks("train"), family.tasks("test")
    assert not {t.id for t in train} & {t.id for t in test}
    train_bugs = {
        (t.payload["module"], json.dumps(t.payload["mutations"], sort_keys=True)) for t in train
    }
    assert all(
        (t.payload["module"], json.dumps(t.payload["mutations"], sort_keys=True)) not in train_bugs
        for t in test
    )
    # Every test module also appears in training (a known repository, a new bug).
    assert {t.payload["module"] for t in test} <= {t.payload["module"] for t in train}
    with pytest.raises(ValueError, match="holdout"):
        CodeFamily(holdout="everything")


# ------------------------------------------------------------------- shared test runs


def test_run_cache_computes_once_and_keeps_only_what_it_may():
    async def go():
        cache, calls = RunCache(max_entries=2), []

        async def compute(value):
            calls.append(value)
            await asyncio.sleep(0.01)
            return value

        # three concurrent asks for one key: one computation, three answers
        same = await asyncio.gather(*(cache.get("a", lambda: compute(1)) for _ in range(3)))
        assert same == [1, 1, 1] and calls == [1]
        assert await cache.get("a", lambda: compute(2)) == 1 and calls == [1]
        # a result that may not be kept (a timed-out run) is computed again next time
        assert await cache.get("t", lambda: compute(3), keep=lambda r: False) == 3
        assert await cache.get("t", lambda: compute(4)) == 4 and calls == [1, 3, 4]
        # at most max_entries: "a" was used least recently and goes
        await cache.get("b", lambda: compute(5))
        assert await cache.get("a", lambda: compute(6)) == 6

        async def boom():
            raise ValueError("broken")

        # a failure reaches every waiter and is not cached
        results = await asyncio.gather(
            *(cache.get("e", boom) for _ in range(2)), return_exceptions=True
        )
        assert all(isinstance(r, ValueError) for r in results)
        assert await cache.get("e", lambda: compute(7)) == 7
        return cache

    cache = asyncio.run(go())
    assert (cache.hits, cache.misses) == (3, 8)


def test_tree_digest_sees_paths_and_bytes_not_pycache(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    first = tree_digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert tree_digest(tmp_path) == first
    (tmp_path / "a.py").write_text("x = 2\n")
    assert tree_digest(tmp_path) != first
    (tmp_path / "a.py").rename(tmp_path / "b.py")
    (tmp_path / "b.py").write_text("x = 1\n")
    assert tree_digest(tmp_path) != first


def test_family_envs_share_test_runs_for_equal_files():
    """Episodes of one family that reach the same files share their pytest runs, and still get
    the grades (and run_tests output) a fresh run gives; different files run again."""

    async def go():
        task = calc_task()
        fam = CodeFamily()
        fix = ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})
        wrong = ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "b - a"})
        tests = ToolCall("run_tests", {})
        group = await asyncio.gather(
            *(play(task, [fix, tests], fam.make_env()) for _ in range(3)),
            play(task, [wrong, tests], fam.make_env()),
        )
        alone = await play(task, [fix, tests])  # an env outside the family: fresh runs
        return fam.run_cache, group, alone

    cache, group, alone = asyncio.run(go())
    # per distinct tree: run_tests, the hidden suite and the naive proxy = 3 runs; two trees
    assert (cache.misses, cache.hits) == (6, 6)
    for ep in group[:3]:
        assert ep.result.success and ep.result.info["tests"] == alone.result.info["tests"]
        assert ep.observations[1] == alone.observations[1]
    assert not group[3].result.success and "failed" in group[3].observations[1]
