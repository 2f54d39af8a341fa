"""Asynchronous rollouts: per-token versions, the staleness bound, correction weights from the
stored behaviour logprobs, finish-old vs continue-new, and async == sync at max_staleness 0."""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading

import pytest
import torch

from turnrl.algo.losses import importance_weights, policy_loss
from turnrl.chat import ChatRenderer
from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, default_sampling
from turnrl.rollout.async_rollout import AsyncRollouts, TrajectoryBuffer, oldest_version
from turnrl.tiny.model import tiny_model, train_tokenizer
from turnrl.train.batch import collate
from turnrl.types import RewardResult, Task, ToolCall, Trajectory

RELEASE = threading.Event()  # holds the "blocked" episodes of the staleness test


class AnyText:
    """Every action is one call to ``say`` with the action's text: any sample is a valid step,
    so an untrained model produces multi-turn episodes with varied rewards."""

    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("say", {"text": text})]

    def format(self, calls: list[ToolCall]) -> str:
        return calls[0].arguments["text"]


class SayEnv(ToolEnv):
    """``turns`` calls of ``say`` end the episode; reward 1 when the last text has even length.
    ``delay`` (seconds) slows each step; ``blocked`` waits for RELEASE."""

    name = "say"
    tools = ("say",)

    async def reset(self, task: Task) -> str:
        self.turns, self.calls, self.text = task.payload.get("turns", 1), 0, ""
        self.delay, self.blocked = task.payload.get("delay", 0.0), task.payload.get("blocked")
        self.instructions = "Say something."
        return "Go."

    async def say(self, text: str) -> ToolOutput:
        """Say something."""
        if self.blocked:
            await asyncio.get_running_loop().run_in_executor(None, RELEASE.wait, 60)
        await asyncio.sleep(self.delay)
        self.calls += 1
        self.text = text
        return ToolOutput("ok", done=self.calls >= self.turns)

    async def grade(self) -> RewardResult:
        r = float(len(self.text) % 2 == 0)
        return RewardResult(reward=r, success=bool(r))


class SayFamily:
    name = "say"

    def make_env(self) -> SayEnv:
        return SayEnv()

    def close(self) -> None:
        pass


LIMITS = RolloutLimits(max_turns=4, max_context_tokens=256, max_new_tokens=6)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Intra-op threads only contend on small models (and on a shared 2-core machine badly).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([f"say {i} ok go something" for i in range(200)], vocab_size=300)


@pytest.fixture()
def setup(tok):
    torch.manual_seed(0)
    model = tiny_model(tok, seed=0, hidden_size=32, layers=1)
    renderer = ChatRenderer(tok, AnyText(), "<|im_end|>")
    return HFPolicy(model, tok.pad_token_id), renderer


def units(groups_per_unit: int, group_size: int, payload=lambda k, g: {}):
    """Per-step request lists: unit k has ``groups_per_unit`` groups of ``group_size``."""
    for k in itertools.count():
        yield [
            EpisodeRequest(Task(f"t{k}-{g}", "say", payload(k, g)), f"s{k}-g{g}", 1000 * k + i)
            for g in range(groups_per_unit)
            for i in range(group_size)
        ]


def fake_update(policy: HFPolicy, rollouts: AsyncRollouts, snapshots: dict | None = None) -> None:
    """A weight change the sampler can see (small noise), then the version bump and sync."""
    with policy.lock:
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        policy.version += 1
    if snapshots is not None:
        snapshots[policy.version] = copy.deepcopy(policy.model)
    rollouts.weights_updated(policy.version)


def check_versions(traj) -> None:
    """Each action token carries its turn's version; -1 elsewhere; versions never decrease."""
    traj.validate()
    versions = []
    for turn in traj.turns:
        assert set(traj.policy_versions[turn.action_start : turn.action_end]) <= {
            turn.policy_version
        }
        versions.append(turn.policy_version)
    assert versions == sorted(versions)


def slow_second_unit(k, g):
    return {"turns": 3, "delay": 0.3 if k >= 1 else 0.0}


def test_versions_recorded_per_token_continue_new(setup):
    policy, renderer = setup
    with AsyncRollouts(
        units(2, 2, slow_second_unit),
        SayFamily().make_env,
        renderer,
        policy,
        default_sampling(renderer),
        LIMITS,
        batch_size=4,
        max_staleness=1,
    ) as rollouts:
        trajs, m0 = rollouts.get_batch(0)
        assert all(t.task_id.startswith("t0-") for t in trajs)
        fake_update(policy, rollouts)  # unit 1 is mid-episode now (its steps are slow)
        trajs, m1 = rollouts.get_batch(1)
    assert [t.task_id for t in trajs] == ["t1-0", "t1-0", "t1-1", "t1-1"]  # whole groups, in order
    for t in trajs:
        check_versions(t)
    mixed = [t for t in trajs if len({turn.policy_version for turn in t.turns}) > 1]
    assert mixed, "an episode in flight should continue with the new weights"
    assert m1["async/staleness_1"] == 4.0 and m1["async/dropped"] == 0.0


