"""Rollouts on Ray actors: environments, sandboxes and sampling run on the workers.

Design (the simpler of the two robust choices): each worker actor owns its environments (the
family is built *inside* the actor, so sandboxes execute on the worker's machine) **and a copy
of the policy** that samples its episodes. After every ``sync_every`` updates the trainer puts
one CPU ``state_dict`` in the object store (``ray.put``) and every worker loads it between two
generation batches. Rejected: generation served by the trainer, which would add a network round
trip per turn and make the trainer a server; copying a tiny model is cheap, and for big models a
worker would hold a vLLM engine instead of the HF copy (same ``load_weights`` seam).

The trainer sees the same seam as :class:`turnrl.rollout.async_rollout.AsyncRollouts`
(``get_batch`` / ``weights_updated`` / ``close``) and the same staleness rules (the shared
:class:`TrajectoryBuffer`). A producer thread submits one actor call per episode (each actor is
an asyncio actor: its episodes run concurrently and share a generation batcher) and streams
results back with ``ray.wait``. Episodes in flight continue with new weights as they arrive
(``continue_new``; each token keeps its version).

Failures: when a worker dies (killed, OOM, node lost), each of its episodes in flight is re-run
from scratch on another worker, up to ``max_retries`` times; after that it is recorded as an
``ENV_ERROR`` trajectory (no action tokens, so it carries no gradient). The dead worker is
replaced by a new actor with the current weights, up to ``max_replacements`` times per run, each
with a log line; after that the run goes on with the workers that remain, and only when none is
left does ``get_batch`` raise.

Versions: the spec's ``version`` is the policy version of its weights, so a resumed run's
workers tag their tokens with the restored version (not 0, which would make every episode
look stale and be dropped).

Ray is an optional extra (``pip install turnrl[ray]``); it is imported only when used. By default
a local cluster is started (``ray.init(num_cpus=..., include_dashboard=False)``); pass
``address`` to join an existing one.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from turnrl.chat import ChatRenderer
from turnrl.envs.registry import make_family
from turnrl.policy.base import SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, run_episode
from turnrl.rollout.async_rollout import TrajectoryBuffer, groups_of
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.types import TerminationReason, Trajectory


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("rollout.workers=ray needs Ray: pip install 'turnrl[ray]'") from e
    return ray


@dataclass
class WorkerSpec:
    """Everything a worker needs to run episodes; pickled once into the object store."""

    make_family: Callable[[], Any]  # called inside the actor: envs and sandboxes live there
    renderer: ChatRenderer
    model: torch.nn.Module  # CPU copy of the policy (initial weights)
    pad_token_id: int
    params: SamplingParams
    limits: RolloutLimits
    version: int = 0  # policy version of ``model``'s weights (a resumed run's, after resume)
    max_concurrency: int = 64  # episodes at once per worker
    batch_wait_s: float = 0.05
    threads: int = 1  # torch intra-op threads per worker

    @classmethod
    def for_env(cls, name: str, options: dict[str, Any] | None = None, **kw: Any) -> WorkerSpec:
        return cls(make_family=functools.partial(make_family, name, options or {}), **kw)


class RolloutWorker:
    """A Ray actor (wrapped with ``ray.remote`` at run time): envs + a sampler copy."""

    def __init__(self, spec: WorkerSpec) -> None:
        torch.set_num_threads(spec.threads)
        self.spec = spec
        self.family = spec.make_family()
        spec.model.eval().requires_grad_(False)
        self.policy = HFPolicy(spec.model, spec.pad_token_id)
        self.policy.version = spec.version
        self.batcher: GenerationBatcher | None = None
        self.gate: asyncio.Semaphore | None = None

    def pid(self) -> int:
        return os.getpid()

    async def set_weights(self, version: int, state_dict: dict[str, torch.Tensor]) -> int:
        if version > self.policy.version:
            await asyncio.to_thread(self._load, version, state_dict)
        return self.policy.version

    def _load(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        with self.policy.lock:  # between two generation batches
            self.policy.model.load_state_dict(state_dict)
            self.policy.version = version

    async def run(self, request: EpisodeRequest, min_version: int = 0) -> Trajectory:
        """Play one episode once this worker holds weights of at least ``min_version``: the
        trainer's weight push and the episodes after it are separate actor calls that may
        arrive in either order, and an episode begun on the old weights would be stale."""
        while self.policy.version < min_version:
            await asyncio.sleep(0.01)
        if self.batcher is None:  # created on the actor's own event loop
            self.batcher = GenerationBatcher(
                self.policy, self.spec.params, max_wait_s=self.spec.batch_wait_s
            )
            self.gate = asyncio.Semaphore(self.spec.max_concurrency)
        assert self.gate is not None
        async with self.gate:
            return await run_episode(
                self.family.make_env(), request, self.spec.renderer, self.batcher, self.spec.limits
            )


@dataclass
class _Job:
    seq: int
    request: EpisodeRequest
    version_start: int
    worker: int = -1
    actor: Any = None  # the handle it ran on (a replaced worker's slot holds a new one)
    attempts: int = 0


def failed_trajectory(request: EpisodeRequest, error: str) -> Trajectory:
    """An episode lost with its worker: recorded, counted, never trained on (no tokens)."""
    return Trajectory(
        task_id=request.task.id,
        group_id=request.group_id,
        prompt_len=0,
        token_ids=[],
        loss_mask=[],
        behavior_logprobs=[],
        policy_versions=[],
        termination=TerminationReason.ENV_ERROR,
        error=error,
    )


class RayRollouts:
    """Asynchronous rollouts on Ray workers, behind the ``get_batch`` / ``weights_updated`` seam."""

    def __init__(
        self,
        requests: Iterable[list[EpisodeRequest]],
        spec: WorkerSpec,
        policy: HFPolicy,
        *,
        batch_size: int,
        max_staleness: int = 1,
        num_workers: int = 2,
        sync_every: int = 1,
        max_retries: int = 1,
        max_replacements: int = 4,
        address: str | None = None,
        num_cpus: int = 2,
        cpus_per_worker: float = 1.0,
        log: Callable[[str], None] = print,
    ) -> None:
        if sync_every < 1 or sync_every > max_staleness + 1:
            raise ValueError(
                f"sync_every={sync_every}: must be in [1, max_staleness + 1 = {max_staleness + 1}]"
            )
        if num_workers < 1:
            raise ValueError(f"num_workers={num_workers}: must be >= 1")
        ray = _ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            if address:
                ray.init(address=address)
            else:
                ray.init(num_cpus=num_cpus, include_dashboard=False)
        self.policy, self.sync_every, self.max_retries = policy, sync_every, max_retries
        self.max_replacements, self.log = max_replacements, log
        self.buffer = TrajectoryBuffer(batch_size, max_staleness, policy.version)
        self.requests = requests
        if spec.version != policy.version:
            spec = dataclasses.replace(spec, version=policy.version)
        self._actor = ray.remote(num_cpus=cpus_per_worker)(RolloutWorker)
        self._spec_ref = ray.put(spec)
        self._weights: tuple[int, Any] | None = None  # the last (version, state ref) pushed
        self.workers = [self._actor.remote(self._spec_ref) for _ in range(num_workers)]
        self.alive = [True] * num_workers
        self.load = [0] * num_workers  # episodes in flight per worker
        self._synced = policy.version
        self.counts = collections.Counter()  # worker_deaths, retried, lost, replaced
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ray-rollouts", daemon=True)
        self._thread.start()

    # -- the trainer's seam ---------------------------------------------------------------
    def get_batch(
        self, step: int, n_trajectories: int | None = None, timeout_s: float | None = None
    ) -> tuple[list[Trajectory], dict[str, float]]:
        del step
        trajs, metrics = self.buffer.take(n_trajectories or self.buffer.batch_size, timeout_s)
        metrics["async/policy_version"] = float(self.buffer.version)
        with self._lock:
            metrics["ray/workers_alive"] = float(sum(self.alive))
            for key in ("worker_deaths", "retried", "lost", "replaced"):
                metrics[f"ray/{key}"] = float(self.counts[key])
        return trajs, metrics

    def weights_updated(self, version: int | None = None) -> None:
        """After each update: every ``sync_every`` versions, push a CPU state_dict once into the
        object store and let every live worker load it."""
        ray = _ray()
        version = self.policy.version if version is None else version
        if version - self._synced >= self.sync_every:
            state = {
                k: v.detach().to("cpu", copy=True)
                for k, v in self.policy.model.state_dict().items()
            }
            ref = ray.put(state)
            with self._lock:
                self._weights = (version, ref)
                for w, alive in zip(self.workers, self.alive):
                    if alive:
                        w.set_weights.remote(version, ref)
            self._synced = version
        self.buffer.set_version(version)

    def worker_pids(self) -> list[int]:
        ray = _ray()
        return ray.get([w.pid.remote() for w, a in zip(self.workers, self.alive) if a])

    def close(self) -> None:
        ray = _ray()
        self._closing.set()
        self._thread.join(timeout=60)
        for w in self.workers:
            try:
                ray.kill(w)
            except Exception:
                pass
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayRollouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the producer thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as e:  # surfaces in the trainer's next get_batch
            self.buffer.close_input(e)

    def _submit(self, job: _Job, pending: dict) -> None:
        with self._lock:
            live = [i for i, a in enumerate(self.alive) if a]
            if not live:
                raise RuntimeError("every Ray rollout worker has died")
            job.worker = min(live, key=lambda i: self.load[i])
            self.load[job.worker] += 1
            job.attempts += 1
            job.actor = self.workers[job.worker]
            pending[job.actor.run.remote(job.request, self._synced)] = job

    def _produce(self) -> None:
        ray = _ray()
        pending: dict[Any, _Job] = {}
        waiting: collections.deque[list[EpisodeRequest]] = collections.deque()
        units = iter(self.requests)
        exhausted = False
        while not self._closing.is_set():
            while not exhausted:  # start every group the staleness bound admits
                if not waiting:
                    try:
                        waiting.extend(groups_of(list(next(units))))
                    except StopIteration:
                        exhausted = True
                        self.buffer.close_input()
                        break
                if not self.buffer.may_start():
                    break
                group = waiting.popleft()
                for req in group:
                    seq = self.buffer.start(req.group_id, len(group))
                    self._submit(_Job(seq, req, self._synced), pending)
            if not pending:
                if exhausted:
                    return
                time.sleep(0.02)
                continue
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.05)
            for ref in done:
                job = pending.pop(ref)
                with self._lock:
                    if self.workers[job.worker] is job.actor:
                        self.load[job.worker] -= 1
                try:
                    traj = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self._worker_died(job.worker, job.actor, e)
                    if job.attempts <= self.max_retries:
                        self.counts["retried"] += 1
                        self._submit(job, pending)
                        continue
                    self.counts["lost"] += 1
                    traj = failed_trajectory(job.request, f"worker died: {type(e).__name__}")
                except ray.exceptions.RayError as e:  # the call itself failed on a live worker
                    self.counts["lost"] += 1
                    traj = failed_trajectory(job.request, f"{type(e).__name__}: {e}"[:500])
                self.buffer.finish(job.seq, job.request.group_id, job.version_start, traj)
        for ref in pending:
            try:
                ray.cancel(ref)
            except Exception:
                pass

    def _worker_died(self, i: int, actor: Any, error: BaseException) -> None:
        """Mark worker ``i`` dead and, while the budget lasts, start a new actor in its slot
        with the latest weights pushed (or the spec's, before any push)."""
        with self._lock:
            if not self.alive[i] or self.workers[i] is not actor:
                return  # already handled (another of its episodes reported it)
            self.alive[i] = False
            self.counts["worker_deaths"] += 1
            if self.counts["replaced"] >= self.max_replacements:
                self.log(
                    f"ray: rollout worker {i} died ({type(error).__name__}); not replaced "
                    f"(ray.max_replacements={self.max_replacements} used), "
                    f"{sum(self.alive)} left"
                )
                return
            worker = self._actor.remote(self._spec_ref)
            if self._weights is not None:
                worker.set_weights.remote(*self._weights)
            self.workers[i], self.alive[i], self.load[i] = worker, True, 0
            self.counts["replaced"] += 1
            self.log(
                f"ray: rollout worker {i} died ({type(error).__name__}); replaced by a new one "
                f"({self.counts['replaced']}/{self.max_replacements} replacements used)"
            )
