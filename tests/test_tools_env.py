"""Tool-API env: state-check grading, typed tools, isolation, experts and baselines."""

from __future__ import annotations

import asyncio
import json

import pytest

from turnrl.envs.scripted import run_scripted
from turnrl.envs.tools import ToolsFamily
from turnrl.envs.tools.env import SCHEMA, ToolsEnv
from turnrl.envs.tools.expert import PlanAgent, solution_calls
from turnrl.envs.tools.state import (
    distance,
    extra_changes,
    open_db,
    progress,
    state_diff,
    states_equal,
)
from turnrl.envs.tools.tasks import TEMPLATES, VOCAB
from turnrl.types import Task, ToolCall

FAMILY = ToolsFamily()


def run(coro):
    return asyncio.run(coro)


def run_all(coros):
    async def gather():
        return await asyncio.gather(*coros)

    return asyncio.run(gather())


def task_of(template: str, split: str = "train") -> Task:
    return next(t for t in FAMILY.tasks(split, 12) if t.payload["template"] == template)


async def play(task: Task, calls: list[ToolCall], env: ToolsEnv | None = None):
    """Run fixed calls then done(); return (episode, env-independent result)."""
    agent = PlanAgent(calls, ToolCall("done", {}))
    return await run_scripted(env or FAMILY.make_env(), task, agent)


# ---------------------------------------------------------------- state check

GOAL = {
    "files": [{"path": "a.txt", "content": "x"}, {"path": "b.txt", "content": "y"}],
    "events": [{"id": 1, "title": "Gym", "day": "mon", "hour": 9}],
}


def test_state_equal_is_order_independent_and_ignores_ids():
    shuffled = {
        "events": [{"id": 7, "title": "Gym", "day": "mon", "hour": 9}],  # other surrogate id
        "files": [{"content": "y", "path": "b.txt"}, {"content": "x", "path": "a.txt"}],
        "accounts": [],  # an empty table equals a missing one
    }
    assert states_equal(shuffled, GOAL)
    conn = open_db(SCHEMA, shuffled)
    assert states_equal(conn, GOAL) and state_diff(conn, GOAL) == []
    assert distance(conn, GOAL) == 0


def test_state_missing_change_and_extra_change_fail():
    missing = {"files": [{"path": "a.txt", "content": "x"}], "events": GOAL["events"]}
    diff = state_diff(missing, GOAL)
    assert diff == ["files: missing {content='y', path='b.txt'}"]
    extra = {**GOAL, "files": [*GOAL["files"], {"path": "c.txt", "content": "z"}]}
    assert state_diff(extra, GOAL) == ["files: unexpected {content='z', path='c.txt'}"]
    assert not states_equal(extra, GOAL)


def test_state_is_a_multiset_duplicates_count():
    rows = [{"src": "a", "dst": "b", "amount": 5}]
    assert not states_equal({"transfers": rows * 2}, {"transfers": rows})
    assert state_diff({"transfers": rows * 3}, {"transfers": rows})[0].endswith("x2")


def test_extra_changes_and_progress():
    init = {"files": [{"path": "a.txt", "content": "x"}, {"path": "keep.txt", "content": "k"}]}
    goal = {"files": [{"path": "keep.txt", "content": "k"}]}  # task: delete a.txt
    destroyed = {"files": []}  # deleted keep.txt too
    assert extra_changes(init, destroyed, goal) == ["files: removed {content='k', path='keep.txt'}"]
    assert extra_changes(init, goal, goal) == []
    assert progress(init, init, goal) == 0.0
    assert progress(init, goal, goal) == 1.0
    assert progress(init, destroyed, goal) == 0.0  # one step right, one wrong
    assert progress(init, {"files": []}, init) == -1.0  # nothing to do, two rows destroyed


# ---------------------------------------------------------------- grading through the env


def test_expert_success_and_missing_change_fails():
    task = task_of("bank_split")
    calls = solution_calls(task.payload)
    ok = run(play(task, calls))
    assert ok.result.success and ok.result.reward == 1.0 and ok.result.flags == []
    partial = run(play(task, calls[:-1]))  # the second transfer never happens
    assert not partial.result.success and partial.result.reward == 0.0
    assert any("missing" in d for d in partial.result.info["diff"])
    assert 0.0 < partial.result.components["progress"] < 1.0


def test_extra_destructive_change_fails_and_is_flagged():
    task = task_of("files_delete")
    others = [f["path"] for f in task.payload["init"]["files"]]
    target = task.payload["solution"][0][1]["path"]
    victim = next(p for p in others if p != target)
    calls = [*solution_calls(task.payload), ToolCall("delete_file", {"path": victim})]
    ep = run(play(task, calls))
    assert not ep.result.success
    assert "destructive_change" in ep.result.flags and "extra_change" in ep.result.flags
    assert any(victim in d for d in ep.result.info["diff"])