def test_finish_old_keeps_the_starting_weights(setup):
    policy, renderer = setup
    with AsyncRollouts(
        units(2, 2, slow_second_unit),
        SayFamily().make_env,
        renderer,
        policy,
        default_sampling(renderer),
        LIMITS,
        batch_size=4,
        max_staleness=1,
        inflight="finish_old",
    ) as rollouts:
        rollouts.get_batch(0)
        fake_update(policy, rollouts)
        trajs, metrics = rollouts.get_batch(1)
        fake_update(policy, rollouts)
        later, _ = rollouts.get_batch(2)
        assert len(rollouts._samplers) <= 2  # retired versions are let go
    for t in trajs:
        check_versions(t)
        assert {turn.policy_version for turn in t.turns} == {0}  # started before the update
    assert metrics["async/staleness_1"] == 4.0
    assert all(oldest_version(t, -1) >= 1 for t in later)


def test_staleness_bound_drops_and_never_starts_too_much(setup):
    """Group 1 of step 0 is held until the trainer is 3 versions further: with max_staleness 1
    it must be dropped (counted), never handed to the trainer; nothing handed over exceeds the
    bound, and in-flight + buffered never exceeds (max_staleness + 1) x batch size."""
    policy, renderer = setup
    RELEASE.clear()
    eta, B = 1, 4
    handed = []
    with AsyncRollouts(
        units(2, 2, lambda k, g: {"blocked": k == 0 and g == 1}),
        SayFamily().make_env,
        renderer,
        policy,
        default_sampling(renderer),
        LIMITS,
        batch_size=B,
        max_staleness=eta,
    ) as rollouts:
        dropped = 0.0
        for step in range(6):
            if step == 3:
                RELEASE.set()
            trajs, m = rollouts.get_batch(step, timeout_s=60)
            assert len(trajs) == B
            assert m["async/inflight"] + m["async/buffered"] <= (eta + 1) * B
            for t in trajs:
                assert policy.version - oldest_version(t, policy.version) <= eta
            assert m["async/staleness_max"] <= eta
            handed += [t.task_id for t in trajs]
            dropped += m["async/dropped"]
            fake_update(policy, rollouts)
    assert "t0-1" not in handed and dropped == 2.0
    assert rollouts.buffer.dropped == 2


def _sampled_at(group: str, version: int) -> Trajectory:
    return Trajectory(group, group, 1, [0, 1], [0, 1], [0.0, -1.0], [-1, version])


def test_partial_drop_does_not_stall_the_producer():
    """Regression (a Ray run hung in CI): after one trajectory of a group is dropped, the live
    count is no longer a multiple of the group size. The bound must still admit the next group,
    and a hand-over that exceeds the batch (whole groups) must not shrink the next budget."""
    B, G = 4, 2
    buf = TrajectoryBuffer(batch_size=B, max_staleness=0, version=0)

    def run_group(name: str, versions: list[int]) -> None:
        assert buf.may_start(), f"group {name} refused: started={buf.started}"
        seqs = [buf.start(name, G) for _ in versions]
        for seq, v in zip(seqs, versions):
            buf.finish(seq, name, v, _sampled_at(name, v))

    run_group("a", [0, 0])
    run_group("b", [0, 0])
    assert not buf.may_start()  # (η + 1)·B = 4 live
    assert len(buf.take(B, timeout_s=1)[0]) == 4
    buf.set_version(1)
    run_group("c", [0, 1])  # its first episode sampled a token with the old weights
    run_group("d", [1, 1])
    with pytest.raises(TimeoutError):  # c's stale episode is dropped: 3 ready, 7 live
        buf.take(B, timeout_s=0.2)
    assert buf.dropped == 1
    run_group("e", [1, 1])  # admitted although 7 + 2 > 8
    trajs, m = buf.take(B, timeout_s=1)
    assert [t.group_id for t in trajs] == ["c", "d", "d", "e", "e"]
    assert m["async/dropped"] == 1.0
    buf.set_version(2)  # 9 live, budget 3·4 + 1 overtaken = 13
    run_group("f", [2, 2])
    run_group("g", [2, 2])
    assert not buf.may_start()
    assert len(buf.take(B, timeout_s=1)[0]) == 4


