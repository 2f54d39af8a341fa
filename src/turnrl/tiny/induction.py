"""Copy rows: synthetic sequences only an induction head can predict, for the tiny model.

A pretrained LLM copies from its context by induction (find the earlier occurrence of the
current token, write what came after it). The tiny model is trained from scratch on a few
hundred demonstrations, where each value it should copy (a refund amount, an address) occurs
once per episode: it memorises them instead, and writes base-rate guesses on held-out tasks.
On these rows the circuit forms in about 1,300 steps at
lr 1e-3 (a sudden drop after a plateau at chance), and a few rows mixed into every SFT step keep
it while the model learns the demonstrations.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from turnrl.algo.losses import sequence_logprobs
from turnrl.tiny.model import SPECIAL_TOKENS

SPAN = (3, 10)  # tokens per copied span


def copy_rows(
    rng: random.Random, vocab: tuple[int, int], n: int, length: int = 24
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows of ``2 * length`` tokens: ``length`` random ids from ``range(*vocab)``, then
    spans of 3-10 of them copied from random offsets. The mask (aligned with the targets,
    ``[n, 2 * length - 1]``) is 1 on every span token after the span's first: those follow from
    the one before by looking it up earlier in the row; the first of a span is a random pick.
    """
    rows, masks = [], []
    for _ in range(n):
        source = [rng.randrange(*vocab) for _ in range(length)]
        row, mask = list(source), [0] * length
        while len(row) < 2 * length:
            k = rng.randint(*SPAN)
            s = rng.randrange(0, length - k)
            row += source[s : s + k]
            mask += [0] + [1] * (k - 1)
        rows.append(row[: 2 * length])
        masks.append(mask[: 2 * length])
    return torch.tensor(rows), torch.tensor(masks, dtype=torch.float)[:, 1:]


def copy_loss(model: torch.nn.Module, rng: random.Random, n: int) -> tuple[torch.Tensor, float]:
    """Mean next-token loss over the copied tokens of ``n`` fresh rows of the model's ids (past
    the tiny tokenizer's specials), and the share of them its argmax gets right (its copy
    accuracy)."""
    ids, mask = copy_rows(rng, (len(SPECIAL_TOKENS), model.config.vocab_size), n)
    logits = model(ids).logits
    lp = sequence_logprobs(logits, ids)[:, 1:]
    hit = (logits[:, :-1].argmax(-1) == ids[:, 1:]).float()
    return -(lp * mask).sum() / mask.sum(), ((hit * mask).sum() / mask.sum()).item()


def induction_warmup(
    model: torch.nn.Module,
    *,
    max_steps: int,
    seed: int,
    lr: float = 1e-3,
    batch_size: int = 16,
    target: float = 0.9,
    log: Callable[[int, float, float], None] | None = None,
) -> float:
    """Train on copy rows until the copy accuracy over the last 50 steps reaches ``target`` or
    ``max_steps`` pass; returns that accuracy. lr 1e-3: at 3e-3 the circuit did not form in
    1,500 steps; at 1e-3 it reached 0.9 in 1,300-1,500 on every seed tried.
    """
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    recent: list[float] = []
    for step in range(1, max_steps + 1):
        loss, acc = copy_loss(model, rng, batch_size)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = (recent + [acc])[-50:]
        mean = sum(recent) / len(recent)
        if log is not None and step % 50 == 0:
            log(step, loss.item(), mean)
        if step >= 50 and mean >= target:
            break
    return sum(recent) / max(len(recent), 1)
