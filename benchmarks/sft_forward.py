"""SFT step time of the plain forward against its two exact shortcuts, same batches.

``shared_prefix_logits`` runs the tokens every demo of a batch starts with once (a real
model's system prompt and tool list); ``packed_logits`` lays the demos end to end to skip their
padding; ``batch_logits``, what SFT uses, picks the cheaper per batch. This times forward +
backward + optimizer step of a recipe's tiny model on batches of its own scripted
demonstrations, each way in turn, and prints the ratios to the plain forward.

    .venv/bin/python benchmarks/sft_forward.py [--recipe code-tiny] [--demos 64] [--batch 16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.registry import make_family
from turnrl.policy.hf import packed_logits, pad_right, shared_prefix_logits
from turnrl.policy.models import turn_end_token
from turnrl.run import build as setup
from turnrl.run.config import load_config
from turnrl.tiny.model import tiny_model
from turnrl.tiny.warm_start import env_tokenizer
from turnrl.train.sft import batch_logits, render_demo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="code-tiny")
    ap.add_argument("--demos", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(None, [f"recipe={args.recipe}", f"sft.episodes={args.demos}"])
    family = make_family(cfg.env.name, cfg.env.options)
    episodes = setup.demonstrations(cfg, family, family.tasks("train", None, seed=0))
    tok = env_tokenizer(episodes, cfg.tiny.vocab_size)
    renderer = ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))
    limits = cfg.rollout.max_obs_tokens, cfg.rollout.max_context_tokens
    demos = [render_demo(ep, renderer, ep.tools, *limits) for ep in episodes]
    demos = [d for d in demos if d is not None]
    batches = [
        pad_right([d.token_ids for d in demos[i : i + args.batch]], tok.pad_token_id, "cpu")
        for i in range(0, len(demos) - args.batch + 1, args.batch)
    ]
    tokens = sum(int(a.sum()) for _, a in batches)
    padded = sum(a.numel() for _, a in batches)
    model = tiny_model(tok, seed=0, hidden_size=cfg.tiny.hidden_size, layers=cfg.tiny.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def epoch(forward) -> float:
        t0 = time.perf_counter()
        for ids, attn in batches:
            loss = forward(model, ids, attn).float().logsumexp(-1).mul(attn).sum() / attn.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    def plain(m, ids, attn):
        return m(input_ids=ids, attention_mask=attn).logits

    forwards = {
        "plain": plain,
        "shared prefix": shared_prefix_logits,
        "packed": packed_logits,
        "batch_logits": batch_logits,
    }
    epoch(plain)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in forwards}
    for _ in range(args.reps):
        for name, forward in forwards.items():
            times[name].append(epoch(forward))
    print(
        f"{args.recipe}: {len(batches)} batches of {args.batch} demos, {tokens} tokens per pass,"
        f" {1 - tokens / padded:.0%} of the padded batch is padding"
    )
    base = statistics.median(times["plain"])
    for name, t in times.items():
        s = statistics.median(t)
        print(f"{name:14s}: {tokens / s:8.0f} tok/s  ({s:.2f} s per pass, {base / s:.2f}x plain)")


if __name__ == "__main__":
    main()
