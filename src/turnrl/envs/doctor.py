"""``turnrl doctor ENV``: check an env before training on it, as Gymnasium's env checker does.

Runs scripted agents through a few tasks, with no model, and checks what training relies on:

- the tasks are ``Task`` objects that serialise to JSON, with unique ids and a test split;
- every tool's schema is a valid JSON schema with a name and a description;
- ``reset``/``step``/``grade``/``close`` keep the contract (:mod:`turnrl.envs.base`): types,
  finite rewards and measures, hashable anchors, a malformed call answered by an observation;
- the expert (if the env has one) solves every task;
- an agent that does nothing and one that calls tools at random score about 0 (a grader
  that pays for nothing would train a policy to do nothing);
- the same calls replayed into a fresh env give the same observations, rewards and grade
  (group advantages compare episodes of one task, which is meaningless if the task moves);
- ``grade`` never raises, whatever the episode did;
- how long reset, step and grade take.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnrl.envs.base import StepResult, ToolEnv
from turnrl.envs.scripted import IdleAgent, RandomToolAgent, ScriptedAgent
from turnrl.types import RewardResult, Task, ToolCall

NEAR_ZERO = 0.25  # the most a do-nothing or random agent may score (few tasks: 1 lucky in 4)


@dataclass
class Check:
    name: str
    ok: bool | None  # None: skipped or information only
    detail: str


@dataclass
class Episode:
    """One scripted episode as the doctor saw it."""

    task: Task
    agent: str
    first: str = ""  # what reset returned
    calls: list[ToolCall] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    ends: list[tuple[bool, bool]] = field(default_factory=list)  # (terminated, truncated)
    result: RewardResult | None = None
    problems: list[str] = field(default_factory=list)  # contract breaches
    error: str | None = None  # reset/step/close raised, or the agent did
    grade_error: str | None = None
    times: dict[str, list[float]] = field(default_factory=dict)

    @property
    def success(self) -> float:
        return float(bool(self.result and self.result.success))


AgentFactory = Callable[[ToolEnv], ScriptedAgent]


async def play(
    make_env: Callable[[], ToolEnv],
    task: Task,
    agent_name: str,
    new_agent: AgentFactory,
    max_turns: int,
) -> Episode:
    """Run one episode, recording every breach and exception instead of raising."""
    ep = Episode(task, agent_name)
    try:
        env = make_env()
    except Exception as e:
        ep.error = f"make_env raised {_exc(e)}"
        return ep
    phase = "reset"
    try:
        observation = await _timed(ep, "reset", env.reset(task))
        if not isinstance(observation, str):
            ep.problems.append(f"reset returned {type(observation).__name__}, not str")
            observation = str(observation)
        ep.first = observation
        if not isinstance(env.instructions, str):
            ep.problems.append(f"env.instructions is {type(env.instructions).__name__}, not str")
        agent = new_agent(env)
        for _ in range(max_turns):
            try:
                call = agent.act(observation)
            except Exception as e:
                ep.error = f"the {agent_name} agent raised {_exc(e)}"
                break
            if call is None:
                break
            phase = f"step {len(ep.calls) + 1} ({call.name})"
            step = await _timed(ep, "step", env.step(call))
            ep.problems += _step_problems(step) + _measure_problems(env.measure())
            ep.calls.append(call)
            ep.observations.append(str(getattr(step, "observation", step)))
            ep.rewards.append(getattr(step, "reward", 0.0))
            ep.ends.append((bool(step.terminated), bool(step.truncated)))
            observation = ep.observations[-1]
            if step.terminated or step.truncated:
                break
    except Exception as e:
        ep.error = f"{phase} raised {_exc(e)}"
    try:
        ep.result = await _timed(ep, "grade", env.grade())
        ep.problems += _result_problems(ep.result)
    except Exception as e:
        ep.grade_error = f"grade raised {_exc(e)} after the {agent_name} agent on {task.id}"
    try:
        await env.close()
    except Exception as e:
        ep.problems.append(f"close raised {_exc(e)}")
    return ep


async def _timed(ep: Episode, phase: str, awaitable: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return await awaitable
    finally:
        ep.times.setdefault(phase, []).append(time.perf_counter() - t0)


def _exc(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" at {frame.filename.rpartition('/')[2]}:{frame.lineno}" if frame else ""
    return f"{type(e).__name__}: {e}{where}"


def _step_problems(step: Any) -> list[str]:
    if not isinstance(step, StepResult):
        return [f"step returned {type(step).__name__}, not StepResult"]
    out = []
    if not isinstance(step.observation, str):
        out.append(f"step observation is {type(step.observation).__name__}, not str")
    if not isinstance(step.reward, (int, float)) or not math.isfinite(step.reward):
        out.append(f"step reward {step.reward!r} is not a finite number")
    if not isinstance(step.terminated, bool) or not isinstance(step.truncated, bool):
        out.append("step terminated/truncated are not bools")
    if not isinstance(step.info, dict):
        out.append(f"step info is {type(step.info).__name__}, not dict")
    else:
        try:
            hash(step.info.get("anchor"))
        except TypeError:
            out.append(f"step anchor {step.info['anchor']!r:.60} is not hashable (GiGPO needs it)")
    return out


def _measure_problems(measures: Any) -> list[str]:
    """``env.measure()`` must be a mapping of names to finite numbers (a rubric shapes per-turn
    rewards from them)."""
    if not isinstance(measures, dict):
        return [f"measure returned {type(measures).__name__}, not dict"]
    return [
        f"measure {k!r} = {v!r} is not a finite number"
        for k, v in measures.items()
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
    ]


def _result_problems(result: Any) -> list[str]:
    if not isinstance(result, RewardResult):
        return [f"grade returned {type(result).__name__}, not RewardResult"]
    out = []
    if not isinstance(result.reward, (int, float)) or not math.isfinite(result.reward):
        out.append(f"grade reward {result.reward!r} is not a finite number")
    if not isinstance(result.success, bool):
        out.append(f"grade success {result.success!r} is not a bool")
    return out


def schema_problems(schema: Any) -> list[str]:
    """What is wrong with one tool schema (OpenAI function format), if anything."""
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as e:
        return [f"schema is not JSON-serialisable ({e})"]
    fn = schema.get("function") if isinstance(schema, dict) else None
    if not isinstance(fn, dict) or schema.get("type") != "function":
        return ["schema is not {'type': 'function', 'function': {...}}"]
    name = fn.get("name", "?")
    out = []
    if not fn.get("description"):
        out.append(f"{name}: no description (the model reads it: give the method a docstring)")
    params = fn.get("parameters")
    if not isinstance(params, dict) or params.get("type") != "object":
        out.append(f"{name}: parameters must be a JSON schema of type object")
        return out
    try:
        from jsonschema.validators import validator_for
    except ImportError:  # the structural checks above are all we can do
        return out
    try:
        validator_for(params).check_schema(params)
    except Exception as e:
        out.append(f"{name}: invalid JSON schema ({str(e).splitlines()[0]})")
    return out


async def check_env(
    family: Any, n_tasks: int = 4, max_turns: int = 6, seed: int = 0
) -> list[Check]:
    """Every check on ``family``'s first ``n_tasks`` train tasks; scripted agents get
    ``max_turns`` steps (the expert gets 30: its success should not hinge on the turn cap)."""
    checks: list[Check] = []
    try:
        train = family.tasks("train", n_tasks, seed=seed)
        test = family.tasks("test", n_tasks, seed=seed)
        checks.append(_tasks_check(train, test))
    except Exception as e:
        return [Check("tasks", False, f"tasks() raised {_exc(e)}")]
    tasks = [t for t in train if isinstance(t, Task)][:n_tasks]
    if not tasks:
        return checks

    probe = None
    try:
        probe = family.make_env()
        await probe.reset(tasks[0])
        schemas = probe.tool_schemas()
        problems = [p for s in schemas for p in schema_problems(s)]
        names = ", ".join(s.get("function", {}).get("name", "?") for s in schemas)
        if not schemas and not probe.final_answer:  # a plain-text env needs no tool
            problems.append("the env has no tools")
        names = names or "none (plain-text replies: final_answer)"
        checks.append(
            Check("tool schemas", not problems, "; ".join(problems) or f"{len(schemas)}: {names}")
        )
    except Exception as e:
        schemas = []
        checks.append(Check("tool schemas", False, f"an env to read them from: {_exc(e)}"))
    finally:
        if probe is not None:
            with contextlib.suppress(Exception):  # the episodes below report a raising close
                await probe.close()

    episodes: list[Episode] = []
    expert_eps: list[Episode] = []
    if hasattr(family, "expert"):
        for i, task in enumerate(tasks):
            ep = await play(
                family.make_env,
                task,
                "expert",
                lambda env, t=task, i=i: family.expert(t, seed=seed + i),
                max(30, max_turns),
            )
            expert_eps.append(ep)
        episodes += expert_eps
    idle_eps = [
        await play(family.make_env, t, "do-nothing", _baseline(family, t), max_turns) for t in tasks
    ]
    random_eps = [
        await play(family.make_env, t, "random", _random(family, t, seed + 1000 * j + i), max_turns)
        for j in range(2)
        for i, t in enumerate(tasks)
    ]
    episodes += idle_eps + random_eps
    episodes += await _malformed_calls(family, tasks[0], schemas)

    breaches = [f"{ep.agent} on {ep.task.id}: {p}" for ep in episodes for p in ep.problems]
    breaches += [f"{ep.agent} on {ep.task.id}: {ep.error}" for ep in episodes if ep.error]
    steps = sum(len(e.calls) for e in episodes)
    detail = f"{len(episodes)} episodes, {steps} steps"
    if breaches:
        more = f" (+{len(breaches) - 1} more)" if len(breaches) > 1 else ""
        detail = breaches[0] + more
    checks.append(Check("reset/step/grade contract", not breaches, detail))
    grade_errors = [ep.grade_error for ep in episodes if ep.grade_error]
    checks.append(
        Check(
            "grade never raises",
            not grade_errors,
            grade_errors[0] if grade_errors else f"{len(episodes)} episodes graded, none raised",
        )
    )
    if expert_eps:
        solved = [ep for ep in expert_eps if ep.success]
        failed = [ep.task.id for ep in expert_eps if not ep.success]
        turns = sum(len(ep.calls) for ep in expert_eps) / len(expert_eps)
        detail = f"{len(solved)}/{len(expert_eps)} tasks solved in {turns:.1f} turns on average"
        if failed:
            detail += f"; failed: {', '.join(failed[:3])}"
        checks.append(Check("expert succeeds", not failed, detail))
    else:
        checks.append(
            Check("expert succeeds", None, "no expert (optional: SFT and this check use it)")
        )
    checks.append(_near_zero("do-nothing scores ~0", idle_eps))
    checks.append(_near_zero("random scores ~0", random_eps))
    reference = [ep for ep in (expert_eps[:2] + random_eps[:2]) if not ep.error]
    checks.append(await _replay_check(family, reference))
    checks.append(_timing(episodes))
    return checks


def _tasks_check(train: list[Any], test: list[Any]) -> Check:
    problems = []
    for t in train + test:
        if not isinstance(t, Task):
            problems.append(f"tasks() returned a {type(t).__name__}, not a Task")
            break
        try:
            Task.from_json(t.to_json())
        except (TypeError, ValueError) as e:
            problems.append(f"task {t.id} does not serialise to JSON ({e})")
            break
    ids = [t.id for t in train + test if isinstance(t, Task)]
    if len(set(ids)) != len(ids):
        problems.append("task ids repeat")
    if not train:
        problems.append("no train tasks")
    if not test:
        problems.append("no test tasks (held-out evaluation needs some)")
    return Check(
        "tasks",
        not problems,
        "; ".join(problems) or f"{len(train)} train, {len(test)} test, JSON-serialisable",
    )


def _baseline(family: Any, task: Task) -> AgentFactory:
    if hasattr(family, "baseline"):
        return lambda env: family.baseline(task)
    return lambda env: IdleAgent()


def _random(family: Any, task: Task, seed: int) -> AgentFactory:
    if hasattr(family, "random_agent"):
        return lambda env: family.random_agent(task, seed=seed)
    return lambda env: RandomToolAgent(env.tool_schemas(), seed)


class _Calls:
    def __init__(self, calls: list[ToolCall]) -> None:
        self.calls = iter(calls)

    def act(self, observation: str) -> ToolCall | None:
        return next(self.calls, None)


async def _malformed_calls(family: Any, task: Task, schemas: list[dict]) -> list[Episode]:
    """An unknown tool, and each tool with arguments of the wrong type: the env must answer
    with an observation (the model reads it), not raise."""
    calls = [ToolCall("no_such_tool", {})]
    for s in schemas:
        fn = s.get("function", {})
        props = fn.get("parameters", {}).get("properties", {})
        calls.append(
            ToolCall(fn.get("name", "?"), {p: {"wrong": ["type"]} for p in props} or {"extra": 1})
        )
    return [
        await play(family.make_env, task, "malformed-call", lambda env: _Calls(calls), len(calls))
    ]


def _near_zero(name: str, eps: list[Episode]) -> Check:
    rate = sum(ep.success for ep in eps) / max(len(eps), 1)
    reward = sum(ep.result.reward for ep in eps if ep.result) / max(len(eps), 1)
    ok = rate <= NEAR_ZERO and reward <= NEAR_ZERO
    return Check(
        name,
        ok,
        f"success {rate:.2f}, mean reward {reward:.2f} over {len(eps)} episodes"
        + ("" if ok else f" (must be <= {NEAR_ZERO})"),
    )


async def _replay_check(family: Any, reference: list[Episode]) -> Check:
    if not reference:
        return Check("replay is deterministic", None, "no finished episode to replay")
    for ep in reference:
        again = await play(
            family.make_env, ep.task, "replay", lambda env, c=ep.calls: _Calls(c), len(ep.calls)
        )
        diff = _difference(ep, again)
        if diff:
            return Check(
                "replay is deterministic", False, f"{ep.task.id} ({ep.agent} calls): {diff}"
            )
    steps = sum(len(ep.calls) for ep in reference)
    return Check(
        "replay is deterministic",
        True,
        f"{len(reference)} episodes, {steps} steps replayed identically",
    )


def _difference(a: Episode, b: Episode) -> str | None:
    if a.first != b.first:
        return f"reset returned {a.first!r:.50} then {b.first!r:.50}"
    for k, (x, y) in enumerate(zip(a.observations, b.observations, strict=False)):
        if x != y:
            return f"step {k + 1} observation differs: {x!r:.50} vs {y!r:.50}"
    if a.rewards != b.rewards:
        return f"step rewards differ: {a.rewards} vs {b.rewards}"
    if a.ends != b.ends or len(a.observations) != len(b.observations):
        return "the episode ends at a different step"
    ra, rb = a.result, b.result
    if (ra and (ra.reward, ra.success)) != (rb and (rb.reward, rb.success)):
        return f"grade differs: {ra and ra.reward} vs {rb and rb.reward}"
    return None


def _timing(eps: list[Episode]) -> Check:
    def ms(phase: str) -> str:
        xs = [t for ep in eps for t in ep.times.get(phase, [])]
        if not xs:
            return f"{phase} -"
        return f"{phase} {1000 * sum(xs) / len(xs):.2f} ms (max {1000 * max(xs):.1f})"

    return Check("time per call", None, ", ".join(ms(p) for p in ("reset", "step", "grade")))


def run_doctor(
    name: str, options: dict[str, Any], tasks: str | None, n_tasks: int, max_turns: int, seed: int
) -> list[Check]:
    """Build the family of ``env.name`` and check it (a family that fails to build is one
    failed check)."""
    from turnrl.envs.registry import make_family

    try:
        family = make_family(name, options, tasks)
        if hasattr(family, "subagent_expert"):  # played with a helper: its scripted one answers
            from turnrl.envs.wrappers import with_subagent

            family = with_subagent(family, max_turns)
    except Exception as e:
        return [Check("env builds", False, f"{type(e).__name__}: {e}")]
    try:
        return asyncio.run(check_env(family, n_tasks, max_turns, seed))
    finally:
        family.close()


def print_checks(checks: list[Check], console: Any, title: str = "turnrl doctor") -> None:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    marks = {True: "[green]PASS[/green]", False: "[red]FAIL[/red]", None: "[dim]-[/dim]"}
    for c in checks:
        table.add_row(c.name, marks[c.ok], c.detail)
    console.print(table)
    failed = sum(c.ok is False for c in checks)
    console.print(
        f"[red]{failed} check(s) failed[/red]" if failed else "[green]all checks passed[/green]"
    )
