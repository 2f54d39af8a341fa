"""The tiny model's SFT terms: a weighted loss on tool-argument values, and copy rows.

    loss = sum_t m_t l_t / sum_t m_t + w * sum_t v_t l_t / sum_t v_t  (+ copy loss of n rows)

with l_t = -log p(x_t | x_<t), m the action mask and v the value mask (1/n on each of the n
tokens of a tool-argument value, so the second term is the mean over the batch's values of each
value's mean token loss). Why the second term: in a plain token mean the few value tokens (a
path, an operator, an order id) are a small share of each action, and a model trained from
scratch spends its attention on the fixed frame around them; it then learns to copy a value
from its context late or never. With weight 3 the tiny model copies the file name and both
operators of a code-env fix, given enough distinct demonstrations: repeating few of them many
times teaches it to guess values from their base rates instead. Copy rows
(:mod:`turnrl.tiny.induction`) mixed into every step keep the induction circuit a warm-up
formed. A pretrained model copies already and gets neither term.
"""

from __future__ import annotations

import json
import random

import torch

from turnrl.chat import ChatRenderer
from turnrl.policy.hf import pad_right
from turnrl.tiny.induction import copy_loss
from turnrl.train.sft import Demo
from turnrl.types import ToolCall


class TinyTerms:
    """:class:`turnrl.train.sft.ExtraTerms` of the tiny lab: ``value_weight`` times the mean
    loss over argument values (reported with the demonstration loss) and the copy loss of
    ``copy_rows`` fresh rows per step (not reported)."""

    def __init__(self, value_masks: list[list[float]], value_weight: float, copy_rows: int) -> None:
        self.value_masks, self.value_weight, self.copy_rows = value_masks, value_weight, copy_rows

    def demo_term(self, idx: list[int], logprobs: torch.Tensor) -> torch.Tensor | None:
        if not self.value_weight:
            return None
        values, _ = pad_right(
            [self.value_masks[i] for i in idx], 0.0, logprobs.device, torch.float
        )  # [B, T] value shares
        return -(self.value_weight * (logprobs * values).sum() / values.sum().clamp(min=1))

    def step_term(self, model: torch.nn.Module, rng: random.Random) -> torch.Tensor | None:
        return copy_loss(model, rng, self.copy_rows)[0] if self.copy_rows else None


def value_mask(demo: Demo, calls: list[ToolCall], renderer: ChatRenderer) -> list[float]:
    """Per token of ``demo``, its share of a tool-argument value: 1/n on each of a value's n
    tokens, 0 elsewhere. Values are where an agent copies from its context (a path, an id, the
    text it replaces); the frame around them is the same in every call. A value of n tokens
    gives 1/n to each, so every value counts once however it tokenizes: an order id's digits,
    which follow the ``#W`` every id starts with, weigh as much as a one-token operator.
    ``calls`` are the demo's actions in order (each is one run of ``loss_mask`` 1s)."""
    shares = [0.0] * len(demo.token_ids)
    starts = [
        i for i, m in enumerate(demo.loss_mask) if m and (i == 0 or not demo.loss_mask[i - 1])
    ]
    assert len(starts) == len(calls), f"{len(starts)} action spans for {len(calls)} calls"
    for start, call in zip(starts, calls):
        ids, spans = value_spans(call, renderer)
        assert demo.token_ids[start : start + len(ids)] == ids, "demo tokens differ from the call's"
        for first, end in spans:
            shares[start + first : start + end] = [1.0 / (end - first)] * (end - first)
    return shares


def value_spans(call: ToolCall, renderer: ChatRenderer) -> tuple[list[int], list[tuple[int, int]]]:
    """The call's tokens and, per argument value in order, the token range [first, end) it
    occupies (none when the parser formats values differently, or for an empty value)."""
    text = renderer.parser.format([call])
    enc = renderer.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    chars, pos = [], 0
    for key, value in call.arguments.items():
        name, encoded = json.dumps(key), json.dumps(value, separators=(",", ":"))
        at = text.find(f"{name}:{encoded}", pos)
        if at < 0:  # a parser that formats differently: no value spans
            return enc["input_ids"], []
        start = at + len(name) + 1
        quoted = isinstance(value, str)
        chars.append((start + quoted, start + len(encoded) - quoted))
        pos = start + len(encoded)
    spans = []
    for s, e in chars:
        inside = [i for i, (a, b) in enumerate(offsets) if a < e and b > s]
        if inside:
            spans.append((inside[0], inside[-1] + 1))
    return enc["input_ids"], spans
