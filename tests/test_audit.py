"""The mutation audit on a task whose mutants are known, and the weak-tests code variant."""

from __future__ import annotations

import asyncio
import io
import json
import random

import pytest

from turnrl.envs.code.mutations import MUTATION_KINDS, mutants
from turnrl.envs.code.tasks import TIER_KINDS, visible_test_file
from turnrl.envs.code.weak import (
    WeakTestsCodeFamily,
    bug_catch_share,
    choose_training_tests,
    weak_grade,
)
from turnrl.envs.scripted import run_scripted
from turnrl.rewards.audit import (
    AuditReport,
    TaskAudit,
    audit_tasks,
    derived_ids,
    parse_kinds,
    predicted_gap,
    print_report,
)
from turnrl.types import RewardResult, Task, Trajectory

SOURCE = "def double(x):\n    return x * 2\n\n\ndef inc(x):\n    return x + 1\n"
TESTS = (
    "from calc import double, inc\n\n\n"
    "def test_double():\n    assert double(3) == 6\n\n\n"
    "def test_inc():\n    assert inc(3) == 4\n"
)


def calc_task(task_id: str, visible: str) -> Task:
    buggy = SOURCE.replace("x + 1", "x - 1")
    return Task(
        id=task_id,
        env="code",
        payload={
            "repo": {"calc.py": buggy},
            "visible_tests": {"test_calc.py": visible},
            "hidden_tests": {"test_calc.py": TESTS},
            "gold_patch": {"calc.py": SOURCE},
            "fail_to_pass": ["test_calc.py::test_inc"],
            "pass_to_pass": ["test_calc.py::test_double"],
            "module": "calc",
        },
    )


def test_predicted_gap_formula():
    p, c = 0.3, 0.6
    assert predicted_gap(p, c) == pytest.approx((p + (1 - p) * (1 - c)) - p)
    assert predicted_gap(1.0, 0.0) == 0.0 and predicted_gap(0.0, 1.0) == 0.0
    assert predicted_gap(0.0, 0.0) == 1.0


def test_audit_catch_rates_on_known_mutants():
    # Every mutant of this module lands in `double` or `inc`, and each test catches exactly
    # the mutants of its own function, so the catch rates follow from the mutant list.
    all_mutants = list(mutants(SOURCE, random.Random(0)))
    in_double = sum(m.function == "double" for m in all_mutants)
    assert 0 < in_double < len(all_mutants)
    tasks = [
        calc_task("only-double", visible_test_file(TESTS, {"test_double"})),
        calc_task("both", TESTS),
        # not a verbatim subset of the hidden file: audited by its own runs
        calc_task(
            "rewritten", "from calc import double\n\ndef test_d():\n    assert double(5) == 10\n"
        ),
    ]
    assert derived_ids(tasks[0].payload["visible_tests"], tasks[0].payload["hidden_tests"]) == {
        "test_calc.py::test_double"
    }
    assert derived_ids(tasks[2].payload["visible_tests"], tasks[2].payload["hidden_tests"]) is None
    report = audit_tasks(tasks, max_mutants_per_task=50, p_values=(0.2, 0.5))
    only, both, rewritten = report.tasks
    n = len(all_mutants)
    for t in report.tasks:
        assert t.error is None and t.mutants == n and t.caught_hidden == n and t.c_hidden == 1.0
    assert only.caught_visible == in_double and only.c == pytest.approx(in_double / n)
    assert both.c == 1.0
    assert rewritten.caught_visible == in_double
    assert report.c == pytest.approx((2 * in_double + n) / (3 * n))
    assert report.predicted_gap(0.2) == pytest.approx(0.8 * (1 - report.c))

    data = report.to_json()
    assert data["overall"]["mutants"] == 3 * n
    assert data["tasks"][0]["predicted_gap"]["0.5"] == pytest.approx(0.5 * (1 - in_double / n))
    json.dumps(data)  # serialisable
    from rich.console import Console

    out = io.StringIO()
    print_report(report, Console(file=out, width=200))
    assert "only-double" in out.getvalue() and "overall" in out.getvalue()


def test_audit_mutates_with_each_tasks_tier_kinds():
    # The env draws a tier's bugs from its mutation kinds, so the audit does too by default;
    # tasks of one module but different tiers get different mutants.
    all_mutants = list(mutants(SOURCE, random.Random(0)))
    tier1 = [m for m in all_mutants if m.kind in TIER_KINDS[1]]
    tier2 = [m for m in all_mutants if m.kind in TIER_KINDS[2]]
    assert tier1 and tier2 and len(tier1) + len(tier2) == len(all_mutants)
    one, two = calc_task("t1", TESTS), calc_task("t2", TESTS)
    one.payload["tier"], two.payload["tier"] = 1, 2
    report = audit_tasks([one, two], max_mutants_per_task=50)
    a, b = report.tasks
    assert a.mutants == len(tier1) and a.kinds == TIER_KINDS[1]
    assert b.mutants == len(tier2) and b.kinds == TIER_KINDS[2]
    assert report.to_json()["overall"]["kinds"] == "tier"
    every = audit_tasks([one], max_mutants_per_task=50, kinds=MUTATION_KINDS)
    assert every.tasks[0].mutants == len(all_mutants)
    assert every.to_json()["overall"]["kinds"] == list(MUTATION_KINDS)

    assert parse_kinds("tier") is None and parse_kinds("all") == MUTATION_KINDS
    assert parse_kinds("arith_op, constant") == ("arith_op", "constant")
    with pytest.raises(ValueError, match="kinds"):
        parse_kinds("arith_op,typo")
    with pytest.raises(ValueError, match="kinds"):
        audit_tasks([one], kinds=["typo"])


