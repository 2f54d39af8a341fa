"""verifiers environments through the real agent loop (``env.name=verifiers``): a ToolEnv and a
tool-free MultiTurnEnv written against verifiers' public API (``examples/vf_arith.py``), each
played token-exactly with SmolLM2's template while verifiers runs its own rollout; the reward
and components equal those of the same replies run through verifiers alone; endings, faults,
the rubric as turnrl members, ``turnrl doctor`` and one ``turnrl train`` step."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

vf = pytest.importorskip("verifiers", reason="the verifiers extra")

from tests.adapters_support import check_token_exact, play_forced, train_one_step  # noqa: E402
from turnrl.cli import app  # noqa: E402
from turnrl.envs.registry import make_family  # noqa: E402
from turnrl.rewards.pipeline import build_rubric  # noqa: E402
from turnrl.rewards.rubric import Episode  # noqa: E402
from turnrl.run.config import ConfigError, load_config  # noqa: E402
from turnrl.run.preflight import preflight  # noqa: E402
from turnrl.types import TerminationReason, ToolCall  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _env_modules(monkeypatch):
    """``vf_arith`` (examples/) and ``vf_faulty`` (tests/fixtures/) importable by env_id."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fixtures"))


class Script:
    """Replies in order: a ToolCall or a plain text."""

    def __init__(self, replies) -> None:
        self.replies = iter(replies)

    def act(self, observation):
        return next(self.replies)


def verifiers_alone(vf_env, row: dict, replies: list) -> dict:
    """The same replies through verifiers by itself: its rollout with a client that answers
    from the list, then its rubric. Returns the scored state."""
    from verifiers.types import Response, ResponseMessage

    class Scripted(vf.Client):
        def __init__(self):
            super().__init__(None)
            self.replies, self.n = iter(replies), 0

        async def get_response(self, prompt, model, sampling_args, tools=None, **kw):
            r = next(self.replies)
            calls = None
            if isinstance(r, ToolCall):
                import json

                self.n += 1
                calls = [
                    vf.ToolCall(id=f"c{self.n}", name=r.name, arguments=json.dumps(r.arguments))
                ]
            return Response(
                id="x",
                created=0,
                model=model,
                message=ResponseMessage(
                    content=None if calls else r,
                    tool_calls=calls,
                    finish_reason="tool_calls" if calls else "stop",
                    is_truncated=False,
                ),
            )

        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, *a, **k):
            raise NotImplementedError

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return response

        async def close(self):
            return None

    async def go():
        state = await vf_env.rollout(row, Scripted(), "m", {})
        await vf_env.rubric.score_rollout(state)
        return state

    return asyncio.run(go())


def test_tool_env_episodes_are_token_exact_and_score_as_verifiers_does():
    family = make_family("verifiers", {"env_id": "vf_arith"})
    tasks = family.tasks("test", 3, seed=0)
    scripts = []
    for t in tasks:
        row = family.row(t.payload)
        a, b = (int(x) for x in row["question"].removeprefix("What is ").rstrip("?").split(" + "))
        reply = f"It is {a + b}." if t is tasks[0] else f"The sum of {a} and {b} is {a + b}."
        scripts.append([ToolCall("add", {"a": a, "b": b}), reply])
    trajs, backend, renderer = play_forced(family.make_env, tasks, [Script(s) for s in scripts])
    env = family.make_env()
    for i, traj in enumerate(trajs):
        assert traj.termination is TerminationReason.DONE, traj.error
        tools = [{"type": "function", "function": {"name": "add", **_tool_fields(family)}}]
        check_token_exact(traj, renderer, tools, backend.generations[i])
        assert traj.messages[0]["content"] == "Use the add tool, then reply with the sum."
        assert traj.messages[3]["content"] == str(sum(scripts[i][0].arguments.values()))
        alone = verifiers_alone(family.vf_env, family.row(tasks[i].payload), scripts[i])
        assert traj.reward == pytest.approx(alone["reward"])
        assert traj.graded.components == pytest.approx(alone["metrics"])
        assert traj.graded.info["weights"]["correct_answer"] == 1.0
    assert [t.reward for t in trajs] == [1.5, 1.0, 1.0]  # only the first reply is concise
    assert trajs[0].graded.components["used_the_tool"] == 1.0
    del env


def _tool_fields(family):
    (tool,) = family.vf_env.tool_defs
    return {"description": tool.description, "parameters": tool.parameters}


def test_rubric_becomes_turnrl_rubric_members_with_the_same_reward():
    family = make_family("verifiers", {"env_id": "vf_arith"})
    task = family.tasks("train", 1, seed=1)[0]
    row = family.row(task.payload)
    a, b = (int(x) for x in row["question"].removeprefix("What is ").rstrip("?").split(" + "))
    trajs, _, _ = play_forced(
        family.make_env, [task], [Script([ToolCall("add", {"a": a, "b": b}), str(a + b)])]
    )
    rubric = build_rubric(env_members=family.rubric_members())  # as the run builds it
    assert rubric.names[:4] == ["correct_answer", "concise_answer", "used_the_tool", "reply_length"]
    assert [w for _, w in rubric.funcs][:4] == [1.0, 0.5, 0.0, 0.0]
    result = asyncio.run(rubric.score(Episode(trajs[0], graded=trajs[0].graded)))
    assert result.reward == trajs[0].reward == 1.5
    assert result.components["correct_answer"] == 1.0 and "reply_length" in result.components
    assert "env_reward" not in result.components  # the functions replace the grade


