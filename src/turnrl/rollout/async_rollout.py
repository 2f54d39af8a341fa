"""Asynchronous rollouts: episodes keep running while the trainer updates the weights.

The trainer sees the same seam as the synchronous path::

    rollouts = AsyncRollouts(requests, family.make_env, renderer, policy, params, limits,
                             batch_size=B, max_staleness=1)
    for step in ...:
        trajs, metrics = rollouts.get_batch(step, B)   # blocks until B trajectories are ready
        ... train on trajs, policy.version += 1 ...
        rollouts.weights_updated(policy.version)
    rollouts.close()

A background thread runs its own asyncio loop (the agent loop of ``agent_loop.py``, unchanged),
starting episodes from ``requests`` (an iterable of per-step request lists, e.g.
``sample_requests(cfg, tasks, k) for k in count()``) and keeping finished trajectories in a
buffer until a whole group (the requests sharing a ``group_id``) is done.

Staleness. Every action token records the policy version that sampled it. At hand-over, a
trajectory's staleness is ``version - oldest version among its action tokens``; one above
``max_staleness`` (η) is dropped and counted, so it never reaches the loss. To waste little, no
episode is started that could not be trained in time: with batch size B, a group starts only
while ``started - dropped < (updates + η + 1) * B + overtaken``, i.e. about (η + 1)·B episodes
are in flight or waiting (``overtaken``: trajectories handed over beyond B, since hand-overs are
whole groups). With η = 0 and B a multiple of the group size the next batch starts only after
the update: this is exactly the synchronous schedule (same requests, same seeds, same
trajectories).

Weights and episodes in flight (``inflight``):

* ``"continue_new"`` (default): an episode in flight samples its next turn with whatever weights
  are current; each token keeps its own version. With ``sync_every=1`` the sampler *is* the
  trainer's model (no copy; the trainer holds ``policy.lock`` while stepping, so no turn is
  sampled from half-updated weights, and sampling pauses during the step). With
  ``sync_every=k > 1`` the sampler is one copy of the model, reloaded every k updates (sampling
  then also runs during the trainer's step).
* ``"finish_old"``: an episode finishes with the weights it started with. Each synced version
  lives in its own copy of the model with its own batcher until its last episode ends. Costs:
  up to η + 1 model copies in memory, and episodes of different versions cannot share a batch.

The correction for the remaining staleness is the loss's (``algo.is_correction``: ``tis`` or
``decoupled``) from the per-token behaviour logprobs stored on each trajectory.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from turnrl.chat import ChatRenderer
from turnrl.envs.base import ToolEnv
from turnrl.policy.base import SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, run_episode
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.types import Trajectory

Inflight = Literal["continue_new", "finish_old"]


def oldest_version(traj: Trajectory, default: int) -> int:
    """The oldest policy version among the action tokens (``default`` if none was sampled)."""
    return min((v for v in traj.policy_versions if v >= 0), default=default)


def groups_of(requests: list[EpisodeRequest]) -> list[list[EpisodeRequest]]:
    """Requests split into groups by ``group_id``, in order of first appearance."""
    out: dict[str, list[EpisodeRequest]] = {}
    for r in requests:
        out.setdefault(r.group_id, []).append(r)
    return list(out.values())


@dataclass
class _Group:
    first_seq: int
    size: int
    done: list[tuple[int, int, Trajectory]] = field(default_factory=list)  # (seq, v_start, traj)


class TrajectoryBuffer:
    """The staleness bookkeeping shared by the local and the Ray producers (thread-safe).

    The producer asks :meth:`may_start` before starting a group, then calls :meth:`start` per
    episode and :meth:`finish` with its trajectory; the trainer calls :meth:`take` and
    :meth:`set_version`. ``on_change`` (set by the producer) is called whenever room to start
    episodes may have appeared.
    """

    def __init__(self, batch_size: int, max_staleness: int, version: int) -> None:
        assert batch_size >= 1, f"batch_size={batch_size} must be >= 1"
        assert max_staleness >= 0, f"max_staleness={max_staleness} must be >= 0"
        self.batch_size, self.max_staleness = batch_size, max_staleness
        self.version0 = self.version = version
        self.cond = threading.Condition()
        self.started = self.dropped = self.consumed = self.inflight = self.overtaken = 0
        self.exhausted = False
        self.error: BaseException | None = None
        self.on_change: Callable[[], None] = lambda: None
        self._groups: dict[str, _Group] = {}
        self._ready: list[_Group] = []
        self._dropped_reported = 0

    # -- producer side --------------------------------------------------------------------
    def may_start(self) -> bool:
        """Room for the next group: true while fewer than the budget are live. A group of G may
        overshoot the budget by up to G - 1 episodes (after a partial drop the count is no
        longer a multiple of the group size; waiting for exact room would stall forever); what
        overshoots is at worst dropped as stale at hand-over."""
        with self.cond:
            return not self._blocked()

    def start(self, group_id: str, group_size: int) -> int:
        with self.cond:
            seq = self.started
            self.started += 1
            self.inflight += 1
            self._groups.setdefault(group_id, _Group(seq, group_size))
            return seq

    def finish(self, seq: int, group_id: str, version_start: int, traj: Trajectory) -> None:
        with self.cond:
            self.inflight -= 1
            group = self._groups[group_id]
            group.done.append((seq, version_start, traj))
            if len(group.done) == group.size:
                del self._groups[group_id]
                self._ready.append(group)
            self.cond.notify_all()

    def close_input(self, error: BaseException | None = None) -> None:
        with self.cond:
            self.exhausted = True
            self.error = self.error or error
            self.cond.notify_all()

    # -- trainer side ---------------------------------------------------------------------
    def set_version(self, version: int) -> None:
        with self.cond:
            self.version = version
            self.cond.notify_all()
        self.on_change()

    def staleness(self, version_start: int, traj: Trajectory) -> int:
        return self.version - oldest_version(traj, version_start)

    def _drop_stale(self) -> int:
        dropped = 0
        for group in self._ready:
            keep = [d for d in group.done if self.staleness(d[1], d[2]) <= self.max_staleness]
            dropped += len(group.done) - len(keep)
            group.done = keep
        self._ready = [g for g in self._ready if g.done]
        self.dropped += dropped
        return dropped

    def take(
        self, n: int, timeout_s: float | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Block until whole groups holding >= n fresh trajectories are done; return them in
        start order with the staleness metrics of this hand-over."""
        t0 = time.monotonic()
        deadline = None if timeout_s is None else t0 + timeout_s
        with self.cond:
            while True:
                if self.error is not None:
                    raise RuntimeError("rollout producer failed") from self.error
                if self._drop_stale():
                    self.on_change()  # dropped trajectories free room for new episodes
                have = sum(len(g.done) for g in self._ready)
                if have >= n or (self.exhausted and self.inflight == 0):
                    break
                if self.inflight == 0 and not self.exhausted and self._blocked():
                    raise RuntimeError(
                        f"get_batch({n}): nothing in flight, {have} ready, and the staleness "
                        f"bound admits no new episode at version {self.version}; call "
                        "weights_updated(version) after every update, and use a batch size "
                        "that is a multiple of the group size"
                    )
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"get_batch({n}): only {have} ready after {timeout_s}s")
                self.cond.wait(0.5 if left is None else min(left, 0.5))
            self._ready.sort(key=lambda g: g.first_seq)
            taken: list[tuple[int, int, Trajectory]] = []
            while self._ready and len(taken) < n:
                taken += sorted(self._ready.pop(0).done, key=lambda d: d[0])
            self.consumed += len(taken)
            self.overtaken += max(len(taken) - n, 0)
            stale = Counter(self.staleness(v0, t) for _, v0, t in taken)
            metrics: dict[str, float] = {
                f"async/staleness_{k}": float(c) for k, c in sorted(stale.items())
            }
            metrics["async/staleness_mean"] = sum(k * c for k, c in stale.items()) / max(
                len(taken), 1
            )
            metrics["async/staleness_max"] = float(max(stale, default=0))
            metrics["async/dropped"] = float(self.dropped - self._dropped_reported)
            metrics["async/dropped_total"] = float(self.dropped)
            metrics["async/inflight"] = float(self.inflight)
            metrics["async/buffered"] = float(sum(len(g.done) for g in self._ready))
            metrics["async/wait_s"] = time.monotonic() - t0
            self._dropped_reported = self.dropped
            return [t for _, _, t in taken], metrics

    def _blocked(self) -> bool:
        """No room: live episodes (started, not dropped) fill the budget of η + 1 batches
        beyond those consumed. Whole groups make a hand-over exceed its batch size; the excess
        (``overtaken``) counts as consumed ahead, or the producer would stall one group short."""
        updates = self.version - self.version0
        budget = (updates + self.max_staleness + 1) * self.batch_size + self.overtaken
        return self.started - self.dropped >= budget


