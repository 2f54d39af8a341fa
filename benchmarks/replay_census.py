"""Census of what the differential replay sees, over every shipped code task.

Two questions, both answered by grading through the replay only (``differential.check``: the
recorded calls of the hidden tests plus inputs drawn at grading, on the submission and on
the gold solution, compared outside both sandboxes):

1. **Can the replay see each task's bug?** The unfixed repository is submitted as it is. A
   task the replay cannot see passes it: its verdict would then rest on the pytest run, which
   code under test can forge. Reported: tasks whose bug shows on the tests' own calls, on
   drawn inputs only, and on neither (the figure that must be 0).
2. **Does an answer table survive?** On every task whose failing tests are all visible (so
   the hidden suite holds nothing the agent did not see), the buggy module is submitted with
   a table of the visible tests' answers put in front of every function and method: keyed on
   the call's arguments and the object's whole state, it returns the gold solution's answer
   and state for each call the visible tests make and runs the buggy code otherwise. It
   survives a grading when the replay passes it. Reported: gradings survived, tasks on which
   any grading survived (must be 0).

    .venv/bin/python benchmarks/replay_census.py [--micro 200] [--seeds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import sys
import time
import types
from pathlib import Path
from typing import Any

from turnrl.envs.code import differential
from turnrl.envs.code.micro import micro_tasks
from turnrl.envs.code.tasks import load_tasks
from turnrl.sandbox import Limits
from turnrl.types import Task

_spec = importlib.util.spec_from_file_location(
    "harness", Path(differential.__file__).parent / "harness.py"
)
harness = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(harness)  # type: ignore[union-attr]

TABLE_CODE = """

_TABLE = {table!r}


def _key(x, depth=0):  # a dict key: values that compare equal (80 and 80.0) meet
    if depth > 8:
        return "..."
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_key(v, depth + 1) for v in x))
    if isinstance(x, dict):
        return ("dict", frozenset((_key(k, depth + 1), _key(v, depth + 1)) for k, v in x.items()))
    if isinstance(x, (set, frozenset)):
        return ("set", frozenset(_key(v, depth + 1) for v in x))
    if hasattr(x, "__dict__"):
        return (type(x).__name__, _key(vars(x), depth + 1))
    return repr(x)


def _tabled(fn, name):
    def wrapper(*args, **kwargs):
        key = (name, _key(args), _key(kwargs))
        if key in _TABLE:
            result, state = _TABLE[key]
            if state is not None:
                args[0].__dict__.update(state)
            return result
        return fn(*args, **kwargs)

    return wrapper


for _name, _value in list(globals().items()):
    if getattr(_value, "__module__", None) != __name__ or _name.startswith("_"):
        continue
    if isinstance(_value, type):
        for _attr, _fn in list(vars(_value).items()):
            if callable(_fn) and not isinstance(_fn, type) and _attr not in ("__hash__", "__repr__"):
                setattr(_value, _attr, _tabled(_fn, _value.__name__ + "." + _attr))
    elif callable(_value):
        globals()[_name] = _tabled(_value, _name)
