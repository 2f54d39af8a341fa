"""Code-env tasks: mutation operators, the generator, the shipped task set, SWE-bench loading."""

from __future__ import annotations

import ast
import json
import random
from collections import Counter

import pytest

from turnrl.envs.code.mutations import MUTATION_KINDS, apply_mutants, mutants
from turnrl.envs.code.pytest_results import parse_junit, run_pytest
from turnrl.envs.code.swebench import PatchError, apply_patch, load_swebench_jsonl
from turnrl.envs.code.tasks import (
    CORPUS_DIR,
    PAYLOAD_KEYS,
    TIER_KINDS,
    generate_tasks,
    load_corpus,
    load_tasks,
    materialize,
    visible_test_file,
)
from turnrl.types import Task

# -- mutation operators -------------------------------------------------------------------

WORKED = {
    # kind: (source, mutated line must be one of these)
    "arith_op": ("def f(a, b):\n    return a + b  # sum\n", {"    return a - b  # sum"}),
    "compare_op": (
        "def f(a, b):\n    return a < b\n",
        {"    return a <= b", "    return a > b"},
    ),
    "bool_op": ("def f(a, b):\n    return a and b\n", {"    return a or b"}),
    "constant": ("def f(c):\n    return c * 9\n", {"    return c * 10", "    return c * 8"}),
    "off_by_one": (
        "def f(n):\n    return list(range(1, n + 1))\n",
        {
            "    return list(range(1, n))",
            "    return list(range(1, n + 2))",
            "    return list(range(0, n + 1))",
            "    return list(range(2, n + 1))",
        },
    ),
    "negate_condition": (
        "def f(x):\n    if x.ok:\n        return 1\n    return 2\n",
        {"    if not x.ok:"},
    ),
    "wrong_return": ("def f(a, b):\n    return a, b\n", {"    return b, a"}),
    "drop_statement": (
        "def f(xs):\n    xs.sort()\n    return xs\n",
        {None},
    ),
}


def test_at_least_six_kinds():
    assert len(MUTATION_KINDS) >= 6
    assert set(WORKED) == set(MUTATION_KINDS)


@pytest.mark.parametrize("kind", sorted(WORKED))
def test_each_kind_on_worked_example(kind):
    source, allowed = WORKED[kind]
    found = list(mutants(source, random.Random(0), kinds=[kind]))
    assert found, f"no {kind} mutant"
    m = found[0]
    assert m.kind == kind and m.function == "f"
    assert m.mutated_line in allowed
    assert m.original_line == source.splitlines()[m.line - 1]
    # Only that one line changed (or was deleted); the rest keeps its formatting.
    before, after = source.splitlines(), m.mutated_source.splitlines()
    expected = before[: m.line - 1] + ([m.mutated_line] if m.mutated_line is not None else [])
    assert after == expected + before[m.line :]
    ast.parse(m.mutated_source)


def test_off_by_one_in_subscript_and_negated_not():
    source = "def f(xs, i):\n    if not xs:\n        return None\n    return xs[i]\n"
    got = {(m.kind, m.mutated_line) for m in mutants(source, random.Random(1))}
    assert ("negate_condition", "    if xs:") in got
    assert any(
        k == "off_by_one" and line in ("    return xs[i + 1]", "    return xs[i - 1]")
        for k, line in got
    )


def test_drop_only_statement_leaves_pass():
    source = "def f(x):\n    if x:\n        raise ValueError(x)\n    return x\n"
    (m,) = mutants(source, random.Random(0), kinds=["drop_statement"])
    assert m.mutated_line == "        pass"


def test_docstrings_and_annotations_untouched():
    source = '"""Doc 1."""\n\n\ndef f(x: list[int]) -> int:\n    """Return 2."""\n    return x[0]\n'
    for m in mutants(source, random.Random(0)):
        assert m.line == 6, m


def test_mutants_deterministic_and_unique():
    source = (CORPUS_DIR / "dates.py").read_text()
    a = [m.mutated_source for m in mutants(source, random.Random(3))]
    b = [m.mutated_source for m in mutants(source, random.Random(3))]
    assert a == b and len(set(a)) == len(a) and len(a) > 20
    assert {m.kind for m in mutants(source, random.Random(3))} == set(MUTATION_KINDS)