def test_other_route_to_goal_state_passes():
    """Cancel + re-add instead of move_event: other ids and row order, same goal state."""
    task = task_of("cal_move")
    _, _, (_, move) = task.payload["solution"]
    ev = next(e for e in task.payload["init"]["events"] if e["id"] == move["event_id"])
    calls = [
        ToolCall("cancel_event", {"event_id": ev["id"]}),
        ToolCall("add_event", {"title": ev["title"], "day": move["day"], "hour": move["hour"]}),
    ]
    assert run(play(task, calls)).result.success


def test_do_nothing_fails_every_template():
    tasks = FAMILY.tasks("train", 12)
    eps = run_all(run_scripted(FAMILY.make_env(), t, FAMILY.baseline(t)) for t in tasks)
    assert [e.result.reward for e in eps] == [0.0] * 12


# ---------------------------------------------------------------- typed tools and errors


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (ToolCall("transfer", {"src": "x", "dst": "y", "amount": "ten"}), "amount"),
        (ToolCall("transfer", {"src": "x", "dst": "y", "amount": -5}), "greater than 0"),
        (ToolCall("transfer", {"src": "x", "dst": "y"}), "Field required"),
        (ToolCall("transfer", {"src": "x", "dst": "y", "amount": 5, "memo": "hi"}), "memo"),
        (ToolCall("transfer", ["x", "y", 5]), "JSON object"),  # type: ignore[arg-type]
    ],
)
def test_malformed_arguments_become_observations(call, needle):
    async def go():
        env = FAMILY.make_env()
        await env.reset(task_of("bank_transfer"))
        step = await env.step(call)
        assert step.info["error"] == "bad_arguments" and needle in step.observation
        assert not step.terminated and states_equal(env.db, env.init)  # nothing changed
        await env.close()

    run(go())


def test_domain_errors_say_what_to_do():
    async def go():
        task = task_of("bank_transfer")
        env = FAMILY.make_env()
        await env.reset(task)
        accounts = sorted(a["name"] for a in task.payload["init"]["accounts"])
        step = await env.step(ToolCall("get_balance", {"account": "nope"}))
        assert step.info["error"] == "tool_error"
        assert step.observation == f"Error: unknown account 'nope'; accounts: {', '.join(accounts)}"
        src, dst = accounts
        step = await env.step(ToolCall("transfer", {"src": src, "dst": dst, "amount": 10**6}))
        assert step.observation.startswith("Error: insufficient funds")
        # narrowed tool list: the calendar is not part of this task
        step = await env.step(ToolCall("list_events", {"day": "mon"}))
        assert step.info["error"] == "unknown_tool" and "get_balance" in step.observation
        await env.close()

    run(go())


def test_calendar_types_and_conflicts():
    async def go():
        task = task_of("cal_add")
        env = FAMILY.make_env()
        await env.reset(task)
        busy = task.payload["init"]["events"][0]
        bad_day = await env.step(ToolCall("add_event", {"title": "x", "day": "sun", "hour": 9}))
        assert bad_day.info["error"] == "bad_arguments" and "'mon'" in bad_day.observation
        bad_hour = await env.step(ToolCall("add_event", {"title": "x", "day": "mon", "hour": 25}))
        assert bad_hour.info["error"] == "bad_arguments"
        clash = await env.step(
            ToolCall("add_event", {"title": "x", "day": busy["day"], "hour": busy["hour"]})
        )
        assert f"taken by '{busy['title']}'" in clash.observation
        schemas = {s["function"]["name"]: s for s in env.tool_schemas()}
        assert set(schemas) == {"list_events", "add_event", "cancel_event", "move_event", "done"}
        hour = schemas["add_event"]["function"]["parameters"]["properties"]["hour"]
        assert hour["minimum"] == 0 and hour["maximum"] == 23
        await env.close()

    run(go())


# ---------------------------------------------------------------- isolation


def test_database_isolation_between_concurrent_episodes():
    """The same task in 16 concurrent envs: half destroy everything, half solve it."""
    task = task_of("files_find_delete")
    paths = [f["path"] for f in task.payload["init"]["files"]]
    wreck = [ToolCall("delete_file", {"path": p}) for p in paths]

    async def episode(i: int):
        calls = solution_calls(task.payload) if i % 2 else wreck
        agent = PlanAgent(calls, ToolCall("done", {}))
        return await run_scripted(FAMILY.make_env(), task, agent)

    eps = run_all(episode(i) for i in range(16))
    assert [e.result.success for e in eps] == [bool(i % 2) for i in range(16)]


# ---------------------------------------------------------------- tasks, experts, baselines


