"""A turn-level critic: V at each turn boundary, GAE over turns, and the value loss.

A turn is one decision; the value of the state before it is read from a causal LM's hidden state
at the last token the agent saw before acting (the token just before the turn's first action
token). Reading V once per turn, not per token, keeps the critic's targets on the time scale the
reward lives on (ArCHer's high-level critic).

Notation
--------
B, K        trajectories, padded number of turns; n_i = real turns of trajectory i
V_{i,k}     value of the state before turn k; V_{i,n_i} the state after the last turn
r_{i,k}     reward of turn k (per-turn reward, the final reward included on the last turn)
d_{i,k}     1 when turn k ended the episode by termination (no future), 0 otherwise
δ_{i,k}     r_{i,k} + γ (1 − d_{i,k}) V_{i,k+1} − V_{i,k}   (TD error)
A_{i,k}     Σ_l (γλ)^l δ_{i,k+l}                       (GAE)
G_{i,k}     A_{i,k} + V_{i,k}                          (the critic's target, "returns")
"""

from __future__ import annotations

import torch
from torch import nn


def gae_over_turns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    turn_mask: torch.Tensor,
    truncated: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with one step per turn.

    δ_k = r_k + γ V_{k+1} − V_k for k < n−1; on the last turn the next value is V_n where
    ``truncated`` (the episode was cut: bootstrap from the critic) and 0 where it terminated.
    A_k = δ_k + γλ A_{k+1}, G_k = A_k + V_k. Shapes: ``rewards, turn_mask: [B, K]``,
    ``values: [B, K+1]`` (V_n is read at column n_i, so padded trajectories keep their bootstrap
    value right after their last real turn), ``truncated: [B]`` bool → (``A: [B, K]``, ``G: [B, K]``),
    0 on padded turns. Ref: Schulman et al. 2016, "High-Dimensional Continuous Control Using
    Generalized Advantage Estimation", arXiv:1506.02438; Gymnasium's terminated/truncated split.
    """
    B, K = rewards.shape
    assert values.shape == (B, K + 1), f"values {tuple(values.shape)} != (B, K+1) = {(B, K + 1)}"
    mask = turn_mask.to(rewards.dtype)  # [B, K]
    n = turn_mask.long().sum(-1)  # [B]
    values = values.detach()
    adv = torch.zeros_like(rewards)  # [B, K]
    running = torch.zeros_like(rewards[:, 0])  # [B]
    for k in reversed(range(K)):
        is_last = n - 1 == k  # [B]
        alive = torch.where(is_last, truncated.to(rewards.dtype), mask[:, k])  # [B] 1 − d_k
        delta = rewards[:, k] + gamma * alive * values[:, k + 1] - values[:, k]  # [B]
        running = torch.where(is_last, delta, delta + gamma * lam * running) * mask[:, k]
        adv[:, k] = running
    returns = (adv + values[:, :K]) * mask  # [B, K]
    return adv, returns


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
    total: float | None = None,
) -> torch.Tensor:
    """L_V = ½ · mean_mask max((V − G)², (V_old + clip(V − V_old, −c, c) − G)²).

    ``total`` replaces the mask's own count in the mean (the turn count of a whole minibatch
    when this call sees one micro-batch of it, so the micro-batch losses sum to its loss).

    Without ``old_values``/``clip`` it is the plain ½ (V − G)². Clipping keeps the new values near
    the ones that produced the advantages (PPO's value clipping). Shapes: ``values, returns, mask,
    old_values: [B, K]`` → scalar. Ref: Schulman et al. 2017, "Proximal Policy Optimization
    Algorithms" (as implemented in OpenAI baselines ppo2); Huang et al. 2022, "The 37
    Implementation Details of PPO".
    """
    m = mask.to(values.dtype)  # [B, K]
    returns = returns.detach()
    err = (values - returns) ** 2  # [B, K]
    n = m.sum().clamp(min=1) if total is None else max(float(total), 1.0)
    if clip is not None:
        if old_values is None:
            raise ValueError("value_loss: clip needs old_values")
        old = old_values.detach()
        clipped = old + (values - old).clamp(-clip, clip)  # [B, K]
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * torch.where(m > 0, err, torch.zeros_like(err)).sum() / n


def turn_boundary_positions(
    turn_index: torch.Tensor, turn_mask: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """Token positions at which to read V_0 … V_K.

    V_k (k < n_i) is read at (first action token of turn k) − 1: the last token the agent saw
    before acting. V_{n_i} and padded turns are read at the last real token, ``lengths − 1``.
    Shapes: ``turn_index: [B, T]`` (−1 off actions), ``turn_mask: [B, K]``, ``lengths: [B]`` →
    ``[B, K+1]`` long. Ref: Zhou et al. 2024, "ArCHer" (an utterance-level critic reads the
    state at the end of the context before each utterance), arXiv:2402.19446.
    """
    B, T = turn_index.shape
    K = turn_mask.shape[1]
    pos = torch.arange(T, device=turn_index.device).expand(B, T)  # [B, T]
    src = torch.where(turn_index >= 0, pos, torch.full_like(pos, T))  # [B, T]
    first = torch.full((B, K), T, dtype=torch.long, device=turn_index.device)  # [B, K]
    first.scatter_reduce_(1, turn_index.long().clamp(min=0, max=K - 1), src, reduce="amin")
    last = (lengths.long() - 1).unsqueeze(-1)  # [B, 1]
    at_turn = torch.where(turn_mask.bool(), (first - 1).clamp(min=0), last)  # [B, K]
    return torch.cat([at_turn, last], dim=1)  # [B, K+1]


class TurnCritic(nn.Module):
    """V(s) = w·h_t + b, h_t the trunk's last hidden state at a turn boundary (a linear value head
    on an LM, as in Ouyang et al. 2022 "InstructGPT" and ArCHer's turn-level critic).

    Two configurations:
      * own trunk (:meth:`from_config` / :meth:`from_pretrained`): a separate small causal LM whose
        base model is a registered submodule, trained by the critic's own optimizer;
      * shared trunk (:meth:`sharing`): the policy's own base model. It is *not* registered, so
        ``critic.parameters()`` is only the value head and the policy's optimizer stays the only
        owner of the trunk; with ``detach_trunk=False`` the value loss also trains the trunk
        (add it to the policy loss), with ``True`` only the head learns. The cheapest path reuses
        the policy's forward: ``policy(..., output_hidden_states=True).hidden_states[-1]`` into
        :meth:`values_from_hidden`.
    """

    def __init__(
        self,
        trunk: nn.Module,
        hidden_size: int,
        *,
        shared: bool = False,
        detach_trunk: bool = False,
    ):
        super().__init__()
        if shared:
            object.__setattr__(self, "_shared_trunk", trunk)  # kept out of parameters()
        else:
            self.trunk = trunk
        self.shared = shared
        self.detach_trunk = detach_trunk
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_config(cls, config) -> TurnCritic:
        """A critic with its own freshly initialised trunk (e.g. a ``LlamaConfig``)."""
        from transformers import AutoModel

        trunk = AutoModel.from_config(config)
        return cls(trunk, config.hidden_size)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> TurnCritic:
        """A critic with its own trunk loaded from a causal-LM checkpoint."""
        from transformers import AutoModel

        trunk = AutoModel.from_pretrained(path, **kwargs)
        return cls(trunk, trunk.config.hidden_size)

    @classmethod
    def sharing(cls, policy: nn.Module, *, detach_trunk: bool = False) -> TurnCritic:
        """A value head on the policy's trunk (``policy.base_model`` of a transformers causal LM)."""
        trunk = getattr(policy, "base_model", policy)
        return cls(trunk, policy.config.hidden_size, shared=True, detach_trunk=detach_trunk)

    def values_from_hidden(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """V at the given positions. ``hidden: [B, T, H]``, ``positions: [B, K+1]`` → ``[B, K+1]``."""
        if self.detach_trunk:
            hidden = hidden.detach()
        H = hidden.shape[-1]
        h = hidden.gather(1, positions.long().unsqueeze(-1).expand(-1, -1, H))  # [B, K+1, H]
        return self.value_head(h.to(self.value_head.weight.dtype)).squeeze(-1)  # [B, K+1]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the trunk and read V. ``input_ids: [B, T]``, ``positions: [B, K+1]`` → ``[B, K+1]``."""
        trunk = self._shared_trunk if self.shared else self.trunk
        hidden = trunk(
            input_ids=input_ids, attention_mask=attention_mask
        ).last_hidden_state  # [B, T, H]
        return self.values_from_hidden(hidden, positions)
