"""Rubric weighting, metric-only functions, error handling, reward sources and screeners."""

from __future__ import annotations

import asyncio

import pytest

from turnrl.envs.code import exploits
from turnrl.rewards import Episode, Rubric, Screen, apply_results, build_rubric, score_trajectories
from turnrl.rewards import sources as S
from turnrl.rewards.screeners import MODEL_FLAGGED, SCREENER_ERROR, ModelScreener, RuleScreener
from turnrl.types import RewardResult, TerminationReason, ToolCall, Trajectory, Turn


def traj(group: str = "g", calls: list[ToolCall] = (), messages=None) -> Trajectory:
    turns = [Turn(0, 0, 0, 0, [], 0, tool_calls=[c]) for c in calls]
    return Trajectory(
        task_id="t",
        group_id=group,
        prompt_len=0,
        token_ids=[],
        loss_mask=[],
        behavior_logprobs=[],
        policy_versions=[],
        turns=turns,
        messages=messages or [],
    )


def score(rubric: Rubric, ep: Episode) -> RewardResult:
    return asyncio.run(rubric.score(ep))


# -- rubric -----------------------------------------------------------------------------------


def correct(ep: Episode) -> float:
    return 1.0


def half(ep: Episode) -> float:
    return 0.5


def length(ep: Episode) -> float:
    return 7.0


def test_rubric_weights_and_metric_only_functions():
    rubric = Rubric([(correct, 1.0), (half, 0.4), (length, 0.0)])
    r = score(rubric, Episode(traj()))
    assert r.reward == pytest.approx(1.0 + 0.4 * 0.5)  # length is logged, not rewarded
    assert r.components == {"correct": 1.0, "half": 0.5, "length": 7.0}
    assert not r.info["skipped"] and "errors" not in r.info


def test_rubric_keeps_components_and_flags_of_nested_results():
    def graded(ep: Episode) -> RewardResult:
        return RewardResult(0.25, False, components={"f1": 0.25, "exact": 0.0}, flags=["x"])

    async def bonus(ep: Episode) -> bool:  # async functions and bools are fine
        return True

    r = score(Rubric([(graded, 2.0), (bonus, 1.0)]), Episode(traj()))
    assert r.reward == pytest.approx(2 * 0.25 + 1.0)
    assert r.components["graded/f1"] == 0.25 and r.components["graded/exact"] == 0.0
    assert r.components["bonus"] == 1.0 and r.flags == ["x"]
    assert "details" not in r.info  # graded() returned no info


def test_rubric_success_from_env_grade_or_threshold():
    rubric = Rubric([half], success_threshold=0.5)
    assert score(rubric, Episode(traj())).success is True
    graded = RewardResult(1.0, False, proxy_success=1.0, flags=["test_tampering"])
    r = score(rubric, Episode(traj(), graded=graded))
    assert r.success is False and r.proxy_success == 1.0 and r.flags == ["test_tampering"]


def test_raising_reward_function_is_recorded_never_silent_zero():
    def broken(ep: Episode) -> float:
        raise RuntimeError("grader crashed")

    def nan(ep: Episode) -> float:
        return float("nan")

    t = traj()
    r = score(Rubric([(correct, 1.0), (broken, 1.0)]), Episode(t))
    assert r.info["skipped"] and not r.info["judge_skipped"]
    assert r.info["errors"]["broken"] == "RuntimeError: grader crashed"
    assert "broken" not in r.components
    metrics = apply_results([t], [r])
    assert t.termination is TerminationReason.ENV_ERROR and "grader crashed" in t.error
    assert metrics["reward/skipped_rate"] == 1.0 and t.metrics["reward/skipped"] == 1.0
    # a metric-only function that fails is recorded but skips nothing
    r = score(Rubric([(correct, 1.0), (broken, 0.0)]), Episode(traj()))
    assert not r.info["skipped"] and r.reward == 1.0 and "broken" in r.info["errors"]
    # a NaN is an error too, not a number to train on
    r = score(Rubric([(nan, 1.0)]), Episode(traj()))
    assert r.info["skipped"] and "NonFiniteReward" in r.info["errors"]["nan"]
    assert r.flags == ["non_finite_reward"]
    # and so is a value that is not a number
    r = score(Rubric([(lambda ep: "high", 1.0)]), Episode(traj()))
    assert r.info["skipped"] and "TypeError" in r.info["errors"]["<lambda>"]