def test_plain_text_multi_turn_env_and_its_own_turn_limit():
    family = make_family("verifiers", {"env_id": "vf_arith", "env_args": {"mode": "guess"}})
    assert family.make_env().tool_schemas() == []
    tasks = family.tasks("train", 2, seed=0)
    answers = [family.row(t.payload)["answer"] for t in tasks]
    wrong = [str(1 + int(a) % 8) for a in answers]
    trajs, backend, renderer = play_forced(
        family.make_env, tasks, [Script([w, a]) for w, a in zip(wrong, answers)]
    )
    for i, traj in enumerate(trajs):
        assert traj.termination is TerminationReason.DONE, traj.error
        check_token_exact(traj, renderer, [], backend.generations[i])
        assert "is wrong; the number is" in traj.messages[3]["content"]
        assert traj.reward == 1.0 and traj.graded.info["stop_condition"] == "has_final_env_response"
    # four wrong guesses meet the env's max_turns=4: a truncation, not a termination
    trajs, backend, renderer = play_forced(family.make_env, tasks[:1], [Script([wrong[0]] * 4)])
    traj = trajs[0]
    assert traj.termination is TerminationReason.MAX_TURNS and len(traj.turns) == 4
    assert traj.graded.info["stop_condition"] == "max_turns_reached" and traj.reward == 0.0
    check_token_exact(traj, renderer, [], backend.generations[0])


# -- faults ------------------------------------------------------------------------------------


def test_a_raising_env_ends_its_episode_with_env_error():
    family = make_family("verifiers", {"env_id": "vf_faulty", "env_args": {"fault": "raise"}})
    trajs, _, _ = play_forced(family.make_env, family.tasks("train", 1), [Script(["hi"])])
    assert trajs[0].termination is TerminationReason.ENV_ERROR and trajs[0].excluded
    assert "the env broke" in trajs[0].error


def test_a_hung_env_ends_its_episode_with_timeout():
    options = {"env_id": "vf_faulty", "env_args": {"fault": "hang"}, "step_timeout_s": 0.5}
    family = make_family("verifiers", options)
    fine = make_family("verifiers", {"env_id": "vf_faulty", "env_args": {"fault": "none"}})
    envs = iter([family.make_env(), fine.make_env()])
    t0 = time.monotonic()
    trajs, _, _ = play_forced(
        lambda: next(envs), family.tasks("train", 2), [Script(["hi"]), Script(["hi"] * 5)]
    )
    assert time.monotonic() - t0 < 30  # the env hangs for an hour: it was not waited for
    assert trajs[0].termination is TerminationReason.TIMEOUT and trajs[0].excluded
    assert trajs[1].termination is TerminationReason.MAX_TURNS  # the other one went on


def test_a_malformed_env_response_ends_its_episode_with_env_error():
    family = make_family("verifiers", {"env_id": "vf_faulty", "env_args": {"fault": "malformed"}})
    trajs, _, _ = play_forced(family.make_env, family.tasks("train", 1), [Script(["hi"])])
    assert trajs[0].termination is TerminationReason.ENV_ERROR and trajs[0].excluded


# -- options, CLI ----------------------------------------------------------------------------------


def test_bad_options_fail_in_one_line_before_anything_is_written(tmp_path, monkeypatch):
    base = [f"runs_dir={tmp_path}", "env.name=verifiers", "sft.enabled=false"]
    for options, field in [
        ("{env_id: no_such_env_module}", "env.options.env_id"),
        ("{env_id: vf_arith, env_args: {colour: red}}", "env.options.env_args"),
        ("{env_id: vf_arith, step_timeout_s: 0}", "env.options.step_timeout_s"),
    ]:
        cfg = load_config(None, [*base, f"env.options={options}"])
        with pytest.raises(ConfigError, match=field) as e:
            preflight(cfg)
        assert "\n" not in str(e.value)
    assert not any(tmp_path.iterdir())
    import sys

    monkeypatch.setitem(sys.modules, "verifiers", None)
    cfg = load_config(None, [*base, "env.options.env_id=vf_arith"])
    with pytest.raises(ConfigError, match=r"pip install 'turnrl\[verifiers\]'"):
        preflight(cfg)


@pytest.mark.parametrize("args", [{}, {"mode": "guess"}])
def test_doctor_passes(args, monkeypatch):
    monkeypatch.chdir(ROOT / "examples")
    options = f"env.options={{env_id: vf_arith, env_args: {args or '{}'}}}".replace("'", "")
    out = CliRunner().invoke(app, ["doctor", "verifiers", options, "--tasks", "3"])
    assert out.exit_code == 0, out.output
    assert "all checks passed" in out.output


def test_one_training_step_through_turnrl_train(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "examples")
    rows = train_one_step(tmp_path, ["env.name=verifiers", "env.options.env_id=vf_arith"])
    assert [r["step"] for r in rows if "loss" in r] == [1]
    trained = next(r for r in rows if "loss" in r)
    assert "rubric/correct_answer" in trained and "rubric/reply_length" in trained, sorted(trained)
