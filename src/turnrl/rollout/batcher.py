"""Batches the generation requests of concurrent episodes into one model call.

Episodes alternate between waiting on the model and waiting on their tools. A batch is sent as
soon as every live episode is waiting on the model, or when the oldest request has waited
``max_wait_s`` (so a slow tool does not stall the others). Episodes whose env calls run on
threads of their own arrive in any order; a batch's rows are sorted by seed, so its contents
alone decide what it samples. While a batch runs in a worker
thread, new requests queue for the next one, so the event loop keeps serving tools.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from dataclasses import dataclass, field

from turnrl.policy.base import Generation, PolicyBackend, SamplingParams

# One long-lived thread for all model calls: torch's OpenMP pool belongs to the thread that
# calls it, and a fresh thread per batch (asyncio.to_thread) would start competing pools.
_GENERATION_THREAD = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="turnrl-generate")


@dataclass
class _Request:
    prompt: list[int]
    max_new_tokens: int
    seed: int
    future: asyncio.Future
    created: float = field(default_factory=time.monotonic)


class GenerationBatcher:
    def __init__(
        self, backend: PolicyBackend, params: SamplingParams, max_wait_s: float = 0.05
    ) -> None:
        self.backend = backend
        self.params = params
        self.max_wait_s = max_wait_s
        self.live_episodes = 0
        self._pending: list[_Request] = []
        self._wake = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self.batch_sizes: list[int] = []

    def episode_started(self) -> None:
        self.live_episodes += 1

    def episode_finished(self) -> None:
        self.live_episodes -= 1
        self._wake.set()  # the remaining episodes may now all be waiting

    async def generate(self, prompt: list[int], max_new_tokens: int, seed: int) -> Generation:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(prompt, max_new_tokens, seed, future))
        self._wake.set()
        return await future

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            deadline = self._pending[0].created + self.max_wait_s
            while len(self._pending) < self.live_episodes and time.monotonic() < deadline:
                try:
                    await asyncio.wait_for(self._wake.wait(), deadline - time.monotonic())
                except asyncio.TimeoutError:
                    break
                self._wake.clear()
            # rows in a fixed order (each request's seed is its own): the same requests give
            # the same batch, and so the same log-probs to the last bit, in any arrival order
            batch = sorted(self._pending, key=lambda r: (r.seed, r.prompt))
            self._pending = []
            self.batch_sizes.append(len(batch))
            max_new = max(r.max_new_tokens for r in batch)
            params = dataclasses.replace(self.params, max_new_tokens=max_new)
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    _GENERATION_THREAD,
                    self.backend.generate_batch,
                    [r.prompt for r in batch],
                    params,
                    [r.seed for r in batch],
                )
            except Exception as e:  # a backend failure fails its requests, not the loop
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)
                continue
            for r, g in zip(batch, results):
                if len(g.token_ids) > r.max_new_tokens:  # this request had a smaller budget
                    g = Generation(
                        g.token_ids[: r.max_new_tokens],
                        g.logprobs[: r.max_new_tokens],
                        False,
                        g.policy_version,
                    )
                if not r.future.done():
                    r.future.set_result(g)
            if self._pending:
                self._wake.set()