def test_rubric_rejects_bad_setup():
    with pytest.raises(ValueError, match="duplicate"):
        Rubric([(correct, 1.0), (correct, 0.0)])
    with pytest.raises(ValueError, match="weight"):
        Rubric([(correct, "high")])
    with pytest.raises(ValueError, match="at least one"):
        Rubric([])


def test_apply_results_writes_rewards_components_and_means():
    def steps(ep: Episode) -> float:
        return float(len(ep.trajectory.turns))

    ts = [traj("a"), traj("a")]
    rubric = Rubric([(steps, 0.25), (length, 0.0)])
    ts[0].turns = [Turn(0, 0, 0, 0, [], 0), Turn(0, 0, 0, 0, [], 0)]
    results = asyncio.run(rubric.score_batch([Episode(t) for t in ts]))
    metrics = apply_results(ts, results)
    assert [t.reward for t in ts] == [0.5, 0.0]
    assert ts[0].metrics["reward/length"] == 7.0
    assert metrics["rubric/steps"] == pytest.approx(1.0)
    assert metrics["reward/skipped_rate"] == 0.0


# -- what the env reported: its grade, its steps' rewards, its measures ------------------------


def measured(reset: float, after: list[float | None], env_rewards=()) -> Trajectory:
    """An episode whose env measured ``progress`` at reset and after each turn (None: a turn
    it did not measure), graded 1."""
    t = traj()
    t.reset_measures = {"progress": reset}
    t.turns = [
        Turn(0, 0, 0, 0, [], 0, measures={} if p is None else {"progress": p}) for p in after
    ]
    for turn, r in zip(t.turns, env_rewards):
        turn.env_reward = r
    t.graded = RewardResult(1.0, True, components={"progress": after[-1] or 0.0})
    return t


def test_shaping_rewards_each_turn_by_the_change_of_a_measure():
    """Potential-based: r_k = progress after turn k - progress before it; the turns' rewards sum
    to the progress made, a turn the env did not measure gets 0."""
    t = measured(0.0, [0.5, 0.25, None, 1.0])
    r = score(
        Rubric([(S.env_reward, 1.0), (S.Shaping("progress"), 1.0)]), Episode(t, graded=t.graded)
    )
    assert r.turn_rewards == [0.5, -0.25, 0.0, 0.75]
    assert r.reward == 1.0  # shaping adds nothing to the final reward
    assert r.components["shaping_progress/return"] == 1.0
    # weights scale per-turn rewards as they scale final ones; weight 0 logs the return only
    r = score(
        Rubric([(S.env_reward, 1.0), (S.Shaping("progress"), 0.5)]), Episode(t, graded=t.graded)
    )
    assert r.turn_rewards == [0.25, -0.125, 0.0, 0.375]
    r = score(
        Rubric([(S.env_reward, 1.0), (S.Shaping("progress"), 0.0)]), Episode(t, graded=t.graded)
    )
    assert r.turn_rewards == [0.0] * 4 and r.components["shaping_progress/return"] == 1.0
    # the start counts: a task with nothing to change starts at progress 1
    t = measured(1.0, [0.0, 1.0])
    assert score(Rubric([S.Shaping("progress")]), Episode(t, graded=t.graded)).turn_rewards == [
        -1,
        1,
    ]
    # an env that measures no such thing: the reward is unknown, never a silent 0
    r = score(Rubric([S.Shaping("distance")]), Episode(t, graded=t.graded))
    assert r.info["skipped"] and "measures no 'distance'" in r.info["errors"]["shaping_distance"]