def clone_policy(policy: HFPolicy) -> HFPolicy:
    """A frozen copy of the sampler's model (for snapshots of one version's weights)."""
    model = copy.deepcopy(policy.model)
    for p in model.parameters():
        p.grad = None
        p.requires_grad_(False)
    model.eval()
    out = HFPolicy(model, policy.pad_token_id, policy.max_batch_size, autocast=policy.autocast)
    out.version = policy.version
    return out


def load_weights(target: HFPolicy, source: HFPolicy, version: int) -> None:
    """Copy the trainer's weights into a sampler copy between two of its batches."""
    with target.lock:
        target.model.load_state_dict(source.model.state_dict())
        target.version = version


@dataclass
class _Sampler:
    """One set of weights the rollout side samples from, with its own batcher."""

    backend: HFPolicy
    batcher: GenerationBatcher
    episodes: int = 0


class AsyncRollouts:
    """Produces trajectories in the background; see the module docstring for the rules."""

    def __init__(
        self,
        requests: Iterable[list[EpisodeRequest]],
        make_env: Callable[[], ToolEnv],
        renderer: ChatRenderer,
        policy: HFPolicy,
        params: SamplingParams,
        limits: RolloutLimits,
        *,
        batch_size: int,
        max_staleness: int = 1,
        inflight: Inflight = "continue_new",
        sync_every: int = 1,
        max_concurrency: int = 64,
        batch_wait_s: float = 0.05,
    ) -> None:
        problems = []
        if inflight not in ("continue_new", "finish_old"):
            problems.append(f"inflight={inflight!r}: expected 'continue_new' or 'finish_old'")
        if sync_every < 1:
            problems.append(f"sync_every={sync_every}: must be >= 1")
        if sync_every > max_staleness + 1:
            problems.append(
                f"sync_every={sync_every} > max_staleness + 1 = {max_staleness + 1}: every "
                "trajectory sampled between syncs would be dropped"
            )
        if problems:
            raise ValueError("; ".join(problems))
        self.requests = requests
        self.make_env, self.renderer, self.limits = make_env, renderer, limits
        self.policy, self.params = policy, params
        self.inflight, self.sync_every = inflight, sync_every
        self.max_concurrency, self.batch_wait_s = max_concurrency, batch_wait_s
        self.buffer = TrajectoryBuffer(batch_size, max_staleness, policy.version)
        self.shared = inflight == "continue_new" and sync_every == 1
        # The sampler weights new episodes start with (the trainer's own model when shared).
        self._latest = policy if self.shared else clone_policy(policy)
        self._synced = policy.version
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="async-rollouts", daemon=True)
        self._thread.start()
        self._ready.wait()

    # -- the trainer's seam ---------------------------------------------------------------
    def get_batch(
        self, step: int, n_trajectories: int | None = None, timeout_s: float | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """The next ``n_trajectories`` (default: the batch size) fresh trajectories, whole
        groups in start order, and this hand-over's ``async/*`` metrics."""
        del step  # the schedule is driven by weights_updated; step is kept for the seam
        trajs, metrics = self.buffer.take(n_trajectories or self.buffer.batch_size, timeout_s)
        metrics["async/policy_version"] = float(self.buffer.version)
        return trajs, metrics

    def weights_updated(self, version: int | None = None) -> None:
        """Call after each optimizer step (``policy.version`` already incremented). Pushes the
        weights to the sampler every ``sync_every`` updates and lets new episodes start."""
        version = self.policy.version if version is None else version
        if not self.shared and version - self._synced >= self.sync_every:
            if self.inflight == "finish_old":
                snapshot = clone_policy(self.policy)
                snapshot.version = version
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._install, snapshot)
            else:
                load_weights(self._latest, self.policy, version)
            self._synced = version
        self.buffer.set_version(version)

    def close(self) -> None:
        if self._loop is not None and self._main is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._main.cancel)
        self._thread.join(timeout=60)

    def __enter__(self) -> AsyncRollouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the producer (its own thread and event loop) ---------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except asyncio.CancelledError:
            pass
        except BaseException as e:  # surfaces in the trainer's next get_batch
            self.buffer.close_input(e)
        finally:
            self._ready.set()

    def _install(self, snapshot: HFPolicy) -> None:
        self._latest = snapshot
        self._retire_unused()

    def _retire_unused(self) -> None:
        for backend, s in list(self._samplers.items()):
            if s.episodes == 0 and backend is not self._latest:
                del self._samplers[backend]
                asyncio.get_running_loop().create_task(s.batcher.close())

    def _sampler(self) -> _Sampler:
        s = self._samplers.get(self._latest)
        if s is None:
            batcher = GenerationBatcher(self._latest, self.params, max_wait_s=self.batch_wait_s)
            s = self._samplers[self._latest] = _Sampler(self._latest, batcher)
        return s

    async def _produce(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._main = loop, asyncio.current_task()
        self._samplers: dict[HFPolicy, _Sampler] = {}
        wake = asyncio.Event()
        self.buffer.on_change = lambda: loop.call_soon_threadsafe(wake.set)
        gate = asyncio.Semaphore(self.max_concurrency)
        tasks: set[asyncio.Task] = set()
        self._ready.set()

        async def episode(seq: int, req: EpisodeRequest, sampler: _Sampler, v0: int) -> None:
            try:
                async with gate:
                    traj = await run_episode(
                        self.make_env(), req, self.renderer, sampler.batcher, self.limits
                    )
            finally:
                sampler.episodes -= 1
                self._retire_unused()
            self.buffer.finish(seq, req.group_id, v0, traj)

        try:
            for unit in self.requests:
                for group in groups_of(list(unit)):
                    while not self.buffer.may_start():
                        await wake.wait()
                        wake.clear()
                    sampler = self._sampler()
                    for req in group:
                        seq = self.buffer.start(req.group_id, len(group))
                        sampler.episodes += 1
                        v0 = sampler.backend.version
                        task = loop.create_task(episode(seq, req, sampler, v0))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            self.buffer.close_input()
            while tasks:
                await asyncio.gather(*tasks)
        except BaseException as e:
            self.buffer.close_input(None if isinstance(e, asyncio.CancelledError) else e)
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for s in self._samplers.values():
                await s.batcher.close()
