"""Frozen subagents: the delegated answer is an observation (mask 0, none of the subagent's
tokens in the main trajectory); the snapshot does not move while the policy trains through
``train()`` and is refreshed when due; an endpoint subagent on a loopback stub; budgets end
the sub-episode (never the main one) with a recorded reason; bad config fails in one line."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.openai_stub import OpenAIStub
from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.cli import app
from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.envs.locker import DELEGATED, LockerEnv, LockerExpert, LockerFamily
from turnrl.envs.scripted import run_scripted
from turnrl.envs.wrappers import DelegatingEnv, with_subagent
from turnrl.policy.base import Generation
from turnrl.policy.models import turn_end_token
from turnrl.rollout import subagent as subagent_module
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, run_episode
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.subagent import ModelSubagent, subagent_metrics
from turnrl.run import build as build_module
from turnrl.run.build import start_subagent
from turnrl.run.config import load_config
from turnrl.run.recipe import train
from turnrl.tiny.model import train_tokenizer
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall

PARSER = HermesToolCallParser()
TASK = Task("locker-t-0", "locker", {"owner": "Ann", "code": 7})


def call_text(name: str, **arguments) -> str:
    return PARSER.format([ToolCall(name, arguments)])


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    texts = [
        call_text("read_ledger"),
        call_text("answer", code=7),
        call_text("open_locker", code=7),
    ]
    texts += [call_text("delegate", task=DELEGATED), "Locker of Ann: code=7", "Open the locker"]
    tok = train_tokenizer(texts * 20, vocab_size=400)
    return ChatRenderer(tok, PARSER, turn_end_token(tok))


class Writes:
    """A backend that writes the given texts in order (the last one again once they run out),
    each a finished turn; it records every prompt it was given."""

    def __init__(self, renderer: ChatRenderer, texts: list[str]) -> None:
        self.renderer, self.texts, self.version = renderer, list(texts), 0
        self.written: list[list[int]] = []

    def generate_batch(self, prompts, params, seeds=None):
        out = []
        for _ in prompts:
            text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
            ids = self.renderer.encode(text) + [self.renderer.turn_end_id]
            self.written.append(ids)
            out.append(Generation(ids, [-0.5] * len(ids), True, self.version))
        return out


def play(renderer, main_texts, sub_texts, limits=RolloutLimits(), env=None):
    """One main episode whose subagent writes ``sub_texts``: (trajectory, main, sub backends)."""
    main = Writes(renderer, main_texts)
    sub = Writes(renderer, sub_texts)
    subagent = ModelSubagent(sub, renderer, limits)  # type: ignore[arg-type]

    async def go():
        batcher = GenerationBatcher(main, main_sampling(renderer))
        try:
            wrapped = DelegatingEnv(env or LockerEnv(), subagent)
            return await run_episode(
                wrapped, EpisodeRequest(TASK, "g", 0), renderer, batcher, limits
            )
        finally:
            await batcher.close()

    return asyncio.run(go()), main, sub


def main_sampling(renderer):
    from turnrl.rollout.agent_loop import default_sampling

    return default_sampling(renderer)


def contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def test_delegated_answer_is_an_observation_and_no_subagent_token_is_trained(renderer):
    traj, main, sub = play(
        renderer,
        [call_text("delegate", task=DELEGATED), call_text("open_locker", code=7)],
        [call_text("read_ledger"), call_text("answer", code=7)],
    )
    traj.validate()  # loss_mask is 1 exactly on the main policy's two actions
    assert traj.termination is TerminationReason.DONE and traj.reward == 1.0
    assert [len(g) for g in sub.written] and len(main.written) == 2
    delegate_turn = traj.turns[0]
    obs = traj.token_ids[delegate_turn.obs_start : delegate_turn.obs_end]
    assert set(traj.loss_mask[delegate_turn.obs_start : delegate_turn.obs_end]) == {0}
    assert "7" in renderer.decode(obs)  # the answer arrived as env text
    # none of the subagent's sampled turns, nor what it read, is in the main trajectory
    for ids in sub.written:
        assert not contains(traj.token_ids, ids)
    assert not contains(traj.token_ids, renderer.encode("Locker of Ann"))
    trained = [t for t, m in zip(traj.token_ids, traj.loss_mask) if m]
    assert trained == [t for ids in main.written for t in ids]
    (call,) = traj.graded.info["subagent"]
    assert call["reason"] == "done" and call["answer"] == "7" and call["turns"] == 2
    assert call["generated_tokens"] == sum(len(ids) for ids in sub.written)
    m = subagent_metrics([traj])
    assert m["subagent/calls"] == 1 and m["subagent/answered"] == 1
    assert traj.metrics["subagent/turns"] == 2  # the episode's own metrics too
    assert m["subagent/tokens"] > m["subagent/generated_tokens"] > 0


class SlowLedger(LockerEnv):
    """The ledger takes a second to read."""

    def subagent_env(self):
        env = super().subagent_env()

        async def read_ledger() -> str:
            await asyncio.sleep(1.0)
            return "code=7"

        env.read_ledger = read_ledger  # type: ignore[method-assign]
        return env


@pytest.mark.parametrize(
    "budget, env, reason, says",
    [
        ({"max_turns": 2}, None, "max_turns", "ran out of turns"),
        ({"max_context_tokens": 40}, None, "context_limit", "ran out of context tokens"),
        ({"episode_timeout_s": 0.3}, SlowLedger(), "timeout", "ran past its time limit"),
    ],
)
def test_budget_overruns_end_the_sub_episode_not_the_main_one(renderer, budget, env, reason, says):
    limits = RolloutLimits(**{"max_turns": 6, **budget})
    # the subagent reads the ledger forever; the agent then guesses
    traj = _play_with_sub_limits(renderer, limits, env)
    assert traj.termination is TerminationReason.DONE and len(traj.turns) == 2
    (call,) = traj.graded.info["subagent"]
    assert call["reason"] == reason and call["answer"] is None
    assert says in traj.messages[3]["content"]  # what the agent read
    assert subagent_metrics([traj])[f"subagent/stop/{reason}"] == 1.0


def _play_with_sub_limits(renderer, sub_limits, env):
    main = Writes(
        renderer, [call_text("delegate", task=DELEGATED), call_text("open_locker", code=3)]
    )
    sub = Writes(renderer, [call_text("read_ledger")])
    subagent = ModelSubagent(sub, renderer, sub_limits)  # type: ignore[arg-type]

    async def go():
        batcher = GenerationBatcher(main, main_sampling(renderer))
        try:
            wrapped = DelegatingEnv(env or LockerEnv(), subagent)
            return await run_episode(
                wrapped, EpisodeRequest(TASK, "g", 0), renderer, batcher, RolloutLimits()
            )
        finally:
            await batcher.close()

    return asyncio.run(go())


class Notes(ToolEnv):
    """An env whose subagent shares its state: it may read the note, not submit."""

    name = "notes"
    tools = ("read_note", "submit")
    subagent_tools = ("read_note",)

    async def reset(self, task: Task) -> str:
        self.instructions, self.submitted = "Submit the note's word.", None
        return "Submit the word."

    def read_note(self) -> str:
        """Read the note."""
        return "the word is kiwi"

    def submit(self, word: str) -> ToolOutput:
        """Submit the word."""
        self.submitted = word
        return ToolOutput("ok", done=True)

    async def grade(self) -> RewardResult:
        ok = self.submitted == "kiwi"
        return RewardResult(float(ok), ok)


def test_default_sub_env_is_a_view_of_the_same_state(renderer):
    main = Writes(
        renderer, [call_text("delegate", task="find the word"), call_text("submit", word="kiwi")]
    )
    sub = Writes(renderer, [call_text("submit", word="x"), call_text("read_note"), "kiwi"])
    subagent = ModelSubagent(sub, renderer, RolloutLimits())  # type: ignore[arg-type]

    async def go():
        batcher = GenerationBatcher(main, main_sampling(renderer))
        try:
            env = DelegatingEnv(Notes(), subagent)
            return await run_episode(
                env, EpisodeRequest(TASK, "g", 0), renderer, batcher, RolloutLimits()
            )
        finally:
            await batcher.close()

    traj = asyncio.run(go())
    assert traj.messages[3]["content"] == "kiwi" and traj.reward == 1.0
    assert traj.graded.info["subagent"][0]["turns"] == 3  # the submit it tried was refused


class Helper(OpenAIStub):
    """An OpenAI-compatible stub that plays the ledger's helper with native tool calls."""

    def reply(self, body: dict) -> dict:
        read = [m for m in body["messages"] if m["role"] == "tool"]
        if read:
            code = int(re.search(r"code=(\d+)", read[-1]["content"])[1])
            name, args = "answer", {"code": code}
        else:
            name, args = "read_ledger", {}
        call = {"id": f"c{len(body['messages'])}", "type": "function"}
        call["function"] = {"name": name, "arguments": json.dumps(args)}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"choices": [{"message": message}]}