def test_apply_mutants_combines_lines():
    source = "def f(a, b):\n    x = a + b\n    return x < 3\n"
    by_kind = {m.kind: m for m in mutants(source, random.Random(0))}
    combined = apply_mutants(source, [by_kind["arith_op"], by_kind["compare_op"]])
    lines = combined.splitlines()
    assert lines[1] == by_kind["arith_op"].mutated_line
    assert lines[2] == by_kind["compare_op"].mutated_line
    with pytest.raises(ValueError):
        apply_mutants("def g():\n    pass\n", [by_kind["arith_op"]])


def test_unknown_kind_rejected():
    with pytest.raises(ValueError, match="unknown mutation kinds"):
        list(mutants("x = 1\n", random.Random(0), kinds=["typo"]))


# -- pytest results -----------------------------------------------------------------------


def test_parse_junit_node_ids_and_outcomes():
    xml = """<?xml version="1.0"?><testsuites><testsuite>
      <testcase classname="test_a" name="test_ok" file="test_a.py" line="1" time="0"/>
      <testcase classname="test_a" name="test_bad" file="test_a.py" time="0"><failure message="x"/></testcase>
      <testcase classname="pkg.test_b.TestK" name="test_m[1-2]" file="pkg/test_b.py" time="0"><skipped/></testcase>
      <testcase classname="test_a" name="test_ok" file="test_a.py" time="0"><error message="teardown"/></testcase>
      <testcase classname="" name="test_c" file="test_c.py" time="0"><error message="collection failure"/></testcase>
    </testsuite></testsuites>"""
    assert parse_junit(xml) == {
        "test_a.py::test_ok": "error",
        "test_a.py::test_bad": "failed",
        "pkg/test_b.py::TestK::test_m[1-2]": "skipped",
        "test_c.py": "error",
    }


def test_run_pytest_reads_report_and_stops_endless_test(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import sys\n\n\ndef test_a():\n    assert True\n\n\n"
        "def test_b():\n    assert 1 == 2\n\n\ndef test_c():\n    while True:\n        pass\n\n\n"
        "def test_d():\n    pass\n"
    )
    assert run_pytest(tmp_path, per_test_timeout=0.5) == {
        "test_x.py::test_a": "passed",
        "test_x.py::test_b": "failed",
        "test_x.py::test_c": "failed",  # stopped by the per-test limit; test_d never ran
    }
    with pytest.raises(TimeoutError):
        run_pytest(tmp_path, timeout=1)


# -- generator ----------------------------------------------------------------------------

TOY_MODULE = '''"""Toy."""


def inc(x):
    return x + 1


def untested(x):
    return x * 3 - 2
'''
TOY_TESTS = """from toy import inc


def test_inc_zero():
    assert inc(0) == 1


def test_inc_negative():
    assert inc(-5) == -4


def test_is_int():
    assert isinstance(inc(2), int)


def test_big():
    assert inc(10**6) == 1000001
"""


@pytest.mark.slow  # ~5 s on an idle machine, 15-20 s on busy cores
def test_generator_keeps_only_failing_mutants(tmp_path):
    (tmp_path / "toy.py").write_text(TOY_MODULE)
    (tmp_path / "test_toy.py").write_text(TOY_TESTS)
    tasks = generate_tasks(
        seed=0, n_per_module=3, tiers=(1,), corpus_dir=tmp_path, visible_fraction=0.25
    )
    assert tasks, "no task kept"
    # Every mutant of `untested` leaves the suite green, so none may survive.
    for task in tasks:
        p = task.payload
        assert [m["function"] for m in p["mutations"]] == ["inc"]
        assert p["fail_to_pass"] and set(p["fail_to_pass"]).isdisjoint(p["pass_to_pass"])
        assert sorted(p["fail_to_pass"] + p["pass_to_pass"]) == sorted(
            f"test_toy.py::{n}"
            for n in ("test_inc_zero", "test_inc_negative", "test_is_int", "test_big")
        )
        visible = _test_names(p["visible_tests"]["test_toy.py"])
        assert len(visible) == 1 and f"test_toy.py::{visible[0]}" in p["fail_to_pass"]
        assert p["gold_patch"] == {"toy.py": TOY_MODULE} and p["repo"]["toy.py"] != TOY_MODULE
    assert len({t.id for t in tasks}) == len(tasks)


def test_generator_validates_arguments(tmp_path):
    with pytest.raises(ValueError):
        generate_tasks(0, 1, visible_fraction=1.5, corpus_dir=tmp_path)
    with pytest.raises(ValueError):
        generate_tasks(0, 1, tiers=(4,), corpus_dir=tmp_path)
    with pytest.raises(ValueError, match="generated"):
        generate_tasks(0, 1, tiers=(0,), corpus_dir=tmp_path)