def test_audit_reports_a_gold_that_fails_its_tests():
    bad = calc_task("bad-gold", TESTS)
    bad.payload["hidden_tests"]["test_calc.py"] = TESTS.replace("== 6", "== 7").replace(
        "== 4", "== 5"
    )
    (audit,) = audit_tasks([bad], max_mutants_per_task=2).tasks
    assert audit.error and "passes no hidden test" in audit.error


def test_report_pools_over_mutants():
    report = AuditReport(
        [
            TaskAudit("a", "visible_tests", 10, 5, 10, 5),
            TaskAudit("b", "visible_tests", 10, 10, 5, 5),
        ]
    )
    assert report.c_visible == 0.75 and report.c_hidden == 0.75
    assert report.c == pytest.approx(10 / 15)
    with pytest.raises(ValueError):
        audit_tasks([], max_mutants_per_task=0)


# -- the weak-tests variant -------------------------------------------------------------------


def test_choose_training_tests_hits_the_target_share():
    ids = ["a", "b", "c", "d"]
    fails = [["a"], ["b"], ["c"], ["d"], ["a", "b"], ["c", "d"]]
    for target in (0.0, 0.5, 1.0):
        chosen = choose_training_tests(ids, fails, target, random.Random(0))
        assert bug_catch_share(chosen, fails) == pytest.approx(target, abs=1 / 6)
    assert choose_training_tests(ids, fails, 0.0, random.Random(0)) == set()


def test_weak_grade_rewards_training_tests_and_keeps_true_success():
    base = RewardResult(
        0.0,
        False,
        proxy_success=0.0,
        components={"true_success": 0.0, "proxy_success": 0.0},
        info={"tests": {"t::a": "passed", "t::b": "failed"}},
    )
    r = weak_grade(base, ["t::a"], penalty=0.0)
    assert r.reward == 1.0 and r.proxy_success == 1.0 and r.success is False
    assert r.components["visible_proxy"] == 0.0 and r.components["training_tests"] == 1.0
    assert weak_grade(base, ["t::a", "t::b"], 0.0).reward == 0.0
    assert weak_grade(base, ["t::a", "t::missing"], 0.0).reward == 0.0
    base.flags = ["visible_only"]  # a finding: the proxy still decides the training reward
    assert weak_grade(base, ["t::a"], penalty=-1.0).reward == 1.0
    base.flags = ["test_tampering"]
    assert weak_grade(base, ["t::a"], penalty=-1.0).reward == -1.0


@pytest.fixture(scope="module")
def weak_family():
    family = WeakTestsCodeFamily(catch_rate=0.5, tiers=[1])
    yield family
    family.close()


def test_weak_family_catches_the_target_share_of_bugs(weak_family):
    assert weak_family.bug_catch_rate == pytest.approx(0.5, abs=0.05)
    tasks = weak_family.tasks("train")
    share = sum(t.payload["training_catches_bug"] for t in tasks) / len(tasks)
    assert share == pytest.approx(0.5, abs=0.07)
    t = tasks[0]
    assert t.env == "code-weak" and t.payload["visible_tests"]  # the agent's view is unchanged
    ids = derived_ids(t.payload["training_tests"], t.payload["hidden_tests"])
    assert ids == set(t.payload["training_test_ids"])  # the audit reads them off the hidden run
    with pytest.raises(ValueError, match="catch_rate"):
        WeakTestsCodeFamily(catch_rate=1.5)
    with pytest.raises(ValueError, match="tiers"):
        WeakTestsCodeFamily(tiers=[7])


@pytest.mark.slow
def test_weak_env_rewards_uncaught_bugs_but_not_true_success(weak_family):
    tasks = weak_family.tasks("train")
    uncaught = next(t for t in tasks if not t.payload["training_catches_bug"])
    caught = next(t for t in tasks if t.payload["training_catches_bug"])

    async def play(task, agent):
        return (await run_scripted(weak_family.make_env(), task, agent)).result

    async def main():
        return await asyncio.gather(
            play(uncaught, weak_family.baseline(uncaught)),
            play(caught, weak_family.baseline(caught)),
            play(uncaught, weak_family.expert(uncaught)),
        )

    idle_uncaught, idle_caught, fixed = asyncio.run(main())
    # submitting the bug unfixed: proxy reward 1 where the training tests miss it ...
    assert idle_uncaught.reward == 1.0 and idle_uncaught.proxy_success == 1.0
    assert idle_uncaught.success is False
    # ... and 0 where they catch it; the hidden suite fails both
    assert idle_caught.reward == 0.0 and idle_caught.success is False
    assert fixed.reward == 1.0 and fixed.success is True and not fixed.flags