def test_endpoint_subagent_from_config_answers_on_loopback():
    helper = Helper()
    try:
        cfg = load_config(
            None,
            ["recipe=locker-tiny", f"subagent.model={{base_url: {helper.url}, model: helper}}"],
        )
        family = with_subagent(LockerFamily(), cfg.subagent.max_turns)
        run = start_subagent(cfg, family, None, None, None, 0)  # type: ignore[arg-type]
        assert run.snapshot is None and "helper" in run.describe

        async def go():
            eps = []
            for i, code in enumerate((7, 12)):
                task = Task(f"t{i}", "locker", {"owner": "Bob", "code": code})
                eps.append(await run_scripted(family.make_env(), task, LockerExpert(0.0)))
            return eps

        eps = asyncio.run(go())
    finally:
        helper.close()
    assert [ep.result.success for ep in eps] == [True, True]
    assert [ep.observations[0] for ep in eps] == ["7", "12"]
    (call,) = eps[0].result.info["subagent"]
    assert call["reason"] == "done" and call["turns"] == 2 and call["tokens"] > 0
    body = helper.bodies[0]
    assert body["model"] == "helper" and body["max_tokens"] == cfg.subagent.max_new_tokens
    assert [t["function"]["name"] for t in body["tools"]] == ["read_ledger", "answer"]
    assert body["messages"][1]["content"] == DELEGATED


