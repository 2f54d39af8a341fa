"""Shared by the ecosystem adapter tests: scripted agents teacher-forced through the real agent
loop with SmolLM2's tokenizer and chat template (a random-weight model of its vocabulary scores
the forced ids), and the token-exact check of the episode that comes out."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.chat_families import random_model, smollm2
from turnrl.chat import ChatRenderer, check_template
from turnrl.envs.base import StepResult, ToolEnv
from turnrl.envs.scripted import ScriptedAgent
from turnrl.policy.base import Generation
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import (
    EpisodeRequest,
    RolloutLimits,
    collect,
    default_sampling,
)
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.types import Task, TerminationReason, Trajectory

_MODEL: dict[str, Any] = {}


def smollm2_policy() -> tuple[ChatRenderer, HFPolicy]:
    if not _MODEL:
        tok = smollm2()
        _MODEL["renderer"] = check_template(tok)
        _MODEL["policy"] = HFPolicy(random_model(tok, "smollm2"), tok.pad_token_id)
    return _MODEL["renderer"], _MODEL["policy"]


class Watched:
    """An env whose observations are recorded (per episode) for the scripted agent to read."""

    def __init__(self, env: ToolEnv, seen: list[str]) -> None:
        self.env, self.seen = env, seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    async def reset(self, task: Task) -> str:
        first = await self.env.reset(task)
        self.seen.append(first)
        return first

    async def step(self, call) -> StepResult:
        out = await self.env.step(call)
        self.seen.append(out.observation)
        return out

    async def answer(self, text: str) -> StepResult:
        out = await self.env.answer(text)
        self.seen.append(out.observation)
        return out


class Forced:
    """A backend that emits each episode's scripted call (or reply text) as token ids, with the
    policy's own logprobs of those ids."""

    def __init__(self, renderer, policy, agents: dict[int, ScriptedAgent], seen) -> None:
        self.renderer, self.policy, self.agents, self.seen = renderer, policy, agents, seen
        self.version = policy.version
        self.generations: dict[int, list[Generation]] = {}

    def generate_batch(self, prompts, params, seeds=None):
        out = []
        for prompt, seed in zip(prompts, seeds):
            k = seed // 1000
            act = self.agents[k].act(self.seen[k][-1])
            text = act if isinstance(act, str) else self.renderer.parser.format([act])
            ids = self.renderer.encode(text) + [self.renderer.turn_end_id]
            lp = self.policy.score([prompt + ids], temperature=params.temperature)[0][len(prompt) :]
            gen = Generation(ids, lp, True, self.version)
            self.generations.setdefault(k, []).append(gen)
            out.append(gen)
        return out


def play_forced(
    make_env, tasks: list[Task], agents: list[ScriptedAgent], limits: RolloutLimits | None = None
) -> tuple[list[Trajectory], Forced, ChatRenderer]:
    """Run ``agents[i]`` on ``tasks[i]`` through the real agent loop, all concurrently."""
    renderer, policy = smollm2_policy()
    seen: dict[int, list[str]] = {i: [] for i in range(len(tasks))}
    envs = iter([Watched(make_env(), seen[i]) for i in range(len(tasks))])
    backend = Forced(renderer, policy, dict(enumerate(agents)), seen)
    limits = limits or RolloutLimits(max_turns=20, max_context_tokens=8192, max_obs_tokens=2048)

    async def go():
        batcher = GenerationBatcher(backend, default_sampling(renderer))
        try:
            reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(tasks)]
            return await collect(reqs, lambda: next(envs), renderer, batcher, limits)
        finally:
            await batcher.close()

    return asyncio.run(go()), backend, renderer


def check_token_exact(traj: Trajectory, renderer: ChatRenderer, tools, generations) -> None:
    """ids == prompt + a1 + delta(o1) + a2 + ..., each observation delta rendered from its own
    message; the loss mask is 1 exactly on the sampled ids; the decoded ids are the template's
    rendering of the whole conversation."""
    traj.validate()
    expected = renderer.prompt_ids(traj.messages[:2], tools)
    assert traj.token_ids[: traj.prompt_len] == expected
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert len(generations) == len(traj.turns)
    for k, gen in enumerate(generations):
        turn = traj.turns[k]
        assert (turn.action_start, turn.action_end) == (
            len(expected),
            len(expected) + len(gen.token_ids),
        )
        expected += gen.token_ids
        if k < len(tool_msgs) and turn.obs_end > turn.obs_start:
            expected += renderer.observation_ids([tool_msgs[k]])
    assert traj.token_ids == expected
    sampled = {i for t in traj.turns for i in range(t.action_start, t.action_end)}
    assert traj.loss_mask == [int(i in sampled) for i in range(len(traj.token_ids))]
    if traj.termination is TerminationReason.DONE:
        rendered = renderer.render(traj.messages, tools, add_generation_prompt=False)
        assert rendered.startswith(renderer.decode(traj.token_ids))


def train_one_step(tmp_path, env_args: list[str]) -> list[dict]:
    """``turnrl train`` for one step on a random-weight Llama (a small local vocabulary with
    Llama 3's template), SFT off; returns the metrics rows."""
    import json

    from typer.testing import CliRunner

    from tests.chat_families import llama3
    from turnrl.cli import app

    tok = llama3()
    model_dir = tmp_path / "model"
    random_model(tok, "llama3").save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    args = [
        "train", "--quiet", *env_args, f"model.name={model_dir}", "steps=1",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_turns=3",
        "rollout.max_new_tokens=16", "rollout.max_context_tokens=1024", "env.eval_tasks=2",
        "threads=1", f"runs_dir={tmp_path / 'runs'}", "name=adapter",
    ]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    rows = (tmp_path / "runs/adapter/metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in rows]
