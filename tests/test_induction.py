"""Copy rows and the induction warm-up of the tiny model (turnrl.tiny.induction)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from turnrl.tiny.induction import copy_loss, copy_rows, induction_warmup


def small_model(vocab: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(cfg)


def test_copy_rows_mark_only_tokens_that_follow_by_lookup():
    ids, mask = copy_rows(random.Random(0), (3, 1000), n=8, length=24)
    assert ids.shape == (8, 48) and mask.shape == (8, 47)
    assert ids.min() >= 3 and ids.max() < 1000
    for row, marks in zip(ids.tolist(), mask.tolist()):
        source = row[:24]
        assert marks[:24] == [0] * 24  # the random half and the first span's first token
        assert sum(marks) > 0
        for t, marked in enumerate(marks):
            if marked:  # target row[t + 1] is what followed row[t] in the random half
                assert any(source[j] == row[t] and source[j + 1] == row[t + 1] for j in range(23))


class Scripted:
    """An rng that returns the given values in order, for a row built by hand."""

    def __init__(self, values: list[int]) -> None:
        self.values = iter(values)

    def randrange(self, *bounds: int) -> int:
        return next(self.values)

    randint = randrange


def test_copy_rows_hand_example():
    # 6 source tokens; a span of 3 from offset 1; a span of 4 from offset 0, cut at 12 tokens
    ids, mask = copy_rows(Scripted([10, 11, 12, 13, 14, 15, 3, 1, 4, 0]), (3, 50), 1, length=6)
    assert ids.tolist() == [[10, 11, 12, 13, 14, 15, 11, 12, 13, 10, 11, 12]]
    # targets are tokens 1..11: 12 and 13 follow 11 and 12, 11 and 12 follow 10 and 11
    assert mask.tolist() == [[0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1]]


def test_copy_loss_is_the_mean_over_marked_tokens():
    model = small_model()
    rng_a, rng_b = random.Random(3), random.Random(3)
    loss, acc = copy_loss(model, rng_a, 4)
    ids, mask = copy_rows(rng_b, (3, 64), 4)
    lp = torch.log_softmax(model(ids).logits[:, :-1].float(), -1)
    lp = lp.gather(-1, ids[:, 1:, None])[..., 0]
    assert loss.item() == pytest.approx((-(lp * mask).sum() / mask.sum()).item(), rel=1e-5)
    assert 0.0 <= acc <= 1.0


def test_induction_warmup_stops_once_the_target_is_reached():
    acc, steps = induction_warmup(
        small_model(),
        max_steps=500,
        seed=0,
        target=0.0,  # met at the first check
    )
    assert steps == 50 and 0.0 <= acc <= 1.0


def test_induction_warmup_stops_at_max_steps():
    _, steps = induction_warmup(small_model(), max_steps=120, seed=0)
    assert steps == 120  # target 0.9 is out of reach for this model in 120 steps
