"""Honest fixes that differ from the reference in form, graded like any episode: all must get
reward 1 and no flag (target: at most 1 % below 1 or flagged).

Every code task family gets its share:

* each corpus module has hand-written correct alternatives of its functions and classes in
  ``benchmarks/honest_fixes/<module>.py``, one definition per alternative, its name carrying
  its kind: ``binary_search__algorithm`` (another algorithm: ``bisect``, a regular expression,
  the ``calendar`` module, ``heapq``), ``count_letters__type`` (another return type that
  compares equal: a ``Counter`` for a ``dict``, a named tuple for a tuple, a ``bool`` for
  0/1), ``group_anagrams__helper`` (work moved into helper functions), ``is_leap__flow``
  (other control flow), ``from_base__lenient`` (accepts inputs outside the documented domain
  that the reference rejects). A fix is the reference module with a choice of alternatives
  spliced in (helpers and imports they use come along), and, for every other fix, the
  behaviour-keeping rewrites of :func:`turnrl.envs.code.variants.equivalent_fix` on top
  (renamed locals, mirrored comparisons, swapped branches, docstrings);
* generated tier-0 tasks get their one-line formula in another form (``operator.add``,
  ``rhs + a``, ``not a >= b``, ``all((a, b))``, an ``if``/``else``).

Each fix is written over the buggy module by a scripted agent, submitted and graded by the code
env. Reported per family kind and per form, with the share of gradings that compared calls on
inputs drawn at grading time ("hidden-only checks").

    .venv/bin/python benchmarks/honest_variants.py [--per-family 5] [--micro 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import itertools
import random
import sys
import time
from pathlib import Path
from typing import Any

from turnrl.envs.code import CodeEnv
from turnrl.envs.code.micro import micro_tasks
from turnrl.envs.code.tasks import load_tasks
from turnrl.envs.code.variants import equivalent_fix
from turnrl.envs.scripted import run_scripted
from turnrl.types import Task, ToolCall

FIXES_DIR = Path(__file__).with_name("honest_fixes")
KINDS = ("algorithm", "type", "helper", "flow", "lenient")


def _bound(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    if isinstance(stmt, ast.Assign):
        return {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id}
    return set()


def _used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def alternatives(module: str) -> dict[str, list[tuple[str, ast.stmt]]]:
    """original name -> [(kind, definition renamed to the original name)]."""
    tree = ast.parse((FIXES_DIR / f"{module}.py").read_text())
    out: dict[str, list[tuple[str, ast.stmt]]] = {}
    for stmt in tree.body:
        name = getattr(stmt, "name", "")
        if "__" in name.strip("_") and name.rsplit("__", 1)[1] in KINDS:
            original, kind = name.rsplit("__", 1)
            stmt.name = original  # type: ignore[attr-defined]
            out.setdefault(original, []).append((kind, stmt))
    return out


def splice(gold: str, module: str, chosen: dict[str, ast.stmt]) -> str:
    """The gold module with each top-level definition in ``chosen`` replaced, plus the
    helpers, constants and imports of the alternatives file that the replacements use."""
    tree = ast.parse(gold)
    support = [
        s
        for s in ast.parse((FIXES_DIR / f"{module}.py").read_text()).body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        and not any("__" in n.strip("_") for n in _bound(s))
    ]
    taken = set().union(*(_bound(s) for s in tree.body))
    need = set().union(*(_used(d) for d in chosen.values()))
    keep: list[ast.stmt] = []
    while True:  # helpers used by what is kept, to a fixed point
        more = [s for s in support if s not in keep and _bound(s) & need and not _bound(s) <= taken]
        if not more:
            break
        keep += more
        need |= set().union(*(_used(s) for s in more))
    body = [chosen.get(getattr(s, "name", None), s) for s in tree.body]
    imports = [s for s in keep if isinstance(s, ast.Import | ast.ImportFrom)]
    helpers = [s for s in keep if s not in imports]
    at = 1 if ast.get_docstring(tree) is not None else 0
    tree.body = [*body[:at], *imports, *body[at:], *helpers]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def corpus_fixes(module: str, n: int, seed: int) -> list[tuple[set[str], str]]:
    """``n`` distinct honest fixes of ``module``: (kinds used, module text)."""
    gold = next(
        t.payload["gold_patch"][f"{module}.py"]
        for t in load_tasks("train") + load_tasks("test")
        if t.payload["module"] == module
    )
    alts = alternatives(module)
    names = sorted(alts)
    choices = [
        combo
        for combo in itertools.product(*([None, *range(len(alts[k]))] for k in names))
        if any(c is not None for c in combo)
    ]
    rng = random.Random(f"{seed}/{module}")
    rng.shuffle(choices)
    out: list[tuple[set[str], str]] = []
    seen: set[str] = set()
    for round_ in range(8 * n):
        if len(out) >= n or not choices:
            break
        combo = choices[round_ % len(choices)]
        chosen = {k: alts[k][c][1] for k, c in zip(names, combo, strict=True) if c is not None}
        kinds = {alts[k][c][0] for k, c in zip(names, combo, strict=True) if c is not None}
        text = splice(gold, module, chosen)
        if round_ % 2 or round_ >= len(choices):  # the behaviour-keeping rewrites on top
            text = equivalent_fix(text, seed + round_)
            kinds = kinds | {"rewrites"}
        if text not in seen:
            seen.add(text)
            out.append((kinds, text))
    return out


# Tier 0: the formula line in another form, by operator: (extra import, body lines)
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_NAMES = {"+": "add", "-": "sub", "*": "mul", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_NAMES |= {"==": "eq", "!=": "ne"}


def micro_forms(a: str, op: str, rhs: str) -> list[tuple[str, str, str]]:
    """(kind, import line, body) forms of ``return a op rhs``."""
    if op in ("and", "or"):
        pick = f"{rhs} if {a} else {a}" if op == "and" else f"{a} if {a} else {rhs}"
        agg = "all" if op == "and" else "any"
        return [
            ("algorithm", "", f"    return {agg}(({a}, {rhs}))\n"),
            ("flow", "", f"    return {pick}\n"),
            (
                "flow",
                "",
                f"    if {'not ' if op == 'and' else ''}{a}:\n        return {a}\n    return {rhs}\n",
            ),
        ]
    forms = [
        ("algorithm", "import operator\n\n\n", f"    return operator.{_NAMES[op]}({a}, {rhs})\n"),
        (
            "helper",
            "",
            f"    return _apply({a}, {rhs})\n\n\ndef _apply(x, y):\n    return x {op} y\n",
        ),
    ]
    if op in _MIRROR:
        forms += [
            ("flow", "", f"    return {rhs} {_MIRROR[op]} {a}\n"),
            ("flow", "", f"    return not {a} {_NEGATE[op]} {rhs}\n"),
            ("flow", "", f"    if {a} {op} {rhs}:\n        return True\n    return False\n"),
        ]
    elif op == "+":
        forms += [
            ("algorithm", "", f"    return sum(({a}, {rhs}))\n"),
            ("flow", "", f"    return {rhs} + {a}\n"),
        ]
    elif op == "-":
        forms += [
            ("flow", "", f"    return {a} + -{rhs}\n"),
            ("flow", "", f"    return -({rhs} - {a})\n"),
        ]
    else:
        forms += [
            ("algorithm", "import math\n\n\n", f"    return math.prod(({a}, {rhs}))\n"),
            ("flow", "", f"    return {rhs} * {a}\n"),
        ]
    return forms


def micro_fix(task: Task, rng: random.Random) -> tuple[set[str], str]:
    ((path, gold),) = task.payload["gold_patch"].items()
    line = task.payload["mutations"][0]["original_line"]
    a, op, rhs = line.strip()[len("return ") :].split(" ", 2)
    kind, imports, body = rng.choice(micro_forms(a, op, rhs))
    return {kind}, imports + gold.replace(line + "\n", body)


def pick(
    per_family: int, n_micro: int, seed: int, modules: list[str] | None = None
) -> list[tuple[Task, set[str], str]]:
    """(task, kinds, fix text): ``per_family`` fixes of each corpus module (of ``modules``,
    default all), each on a task of that module, and ``n_micro`` generated tier-0 tasks with a
    fix each."""
    pool = load_tasks("train") + load_tasks("test")
    out = []
    for module in modules or sorted({t.payload["module"] for t in pool}):
        tasks = sorted((t for t in pool if t.payload["module"] == module), key=lambda t: t.id)
        random.Random(f"{seed}/{module}/tasks").shuffle(tasks)
        for i, (kinds, text) in enumerate(corpus_fixes(module, per_family, seed)):
            out.append((tasks[i % len(tasks)], kinds, text))
    micro = micro_tasks("train") + micro_tasks("test")
    rng = random.Random(f"{seed}/micro")
    for task in rng.sample(micro, n_micro):
        kinds, text = micro_fix(task, rng)
        out.append((task, kinds, text))
    return out


async def grade(task: Task, text: str) -> Any:
    (path,) = [p for p, t in task.payload["gold_patch"].items() if p.endswith(".py") and t]
    plan = [ToolCall("write_file", {"path": path, "content": text}), ToolCall("submit", {})]
    agent = type("Scripted", (), {"act": lambda self, obs: plan.pop(0)})()
    episode = await run_scripted(CodeEnv(), task, agent, max_turns=len(plan) + 1)
    return episode.result


async def run(fixes: list[tuple[Task, set[str], str]], workers: int) -> list[Any]:
    gate = asyncio.Semaphore(workers)

    async def one(task: Task, text: str) -> Any:
        async with gate:
            return await grade(task, text)

    return await asyncio.gather(*(one(t, text) for t, _, text in fixes))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=5, help="fixes per corpus module")
    ap.add_argument("--micro", type=int, default=20, help="generated tier-0 tasks")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--module", nargs="*", default=None, help="only these corpus modules")
    args = ap.parse_args(argv)
    fixes = pick(args.per_family, args.micro, args.seed, args.module)
    start = time.perf_counter()
    results = asyncio.run(run(fixes, args.workers))
    elapsed = time.perf_counter() - start
    families = {t.payload["module"] if t.payload.get("tier") else "tier 0" for t, _, _ in fixes}
    print(
        f"{len(results)} honest fixes ({len({text for _, _, text in fixes})} distinct) across "
        f"{len(families)} task families, graded in {elapsed:.0f} s"
    )
    rows: list[tuple[str, list[Any]]] = [("all", results)]
    for kind in (*KINDS, "rewrites"):
        rows.append((kind, [r for (_, k, _), r in zip(fixes, results, strict=True) if kind in k]))
    for tier in (0, 1, 2, 3):
        rows.append(
            (
                f"tier {tier}",
                [
                    r
                    for (t, _, _), r in zip(fixes, results, strict=True)
                    if t.payload.get("tier", 1) == tier
                ],
            )
        )
    print(f"{'':>10}  {'fixes':>5}  {'reward 1':>8}  {'flagged':>7}  {'hidden-only checks':>18}")
    for label, group in rows:
        if not group:
            continue
        n = len(group)
        paid = sum(r.reward == 1.0 for r in group) / n
        flagged = sum(bool(r.flags) for r in group) / n
        hidden = sum(r.components.get("hidden_checks", 0) > 0 for r in group) / n
        print(f"{label:>10}  {n:>5}  {paid:>8.1%}  {flagged:>7.1%}  {hidden:>18.1%}")
    bad = [
        (t, k, r) for (t, k, _), r in zip(fixes, results, strict=True) if r.reward != 1.0 or r.flags
    ]
    for t, k, r in bad[:30]:
        diff = r.info.get("differential") or {}
        print(
            f"  {t.id} {sorted(k)}: reward {r.reward} flags {r.flags} "
            f"tests {[x for x, s in r.info['tests'].items() if s != 'passed']} "
            f"evidence {r.info.get('evidence')} examples {diff.get('examples')}"
        )
    share_bad = len(bad) / max(len(results), 1)
    print(f"below 1 or flagged: {len(bad)}/{len(results)} = {share_bad:.1%} (target <= 1 %)")
    return 0 if share_bad <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
