"""Peak memory of one training step of a 152k-vocabulary model: full logits vs chunked.

A Qwen2-shaped model with random weights (vocabulary 151,936, hidden size 64, 2 layers) takes one
training step (forward, backward, AdamW) on rows of 2,048 tokens whose second half of every
256-token block is sampled action tokens (loss mask 1), as in a multi-turn episode.

* ``old``: the trainer before chunking, reimplemented here as the baseline: the model's full
  ``[b, T, V]`` logits, float32 log-softmax over all of them, the token entropy over all of them.
* ``new``: :func:`turnrl.train.step.train_on_batch`, the trainer's own step: hidden states from
  the trunk, the output layer applied to scored positions only, 512 positions at a time under
  activation checkpointing, entropy without a graph (``entropy_coef`` 0).

Each variant runs in its own process and reports its peak resident set size (``ru_maxrss``), so
what torch allocates is counted; the peak of a process that only builds the model and the batch
is shown for reference. The full-logits step at 8 rows of 2,048 tokens would need tens of GB (3
rows already passed 15 GB), more than the shared machine this ran on could spare, so ``old`` is
measured at 2 rows of 256 and of 512 tokens and extrapolated linearly in rows × tokens (every
large term is ``[b, T, V]``); ``new`` is measured at 2 × 512 (the same-size ratio) and at the full
8 × 2,048. Rows come in pairs: a group of one has no advantage, so nothing would train.
Usage: ``python benchmarks/train_memory.py [--rows 8] [--tokens 2048]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

VOCAB = 151_936


def build(rows: int, tokens: int, dtype: str = "float32"):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=tokens,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg).to(getattr(torch, dtype))
    ids = torch.randint(0, VOCAB, (rows, tokens))
    pos = torch.arange(tokens)
    mask = ((pos % 256) >= 128).float().expand(rows, tokens).clone()  # [rows, T]
    return model, ids, mask


def step_old(model, ids, mask) -> float:
    """The pre-chunking trainer's micro-batch: full logits, full-vocabulary float32 softmax."""
    import torch

    from turnrl.algo.losses import policy_loss

    def sequence_logprobs(logits, input_ids):
        B, T, V = logits.shape
        z = logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(
            z.reshape(-1, V), input_ids[:, 1:].reshape(-1), reduction="none"
        )
        return torch.nn.functional.pad(-nll.view(B, T - 1), (1, 0))

    def token_entropy(logits):
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        return torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), (1, 0))

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits  # [b, T, V]
    lp = sequence_logprobs(logits, ids)
    entropy = token_entropy(logits.detach())
    adv = torch.randn(ids.shape[0], 1).expand_as(lp)
    loss, _ = policy_loss(lp, lp.detach() - 0.01, adv, mask, entropy=entropy)
    loss.backward()
    opt.step()
    return float(loss)


def step_new(model, ids, mask) -> float:
    """The trainer's own step, one minibatch of all rows."""
    import torch

    from turnrl.run.config import load_config
    from turnrl.train.batch import Batch
    from turnrl.train.step import train_on_batch

    B, T = ids.shape
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=guess",
            f"optim.minibatch_size={B}",
            f"optim.micro_batch_size={B}",
            f"rollout.max_context_tokens={T}",
        ],
    )
    turn = torch.where(mask.bool(), (torch.arange(T) // 256).expand(B, T), -1)  # [B, T]
    K = int(turn.max()) + 1
    batch = Batch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        loss_mask=mask,
        behavior_logprobs=torch.where(mask.bool(), -11.0, 0.0),
        policy_versions=torch.where(mask.bool(), 0, -1),
        turn_index=turn,
        malformed=torch.zeros(B, T, dtype=torch.bool),
        rewards=torch.arange(B, dtype=torch.float64) % 2,
        group_index=torch.zeros(B, dtype=torch.long),
        truncated=torch.zeros(B, dtype=torch.bool),
        excluded=torch.zeros(B, dtype=torch.bool),
        turn_rewards=torch.zeros(B, K, dtype=torch.float64),
        turn_mask=torch.ones(B, K),
        anchor_ids=torch.zeros(B, K, dtype=torch.long),
        episode_row=torch.arange(B),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    out = train_on_batch(cfg, model, None, opt, batch, 0, log=lambda s: None)
    return out["loss"]


def child(variant: str, rows: int, tokens: int) -> None:
    import torch

    torch.set_num_threads(1)
    model, ids, mask = build(rows, tokens)
    t0 = time.monotonic()
    loss = {"idle": lambda *a: 0.0, "old": step_old, "new": step_new}[variant](model, ids, mask)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_gb": peak_kb / 2**20, "loss": loss, "s": time.monotonic() - t0}))


def measure(variant: str, rows: int, tokens: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--rows",
            str(rows),
            "--tokens",
            str(tokens),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--child", choices=["idle", "old", "new"])
    args = ap.parse_args()
    if args.child:
        child(args.child, args.rows, args.tokens)
        return
    R, T = args.rows, args.tokens
    print(f"one training step, vocabulary {VOCAB:,}, hidden 64, 2 layers, {T} tokens per row")
    idle = measure("idle", R, T)["peak_gb"]
    print(f"  process with model and batch, no step:   {idle:6.2f} GB peak RSS")
    small, mid = measure("old", 2, 256), measure("old", 2, 512)
    per_token = (mid["peak_gb"] - small["peak_gb"]) / (2 * 512 - 2 * 256)
    old_r = mid["peak_gb"] + per_token * (R * T - 2 * 512)
    new_mid, new_r = measure("new", 2, 512), measure("new", R, T)
    rows = [
        ("old (full logits), 2 x 256", small["peak_gb"], small["s"], "measured"),
        ("old (full logits), 2 x 512", mid["peak_gb"], mid["s"], "measured"),
        (f"old (full logits), {R} x {T}", old_r, float("nan"), "extrapolated"),
        ("new (chunked), 2 x 512", new_mid["peak_gb"], new_mid["s"], "measured"),
        (f"new (chunked), {R} x {T}", new_r["peak_gb"], new_r["s"], "measured"),
    ]
    for name, gb, s, how in rows:
        print(
            f"  {name:28s} {gb:6.2f} GB peak RSS  ({gb - idle:6.2f} GB above idle)  {s:6.1f} s  {how}"
        )
    print(f"  ratio old/new at 2 x 512: {mid['peak_gb'] / new_mid['peak_gb']:.1f}x (both measured)")
    print(f"  ratio old/new at {R} x {T}: {old_r / new_r['peak_gb']:.1f}x (old extrapolated)")
    print(f"  new at {R} x {T} within the 8 GB target: {new_r['peak_gb'] <= 8.0}")


if __name__ == "__main__":
    main()
