"""Step time of a rollout whose tool blocks, against the same tool written ``async``.

One step: B concurrent episodes of K turns, N sampled tokens per turn, then a tool call that
takes a random 0-50 ms. Three versions of the tool, same latencies:

* ``async``: ``await asyncio.sleep(t)`` (the reference: latency overlaps across episodes);
* ``blocking``: a plain ``def`` calling ``time.sleep(t)``; it runs on the env's own thread;
* ``on-loop``: ``time.sleep(t)`` inside an ``async def``, a blocking call on an event loop. It
  runs on the env's own loop (:mod:`turnrl.envs.guard`), so it overlaps like the others; before
  that guard, on the loop all episodes share, the latencies added up.

Each version runs ``--repeats`` times, interleaved; the fastest run counts (the machine may
be shared). Prints the step times and the ratio blocking / async (target <= 1.2).

    .venv/bin/python benchmarks/blocking_tools.py [--batch 32] [--turns 4] [--tokens 8]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import torch

from turnrl.chat import ChatRenderer
from turnrl.envs.base import ToolEnv
from turnrl.policy.base import SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.tiny.model import tiny_model, train_tokenizer
from turnrl.types import RewardResult, Task, ToolCall


class _Base(ToolEnv):
    name = "sleepy"
    tools = ("work",)

    async def reset(self, task: Task) -> str:
        self.instructions = "Call work."
        self.rng = random.Random(task.id)
        return "Begin."

    async def grade(self) -> RewardResult:
        return RewardResult(0.0, False)


class AsyncTool(_Base):
    async def work(self) -> str:
        """Do some slow work."""
        await asyncio.sleep(self.rng.uniform(0.0, 0.05))
        return "done"


class BlockingTool(_Base):
    def work(self) -> str:
        """Do some slow work."""
        time.sleep(self.rng.uniform(0.0, 0.05))
        return "done"


class OnLoopTool(_Base):
    async def work(self) -> str:
        """Do some slow work (blocking the event loop)."""
        time.sleep(self.rng.uniform(0.0, 0.05))
        return "done"


class AlwaysWork:
    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("work", {})]

    def format(self, calls: list[ToolCall]) -> str:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    B, K, N = args.batch, args.turns, args.tokens
    tok = train_tokenizer([f"def f{i}(x):\n    return x + {i}\n" for i in range(500)], 512)
    model = tiny_model(tok, seed=0, hidden_size=64, layers=2).eval()
    policy = HFPolicy(model, tok.pad_token_id)
    renderer = ChatRenderer(tok, AlwaysWork(), "<|im_end|>")
    params = SamplingParams(temperature=1.0, max_new_tokens=N, stop_token_ids=())
    limits = RolloutLimits(
        max_turns=K, max_new_tokens=N, max_context_tokens=8192, max_parse_errors=10**6
    )
    requests = [EpisodeRequest(Task(f"t{i}", "sleepy"), "g", i) for i in range(B)]

    def step(env_cls: type[ToolEnv]) -> float:
        async def go():
            batcher = GenerationBatcher(policy, params)
            try:
                return await collect(requests, env_cls, renderer, batcher, limits)
            finally:
                await batcher.close()

        t0 = time.perf_counter()
        asyncio.run(go())
        return time.perf_counter() - t0

    versions = {"async": AsyncTool, "blocking": BlockingTool, "on-loop": OnLoopTool}
    for cls in versions.values():
        step(cls)  # warm-up
    best = {name: float("inf") for name in versions}
    for _ in range(args.repeats):
        for name, cls in versions.items():
            best[name] = min(best[name], step(cls))
    print(f"B={B} episodes x K={K} turns x N={N} tokens, tool 0-50 ms; best of {args.repeats}")
    for name, s in best.items():
        print(f"  {name:<9} tool: {s:.2f} s per step")
    print(f"blocking / async: {best['blocking'] / best['async']:.2f}  (target <= 1.2)")
    print(f"on-loop / async:  {best['on-loop'] / best['async']:.2f}  (time.sleep in async def)")


if __name__ == "__main__":
    main()
