"""SFT step time with the shared-prefix forward against the plain forward, same batches.

Every demonstration of an env starts with the same system prompt and tool list (265 of the
~480 tokens of a default-run episode); ``shared_prefix_logits`` runs that prefix once per batch.
This times forward + backward + optimizer step of the default recipe's tiny model on batches
of its own scripted demonstrations, both ways, alternating, and prints the ratio.

    .venv/bin/python benchmarks/sft_shared_prefix.py [--demos 64] [--batch 16] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.registry import make_family
from turnrl.policy.hf import pad_right, shared_prefix_logits
from turnrl.policy.models import turn_end_token
from turnrl.policy.tiny import tiny_model
from turnrl.train import setup
from turnrl.train.config import load_config
from turnrl.train.sft import render_demo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demos", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    cfg = load_config(None, [f"sft.episodes={args.demos}"])
    family = make_family(cfg.env.name, cfg.env.options)
    episodes = setup._demonstrations(cfg, family, family.tasks("train", None, seed=0))
    tok = setup.demo_tokenizer(episodes, cfg.model.vocab_size)
    renderer = ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))
    demos = [render_demo(ep, renderer, ep.tools, 384, 2048) for ep in episodes]
    demos = [d for d in demos if d is not None]
    batches = [
        pad_right([d.token_ids for d in demos[i : i + args.batch]], tok.pad_token_id, "cpu")
        for i in range(0, len(demos) - args.batch + 1, args.batch)
    ]
    tokens = sum(int(a.sum()) for _, a in batches)
    model = tiny_model(tok, seed=0, hidden_size=cfg.model.hidden_size, layers=cfg.model.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def epoch(forward) -> float:
        t0 = time.perf_counter()
        for ids, attn in batches:
            loss = forward(model, ids, attn).float().logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    def plain(m, ids, attn):
        return m(input_ids=ids, attention_mask=attn).logits

    epoch(plain)  # warm-up
    times: dict[str, list[float]] = {"plain": [], "shared": []}
    for _ in range(args.reps):
        times["plain"].append(epoch(plain))
        times["shared"].append(epoch(shared_prefix_logits))
    p, s = statistics.median(times["plain"]), statistics.median(times["shared"])
    print(f"{len(batches)} batches of {args.batch} demos, {tokens} tokens per pass")
    print(f"plain forward : {tokens / p:8.0f} tok/s  ({p:.2f} s per pass)")
    print(f"shared prefix : {tokens / s:8.0f} tok/s  ({s:.2f} s per pass)")
    print(f"speedup       : {p / s:.2f}x")


if __name__ == "__main__":
    main()