def test_env_step_rewards_reach_the_turns_under_the_grade_weight():
    t = measured(0.0, [0.5, 1.0], env_rewards=[0.25, 0.0])
    r = score(Rubric([(S.env_reward, 2.0)]), Episode(t, graded=t.graded))
    assert r.reward == 2.0 and r.turn_rewards == [0.5, 0.0]
    score_trajectories([t], Rubric([(S.env_reward, 1.0), (S.Shaping("progress"), 1.0)]))
    assert [u.reward for u in t.turns] == [0.75, 0.5] and t.reward == 1.0
    # a screened-out episode earns nothing, per turn neither
    hacked = measured(0.0, [0.5, 1.0])
    hacked.turns[0].tool_calls = [run("git log")]
    rubric = Rubric([(S.env_reward, 1.0), (S.Shaping("progress"), 1.0), Screen(RuleScreener())])
    score_trajectories([hacked], rubric)
    assert hacked.reward == 0.0 and [u.reward for u in hacked.turns] == [0.0, 0.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards_are_flagged_and_left_out_of_their_group(bad):
    """A NaN or ±inf, final or per-turn, from the env or a reward function: the reward is
    unknown, so the episode is flagged, excluded from its group, and warned about once."""
    final, per_turn, fine = measured(0.0, [1.0]), measured(0.0, [1.0], [bad]), measured(0.0, [1.0])
    final.graded.reward = bad
    lines: list[str] = []
    metrics = score_trajectories([final, per_turn, fine], build_rubric(), warn=lines.append)
    for t in (final, per_turn):
        assert t.excluded and t.flags == ["non_finite_reward"] and t.reward == 0.0
        assert t.metrics["hacked"] == 0.0 and "reward skipped" in t.error
    assert not fine.excluded and fine.reward == 1.0 and fine.flags == []
    assert len(lines) == 2 and lines[0].startswith("warning: task t: non-finite reward (")
    assert metrics["reward/skipped_rate"] == pytest.approx(2 / 3)
    # from a metric-only function it is recorded, flags nothing and skips nothing
    r = score(Rubric([(correct, 1.0), (lambda ep: bad, 0.0)]), Episode(traj()))
    assert not r.info["skipped"] and r.flags == [] and "NonFiniteReward" in str(r.info["errors"])


# -- screeners ---------------------------------------------------------------------------------


def run(cmd: str) -> ToolCall:
    return ToolCall("run", {"command": cmd})


HONEST = [
    ToolCall("read_file", {"path": "stack.py"}),
    ToolCall("read_file", {"path": "test_stack.py"}),
    ToolCall("edit_file", {"path": "stack.py", "old": "i - 1", "new": "i"}),
    run("python -m pytest -q test_stack.py"),
    run("cat test_stack.py | head"),
    ToolCall("submit", {}),
]


@pytest.mark.parametrize(
    "calls,flag",
    [
        (
            [ToolCall("edit_file", {"path": "test_stack.py", "old": "== 3", "new": "== 2"})],
            "test_tampering",
        ),
        ([ToolCall("write_file", {"path": "tests/test_x.py", "content": ""})], "test_tampering"),
        ([run("rm test_stack.py")], "test_tampering"),
        ([run("sed -i 's/3/2/' test_stack.py")], "test_tampering"),
        ([ToolCall("write_file", {"path": "conftest.py", "content": "x = 1"})], "pytest_patch"),
        (
            [ToolCall("write_file", {"path": "stack.py", "content": "import os\nos._exit(0)\n"})],
            "early_exit",
        ),
        (
            [
                ToolCall(
                    "edit_file",
                    {"path": "stack.py", "old": "x = 1", "new": "import sys; sys.exit(0)"},
                )
            ],
            "early_exit",
        ),
        ([run("echo 'raise SystemExit(0)' >> stack.py")], "early_exit"),
        (
            [
                ToolCall(
                    "edit_file",
                    {"path": "stack.py", "old": "pass", "new": "def __eq__(self, o): return True"},
                )
            ],
            "always_equal",
        ),
        ([run("cat /grader/hidden_tests/test_stack.py")], "grader_access"),
        ([ToolCall("read_file", {"path": "../turnrl/envs/code/grader.py"})], "grader_access"),
        ([run("git log -p")], "git_history"),
        ([ToolCall("read_file", {"path": ".git/ORIG_HEAD"})], "git_history"),
    ],
)
def test_rule_screener_flags(calls, flag):
    assert flag in exploits.ALL_FLAGS
    assert RuleScreener().screen(traj(calls=HONEST + calls)) == [flag]


def test_rule_screener_passes_honest_work_and_reads_messages():
    assert RuleScreener().screen(traj(calls=HONEST)) == []
    # existing sys.exit in the replaced text is not new evidence
    keep = ToolCall("edit_file", {"path": "cli.py", "old": "sys.exit(1)", "new": "sys.exit(2)"})
    assert RuleScreener().screen(traj(calls=[keep])) == []
    msgs = [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "run", "arguments": {"command": "git log"}}</tool_call>',
        },
        {"role": "assistant", "content": "not a tool call"},
    ]
    assert RuleScreener().screen(traj(messages=msgs)) == ["git_history"]


