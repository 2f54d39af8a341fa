"""Trajectories -> padded tensors for the estimators and the loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turnrl.algo.advantages import acted_on_anchors, anchor_ids_exact, anchor_ids_similar
from turnrl.types import Trajectory

# Failures of the machinery, not of the policy: never evidence for or against its actions.


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] 1 on sampled tokens
    behavior_logprobs: torch.Tensor  # [B, T] sampler's logprobs, 0 elsewhere
    policy_versions: torch.Tensor  # [B, T] version that sampled each token, -1 elsewhere
    turn_index: torch.Tensor  # [B, T] turn of each action token, -1 elsewhere
    malformed: torch.Tensor  # [B, T] bool, action tokens of malformed turns
    rewards: torch.Tensor  # [B] float64 final rewards
    group_index: torch.Tensor  # [B] long, one id per task group
    truncated: torch.Tensor  # [B] bool
    excluded: torch.Tensor  # [B] bool, infrastructure failures (env error, timeout, lost)
    turn_rewards: torch.Tensor  # [B, K] float64 per-turn rewards
    turn_mask: torch.Tensor  # [B, K]
    anchor_ids: torch.Tensor  # [B, K] state each turn acted on (GiGPO step groups)

    def rows(self, idx: torch.Tensor | list[int]) -> Batch:
        return Batch(**{k: v[idx] for k, v in self.__dict__.items()})

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{k: v.to(device) for k, v in self.__dict__.items()})


def collate(
    trajs: list[Trajectory],
    pad_id: int,
    *,
    anchors: str = "exact",
    anchor_similarity: float = 0.9,
) -> Batch:
    """Pad trajectories into one batch. ``anchors`` picks how GiGPO step groups are formed:
    ``exact`` (equal states) or ``similar`` (text anchors at least ``anchor_similarity`` alike,
    :func:`anchor_ids_similar`; non-text states compare by their ``repr``)."""
    B = len(trajs)
    T = max(len(t.token_ids) for t in trajs)
    K = max(1, max(len(t.turns) for t in trajs))
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    blp = torch.zeros((B, T), dtype=torch.float32)
    ver = torch.full((B, T), -1, dtype=torch.long)
    tix = torch.full((B, T), -1, dtype=torch.long)
    bad = torch.zeros((B, T), dtype=torch.bool)
    trew = torch.zeros((B, K), dtype=torch.float64)
    tmask = torch.zeros((B, K), dtype=torch.float32)
    groups: dict[str, int] = {}
    for b, t in enumerate(trajs):
        n = len(t.token_ids)
        ids[b, :n] = torch.tensor(t.token_ids)
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
        blp[b, :n] = torch.tensor(t.behavior_logprobs)
        ver[b, :n] = torch.tensor(t.policy_versions)
        for k, turn in enumerate(t.turns):
            tix[b, turn.action_start : turn.action_end] = k
            bad[b, turn.action_start : turn.action_end] = turn.malformed
            trew[b, k] = turn.reward
            tmask[b, k] = 1.0
        groups.setdefault(t.group_id, len(groups))
    group_index = torch.tensor([groups[t.group_id] for t in trajs], dtype=torch.long)
    states = [_hashable(acted_on_anchors(t)) for t in trajs]
    if anchors == "similar":
        texts = [[a if isinstance(a, str) else repr(a) for a in row] for row in states]
        anchor_ids = anchor_ids_similar(texts, group_index, threshold=anchor_similarity)
    elif anchors == "exact":
        anchor_ids = anchor_ids_exact(states)
    else:
        raise ValueError(f"anchors={anchors!r}; expected 'exact' or 'similar'")
    if anchor_ids.shape[1] < K:
        anchor_ids = torch.nn.functional.pad(anchor_ids, (0, K - anchor_ids.shape[1]), value=-1)
    return Batch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=mask,
        behavior_logprobs=blp,
        policy_versions=ver,
        turn_index=tix,
        malformed=bad,
        rewards=torch.tensor([t.reward for t in trajs], dtype=torch.float64),
        group_index=group_index,
        truncated=torch.tensor([t.truncated for t in trajs], dtype=torch.bool),
        excluded=torch.tensor([t.excluded for t in trajs], dtype=torch.bool),
        turn_rewards=trew,
        turn_mask=tmask,
        anchor_ids=anchor_ids[:, :K],
    )


def _hashable(anchors: list) -> list:
    return [
        a if isinstance(a, str | tuple | int | float | type(None)) else repr(a) for a in anchors
    ]
