"""Trajectories -> padded tensors for the estimators and the loss.

One row per segment: an episode whose context was rewritten (``Trajectory.segment_starts``)
becomes several rows, each holding exactly the tokens one stretch of the episode was sampled
from. Rows of one episode are consecutive and share its reward, group and ending;
``episode_row`` points each row at its episode's first row, which alone stands for the episode
in every group statistic (see ``compute_advantages``). Turns keep their episode numbering
across rows; ``turn_mask``/``turn_rewards``/``anchor_ids`` of a row hold only its own turns.
"""

from __future__ import annotations

import bisect
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
    episode_row: torch.Tensor  # [B] long, the first row of each row's episode

    def per_episode(self, x: torch.Tensor, pad: float = float("nan")) -> torch.Tensor:
        """Per-row values ``[B, T]`` joined back into one row per episode ``[E, T']``, each in
        the order of ``Trajectory.token_ids`` (rows' padding dropped, ``pad`` after the end)."""
        lengths = self.attention_mask.sum(-1).tolist()
        parts: list[list[torch.Tensor]] = []
        for b, first in enumerate(self.episode_row.tolist()):
            if first == b:
                parts.append([])
            parts[-1].append(x[b, : lengths[b]])
        joined = [torch.cat(p) for p in parts]
        return torch.nn.utils.rnn.pad_sequence(joined, batch_first=True, padding_value=pad)

    def rows(self, idx: torch.Tensor | list[int]) -> Batch:
        """A sub-batch. Take whole episodes (all rows of each), after the advantages: the
        ``episode_row`` of the result still points into this batch."""
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
    rows = [(t, start, end) for t in trajs for start, end in t.segments()]  # [B] segments
    B = len(rows)
    T = max(end - start for _, start, end in rows)
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
    own = torch.zeros((B, K), dtype=torch.bool)  # turns whose action lies in the row
    episode_row = torch.zeros(B, dtype=torch.long)
    groups: dict[str, int] = {}
    segment = 0
    for b, (t, start, end) in enumerate(rows):
        segment = 0 if start == 0 else segment + 1
        n = end - start
        ids[b, :n] = torch.tensor(t.token_ids[start:end])
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(t.loss_mask[start:end], dtype=torch.float32)
        blp[b, :n] = torch.tensor(t.behavior_logprobs[start:end])
        ver[b, :n] = torch.tensor(t.policy_versions[start:end])
        episode_row[b] = b if start == 0 else episode_row[b - 1]
        for k, turn in enumerate(t.turns):
            if bisect.bisect_right(t.segment_starts, turn.action_start) != segment:
                continue  # the last segment starting at or before its action holds a turn
            tix[b, turn.action_start - start : turn.action_end - start] = k
            bad[b, turn.action_start - start : turn.action_end - start] = turn.malformed
            trew[b, k] = turn.reward
            tmask[b, k] = 1.0
            own[b, k] = True
        groups.setdefault(t.group_id, len(groups))
    group_index = torch.tensor([groups[t.group_id] for t, _, _ in rows], dtype=torch.long)
    states = [_hashable(acted_on_anchors(t)) for t, _, _ in rows]
    if anchors == "similar":
        texts = [[a if isinstance(a, str) else repr(a) for a in row] for row in states]
        anchor_ids = anchor_ids_similar(texts, group_index, threshold=anchor_similarity)
    elif anchors == "exact":
        anchor_ids = anchor_ids_exact(states)
    else:
        raise ValueError(f"anchors={anchors!r}; expected 'exact' or 'similar'")
    if anchor_ids.shape[1] < K:
        anchor_ids = torch.nn.functional.pad(anchor_ids, (0, K - anchor_ids.shape[1]), value=-1)
    anchor_ids = torch.where(own, anchor_ids[:, :K], -1)  # [B, K] each row's own turns
    return Batch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=mask,
        behavior_logprobs=blp,
        policy_versions=ver,
        turn_index=tix,
        malformed=bad,
        rewards=torch.tensor([t.reward for t, _, _ in rows], dtype=torch.float64),
        group_index=group_index,
        truncated=torch.tensor([t.truncated for t, _, _ in rows], dtype=torch.bool),
        excluded=torch.tensor([t.excluded for t, _, _ in rows], dtype=torch.bool),
        turn_rewards=trew,
        turn_mask=tmask,
        anchor_ids=anchor_ids,
        episode_row=episode_row,
    )


def _hashable(anchors: list) -> list:
    return [
        a if isinstance(a, str | tuple | int | float | type(None)) else repr(a) for a in anchors
    ]