def test_visible_test_file_removes_functions():
    source = "import pytest\n\n\ndef helper():\n    return 1\n\n\n@pytest.mark.slow\ndef test_a():\n    assert helper()\n\n\ndef test_b():\n    pass\n"
    out = visible_test_file(source, {"test_b"})
    assert _test_names(out) == ["test_b"] and "def helper" in out and "mark.slow" not in out
    assert "\n\n\n\n" not in out


# -- corpus and shipped tasks ---------------------------------------------------------------

CORPUS = load_corpus()
TRAIN, TEST = load_tasks("train"), load_tasks("test")
ALL = TRAIN + TEST


def _test_names(source: str) -> list[str]:
    return [
        n.name
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]


def test_corpus_size_and_suites():
    assert len(CORPUS) >= 30
    for module in CORPUS:
        lines = len(module.source.splitlines())
        assert 15 <= lines <= 60, (module.name, lines)
        assert 6 <= len(_test_names(module.tests)) <= 15, module.name


def test_shipped_task_counts():
    tiers = Counter((t.split, t.payload["tier"]) for t in ALL)
    assert tiers["train", 1] >= 150 and tiers["test", 1] >= 40
    assert all(tiers[split, tier] > 0 for split in ("train", "test") for tier in (1, 2, 3))
    kinds = {m["kind"] for t in ALL for m in t.payload["mutations"]}
    assert kinds == set(MUTATION_KINDS)


def test_shipped_tasks_structure():
    corpus = {m.name: m for m in CORPUS}
    assert len({t.id for t in ALL}) == len(ALL)
    train_modules = {t.payload["module"] for t in TRAIN}
    test_modules = {t.payload["module"] for t in TEST}
    assert train_modules.isdisjoint(test_modules) and test_modules
    for task in ALL:
        p = task.payload
        assert task.env == "code" and set(PAYLOAD_KEYS) <= set(p), task.id
        module = corpus[p["module"]]
        assert p["gold_patch"] == {module.path: module.source}, f"{task.id} is stale"
        assert p["hidden_tests"] == {module.test_path: module.tests}
        assert set(p["repo"]) == {module.path} and p["repo"][module.path] != module.source
        assert set(p["visible_tests"]) == set(p["hidden_tests"])
        hidden = {f"{module.test_path}::{n}" for n in _test_names(module.tests)}
        visible = {
            f"{module.test_path}::{n}" for n in _test_names(p["visible_tests"][module.test_path])
        }
        assert visible <= hidden and visible & set(p["fail_to_pass"]), task.id
        assert set(p["fail_to_pass"]) | set(p["pass_to_pass"]) == hidden
        assert p["fail_to_pass"] and not set(p["fail_to_pass"]) & set(p["pass_to_pass"])
        muts = p["mutations"]
        buggy_lines = p["repo"][module.path].splitlines()
        for m in muts:
            assert module.source.splitlines()[m["line"] - 1] == m["original_line"]
            assert m["mutated_line"] is None or m["mutated_line"] in buggy_lines
        if p["tier"] in (1, 2):
            assert len(muts) == 1 and muts[0]["kind"] in TIER_KINDS[p["tier"]], task.id
        else:
            assert len(muts) >= 2 and len({m["function"] for m in muts}) == len(muts), task.id
        if p["tier"] == 1:
            assert len(module.source.splitlines()) <= 40


def _sample(n: int) -> list[Task]:
    """A deterministic sample over tiers and splits, one task per module (so the suites can
    share one pytest run: every module and test file name is then unique)."""
    rng = random.Random(0)
    by_module: dict[str, list[Task]] = {}
    for t in ALL:
        by_module.setdefault(t.payload["module"], []).append(t)
    picked = []
    for i, module in enumerate(sorted(by_module)):
        tier = i % 3 + 1
        options = [t for t in by_module[module] if t.payload["tier"] == tier] or by_module[module]
        picked.append(rng.choice(options))
    return picked[:n]


