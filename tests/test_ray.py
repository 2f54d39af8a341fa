"""Ray workers on a local 2-CPU cluster: episodes and their envs run on the workers, weights
reach them after updates, and a worker killed mid-run has its episodes re-run (or recorded as
ENV_ERROR once the retry budget is spent) while the run goes on."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'turnrl[ray]'")

from turnrl.chat import ChatRenderer  # noqa: E402
from turnrl.envs.base import ToolEnv, ToolOutput  # noqa: E402
from turnrl.policy.hf import HFPolicy  # noqa: E402
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, default_sampling  # noqa: E402
from turnrl.rollout.ray_workers import RayRollouts, WorkerSpec  # noqa: E402
from turnrl.tiny.model import tiny_model, train_tokenizer  # noqa: E402
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall  # noqa: E402

pytestmark = pytest.mark.slow


class AnyText:
    """Every action is one ``say`` call: an untrained model still plays real episodes."""

    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("say", {"text": text})]

    def format(self, calls: list[ToolCall]) -> str:
        return calls[0].arguments["text"]


class SayEnv(ToolEnv):
    """Two ``say`` calls end the episode; each step sleeps ``delay``; the grade records the
    process that ran the env (``reward/pid``)."""

    name = "say"
    tools = ("say",)

    async def reset(self, task: Task) -> str:
        self.calls, self.delay = 0, task.payload.get("delay", 0.0)
        self.instructions = "Say something."
        return "Go."

    async def say(self, text: str) -> ToolOutput:
        """Say something."""
        await asyncio.sleep(self.delay)
        self.calls += 1
        return ToolOutput("ok", done=self.calls >= 2)

    async def grade(self) -> RewardResult:
        return RewardResult(reward=1.0, success=True, components={"pid": float(os.getpid())})


class SayFamily:
    name = "say"

    def make_env(self) -> SayEnv:
        return SayEnv()

    def close(self) -> None:
        pass


def units(delay_from_unit: int = 1, delay: float = 1.0):
    """Per-step requests: 2 groups of 2; units from ``delay_from_unit`` on have slow steps."""
    for k in itertools.count():
        payload = {"delay": delay if k >= delay_from_unit else 0.0}
        yield [
            EpisodeRequest(Task(f"t{k}-{g}", "say", payload), f"s{k}-g{g}", 100 * k + i)
            for g in range(2)
            for i in range(2)
        ]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # test-local env classes
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def parts():
    tok = train_tokenizer([f"say {i} ok go something" for i in range(200)], vocab_size=300)
    model = tiny_model(tok, seed=0, hidden_size=32, layers=1)
    renderer = ChatRenderer(tok, AnyText(), "<|im_end|>")
    spec = WorkerSpec(
        make_family=SayFamily,
        renderer=renderer,
        model=model,
        pad_token_id=tok.pad_token_id,
        params=default_sampling(renderer),
        limits=RolloutLimits(max_turns=3, max_context_tokens=256, max_new_tokens=6),
    )
    return spec, model, tok


def update(policy: HFPolicy, rollouts: RayRollouts) -> None:
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    policy.version += 1
    rollouts.weights_updated(policy.version)


def kill(actor) -> None:
    """ray.kill returns at once; wait until the actor is really gone."""
    ray.kill(actor)
    for _ in range(600):
        try:
            ray.get(actor.pid.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def test_killed_workers_rerun_then_env_error_and_run_goes_on(cluster, parts):
    """Three workers (one startup, the slow part on a busy machine). Kill one with retries
    left: its episodes re-run elsewhere. Spend the budget, kill another: its episodes become
    ENV_ERROR trajectories. The last worker carries the run on."""
    spec, model, tok = parts
    policy = HFPolicy(model, tok.pad_token_id)
    with RayRollouts(
        units(),
        spec,
        policy,
        batch_size=4,
        max_staleness=1,
        num_workers=3,
        cpus_per_worker=0.5,
        max_retries=1,
        max_replacements=0,  # dead workers stay dead here (replacement: test_faults)
    ) as rollouts:
        pids = set(rollouts.worker_pids())
        assert len(pids) == 3 and os.getpid() not in pids
        first, _ = rollouts.get_batch(0, timeout_s=180)
        # Unit 1 (slow steps) is in flight now, spread over the three workers.
        kill(rollouts.workers[0])
        update(policy, rollouts)
        rerun, m1 = rollouts.get_batch(1, timeout_s=120)
        # Unit 2 is in flight on workers 1 and 2; no retries left for what dies now.
        rollouts.max_retries = 0
        kill(rollouts.workers[1])
        later = []
        for step in (2, 3, 4):
            update(policy, rollouts)
            trajs, m = rollouts.get_batch(step, timeout_s=120)
            # whole groups of 2 until >= 4; on a busy machine the one worker left is slow
            # enough that a group can lose a member as stale, so 1 + 2 + 2 comes back as 5
            assert 4 <= len(trajs) <= 5
            later += trajs

    assert len(first) == len(rerun) == 4
    assert all(t.termination is TerminationReason.DONE for t in first + rerun)
    assert m1["ray/worker_deaths"] == 1 and m1["ray/retried"] >= 1 and m1["ray/lost"] == 0
    # The re-run episodes sampled (partly) after the update, with the pushed weights.
    assert max(v for t in rerun for v in t.policy_versions) == 1
    lost = [t for t in later if t.termination is TerminationReason.ENV_ERROR]
    done = first + rerun + [t for t in later if t not in lost]
    assert lost and all("worker died" in t.error and not t.token_ids for t in lost)
    assert all(t.termination is TerminationReason.DONE for t in done)
    assert {t.metrics["reward/pid"] for t in done} <= pids  # envs ran on the workers
    assert m["ray/worker_deaths"] == 2 and m["ray/workers_alive"] == 1
    assert m["ray/lost"] >= len(lost) and m["ray/retried"] == m1["ray/retried"]
    for t in done:
        t.validate()