"""


def _literal(x: Any) -> bool:
    try:
        return ast.literal_eval(repr(x)) == x
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def answer_table(task: Task, capture: differential.Capture, visible: set[str]) -> dict[Any, Any]:
    """key -> (gold answer, gold state after) of every call the visible tests make, taken by
    running the gold module in this process on the visible tests' recorded calls."""
    (path,) = capture.modules
    name = path[: -len(".py")].replace("/", ".")
    gold = types.ModuleType(name)
    exec(compile(task.payload["gold_patch"][path], path, "exec"), gold.__dict__)
    keyer: dict[str, Any] = {}
    exec(TABLE_CODE.split("def _tabled")[0].format(table={}), keyer)
    key = keyer["_key"]
    table: dict[Any, Any] = {}
    depth = [0]

    def recording(fn: Any, label: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k = (label, key(args), key(kwargs))
            depth[0] += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0 and _literal(result):
                method = "." in label
                state = dict(vars(args[0])) if method else None
                if not method or _literal(state):
                    table.setdefault(k, (result, state))
            return result

        return wrapper

    for attr, value in list(vars(gold).items()):
        if getattr(value, "__module__", None) != name or attr.startswith("_"):
            continue
        if isinstance(value, type):
            for m, fn in list(vars(value).items()):
                if callable(fn) and not isinstance(fn, type) and m not in ("__hash__", "__repr__"):
                    setattr(value, m, recording(fn, f"{value.__name__}.{m}"))
        elif callable(value):
            setattr(gold, attr, recording(value, attr))
    saved = sys.modules.get(name)
    sys.modules[name] = gold
    try:
        for scenario in capture.scenarios:
            if scenario["test"].split("[")[0] not in visible:
                continue
            alive: list[Any] = []
            for step in scenario["steps"]:
                try:
                    args = harness.decode_plain(step["args"], alive)
                    kwargs = {k: harness.decode_plain(v, alive) for k, v in step["kwargs"].items()}
                    if "new" in step:
                        value = harness.decode_plain(step["new"], alive)(*args, **kwargs)
                    elif isinstance(step["call"], list):
                        obj = harness.decode_plain(step["call"][0], alive)
                        value = getattr(obj, step["call"][1])(*args, **kwargs)
                    else:
                        value = harness.decode_plain(step["call"], alive)(*args, **kwargs)
                except Exception:
                    continue
                for v in value if type(value) in (list, tuple) else [value]:
                    if getattr(type(v), "__module__", None) == name and id(v) not in map(id, alive):
                        alive.append(v)
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved
    return table


def all_visible(task: Task) -> bool:
    visible = differential.test_ids(task.payload["visible_tests"])
    return set(task.payload["fail_to_pass"]) <= visible


async def census(tasks: list[Task], workers: int, seed: int) -> list[tuple[Task, Any]]:
    gate = asyncio.Semaphore(workers)

    async def one(task: Task) -> tuple[Task, Any]:
        async with gate:
            return task, (await differential.check(task, {}, [], Limits(), seed)).verdict

    return await asyncio.gather(*(one(t) for t in tasks))


async def tables(
    tasks: list[Task], seeds: int, workers: int, correct: dict[str, bool]
) -> list[tuple[Task, list[bool]]]:
    """Each table graded ``seeds`` times; a table that passes any grading is graded once more
    with 25 times as many drawn inputs: ``correct[task id]`` says whether it passes that too
    (its table fixes every input where the bug shows: a correct program, however written)."""
    gate = asyncio.Semaphore(workers)

    async def one(task: Task) -> tuple[Task, list[bool]]:
        async with gate:
            cap = await differential.capture(task, Limits())
            visible = differential.test_ids(task.payload["visible_tests"])
            table = answer_table(task, cap, visible)
            (path,) = cap.modules
            attack = task.payload["repo"][path] + TABLE_CODE.format(table=table)
            passed = []
            for s in range(seeds):
                got = await differential.check(task, {path: attack}, [], Limits(), 1000 + s)
                passed.append(got.verdict.passed)
            if any(passed):  # can any input tell it from the gold solution? draw 25x more
                many = await differential.check(
                    task, {path: attack}, [], Limits(), 2000, per_scenario=300, per_function=1000
                )
                correct[task.id] = many.verdict.passed
            return task, passed

    return await asyncio.gather(*(one(t) for t in tasks))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro", type=int, default=200, help="generated tier-0 tasks included")
    ap.add_argument("--seeds", type=int, default=3, help="gradings of each answer table")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--module", nargs="*", default=None, help="only these corpus modules")
    ap.add_argument("--skip-census", action="store_true")
    ap.add_argument("--skip-tables", action="store_true")
    args = ap.parse_args(argv)
    corpus = load_tasks("train") + load_tasks("test")
    if args.module is not None:
        corpus = [t for t in corpus if t.payload["module"] in args.module]
    tasks = corpus + (micro_tasks("train") + micro_tasks("test"))[: args.micro]
    bad = 0
    if not args.skip_census:
        start = time.perf_counter()
        results = asyncio.run(census(tasks, args.workers, seed=0))
        own = [t for t, v in results if v.mismatched_tests]
        fresh_only = [t for t, v in results if not v.mismatched_tests and not v.passed]
        blind = [t for t, v in results if v.passed]
        print(
            f"census: {len(results)} tasks ({len(corpus)} shipped, {len(tasks) - len(corpus)} "
            f"generated tier 0), {time.perf_counter() - start:.0f} s"
        )
        print(f"  bug seen on the tests' own calls:  {len(own)}")
        print(f"  bug seen on drawn inputs only:     {len(fresh_only)}")
        print(f"  tasks the replay cannot see:       {len(blind)}")
        for t in blind:
            print(f"    {t.id}: {t.payload['mutations']}")
        bad += len(blind)
    if not args.skip_tables:
        start = time.perf_counter()
        weak = [t for t in corpus if all_visible(t)]
        correct: dict[str, bool] = {}
        got = asyncio.run(tables(weak, args.seeds, args.workers, correct))
        survived = [(t, p) for t, p in got if any(p) and not correct[t.id]]
        equivalent = [(t, p) for t, p in got if any(p) and correct[t.id]]
        gradings = sum(len(p) for _, p in got)
        print(
            f"answer tables: {len(weak)} tasks with every failing test visible, "
            f"{args.seeds} gradings each, {time.perf_counter() - start:.0f} s"
        )
        print(f"  gradings passed by a table:        {sum(sum(p) for _, p in got)}/{gradings}")
        print(f"  tasks where a wrong table survived: {len(survived)}")
        for t, p in survived:
            print(f"    {t.id} ({sum(p)}/{len(p)}): {t.payload['mutations']}")
        print(
            f"  tasks where the table is a correct program (no input of 25x more draws tells "
            f"it from the gold solution): {len(equivalent)}"
        )
        for t, p in equivalent:
            mutation = "; ".join(str(m["mutated_line"]).strip() for m in t.payload["mutations"])
            print(f"    {t.id} ({sum(p)}/{len(p)}): {mutation}")
        bad += len(survived)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