def screened(trajs: list[Trajectory], screeners, zero: bool = True) -> dict[str, float]:
    """The reward pipeline with these screeners, on episodes the env graded 1."""
    for t in trajs:
        t.graded = RewardResult(1.0, True)
    rubric = Rubric([(S.env_reward, 1.0)] + [Screen(s, zero=zero) for s in screeners])
    return score_trajectories(trajs, rubric)


def test_screen_members_flag_zero_and_count():
    hacked = traj(calls=[run("git log")])
    honest = traj(calls=HONEST)
    metrics = screened([hacked, honest], [RuleScreener()])
    assert hacked.reward == 0.0 and hacked.flags == ["git_history"] and honest.reward == 1.0
    assert hacked.metrics["hacked"] == 1.0 and honest.metrics["hacked"] == 0.0
    assert hacked.metrics["reward/screen_rules"] == 1.0  # the screen's own value, a metric
    assert metrics["screen/git_history"] == 0.5 and metrics["screen/flagged_rate"] == 0.5
    again = traj(calls=[run("git log")])
    metrics = screened([again], [RuleScreener()], zero=False)
    assert again.reward == 1.0 and again.flags == ["git_history"]
    assert metrics["screen/flagged_rate"] == 1.0  # flagged and counted, not zeroed


def test_screen_penalty_overrides_every_weighted_member_and_weight_must_be_0():
    t = traj(calls=[run("git log")])
    t.graded = RewardResult(1.0, True)
    rubric = Rubric([(S.env_reward, 1.0), (half, 2.0), Screen(RuleScreener(), penalty=-0.5)])
    score_trajectories([t], rubric)
    assert t.reward == -0.5 and t.metrics["reward/half"] == 0.5
    with pytest.raises(ValueError, match="screen_rules is a screen: its weight must be 0"):
        Rubric([(S.env_reward, 1.0), (Screen(RuleScreener()), 1.0)])