# A train() run small enough for a test: a short warm start, two steps of four episodes.
SMALL = [
    "recipe=locker-tiny",
    "steps=2",
    "threads=1",
    "sft.episodes=60",
    "sft.epochs=1",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "algo.entropy_coef=0.01",  # a gradient even when a group's rewards tie
    "env.eval_tasks=4",
    "optim.minibatch_size=8",
    "optim.micro_batch_size=8",
]


@pytest.fixture
def snapshots(monkeypatch, tmp_path):
    """Every Snapshot train() builds, with a clone of its weights as they were built."""
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))
    made = []

    class Recorded(subagent_module.Snapshot):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.initial = {k: v.clone() for k, v in self.model.state_dict().items()}
            self.source = args[0]  # the policy being trained
            made.append(self)

    monkeypatch.setattr(build_module, "Snapshot", Recorded)
    return made


def trained_policy(run_dir: Path) -> dict[str, torch.Tensor]:
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(run_dir / "model").state_dict()


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "subagent/version" in r]


def test_frozen_snapshot_stays_bit_identical_while_the_policy_trains(snapshots, tmp_path):
    cfg = load_config(None, SMALL + [f"runs_dir={tmp_path}"])
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    (snap,) = snapshots
    now = snap.model.state_dict()
    assert all(torch.equal(now[k], v) for k, v in snap.initial.items())
    assert all(not p.requires_grad and p.grad is None for p in snap.model.parameters())
    policy = trained_policy(run_dir)
    assert any(not torch.equal(policy[k], now[k]) for k in now)  # the policy did move
    ours = {p.data_ptr() for p in snap.model.parameters()}
    assert not ours & {p.data_ptr() for p in snap.source.parameters()}  # no shared tensors
    rows = metrics(run_dir)
    assert [r["subagent/version"] for r in rows] == [0.0, 0.0]
    assert all("subagent/calls" in r and "subagent/time_s" in r for r in rows)
    # turnrl eval of the run delegates to the run's starting policy, frozen as in training
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(
        app, ["eval", str(run_dir), "--tasks", "4", "--no-baselines", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["episodes"] == 4
    (_, evaluated) = snapshots
    assert all(torch.equal(evaluated.initial[k], v) for k, v in snap.initial.items())


def test_snapshot_refreshes_every_n_steps(snapshots, tmp_path):
    cfg = load_config(None, SMALL + [f"runs_dir={tmp_path}", "subagent.refresh_every=1"])
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    (snap,) = snapshots
    now, policy = snap.model.state_dict(), trained_policy(run_dir)
    assert all(torch.equal(now[k], policy[k]) for k in now)  # a copy of the last policy
    assert any(not torch.equal(now[k], v) for k, v in snap.initial.items())
    assert snap.refreshes == 2 and [r["subagent/version"] for r in metrics(run_dir)] == [1.0, 2.0]


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["model.name=tiny", "env.name=guess"],
            "subagent.enabled: env guess gives a subagent nowhere to work",
        ),
        (
            ["recipe=locker-tiny", "subagent.model={base_url: ftp://x, model: m}"],
            "subagent.model.base_url: must start with http",
        ),
        (["recipe=locker-tiny", "subagent.model=/no/such/model"], "subagent.model: /no/such"),
        (
            [
                "recipe=locker-tiny",
                "subagent.refresh_every=2",
                "subagent.model={base_url: http://x, model: m}",
            ],
            "subagent.refresh_every: only a snapshot",
        ),
    ],
)
def test_bad_subagent_config_fails_in_one_line_before_anything_is_written(tmp_path, args, says):
    runs = tmp_path / "runs"
    r = CliRunner().invoke(
        app, ["train", "subagent.enabled=true", f"runs_dir={runs}", *args], catch_exceptions=False
    )
    assert r.exit_code == 2, r.output
    assert says in r.output and len(r.output.strip().splitlines()) <= 2, r.output
    assert not runs.exists()


