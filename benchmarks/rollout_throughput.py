"""Generated tokens per second of the agent loop against plain batched generation.

The agent loop runs B concurrent episodes of K turns; each turn samples N tokens (no stop
token, so every turn has exactly N) and then calls a tool that sleeps a random 0-50 ms. The
baseline is ``model.generate`` of the same model on B prompts of the same length, K*N new
tokens each. Both sample at temperature 1. Prints both figures and the ratio (target >= 0.85).
Each side runs ``--repeats`` times, interleaved, and the fastest run counts (the machine is
shared, so single timings are noisy). ``--prefix-cache-tokens 0`` turns off the sampler's
KV reuse across turns.

    .venv/bin/python benchmarks/rollout_throughput.py [--batch 32] [--turns 4] [--tokens 32]
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


class SleepyEnv(ToolEnv):
    name = "sleepy"
    tools = ("work",)

    async def reset(self, task: Task) -> str:
        self.instructions = "Call work."
        self.rng = random.Random(task.id)
        return "Begin."

    async def work(self) -> str:
        """Do some slow work."""
        await asyncio.sleep(self.rng.uniform(0.0, 0.05))
        return "done"

    async def grade(self) -> RewardResult:
        return RewardResult(0.0, False)


class AlwaysWork:
    """Every action is a call to ``work`` (the benchmark measures throughput, not parsing)."""

    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("work", {})]

    def format(self, calls: list[ToolCall]) -> str:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefix-cache-tokens", type=int, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    B, K, N = args.batch, args.turns, args.tokens

    texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(2000)]
    tok = train_tokenizer(texts, vocab_size=2048)
    model = tiny_model(tok, seed=0).eval()
    print(
        f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; B={B} episodes x K={K} turns x N={N} tokens"
    )
    cache_kw = (
        {}
        if args.prefix_cache_tokens is None
        else {"prefix_cache_tokens": args.prefix_cache_tokens}
    )
    policy = HFPolicy(model, tok.pad_token_id, **cache_kw)
    renderer = ChatRenderer(tok, AlwaysWork(), "<|im_end|>")
    params = SamplingParams(temperature=1.0, max_new_tokens=N, stop_token_ids=())
    limits = RolloutLimits(
        max_turns=K, max_new_tokens=N, max_context_tokens=8192, max_parse_errors=10**6
    )
    requests = [EpisodeRequest(Task(f"t{i}", "sleepy"), "g", i) for i in range(B)]

    async def loop_run():
        batcher = GenerationBatcher(policy, params)
        try:
            return await collect(requests, SleepyEnv, renderer, batcher, limits)
        finally:
            await batcher.close()

    asyncio.run(loop_run())  # warm-up
    trajs = asyncio.run(loop_run())
    prompt_len = trajs[0].prompt_len
    ids = torch.tensor([trajs[0].token_ids[:prompt_len]] * B)
    gen_kwargs = dict(
        max_new_tokens=K * N,
        min_new_tokens=K * N,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        pad_token_id=tok.pad_token_id,
    )

    def base_run():
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), **gen_kwargs)

    base_run()  # warm-up
    loop_s = base_s = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        trajs = asyncio.run(loop_run())
        loop_s = min(loop_s, time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = base_run()
        base_s = min(base_s, time.perf_counter() - t0)
    loop_tokens = sum(t.num_action_tokens for t in trajs)
    base_tokens = (out.shape[1] - prompt_len) * B
    if hasattr(policy, "prefix_cache"):
        pc = policy.prefix_cache
        print(
            f"prefix cache: {pc.hits} hits, {pc.reused_tokens} prompt tokens reused, {pc.tokens} tokens kept"
        )

    loop_tps, base_tps = loop_tokens / loop_s, base_tokens / base_s
    print(f"best of {args.repeats}, final contexts {len(trajs[0].token_ids)} tokens")
    print(
        f"agent loop:           {loop_tokens} tokens in {loop_s:.2f}s = {loop_tps:.0f} tok/s (tool sleeps 0-50 ms per turn)"
    )
    print(f"plain model.generate: {base_tokens} tokens in {base_s:.2f}s = {base_tps:.0f} tok/s")
    print(f"ratio (agent loop / plain generate): {loop_tps / base_tps:.2f}  (target >= 0.85)")


if __name__ == "__main__":
    main()