@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_solves_and_do_nothing_scores_zero(split):
    tasks = FAMILY.tasks(split, 24, seed=3)

    async def go(make_agent):
        return await asyncio.gather(
            *(run_scripted(FAMILY.make_env(), t, make_agent(t)) for t in tasks)
        )

    experts = run(go(FAMILY.expert))
    assert all(e.result.success for e in experts), [e.result.info for e in experts]
    baseline = run(go(FAMILY.baseline))
    assert sum(e.result.reward for e in baseline) / len(baseline) <= 0.05


def test_tasks_deterministic_tiered_and_held_out():
    a = [t.to_json() for t in FAMILY.tasks("train", 24)]
    assert a == [t.to_json() for t in FAMILY.tasks("train", 24)]
    assert a != [t.to_json() for t in FAMILY.tasks("train", 24, seed=1)]
    for t in FAMILY.tasks("train", 24):
        n = len(t.payload["solution"])
        assert (1 <= n <= 2) if t.payload["tier"] == "easy" else (3 <= n <= 6), t.id
        if t.payload["tier"] == "easy":
            assert len(t.payload["statement"]) < 120
    train, test = VOCAB["train"], VOCAB["test"]
    for field in ("folders", "stems", "words", "titles", "accounts", "payees"):
        assert not set(getattr(train, field)) & set(getattr(test, field)), field
    train_text = " ".join(json.dumps(t.payload) for t in FAMILY.tasks("train", 60))
    for name in test.accounts + test.folders + test.titles:
        assert name not in train_text
    assert len({t.id for t in FAMILY.tasks("test", 50)}) == 50
    easy_only = ToolsFamily(tiers=("easy",)).tasks("train", 12)
    assert {t.payload["template"] for t in easy_only} == {f.__name__ for f in TEMPLATES["easy"]}


def test_statement_split_holds_out_goals_with_training_words():
    """held_out="statement": test goals are never training goals, every template has test
    tasks, and their entity names all come from the training vocabulary."""
    fam = ToolsFamily(held_out="statement")
    train = {t.payload["statement"] for t in fam.tasks("train")}
    test = fam.tasks("test")
    assert not train & {t.payload["statement"] for t in test}
    assert {t.payload["template"] for t in test} == {
        f.__name__ for tier in TEMPLATES.values() for f in tier
    }
    train_words = VOCAB["train"]
    for t in test:
        for f in t.payload["init"].get("files", []):
            assert f["path"].split("/")[0] in train_words.folders + ("invoices",), t.id
    eps = run_all(run_scripted(fam.make_env(), t, fam.expert(t)) for t in test[:24])
    assert all(e.result.success for e in eps), [e.result.info for e in eps]
    with pytest.raises(ValueError, match="held_out"):
        ToolsFamily(held_out="nope")


def test_easy_observations_are_short():
    tasks = ToolsFamily(tiers=("easy",)).tasks("train", 30)
    eps = run_all(run_scripted(FAMILY.make_env(), t, FAMILY.expert(t)) for t in tasks)
    assert max(len(o) for e in eps for o in e.observations) < 120
    assert max(len(e.instructions) for e in eps) < 200


def test_env_measures_progress_towards_the_goal():
    """What reward.shaping={progress: 1.0} turns into per-turn rewards (the whole path, agent
    loop and rubric: tests/test_rollout.py)."""
    task = task_of("files_find_delete")

    async def progress(calls):
        env = FAMILY.make_env()
        await env.reset(task)
        out = [env.measure()["progress"]]
        for c in calls:
            await env.step(c)
            out.append(env.measure()["progress"])
        await env.close()
        return out

    solve = run(progress(solution_calls(task.payload)))
    assert solve[0] == 0.0 and solve[-1] == pytest.approx(1.0)
    assert solve == sorted(solve)  # every call of the solution moves towards the goal
    keep = task.payload["goal"]["files"][0]["path"]  # a file the goal keeps
    bad = run(progress([ToolCall("delete_file", {"path": keep})]))
    assert bad[1] < 0  # deleting a file the goal keeps moves away from the goal


def test_noisy_expert_is_deterministic_and_makes_mistakes():
    tasks = FAMILY.tasks("train", 24)

    async def go():
        return await asyncio.gather(
            *(
                run_scripted(FAMILY.make_env(), t, FAMILY.expert(t, seed=5, noise=0.3))
                for t in tasks
            )
        )

    first = [e.result.success for e in run(go())]
    assert first == [e.result.success for e in run(go())]
    assert 0 < sum(first) < len(first)
    right = ToolCall("transfer", {"src": "a", "dst": "b", "amount": 5})
    always_wrong = PlanAgent([right], ToolCall("done", {}), noise=1.0, seed=0)
    assert always_wrong.act("") != right and always_wrong.mistakes == 1


def test_options_are_validated():
    with pytest.raises(ValueError, match="bogus"):
        ToolsFamily(bogus=1)
    with pytest.raises(ValueError, match="tiers"):
        ToolsFamily(tiers=("medium",))
    with pytest.raises(ValueError, match="split"):
        FAMILY.tasks("valid", 3)