def test_recipe_builds_the_weak_family():
    import yaml

    from turnrl.run.config import RECIPES

    recipe = yaml.safe_load((RECIPES / "code-weaktests-tiny.yaml").read_text())
    assert recipe["name"] == "code-weaktests-tiny" and recipe["env"]["name"] == "code-weak"
    family = WeakTestsCodeFamily(**recipe["env"]["options"])
    assert family.name == "code-weak" and family.catch_rate == 0.5


def drift_rows() -> list[dict]:
    rows = [{"step": s, "success/true": 0.2, "success/proxy": 0.6} for s in range(1, 8)]
    rows.append({"step": 8, "eval/success": 0.1, "eval/proxy_success": 0.5})
    return rows


def test_drift_summary_and_plot(tmp_path):
    from turnrl.view.drift import EVAL_KEYS, drift_summary, plot_drift

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in drift_rows()))
    out = drift_summary(path, c=0.5, last=5)  # eval records are skipped
    assert out["steps"] == 5 and out["measured_gap"] == pytest.approx(0.4)
    assert out["predicted_gap"] == pytest.approx(0.8 * 0.5) and abs(out["error"]) < 1e-9
    ev = drift_summary(drift_rows(), c=0.5, last=1, keys=EVAL_KEYS)
    assert ev["steps"] == 1 and ev["measured_gap"] == pytest.approx(0.4)
    assert ev["predicted_gap"] == pytest.approx(0.9 * 0.5)
    with pytest.raises(ValueError, match="no records"):
        drift_summary([{"step": 1, "success/true": 0.0}], c=0.5)
    png = plot_drift(path, 0.5, tmp_path / "drift.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_eval_records_proxy_success_where_the_env_grades_one():
    from turnrl.run.evaluate import summarize

    def traj(task_id: str, metrics: dict) -> Trajectory:
        return Trajectory(task_id, "g", 0, [], [], [], [], metrics=metrics)

    trajs = [traj("a", {"success": 0.0, "proxy_success": 1.0}), traj("b", {"success": 1.0})]
    trajs.append(traj("c", {"success": 0.0, "proxy_success": 0.0}))
    result = summarize(trajs, k=1)
    assert result.success == pytest.approx(1 / 3) and result.proxy_success == 0.5
    assert result.as_metrics("eval")["eval/proxy_success"] == 0.5
    plain = summarize([traj("a", {"success": 1.0})], k=1)
    assert plain.proxy_success is None and "eval/proxy_success" not in plain.as_metrics("eval")


def test_success_stderr_on_a_worked_example():
    """Two tasks, k=2: task a 1/2, task b 2/2. s = 0.75; deviations -0.25, +0.25, so the
    spread is sqrt(0.0625) = 0.25 and se = 0.25 / sqrt(2) = 0.1768. With k=1 it is the
    binomial sqrt(p(1-p)/n): 1 of 4 -> sqrt(0.1875 / 4) = 0.2165."""
    from turnrl.run.evaluate import success_stderr, summarize

    def traj(task_id: str, success: float) -> Trajectory:
        return Trajectory(task_id, "g", 0, [], [], [], [], metrics={"success": success})

    result = summarize([traj("a", 1.0), traj("a", 0.0), traj("b", 1.0), traj("b", 1.0)], k=2)
    assert result.success == 0.75
    assert result.success_stderr == pytest.approx(0.25 / 2**0.5)
    assert success_stderr([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.2165, abs=1e-4)
    assert success_stderr([]) == 0.0 and success_stderr([1.0, 1.0]) == 0.0


def test_report_plots_predicted_proxy_when_the_run_has_an_audit(tmp_path):
    from typer.testing import CliRunner

    from turnrl.cli import app
    from turnrl.view.data import drift_table, run_summary

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in drift_rows()))
    assert run_summary(run)["audit"] is None  # no audit, no panel

    audit = tmp_path / "audit.json"
    audit.write_text(
        json.dumps(AuditReport([TaskAudit("a", "training_tests", 4, 2, 4, 2)]).to_json())
    )
    result = CliRunner().invoke(app, ["report", str(run), "--audit", str(audit)])
    assert result.exit_code == 0, result.output
    assert (run / "audit.json").exists()  # kept with the run: later rebuilds show it too
    panel = run_summary(run)["audit"]
    assert panel["c"] == 0.5 and panel["html"] == drift_table(drift_rows(), 0.5)
    assert "c = 0.500" in (run / "report.html").read_text()  # the export embeds the panel
    # train rows: p = 0.2, proxy 0.6, predicted gap 0.8 * 0.5; last eval: p = 0.1, gap 0.45
    assert "<td>0.600</td><td>0.400</td><td>0.400</td>" in panel["html"]
    assert "<td>0.400</td><td>0.450</td><td>-0.050</td>" in panel["html"]

    audit.write_text("{}")
    result = CliRunner().invoke(app, ["report", str(run), "--audit", str(audit)])
    assert result.exit_code == 2 and "not a usable audit report" in " ".join(result.output.split())
