"""Token-exact multi-turn rollouts with real tokenizers and chat templates."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.envs.guess import BinarySearchAgent, GuessFamily
from turnrl.envs.registry import make_family
from turnrl.envs.scripted import ScriptedAgent
from turnrl.policy.base import Generation, SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import turn_end_token
from turnrl.rewards import build_rubric, score_trajectories
from turnrl.rollout.agent_loop import (
    EpisodeRequest,
    RolloutLimits,
    collect,
    default_sampling,
    run_episode,
)
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.tiny.model import tiny_model, train_tokenizer
from turnrl.types import RewardResult, Task, TerminationReason

FAMILY = GuessFamily()


@pytest.fixture(scope="module")
def tiny():
    texts = [
        json.dumps({"name": "guess", "arguments": {"number": i}}) + " higher lower correct"
        for i in range(300)
    ]
    tok = train_tokenizer(texts, vocab_size=700)
    model = tiny_model(tok, seed=0)
    return tok, HFPolicy(model, tok.pad_token_id)


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="SmolLM2 needs the gguf package (dev extra)")
    from turnrl.policy.models import SMOLLM2, load_model, load_tokenizer

    tok = load_tokenizer(SMOLLM2)
    model = load_model(SMOLLM2)
    return tok, HFPolicy(model, tok.pad_token_id)


def renderer_for(tok) -> ChatRenderer:
    return ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))


class Recording:
    """Wraps a backend and records every generation per episode seed."""

    def __init__(self, backend):
        self.backend = backend
        self.version = backend.version
        self.calls: dict[int, list[Generation]] = {}

    def generate_batch(self, prompts, params, seeds=None):
        out = self.backend.generate_batch(prompts, params, seeds)
        for s, g in zip(seeds, out):
            self.calls.setdefault(s // 1000, []).append(g)
        return out


class Forced:
    """Teacher-forces the actions of scripted agents through a real model: the ids are the
    tokenisation of the agent's tool call, the logprobs are the model's for those ids."""

    def __init__(self, policy: HFPolicy, renderer: ChatRenderer, agents: dict[int, ScriptedAgent]):
        self.policy, self.renderer, self.agents = policy, renderer, agents
        self.version = policy.version

    def generate_batch(self, prompts, params, seeds=None):
        out = []
        for prompt, seed in zip(prompts, seeds):
            text = self.renderer.decode(prompt)
            last = text.rsplit("<|im_start|>", 2)[-2].split("\n", 1)[1]  # last message body
            obs = last[: last.rindex(self.renderer.turn_end)]
            call = self.agents[seed // 1000].act(obs)
            ids = self.renderer.encode(self.renderer.parser.format([call])) + [
                self.renderer.turn_end_id
            ]
            lp = self.policy.score([prompt + ids], temperature=params.temperature)[0][len(prompt) :]
            out.append(Generation(ids, lp, True, self.version))
        return out


def check_token_exact(traj, renderer, tools, generations, first_prompt_messages):
    """ids == prompt + a1 + delta1 + a2 + ...; mask 1 exactly on sampled ids; decode == template."""
    traj.validate()
    expected = renderer.prompt_ids(first_prompt_messages, tools)
    assert traj.token_ids[: traj.prompt_len] == expected
    pos = traj.prompt_len
    for turn, gen in zip(traj.turns, generations):
        assert turn.action_start == pos
        assert traj.token_ids[turn.action_start : turn.action_end] == gen.token_ids
        assert all(traj.loss_mask[turn.action_start : turn.action_end])
        pos = turn.action_end
        if not gen.stopped:  # the closing token the sampler did not produce, mask 0
            assert traj.token_ids[pos] == renderer.turn_end_id and traj.loss_mask[pos] == 0
            pos += 1
        if turn.obs_end > turn.obs_start:
            assert turn.obs_start == pos
            obs_msgs = [m for m in traj.messages if m["role"] == "tool"]
            assert not any(traj.loss_mask[turn.obs_start : turn.obs_end])
            pos = turn.obs_end
    assert pos == len(traj.token_ids)
    assert len(generations) == len(traj.turns)
    del obs_msgs
    # The decoded sequence is the template's rendering of the whole conversation.
    rendered = renderer.render(traj.messages, tools, add_generation_prompt=True)
    if traj.termination is TerminationReason.DONE:
        rendered = renderer.render(traj.messages, tools, add_generation_prompt=False)
        # ChatML writes a newline after the last turn-end; nothing was sampled after it.
        assert rendered.endswith(renderer.turn_end + "\n")
        rendered = rendered[:-1]
    assert renderer.decode(traj.token_ids) == rendered


def check_logprobs(traj, policy: HFPolicy, temperature: float):
    rescored = policy.score([traj.token_ids], temperature=temperature)[0]
    for i, m in enumerate(traj.loss_mask):
        if m:
            assert abs(rescored[i] - traj.behavior_logprobs[i]) < 1e-4, i


def run(requests, renderer, backend, limits, params=None, make_env=FAMILY.make_env):
    async def go():
        batcher = GenerationBatcher(backend, params or default_sampling(renderer))
        trajs = await collect(requests, make_env, renderer, batcher, limits)
        return trajs, batcher

    return asyncio.run(go())


def first_messages(task: Task, family=FAMILY):
    env = family.make_env()
    first = asyncio.run(env.reset(task))
    return [
        {"role": "system", "content": env.instructions},
        {"role": "user", "content": first},
    ], env.tool_schemas()


@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_sampled_episodes_are_token_exact(model, request):
    tok, policy = request.getfixturevalue(model)
    renderer = renderer_for(tok)
    recorder = Recording(policy)
    tasks = FAMILY.tasks("train", 4)
    reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(tasks)]
    limits = RolloutLimits(
        max_turns=6, max_new_tokens=20, max_parse_errors=100, max_context_tokens=4096
    )
    trajs, batcher = run(reqs, renderer, recorder, limits)
    assert max(batcher.batch_sizes) == 4  # the episodes' requests were batched together
    for i, traj in enumerate(trajs):
        assert len(traj.turns) == 6, traj.termination
        msgs, tools = first_messages(tasks[i])
        check_token_exact(traj, renderer, tools, recorder.calls[i], msgs)
        check_logprobs(traj, policy, 1.0)


@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_tool_calling_episodes_are_token_exact(model, request):
    tok, policy = request.getfixturevalue(model)
    renderer = renderer_for(tok)
    tasks = GuessFamily(1, 200).tasks("train", 3, seed=7)
    agents = {i: BinarySearchAgent(1, 200) for i in range(len(tasks))}
    recorder = Recording(Forced(policy, renderer, agents))
    reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(tasks)]
    limits = RolloutLimits(max_turns=12, max_context_tokens=8192)
    trajs, _ = run(reqs, renderer, recorder, limits, make_env=GuessFamily(1, 200).make_env)
    for i, traj in enumerate(trajs):
        assert traj.termination is TerminationReason.DONE and traj.reward == 1.0
        assert (
            len(traj.turns) >= 6
            or traj.turns[-1].tool_calls[0].arguments["number"] == tasks[i].payload["secret"]
        )
        msgs, tools = first_messages(tasks[i])
        check_token_exact(traj, renderer, tools, recorder.calls[i], msgs)
        check_logprobs(traj, policy, 1.0)
    assert max(len(t.turns) for t in trajs) >= 6


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_name, options", [("web", {"max_hops": 2}), ("computer", {"tier": "medium"})]
)
def test_smollm2_episodes_in_web_and_computer_envs_are_token_exact(smollm2, env_name, options):
    """A real model's chat template carries the browsing and desktop envs: the experts' calls,
    teacher-forced through SmolLM2, solve held-out tasks token-exactly."""
    tok, policy = smollm2
    renderer = renderer_for(tok)
    family = make_family(env_name, options)
    try:
        tasks = family.tasks("test", 2, seed=0)
        agents = {i: family.expert(t, seed=i) for i, t in enumerate(tasks)}
        recorder = Recording(Forced(policy, renderer, agents))
        reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(tasks)]
        limits = RolloutLimits(
            max_turns=20, max_new_tokens=256, max_context_tokens=8192, max_obs_tokens=1024
        )
        trajs, _ = run(reqs, renderer, recorder, limits, make_env=family.make_env)
        for i, traj in enumerate(trajs):
            assert traj.termination is TerminationReason.DONE and traj.reward == 1.0
            msgs, tools = first_messages(tasks[i], family)
            check_token_exact(traj, renderer, tools, recorder.calls[i], msgs)
            check_logprobs(traj, policy, 1.0)
    finally:
        family.close()


def test_top_p_and_temperature_logprobs_match_scoring(tiny):
    tok, policy = tiny
    renderer = renderer_for(tok)
    params = SamplingParams(temperature=0.7, top_p=0.9, stop_token_ids=(renderer.turn_end_id,))
    reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(FAMILY.tasks("train", 2))]
    limits = RolloutLimits(max_turns=3, max_new_tokens=16, max_parse_errors=100)
    trajs, _ = run(reqs, renderer, policy, limits, params=params)
    for traj in trajs:
        check_logprobs(traj, policy, 0.7)


def test_sampling_is_deterministic_given_seeds(tiny):
    tok, policy = tiny
    renderer = renderer_for(tok)
    reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(FAMILY.tasks("train", 3))]
    limits = RolloutLimits(max_turns=2, max_new_tokens=12, max_parse_errors=100)
    a, _ = run(reqs, renderer, policy, limits)
    b, _ = run(reqs[::-1], renderer, policy, limits)  # different batch order, same samples
    assert [t.token_ids for t in a] == [t.token_ids for t in b[::-1]]


def test_a_batch_has_the_same_rows_in_any_arrival_order():
    """Episodes whose env calls run on their own threads ask in any order; the batch's rows
    are the same, in the same order (so its log-probs are too)."""

    class Rows:
        def __init__(self):
            self.calls = []

        def generate_batch(self, prompts, params, seeds=None):
            self.calls.append(list(zip(seeds, prompts)))
            return [Generation([7], [-0.5], True, 0) for _ in prompts]

    async def ask(order):
        backend = Rows()
        batcher = GenerationBatcher(backend, SamplingParams(max_new_tokens=4), max_wait_s=60)
        for _ in order:
            batcher.episode_started()
        await asyncio.gather(*(batcher.generate([1, seed], 4, seed) for seed in order))
        await batcher.close()
        return backend.calls

    one, other = asyncio.run(ask([5, 2, 9, 1])), asyncio.run(ask([9, 1, 5, 2]))
    assert one == other == [[(1, [1, 1]), (2, [1, 2]), (5, [1, 5]), (9, [1, 9])]]


# --- endings and malformed calls -------------------------------------------------------------


class ScriptBackend:
    """Emits fixed action texts in order (per episode), with dummy logprobs."""

    version = 3

    def __init__(self, renderer: ChatRenderer, actions: list[str]):
        self.renderer, self.actions = renderer, actions

    def generate_batch(self, prompts, params, seeds=None):
        out = []
        for s in seeds:
            text = self.actions[min(s % 1000, len(self.actions) - 1)]
            ids = self.renderer.encode(text)[: params.max_new_tokens]
            stopped = len(ids) < params.max_new_tokens
            if stopped:
                ids = ids + [self.renderer.turn_end_id]
            out.append(Generation(ids, [-0.5] * len(ids), stopped, self.version))
        return out


def call(name, **args) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def episode(tiny, actions, limits=RolloutLimits(), env=None, task=None):
    tok, _ = tiny
    renderer = renderer_for(tok)
    task = task or Task("t", "guess", {"secret": 50, "low": 1, "high": 100})
    env = env or FAMILY.make_env()

    async def go():
        batcher = GenerationBatcher(ScriptBackend(renderer, actions), default_sampling(renderer))
        return await run_episode(env, EpisodeRequest(task, "g", 0), renderer, batcher, limits)

    traj = asyncio.run(go())
    traj.validate()
    return traj


def tool_messages(traj) -> list[str]:
    return [m["content"] for m in traj.messages if m["role"] == "tool"]


def test_done(tiny):
    traj = episode(tiny, [call("guess", number=10), call("guess", number=50)])
    assert traj.termination is TerminationReason.DONE and not traj.truncated
    assert traj.reward == 1.0 and tool_messages(traj) == ["higher"]
    assert set(traj.policy_versions) == {-1, 3}


def test_max_turns(tiny):
    traj = episode(tiny, [call("guess", number=10)], RolloutLimits(max_turns=4))
    assert traj.termination is TerminationReason.MAX_TURNS and traj.truncated
    assert len(traj.turns) == 4


def test_context_limit(tiny):
    traj = episode(
        tiny, [call("guess", number=10)], RolloutLimits(max_turns=50, max_context_tokens=450)
    )
    assert traj.termination is TerminationReason.CONTEXT_LIMIT
    assert len(traj.token_ids) <= 450 and len(traj.turns) >= 2


def test_generation_cut_at_max_new_tokens_is_closed_with_masked_turn_end(tiny):
    traj = episode(tiny, [call("guess", number=10)], RolloutLimits(max_turns=2, max_new_tokens=5))
    turn = traj.turns[0]
    assert turn.action_end - turn.action_start == 5
    assert traj.token_ids[turn.action_end] == renderer_for(tiny[0]).turn_end_id
    assert traj.loss_mask[turn.action_end] == 0


class SlowEnv(ToolEnv):
    name = "slow"
    tools = ("wait",)

    async def reset(self, task):
        self.instructions = "wait"
        return "go"

    async def wait(self) -> str:
        """Sleep for a long time."""
        await asyncio.sleep(30)
        return "woke"

    async def grade(self):
        return RewardResult(1.0, True)


class CrashEnv(SlowEnv):
    async def wait(self) -> str:
        """Crash."""
        raise RuntimeError("disk on fire")


def test_timeout(tiny):
    traj = episode(tiny, [call("wait")], RolloutLimits(episode_timeout_s=0.5), env=SlowEnv())
    assert traj.termination is TerminationReason.TIMEOUT and traj.reward == 0.0
    assert "wall-clock" in traj.error


def test_env_error_is_recorded(tiny):
    traj = episode(tiny, [call("wait")], env=CrashEnv())
    assert traj.termination is TerminationReason.ENV_ERROR
    assert "disk on fire" in traj.error


@pytest.mark.parametrize(
    "action, message",
    [
        ('<tool_call>{"name": "guess", "arguments": {number: 3}}</tool_call>', "not valid JSON"),
        ("I think it is 50", "no tool call found"),
        ('<tool_call>{"name": "guess"', "never closed"),
        (call("shout", text="hi"), "unknown tool 'shout'"),
        (call("guess", number="fifty"), "valid integer"),
        (call("guess", num=3), "number: Field required"),
        ('<tool_call>["guess", 3]</tool_call>', 'string "name"'),
    ],
)
def test_malformed_calls_become_observations_then_parse_errors(tiny, action, message):
    traj = episode(tiny, [action], RolloutLimits(max_parse_errors=3))
    assert traj.termination is TerminationReason.PARSE_ERRORS
    obs = tool_messages(traj)
    assert len(obs) == 2 and message in obs[0]  # the third error ends the episode
    assert traj.metrics["parse_errors"] == 3
    assert [t.malformed for t in traj.turns] == [True] * 3


def test_long_observation_is_clipped_with_marker(tiny):
    class Loud(SlowEnv):
        async def wait(self) -> str:
            """Shout."""
            return "la " * 2000

    traj = episode(tiny, [call("wait")], RolloutLimits(max_turns=2, max_obs_tokens=40), env=Loud())
    obs = tool_messages(traj)[0]
    assert "tokens clipped ...]" in obs
    span = traj.turns[0].obs_end - traj.turns[0].obs_start
    assert span < 150  # 2000 words unclipped


def test_anchor_and_per_turn_reward_are_recorded(tiny):
    class Rewarding(SlowEnv):
        async def wait(self) -> ToolOutput:
            """Pay out."""
            return ToolOutput("paid", reward=0.25)

    traj = episode(tiny, [call("wait")], RolloutLimits(max_turns=2), env=Rewarding())
    assert [t.env_reward for t in traj.turns] == [0.25, 0.25]  # what the env reported
    assert traj.turns[0].anchor == "paid"
    assert not any(t.malformed for t in traj.turns)
    # the rubric decides what the trainer sees: the env's step rewards under the grade weight
    assert [t.reward for t in traj.turns] == [0.0, 0.0]
    score_trajectories([traj], build_rubric(grade_weight=2.0))
    assert [t.reward for t in traj.turns] == [0.5, 0.5]


@pytest.mark.parametrize("env_name", ["tools", "user"])
def test_progress_shaping_through_the_agent_loop_and_the_rubric(tiny, env_name):
    """The env measures progress after reset and after every turn; reward.shaping turns its
    changes into per-turn rewards: the expert's sum to the progress made (1), a destructive
    call earns a negative one, and without shaping every turn gets 0."""
    from turnrl.envs.tools.expert import solution_calls
    from turnrl.envs.user.expert import expert_plan

    family = make_family(env_name, {})
    template = "files_find_delete" if env_name == "tools" else "cancel_pending"
    task = next(t for t in family.tasks("train", 200) if t.payload["template"] == template)
    plan, end = (
        (solution_calls, "done") if env_name == "tools" else (expert_plan, "end_conversation")
    )
    actions = [call(c.name, **c.arguments) for c in plan(task.payload)] + [call(end)]
    limits = RolloutLimits(max_turns=len(actions), max_new_tokens=1024, max_context_tokens=16384)

    def shaped(actions, shaping):
        traj = episode(tiny, actions, limits, env=family.make_env(), task=task)
        assert traj.reset_measures == {"progress": 0.0}
        score_trajectories([traj], build_rubric(shaping=shaping))
        return traj

    traj = shaped(actions, {"progress": 1.0})
    assert traj.termination is TerminationReason.DONE and traj.metrics["success"] == 1.0
    rewards = [t.reward for t in traj.turns]
    assert sum(rewards) == pytest.approx(1.0) and min(rewards) >= 0 and max(rewards) > 0
    assert rewards == [
        pytest.approx(t.measures["progress"] - before)
        for t, before in zip(traj.turns, [0.0] + [t.measures["progress"] for t in traj.turns])
    ]
    assert traj.metrics["reward/shaping_progress/return"] == pytest.approx(1.0)
    assert {t.reward for t in shaped(actions, {}).turns} == {0.0}
    if env_name == "tools":
        keep = task.payload["goal"]["files"][0]["path"]  # a file the goal keeps
        bad = shaped([call("delete_file", path=keep)], {"progress": 1.0})
        assert bad.turns[0].reward < 0  # away from the goal


def test_backend_failure_ends_episode_not_run(tiny):
    tok, _ = tiny
    renderer = renderer_for(tok)

    class Broken:
        version = 0

        def generate_batch(self, prompts, params, seeds=None):
            raise torch.cuda.OutOfMemoryError("boom")

    reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(FAMILY.tasks("train", 2))]
    trajs, _ = run(reqs, renderer, Broken(), RolloutLimits())
    assert all(t.termination is TerminationReason.ENV_ERROR and "boom" in t.error for t in trajs)
