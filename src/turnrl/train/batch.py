"""Trajectories -> padded tensors for the estimators and the loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turnrl.algo.advantages import acted_on_anchors, anchor_ids_exact
from turnrl.types import Trajectory


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] 1 on sampled tokens
    behavior_logprobs: torch.Tensor  # [B, T] sampler's logprobs, 0 elsewhere
    policy_versions: torch.Tensor  # [B, T] version that sampled each token, -1 elsewhere
    turn_index: torch.Tensor  # [B, T] turn of each action token, -1 elsewhere
    malformed: torch.Tensor  # [B, T] bool, action tokens of malformed turns
    rewards: torch.Tensor  # [B] final rewards
    group_index: torch.Tensor  # [B] long, one id per task group
    truncated: torch.Tensor  # [B] bool
    turn_rewards: torch.Tensor  # [B, K] per-turn rewards
    turn_mask: torch.Tensor  # [B, K]
    anchor_ids: torch.Tensor  # [B, K] state each turn acted on (GiGPO step groups)

    def rows(self, idx: torch.Tensor | list[int]) -> Batch:
        return Batch(**{k: v[idx] for k, v in self.__dict__.items()})


def collate(trajs: list[Trajectory], pad_id: int) -> Batch:
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
    trew = torch.zeros((B, K), dtype=torch.float32)
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
    anchors = anchor_ids_exact([_hashable(acted_on_anchors(t)) for t in trajs])
    if anchors.shape[1] < K:
        anchors = torch.nn.functional.pad(anchors, (0, K - anchors.shape[1]), value=-1)
    return Batch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=mask,
        behavior_logprobs=blp,
        policy_versions=ver,
        turn_index=tix,
        malformed=bad,
        rewards=torch.tensor([t.reward for t in trajs], dtype=torch.float32),
        group_index=torch.tensor([groups[t.group_id] for t in trajs], dtype=torch.long),
        truncated=torch.tensor([t.truncated for t in trajs], dtype=torch.bool),
        turn_rewards=trew,
        turn_mask=tmask,
        anchor_ids=anchors[:, :K],
    )


def _hashable(anchors: list) -> list:
    return [
        a if isinstance(a, str | tuple | int | float | type(None)) else repr(a) for a in anchors
    ]