@pytest.mark.slow  # ~5 s on an idle machine, 15-20 s on busy cores
def test_sampled_tasks_fail_before_and_pass_after_gold_fix(tmp_path):
    sample = _sample(40)
    assert {t.split for t in sample} == {"train", "test"}
    assert {t.payload["tier"] for t in sample} == {1, 2, 3}
    for fixed in (False, True):
        root = tmp_path / ("gold" if fixed else "buggy")
        for i, task in enumerate(sample):
            materialize(task, root / f"t{i}", hidden=True)
            if fixed:
                for rel, content in task.payload["gold_patch"].items():
                    (root / f"t{i}" / rel).write_text(content)
        outcomes = run_pytest(root, timeout=300)
        for i, task in enumerate(sample):
            p = task.payload
            if fixed:
                for test_id in p["fail_to_pass"] + p["pass_to_pass"]:
                    assert outcomes.get(f"t{i}/{test_id}") == "passed", (task.id, test_id)
            else:
                for test_id in p["fail_to_pass"]:
                    assert outcomes.get(f"t{i}/{test_id}") in ("failed", "error"), (
                        task.id,
                        test_id,
                    )
                for test_id in p["pass_to_pass"]:
                    assert outcomes.get(f"t{i}/{test_id}") == "passed", (task.id, test_id)


def test_materialize_visible_and_hidden(tmp_path):
    task = TRAIN[0]
    materialize(task, tmp_path / "agent", hidden=False)
    materialize(task, tmp_path / "grader", hidden=True)
    (path,) = task.payload["visible_tests"]
    assert (tmp_path / "agent" / path).read_text() == task.payload["visible_tests"][path]
    assert (tmp_path / "grader" / path).read_text() == task.payload["hidden_tests"][path]
    for rel, content in task.payload["repo"].items():
        assert (tmp_path / "agent" / rel).read_text() == content


def test_load_tasks_rejects_unknown_split():
    with pytest.raises(ValueError, match="split"):
        load_tasks("validation")


# -- SWE-bench-shaped instances ---------------------------------------------------------------

BASE_CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
BASE_TEST = "from calc.ops import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
GOLD = """diff --git a/calc/ops.py b/calc/ops.py
index 1111111..2222222 100644
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b
 
 
 def mul(a, b):
"""
TEST_PATCH = """diff --git a/tests/test_ops.py b/tests/test_ops.py
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -1,4 +1,4 @@
-from calc.ops import mul
+from calc.ops import add, mul
 
 
 def test_mul():
@@ -5,0 +6,4 @@ def test_mul():
+
+
+def test_add():
+    assert add(2, 3) == 5
"""


def test_apply_patch_edits_creates_and_deletes():
    files = {"a.txt": "one\ntwo\nthree\n", "gone.txt": "x\n"}
    diff = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n\\ No newline at end of file\n"
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    assert apply_patch(files, diff) == {"a.txt": "one\ntwo\nTHREE", "new.txt": "hello\n"}


def test_apply_patch_with_offset_and_failure():
    files = {"f.py": "# header\n# more\nx = 1\ny = 2\n"}
    diff = "--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
    assert apply_patch(files, diff)["f.py"] == "# header\n# more\nx = 1\ny = 3\n"
    bad = "--- a/f.py\n+++ b/f.py\n@@ -1,1 +1,1 @@\n-z = 9\n+z = 0\n"
    with pytest.raises(PatchError):
        apply_patch(files, bad)


def test_load_swebench_jsonl(tmp_path):
    repo = tmp_path / "repos" / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(BASE_CALC)
    (repo / "tests" / "test_ops.py").write_text(BASE_TEST)
    instance = {
        "instance_id": "calc__calc-1",
        "repo_path": "repos/calc",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]),
        "PASS_TO_PASS": ["tests/test_ops.py::test_mul"],
    }
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    (task,) = load_swebench_jsonl(tmp_path / "instances.jsonl")
    p = task.payload
    assert task.id == "calc__calc-1" and task.split == "test" and set(PAYLOAD_KEYS) <= set(p)
    assert p["repo"] == {"calc/__init__.py": "", "calc/ops.py": BASE_CALC}
    assert p["visible_tests"] == {"tests/test_ops.py": BASE_TEST}
    assert "def test_add" in p["hidden_tests"]["tests/test_ops.py"]
    assert p["gold_patch"] == {"calc/ops.py": BASE_CALC.replace("a - b", "a + b")}
    assert p["fail_to_pass"] == ["tests/test_ops.py::test_add"]

    materialize(task, tmp_path / "before", hidden=True)
    before = run_pytest(tmp_path / "before")
    assert before == {
        "tests/test_ops.py::test_add": "failed",
        "tests/test_ops.py::test_mul": "passed",
    }
    materialize(task, tmp_path / "after", hidden=True)
    for rel, content in p["gold_patch"].items():
        (tmp_path / "after" / rel).write_text(content)
    after = run_pytest(tmp_path / "after")
    assert all(after[t] == "passed" for t in p["fail_to_pass"] + p["pass_to_pass"])