def test_correction_weights_come_from_stored_behaviour_logprobs(setup):
    """Behaviour logprobs stored per token equal the sampling version's own logprobs, and the
    truncated IS weights the loss applies are min(pi_now / pi_{v_t}, C) token by token."""
    policy, renderer = setup
    snapshots = {0: copy.deepcopy(policy.model)}
    with AsyncRollouts(
        units(2, 2, slow_second_unit),
        SayFamily().make_env,
        renderer,
        policy,
        default_sampling(renderer),
        LIMITS,
        batch_size=4,
        max_staleness=2,
    ) as rollouts:
        rollouts.get_batch(0)
        fake_update(policy, rollouts, snapshots)
        trajs, _ = rollouts.get_batch(1)
    pad = renderer.tokenizer.pad_token_id
    batch = collate(trajs, pad)
    now = torch.tensor(
        [
            row + [0.0] * (batch.input_ids.shape[1] - len(row))
            for row in HFPolicy(policy.model, pad).score([t.token_ids for t in trajs])
        ]
    )
    expected = torch.zeros_like(now)
    for b, t in enumerate(trajs):
        for version in {v for v in t.policy_versions if v >= 0}:
            scored = HFPolicy(snapshots[version], pad).score([t.token_ids])[0]
            for i, v in enumerate(t.policy_versions):
                if v == version:
                    assert abs(scored[i] - t.behavior_logprobs[i]) < 1e-4, "behaviour logprob"
                    expected[b, i] = min(float(torch.exp(now[b, i] - scored[i])), 2.0)
    w, _ = importance_weights(now, batch.behavior_logprobs, batch.loss_mask, cap=2.0)
    assert torch.allclose(w, expected, atol=1e-3)
    assert (w[batch.loss_mask.bool()] != 1.0).any()  # the weights really changed something
    _, m = policy_loss(
        now,
        now,
        torch.ones_like(now),
        batch.loss_mask,
        behavior_logprobs=batch.behavior_logprobs,
        is_correction="tis",
        is_cap=2.0,
    )
    mask = batch.loss_mask.bool()
    assert m["is_weight_mean"].item() == pytest.approx(expected[mask].mean().item(), abs=1e-3)
    assert m["is_weight_max"].item() == pytest.approx(expected[mask].max().item(), abs=1e-3)


def test_async_equals_sync_at_zero_staleness(tok):
    """Same seeds, same requests, max_staleness 0: the same trajectories and the same weights
    after three real training steps (the lead's train_on_batch)."""
    from turnrl.rollout.source import SyncRollouts
    from turnrl.rollout.source import sample_requests as requests_of
    from turnrl.run.build import limits_of
    from turnrl.run.config import TrainConfig
    from turnrl.train.step import train_on_batch

    def sample_requests(cfg, tasks, step):
        r = cfg.rollout
        return requests_of(tasks, step, cfg.seed, r.tasks_per_step, r.group_size)

    def rollout(cfg, family, requests, renderer, policy, params):
        sync = SyncRollouts(lambda step: requests, family.make_env, renderer, policy, params,
                            limits_of(cfg), batch_wait_s=cfg.rollout.batch_wait_s)  # fmt: skip
        return sync.get_batch(0)[0]

    cfg = TrainConfig(seed=3, max_staleness=0)
    cfg.rollout.tasks_per_step, cfg.rollout.group_size = 2, 4
    cfg.optim.minibatch_size, cfg.optim.micro_batch_size, cfg.optim.lr = 8, 8, 1e-2
    cfg.rollout.max_turns, cfg.rollout.max_new_tokens = LIMITS.max_turns, LIMITS.max_new_tokens
    cfg.rollout.max_context_tokens = LIMITS.max_context_tokens
    tasks = [Task(f"t{i}", "say", {"turns": 2}) for i in range(5)]
    family = SayFamily()
    B = cfg.rollout.tasks_per_step * cfg.rollout.group_size

    def run(mode: str):
        model = tiny_model(
            tok, seed=1, hidden_size=32, layers=1
        )  # mixed rewards in the first batches
        renderer = ChatRenderer(tok, AnyText(), "<|im_end|>")
        policy, params = HFPolicy(model, tok.pad_token_id), default_sampling(renderer)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
        seen, rollouts = [], None
        if mode == "async":
            rollouts = AsyncRollouts(
                (sample_requests(cfg, tasks, k) for k in itertools.count()),
                family.make_env,
                renderer,
                policy,
                params,
                limits_of(cfg),
                batch_size=B,
                max_staleness=0,
            )
        try:
            for step in range(3):
                if rollouts is None:
                    requests = sample_requests(cfg, tasks, step)
                    trajs = rollout(cfg, family, requests, renderer, policy, params)
                else:
                    trajs, m = rollouts.get_batch(step, B)
                    assert m["async/staleness_0"] == B
                seen.append([(t.task_id, t.token_ids, t.reward) for t in trajs])
                batch = collate(trajs, tok.pad_token_id)
                with policy.lock:
                    out = train_on_batch(cfg, model, None, opt, batch, step)
                    policy.version += 1
                if rollouts is not None:
                    rollouts.weights_updated(policy.version)
                assert out["train/rows"] > 0  # real gradient steps happened
        finally:
            if rollouts is not None:
                rollouts.close()
        return seen, [p.detach().clone() for p in model.parameters()]

    sync_trajs, sync_params = run("sync")
    async_trajs, async_params = run("async")
    assert sync_trajs == async_trajs
    for a, b in zip(sync_params, async_params):
        assert torch.equal(a, b)


def test_bad_options_fail_before_work(setup):
    policy, renderer = setup
    with pytest.raises(ValueError) as e:
        AsyncRollouts(
            iter([]),
            SayFamily().make_env,
            renderer,
            policy,
            default_sampling(renderer),
            LIMITS,
            batch_size=4,
            max_staleness=0,
            inflight="later",
            sync_every=3,
        )
    assert "inflight='later'" in str(e.value) and "sync_every=3" in str(e.value)