def test_local_model_directory_as_subagent(renderer, tmp_path):
    from turnrl.tiny.model import tiny_model

    model = tiny_model(renderer.tokenizer, hidden_size=32, layers=1)
    model.save_pretrained(tmp_path / "helper")
    renderer.tokenizer.save_pretrained(tmp_path / "helper")
    cfg = load_config(
        None,
        ["recipe=locker-tiny", f"subagent.model={tmp_path / 'helper'}", "subagent.max_turns=2"],
    )
    family = with_subagent(LockerFamily(), cfg.subagent.max_turns)
    run = start_subagent(cfg, family, None, None, None, 0)  # type: ignore[arg-type]
    assert run.snapshot is None and str(tmp_path) in run.describe
    sub = run.subagent
    assert all(not p.requires_grad for p in sub.policy.model.parameters())

    async def go():
        env = family.make_env()
        await env.reset(TASK)
        return await env.step(ToolCall("delegate", {"task": DELEGATED})), env.calls

    step, (call,) = asyncio.run(go())
    assert not step.terminated  # an untrained helper: whatever it did, the agent goes on
    assert call.turns >= 1 and call.generated_tokens > 0 and call.tokens > call.generated_tokens
    assert step.observation == call.observation  # its answer, or why it stopped


def test_resume_rebuilds_a_frozen_snapshot_as_it_was(snapshots, tmp_path):
    cfg = load_config(None, SMALL + [f"runs_dir={tmp_path}", "steps=1"])
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    more = load_config(None, SMALL + [f"runs_dir={tmp_path}", "steps=2"])
    train(more, resume_dir=run_dir, quiet=True, log=lambda s: None)
    first, resumed = snapshots
    assert all(torch.equal(resumed.initial[k], v) for k, v in first.initial.items())
    assert resumed.refreshes == 0 and [r["subagent/version"] for r in metrics(run_dir)] == [0, 0]