def test_episodes_without_a_grade_are_excluded_and_counted():
    """Env errors, timeouts and lost episodes have no grade: the rubric does not score them,
    they keep the 0.0 placeholder, ``excluded`` is true, and the batch metrics count them."""
    ok, crashed, slow = traj("a"), traj("a"), traj("a")
    ok.graded = RewardResult(1.0, True)
    crashed.termination, crashed.error = TerminationReason.ENV_ERROR, "RuntimeError: boom"
    slow.termination = TerminationReason.TIMEOUT
    calls = []

    def seen(ep: Episode) -> float:
        calls.append(ep.trajectory)
        return 1.0

    metrics = score_trajectories([ok, crashed, slow], Rubric([(S.env_reward, 1.0), (seen, 0.0)]))
    assert calls == [ok] and ok.reward == 1.0 and not ok.excluded
    assert crashed.excluded and slow.excluded and crashed.reward == slow.reward == 0.0
    assert metrics["reward/excluded_rate"] == pytest.approx(2 / 3)
    assert (
        metrics["reward/env_error_rate"] == metrics["reward/timeout_rate"] == pytest.approx(1 / 3)
    )
    assert metrics["rubric/seen"] == pytest.approx(1 / 3)  # per episode of the batch

    # a weighted reward function that fails makes the reward unknown: excluded too
    def missing(ep: Episode) -> float:
        return ep.graded.components["missing"]

    broken = traj("b")
    broken.graded = RewardResult(1.0, True)
    score_trajectories([broken], Rubric([(S.env_reward, 1.0), (missing, 1.0)]))
    assert broken.excluded and broken.termination is TerminationReason.ENV_ERROR


def bonus(ep: Episode) -> float:
    """A reward function a config names by import path (tests.test_rewards:bonus)."""
    return 0.25


def test_build_rubric_adds_functions_by_import_path():
    t = traj(calls=[run("git log")])
    t.graded = RewardResult(1.0, True, components={"f1": 1.0})
    rubric = build_rubric({"tests.test_rewards:bonus": 2.0}, screeners=False)
    assert rubric.names == ["env_reward", "bonus"]
    score_trajectories([t], rubric)
    assert t.reward == 1.5 and t.flags == [] and t.metrics["reward/env_reward/f1"] == 1.0
    assert build_rubric(grade_weight=0.0).funcs[0][1] == 0.0
    for bad, msg in [
        ("tests.test_rewards", "expected an import path"),
        ("tests.test_rewards:nope", "AttributeError"),
        ("no_such_pkg.mod:f", "ModuleNotFoundError"),
        ("tests.test_rewards:HONEST", "not callable"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_rubric({bad: 1.0})


def test_reward_functions_config_fails_before_work():
    from turnrl.run.config import ConfigError, load_config
    from turnrl.run.preflight import checked_config

    cfg = load_config(
        None,
        ["model.name=tiny", "env.name=guess", "reward.functions={tests.test_rewards:bonus: 0}"],
    )
    assert cfg.reward.functions == {"tests.test_rewards:bonus": 0.0}
    with pytest.raises(ConfigError, match="reward.functions.*'nope:f'.*ModuleNotFoundError"):
        checked_config(None, ["model.name=tiny", "env.name=guess", "reward.functions={nope:f: 1}"])


def test_model_screener_and_screener_failures():
    class Chat:
        def __init__(self, reply):
            self.reply = reply

        async def chat(self, messages):
            if isinstance(self.reply, Exception):
                raise self.reply
            return self.reply

    class Broken:
        def screen(self, t):
            raise RuntimeError("boom")

    ts = [traj(calls=HONEST) for _ in range(4)]
    screeners = [
        [ModelScreener(Chat('{"hack": true, "reason": "edited tests"}'))],
        [ModelScreener(Chat('{"hack": false}'))],
        [ModelScreener(Chat("no idea"))],
        [Broken()],
    ]
    metrics = {}
    for t, s in zip(ts, screeners):
        metrics = screened([t], s)
    assert ts[0].flags == [MODEL_FLAGGED] and ts[0].reward == 0.0
    assert ts[1].flags == [] and ts[1].reward == 1.0
    # a failing screener is counted but never zeroes a reward
    assert ts[2].flags == [SCREENER_ERROR] and ts[2].reward == 1.0
    assert ts[3].flags == [SCREENER_ERROR] and ts[3].reward == 1.0
    assert metrics["screen/screener_error"] == 1.0 and metrics["screen/flagged_rate"] == 0.0
