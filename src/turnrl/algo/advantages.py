"""Credit assignment: per-token advantages for a batch of multi-turn trajectories.

Every estimator is a pure function over tensors. The episode-level estimators (``grpo``,
``dr_grpo``, ``rloo``, ``reinforce_pp``) return one advantage per trajectory ``[B]``, which
:func:`broadcast_to_tokens` copies onto that trajectory's action tokens. The turn-level ones
(``gigpo``, ``gae_turn``) return one advantage per turn ``[B, K]``, which :func:`turns_to_tokens`
copies onto each turn's action tokens. :func:`compute_advantages` is the one entry point the trainer
calls: it picks the estimator with a ``match`` and applies the truncation policy the same way for
all of them. Observation and prompt tokens always get exactly 0: the environment's transition
probabilities do not depend on the policy's parameters, so they carry no gradient.

Notation
--------
B           trajectories in the batch, index i
T           padded token length, index t
K           padded number of turns, index k; n_i = turns trajectory i really has
g(i)        task group of trajectory i (``group_index``); G_g = {j : g(j) = g}, n_g = |G_g|
R_i         final (outcome) reward of trajectory i (``rewards``)
r_{i,k}     per-turn (process) reward of turn k (``turn_rewards``), excluding R_i
s_{i,k}     anchor state the agent acted on at turn k (``anchor_ids``)
m_{i,t}     loss mask: 1 on tokens the policy sampled (``loss_mask``)
k(i,t)      turn of action token t (``turn_index``; -1 on prompt/observation tokens)
valid_i     trajectory takes part in the loss and in group statistics (truncation policy)
e(i)        first row of row i's episode (``episode_row``): an episode whose context was
            rewritten is several rows (segments), one per context it was sampled from
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import torch

from turnrl.algo.critic import gae_over_turns

if TYPE_CHECKING:
    from turnrl.types import Trajectory

Estimator = Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "gae_turn"]
Truncation = Literal["mask", "zero", "keep", "bootstrap"]
StdKind = Literal["population", "sample"]
GiGPONorm = Literal["mean_std", "mean"]


# ---------------------------------------------------------------------------------------------
# Group statistics (scatter over group ids; no python loop over groups)
# ---------------------------------------------------------------------------------------------


def group_mean_std(
    x: torch.Tensor, group: torch.Tensor, weight: torch.Tensor, std: StdKind = "population"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Weighted mean, std and size of each element's group.

    With weights u_j (``weight``: a bool validity mask, or counts): n_g = Σ_{j∈G_g} u_j,
    mean_g = Σ u_j x_j / n_g, std_g = sqrt(Σ u_j (x_j − mean_g)² / d), d = n_g (population) or
    n_g − 1 (sample; groups of one get std 0). Shapes: ``x, group, weight: [N]``; returns three
    ``[N]`` tensors gathered back to each element (weight-0 elements still receive their group's
    statistics, computed without them). Everything is float64 (a float32 mean of 1e6-sized
    rewards loses the differences being measured); a weight-0 element's value is never read,
    so a NaN there cannot reach its group.
    """
    _, inv = torch.unique(group, return_inverse=True)  # [N] dense group ids
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    xd = torch.where(weight > 0, x.double(), torch.zeros((), dtype=torch.float64))  # [N]
    # Shift each group by one of its own members so an all-equal group has deviations of exactly 0
    # (otherwise float rounding of the mean, divided by a ~0 std, gives large spurious advantages).
    first = torch.full((n_groups,), len(x), dtype=torch.long, device=x.device)
    idx = torch.arange(len(x), device=x.device)  # [N]
    idx = torch.where(weight > 0, idx, torch.full_like(idx, len(x)))  # a weighted member
    first.scatter_reduce_(0, inv, idx, reduce="amin")  # [G]
    ref = xd[first.clamp(max=max(len(x) - 1, 0))]  # [G]
    d = xd - ref[inv]  # [N]
    w = weight.double()  # [N]
    count = torch.zeros(n_groups, dtype=torch.float64, device=x.device).index_add_(0, inv, w)  # [G]
    mean_d = torch.zeros_like(count).index_add_(0, inv, d * w) / count.clamp(min=1)  # [G]
    sq = torch.zeros_like(count).index_add_(0, inv, (d - mean_d[inv]) ** 2 * w)  # [G]
    denom = count if std == "population" else count - 1
    var = torch.where(denom > 0, sq / denom.clamp(min=1), torch.zeros_like(sq))  # [G]
    mean = ref + mean_d  # [G]
    return mean[inv], var.sqrt()[inv], count[inv]


def _scale(dev: torch.Tensor, sd: torch.Tensor, eps: float) -> torch.Tensor:
    """dev / (sd + eps), leaving dev (exactly 0 then) where sd is 0, so eps=0 cannot divide 0 by 0."""
    return torch.where(sd > 0, dev / (sd + eps), dev)


# ---------------------------------------------------------------------------------------------
# Episode-level estimators: [B] -> [B]
# ---------------------------------------------------------------------------------------------


def grpo(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    std: StdKind = "population",
    eps: float = 1e-6,
    scale: bool = True,
) -> torch.Tensor:
    """Group-relative advantage: A_i = (R_i − mean_g R) / (std_g R + eps).

    ``std`` picks the population (÷n) or sample (÷(n−1)) standard deviation; the note's example
    (rewards [1, 0, 0, 1] → [1, −1, −1, 1]) uses the population std. ``scale=False`` is Dr. GRPO
    (no std division). Shapes: ``rewards, group_index, valid: [B]`` → ``[B]``, 0 where not valid.
    Ref: Shao et al. 2024, "DeepSeekMath" (GRPO), arXiv:2402.03300.
    """
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.bool()
    mean, sd, _ = group_mean_std(rewards, group_index, valid, std)  # [B] x3 float64
    adv = rewards.double() - mean  # [B]
    if scale:
        adv = _scale(adv, sd, eps)
    return torch.where(valid, adv, torch.zeros_like(adv)).to(rewards.dtype)


def dr_grpo(
    rewards: torch.Tensor, group_index: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Dr. GRPO: A_i = R_i − mean_g R (no std division, which biases toward easy/hard groups).

    Shapes: ``[B]`` → ``[B]``. Ref: Liu et al. 2025, "Understanding R1-Zero-Like Training: A
    Critical Perspective", arXiv:2503.20783.
    """
    return grpo(rewards, group_index, valid, scale=False)


def rloo(
    rewards: torch.Tensor, group_index: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """REINFORCE leave-one-out: A_i = R_i − (1/(n_g−1)) Σ_{j∈G_g, j≠i} R_j = n_g/(n_g−1)·(R_i − mean_g).

    Groups of one get 0 (no baseline to compare with). The advantages of a group sum to 0.
    Shapes: ``[B]`` → ``[B]``. Ref: Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline
    for Free!"; Ahmadian et al. 2024, "Back to Basics", arXiv:2402.14740.
    """
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.bool()
    mean, _, n = group_mean_std(rewards, group_index, valid)  # [B] x3 float64
    dev = rewards.double() - mean  # [B]
    adv = torch.where(n > 1, n / (n - 1).clamp(min=1) * dev, torch.zeros_like(mean))
    return torch.where(valid, adv, torch.zeros_like(adv)).to(rewards.dtype)


def reinforce_pp(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    token_counts: torch.Tensor | None = None,
    group_baseline: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """REINFORCE++: normalise by the whole batch, not by the group.

    a_i = R_i − mean_g R (the "-baseline" variant; ``group_baseline=False`` gives a_i = R_i), then
    A_i = (a_i − μ) / (σ + eps) with μ, σ the mean and population std over the batch. When
    ``token_counts: [B]`` is given, μ and σ weigh each trajectory by its number of action tokens,
    which equals whitening the per-token advantages (what the paper does). Shapes: ``[B]`` → ``[B]``.
    Ref: Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning LLMs", arXiv:2501.03262.
    """
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.bool()
    r = torch.where(valid, rewards.double(), torch.zeros((), dtype=torch.float64))  # [B]
    a = r - group_mean_std(r, group_index, valid)[0] if group_baseline else r  # [B]
    w = valid.double()  # [B]
    if token_counts is not None:
        w = w * token_counts.double()
    mu, sigma, _ = group_mean_std(a, torch.zeros_like(group_index), w)  # [B] x2, one batch group
    adv = _scale(a - mu, sigma, eps)  # [B]
    return torch.where(valid, adv, torch.zeros_like(adv)).to(rewards.dtype)


# ---------------------------------------------------------------------------------------------
# Turn-level estimators: -> [B, K]
# ---------------------------------------------------------------------------------------------


def step_rewards(
    rewards: torch.Tensor, turn_rewards: torch.Tensor, turn_mask: torch.Tensor
) -> torch.Tensor:
    """Per-turn rewards with the final reward added on each trajectory's last turn.

    r'_{i,k} = r_{i,k} + [k = n_i − 1]·R_i, and 0 on padded turns. Shapes: ``rewards: [B]``,
    ``turn_rewards, turn_mask: [B, K]`` → ``[B, K]``. Ref: GiGPO (Feng et al. 2025) combines process
    and outcome rewards this way before discounting.
    """
    mask = turn_mask.to(turn_rewards.dtype)  # [B, K]
    n = turn_mask.long().sum(-1)  # [B]
    last = torch.nn.functional.one_hot((n - 1).clamp(min=0), turn_rewards.shape[1])  # [B, K]
    last = last.to(turn_rewards.dtype) * (n > 0).unsqueeze(-1)
    return (turn_rewards + last * rewards.unsqueeze(-1)) * mask


def discounted_returns(
    step_reward: torch.Tensor, turn_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """Discounted return from each turn: R_{i,k} = r_{i,k} + γ R_{i,k+1}, R_{i,n_i} = 0.

    Shapes: ``[B, K]`` → ``[B, K]`` (0 on padded turns). Ref: Sutton & Barto 2018, eq. 3.9;
    GiGPO (Feng et al. 2025) eq. 5.
    """
    mask = turn_mask.to(step_reward.dtype)  # [B, K]
    out = torch.zeros_like(step_reward)  # [B, K]
    running = torch.zeros_like(step_reward[:, 0])  # [B]
    for k in reversed(range(step_reward.shape[1])):
        running = (step_reward[:, k] + gamma * running) * mask[:, k]
        out[:, k] = running
    return out


def gigpo(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    turn_rewards: torch.Tensor,
    turn_mask: torch.Tensor,
    anchor_ids: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    norm: GiGPONorm = "mean_std",
    std: StdKind = "sample",
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-in-Group Policy Optimisation: A_{i,k} = A^E_i + w·A^S_{i,k}.

    Episode level: A^E_i = (E_i − mean_g E) / (std_g E + eps) over the task group, with E_i =
    R_i + Σ_k r_{i,k} the episode's total reward (GRPO; ``norm="mean"`` drops the std division). Step level: steps of one task group whose anchor
    states are identical form a step group S = {(j, l) : g(j) = g(i), s_{j,l} = s_{i,k}}; each
    step's discounted return R_{i,k} = r'_{i,k} + γ R_{i,k+1} (r' = per-turn reward, plus R_i on the
    last turn) is normalised within S: A^S_{i,k} = (R_{i,k} − mean_S R) / (std_S R + eps); a step
    group of one gets A^S = 0. ``std`` defaults to the sample std as in the reference code
    (verl-agent's ``torch.std``), γ to the paper's 0.95. Returns are summed in float64.
    Shapes: ``rewards, group_index, valid: [B]``, ``turn_rewards, turn_mask, anchor_ids: [B, K]``
    → ``[B, K]``, 0 on padded turns and invalid trajectories.
    Ref: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
    arXiv:2505.10978.
    """
    B, K = turn_rewards.shape
    valid = (
        torch.ones(B, dtype=torch.bool, device=rewards.device) if valid is None else valid.bool()
    )
    scale = norm == "mean_std"
    out_dtype = rewards.dtype
    rewards, turn_rewards = rewards.double(), turn_rewards.double()  # returns summed in float64
    episode_return = rewards + (turn_rewards * turn_mask.to(turn_rewards.dtype)).sum(-1)  # [B]
    episode = grpo(episode_return, group_index, valid, std=std, eps=eps, scale=scale)  # [B]

    returns = discounted_returns(step_rewards(rewards, turn_rewards, turn_mask), turn_mask, gamma)
    step_valid = turn_mask.bool() & valid.unsqueeze(-1)  # [B, K]
    # A step group is a (task group, anchor) pair: fold both ids into one key per step.
    key = torch.stack([group_index.unsqueeze(-1).expand(B, K), anchor_ids], dim=-1)  # [B, K, 2]
    _, step_group = torch.unique(key.reshape(B * K, 2), dim=0, return_inverse=True)  # [B*K]
    mean, sd, n = group_mean_std(returns.reshape(-1), step_group, step_valid.reshape(-1), std)
    a_step = returns.reshape(-1) - mean  # [B*K]
    if scale:
        a_step = _scale(a_step, sd, eps)
    a_step = torch.where(n > 1, a_step, torch.zeros_like(a_step)).reshape(B, K)  # [B, K]

    adv = episode.unsqueeze(-1) + step_weight * a_step  # [B, K]
    return torch.where(step_valid, adv, torch.zeros_like(adv)).to(out_dtype)


def gae_turn(
    rewards: torch.Tensor,
    turn_rewards: torch.Tensor,
    turn_mask: torch.Tensor,
    values: torch.Tensor,
    bootstrap: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over turns with a turn-level critic (see :func:`turnrl.algo.critic.gae_over_turns`).

    Step rewards r'_{i,k} are the per-turn rewards plus R_i on the last turn; the value after the
    last turn is V_{i,n_i} where ``bootstrap`` is True (a truncated episode) and 0 otherwise.
    Shapes: ``rewards, bootstrap, valid: [B]``, ``turn_rewards, turn_mask: [B, K]``,
    ``values: [B, K+1]`` → (advantages ``[B, K]``, returns ``[B, K]``), 0 where not valid.
    Ref: Schulman et al. 2016, "High-Dimensional Continuous Control Using GAE", arXiv:1506.02438;
    turn-level credit as in Zhou et al. 2024, "ArCHer", arXiv:2402.19446.
    """
    B = rewards.shape[0]
    valid = (
        torch.ones(B, dtype=torch.bool, device=rewards.device) if valid is None else valid.bool()
    )
    r = step_rewards(rewards, turn_rewards, turn_mask)  # [B, K]
    adv, ret = gae_over_turns(r, values, turn_mask, bootstrap, gamma=gamma, lam=lam)
    keep = valid.unsqueeze(-1) & turn_mask.bool()  # [B, K]
    return torch.where(keep, adv, torch.zeros_like(adv)), torch.where(
        keep, ret, torch.zeros_like(ret)
    )


# ---------------------------------------------------------------------------------------------
# From trajectory / turn advantages to tokens
# ---------------------------------------------------------------------------------------------


def broadcast_to_tokens(adv: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """A_{i,t} = A_i · m_{i,t}: every action token of a trajectory gets its advantage.

    Shapes: ``adv: [B]``, ``loss_mask: [B, T]`` → ``[B, T]``, exactly 0 where the mask is 0.
    Ref: the policy-gradient theorem over a trajectory, ∇ log p(τ) = Σ_t m_t ∇ log π(x_t | x_<t):
    environment tokens carry no θ (the note's two-turn example, 0.5 × 0.9 × 0.2).
    """
    return torch.where(loss_mask.bool(), adv.unsqueeze(-1), torch.zeros((), dtype=adv.dtype))


def turns_to_tokens(
    adv: torch.Tensor, turn_index: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """A_{i,t} = A_{i,k(i,t)} · m_{i,t}: every action token gets its turn's advantage.

    Shapes: ``adv: [B, K]``, ``turn_index, loss_mask: [B, T]`` → ``[B, T]``, exactly 0 where the mask
    is 0 or the token has no turn (index −1). Ref: turn-level credit, Zhou et al. 2024 "ArCHer";
    GiGPO (Feng et al. 2025).
    """
    k = turn_index.long()  # [B, T]
    if k.numel() and int(k.max()) >= adv.shape[1]:
        raise ValueError(f"turn_index reaches {int(k.max())} but adv has {adv.shape[1]} turns")
    per_token = adv.gather(1, k.clamp(min=0))  # [B, T]
    keep = loss_mask.bool() & (k >= 0)  # [B, T]
    return torch.where(keep, per_token, torch.zeros((), dtype=adv.dtype))


def no_credit_for_malformed(adv: torch.Tensor, malformed: torch.Tensor) -> torch.Tensor:
    """A'_{i,t} = min(A_{i,t}, 0) where token t belongs to a malformed turn, else A_{i,t}.

    Shapes: ``adv, malformed: [B, T]`` → ``[B, T]``. A malformed action (text that does not parse,
    an unknown tool, bad arguments) changed nothing in the environment, so an episode's success
    is no evidence for it; it keeps its share of a failure (it spent a turn and counts towards
    the parse-error limit). Without this, a success that recovered from a garbled call pushes the
    garbled tokens up with the whole episode's advantage: rare tokens gain the most, entropy
    rises and the call format decays over training.
    """
    return torch.where(malformed.bool(), adv.clamp(max=0), adv)


# ---------------------------------------------------------------------------------------------
# Anchors: python states -> integer ids
# ---------------------------------------------------------------------------------------------


def acted_on_anchors(trajectory: Trajectory) -> list[Hashable]:
    """The state each turn acted on: the task's initial state for turn 0, else the previous
    turn's ``anchor`` (``Turn.anchor`` is the state *after* its turn). Trajectories of one group
    share the initial state, so their first steps always form one step group (GiGPO's anchor
    states, Feng et al. 2025).

    A turn whose text did not parse never reached the environment, so it has no state of its
    own: the next turn acts on ("parse_error", state it failed from). Parse errors after
    different states therefore never share a step group, while the same failure from the same
    state (an identical situation: same env state, one failed attempt more) still does."""
    state: Hashable = ("<initial>", trajectory.task_id)
    out: list[Hashable] = []
    for turn in trajectory.turns:
        out.append(state)
        state = ("parse_error", state) if turn.parse_error is not None else _hashable(turn.anchor)
    return out


def _hashable(state: object) -> Hashable:
    """The state itself when it hashes, else its ``repr`` (a dict or list state)."""
    try:
        hash(state)
    except TypeError:
        return repr(state)
    return state


def anchor_ids_exact(anchors: Sequence[Sequence[Hashable]], pad: int = -1) -> torch.Tensor:
    """Integer ids for hashable anchors: equal anchors (``==``/``hash``) get equal ids.

    ``anchors[i][k]`` is the state of trajectory i at turn k. Rows are padded with ``pad`` to the
    longest row; padded turns are ignored by :func:`gigpo` through ``turn_mask``. → ``[B, K]`` long.
    Ref: GiGPO (Feng et al. 2025), exact-match anchor grouping.
    """
    table: dict[Hashable, int] = {}
    K = max((len(row) for row in anchors), default=0)
    out = torch.full((len(anchors), K), pad, dtype=torch.long)  # [B, K]
    for i, row in enumerate(anchors):
        for k, a in enumerate(row):
            out[i, k] = table.setdefault(a, len(table))
    return out


def text_similarity(a: str, b: str) -> float:
    """difflib's ratio 2·M / (|a| + |b|), M = matched characters; 1.0 for identical strings.

    Ref: Ratcliff & Obershelp 1988 (gestalt pattern matching), the measure GiGPO's similarity
    variant uses."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def anchor_ids_similar(
    anchors: Sequence[Sequence[str]],
    group_index: Sequence[int] | torch.Tensor,
    threshold: float = 0.9,
    pad: int = -1,
) -> torch.Tensor:
    """Integer ids that put *similar* text anchors of the same task group in one step group.

    Greedy leader clustering inside each task group, in batch order: an anchor joins the first
    cluster whose first member has :func:`text_similarity` >= ``threshold``, otherwise it starts a
    new cluster. Identical strings always share an id; the result depends on order when
    similarity is not transitive (as in GiGPO's similarity variant). Cost: O(anchors × clusters)
    difflib comparisons per group, so keep anchors short (a state summary, not a whole page).
    → ``[B, K]`` long, ``pad`` on padded turns.
    """
    groups = group_index.tolist() if isinstance(group_index, torch.Tensor) else list(group_index)
    K = max((len(row) for row in anchors), default=0)
    out = torch.full((len(anchors), K), pad, dtype=torch.long)  # [B, K]
    leaders: dict[int, list[tuple[str, int]]] = {}  # group -> [(leader text, id)]
    exact: dict[tuple[int, str], int] = {}
    next_id = 0
    for i, row in enumerate(anchors):
        g = groups[i]
        for k, text in enumerate(row):
            if (g, text) not in exact:
                found = next(
                    (
                        cid
                        for lead, cid in leaders.get(g, [])
                        if text_similarity(lead, text) >= threshold
                    ),
                    None,
                )
                if found is None:
                    found, next_id = next_id, next_id + 1
                    leaders.setdefault(g, []).append((text, found))
                exact[(g, text)] = found
            out[i, k] = exact[(g, text)]
    return out


# ---------------------------------------------------------------------------------------------
# Segments: several rows, one episode
# ---------------------------------------------------------------------------------------------


def fold_segments(x: torch.Tensor, episode_row: torch.Tensor) -> torch.Tensor:
    """x'_e = Σ_{i : e(i) = e} x_i on each episode's first row, 0 on its other rows.

    Rows of one episode hold disjoint turns (0 on the others' turns), so folding puts the
    whole episode's per-turn tensors on its first row. Shapes: ``x: [B, ...]``,
    ``episode_row: [B]`` → ``[B, ...]``.
    """
    return torch.zeros_like(x).index_add_(0, episode_row, x)


def segment_value_columns(turn_mask: torch.Tensor, episode_row: torch.Tensor) -> torch.Tensor:
    """Which row reads which of its episode's values V_0 … V_n: V_k (k < n) the row holding
    turn k; V_n (after the last turn, the bootstrap value) the row holding turn n − 1, at its
    last token. Shapes: ``turn_mask: [B, K]`` (each row's own turns) → ``[B, K+1]`` bool.
    """
    B, K = turn_mask.shape
    own = turn_mask.bool()  # [B, K]
    n = fold_segments(turn_mask.double(), episode_row).sum(-1)[episode_row].long()  # [B]
    holds_last = own.gather(1, (n - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1) & (n > 0)  # [B]
    cols = torch.arange(K + 1, device=turn_mask.device)  # [K+1]
    at_end = (cols == n.unsqueeze(-1)) & holds_last.unsqueeze(-1)  # [B, K+1]
    return torch.cat([own, torch.zeros_like(own[:, :1])], dim=1) | at_end


# ---------------------------------------------------------------------------------------------
# Dispatch with one truncation policy
# ---------------------------------------------------------------------------------------------


@dataclass
class Advantages:
    """What :func:`compute_advantages` returns. Give ``loss_mask`` (not the batch's) to the policy
    loss, so masked (truncated) rows add no KL/entropy terms and do not dilute the mean."""

    tokens: torch.Tensor  # [B, T] per-token advantages, exactly 0 where loss_mask == 0
    loss_mask: torch.Tensor  # [B, T] the batch's loss_mask with invalid rows zeroed
    valid: torch.Tensor  # [B] bool, trajectories that take part in the loss
    non_finite: torch.Tensor  # [B] bool, rows dropped for a NaN/inf reward or advantage
    turns: torch.Tensor | None = None  # [B, K] per-turn advantages (gigpo, gae_turn)
    returns: torch.Tensor | None = None  # [B, K] critic targets (gae_turn)


def compute_advantages(
    estimator: Estimator,
    *,
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    loss_mask: torch.Tensor,
    truncated: torch.Tensor | None = None,
    truncation: Truncation = "mask",
    excluded: torch.Tensor | None = None,
    turn_index: torch.Tensor | None = None,
    turn_rewards: torch.Tensor | None = None,
    turn_mask: torch.Tensor | None = None,
    anchor_ids: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    episode_row: torch.Tensor | None = None,
    std: StdKind | None = None,
    eps: float = 1e-6,
    gamma: float | None = None,
    lam: float = 0.95,
    step_weight: float = 1.0,
    gigpo_norm: GiGPONorm = "mean_std",
    reinforce_pp_group_baseline: bool = True,
) -> Advantages:
    """Per-token advantages with one truncation policy for every estimator.

    Inputs (all from the trainer's batch):
      ``rewards: [B]`` final rewards R_i; ``group_index: [B]`` long, equal for trajectories of the
      same task; ``loss_mask: [B, T]`` 1 on sampled action tokens; ``truncated: [B]`` bool (cut by a
      limit, not ended by the task); for ``gigpo``/``gae_turn`` also ``turn_index: [B, T]`` long
      (turn of each action token, −1 elsewhere), ``turn_rewards: [B, K]`` per-turn rewards (without
      R_i), ``turn_mask: [B, K]``; ``anchor_ids: [B, K]`` for ``gigpo`` (see
      :func:`acted_on_anchors`, :func:`anchor_ids_exact`, :func:`anchor_ids_similar`);
      ``values: [B, K+1]`` for ``gae_turn`` (V at each turn boundary, the last one after the final
      turn).

    Truncation policy (applied to rows where ``truncated``):
      ``mask``: valid_i = 0, the row's advantages are 0 and it is left out of every group/batch
      statistic; ``zero``: R_i := 0 before any statistic (per-turn rewards are kept); ``keep``:
      R_i stands as graded (the grader already judged the state the limit left);
      ``bootstrap``: ``gae_turn`` only: R_i is not added and V_{i,n_i} stands in for the future.

    Segments: ``episode_row: [B]`` long maps each row to its episode's first row (rows of one
    episode share its reward, group and ending; each holds only its own turns, numbered in
    episode order). Per-turn inputs are folded onto the first row (:func:`fold_segments`,
    values by :func:`segment_value_columns`), every estimator runs on first rows only, so an
    episode counts once in each statistic, and every row then takes its episode's advantages:
    the same A_i for episode-level estimators, A_{i,k} of its own turns for turn-level ones.
    The truncation policy is the episode's: ``mask``/``zero`` treat all its rows alike;
    ``bootstrap`` reads V after the episode's last turn (in its last segment). An earlier
    segment is neither truncated nor terminated: its last turn's next value is V of the next
    turn, read in the next segment's rewritten context.

    ``excluded: [B]`` bool marks rows that are nobody's evidence (an infrastructure failure: env
    error, timeout, a lost episode): they leave the loss and every statistic whatever the
    truncation policy. Rows whose reward or per-turn rewards are NaN/inf are excluded the same
    way (``Advantages.non_finite``), and so are rows whose advantages come out non-finite (a
    diverged critic); every read of an excluded value goes through ``torch.where``.

    ``std`` applies to grpo and gigpo; None picks each estimator's reference convention
    (population for grpo, as in the note's worked example; sample for gigpo, as its reference
    code). ``gamma`` None is 0.95 for gigpo (its paper) and 1.0 otherwise (episodic tasks).
    Everything is computed in float64; token advantages come back in ``rewards``' dtype.
    Raises ``ValueError`` naming missing inputs or a bad option.
    """
    B = rewards.shape[0]
    truncated = (
        torch.zeros(B, dtype=torch.bool, device=rewards.device)
        if truncated is None
        else truncated.bool()
    )
    if truncation not in get_args(Truncation):
        raise ValueError(f"truncation={truncation!r}; expected one of {get_args(Truncation)}")
    if truncation == "bootstrap" and estimator != "gae_turn":
        raise ValueError(
            f"truncation='bootstrap' needs a critic: only valid with estimator='gae_turn', got {estimator!r}"
        )
    needs = {
        "gigpo": ("turn_index", "turn_rewards", "turn_mask", "anchor_ids"),
        "gae_turn": ("turn_index", "turn_rewards", "turn_mask", "values"),
    }.get(estimator, ())
    given = dict(turn_index=turn_index, turn_rewards=turn_rewards, turn_mask=turn_mask)
    given |= dict(anchor_ids=anchor_ids, values=values)
    missing = [name for name in needs if given[name] is None]
    if missing:
        raise ValueError(f"estimator={estimator!r} needs {', '.join(missing)}")

    if std is None:
        std = "sample" if estimator == "gigpo" else "population"
    if gamma is None:
        gamma = 0.95 if estimator == "gigpo" else 1.0
    zero = torch.zeros((), dtype=torch.float64, device=rewards.device)
    token_counts = loss_mask.sum(-1)  # [B]
    rows = torch.arange(B, device=rewards.device)
    segmented = episode_row is not None and bool((episode_row != rows).any())
    if segmented:  # one row per episode from here on; the others follow their first row
        if values is not None:
            own = segment_value_columns(turn_mask, episode_row)  # [B, K+1]
            values = fold_segments(torch.where(own, values.double(), zero), episode_row)
        if turn_rewards is not None:
            turn_rewards = fold_segments(turn_rewards.double(), episode_row)  # [B, K]
        if anchor_ids is not None:
            anchor_ids = fold_segments(anchor_ids + 1, episode_row) - 1  # [B, K], -1 padded
        if turn_mask is not None:
            turn_mask = fold_segments(turn_mask, episode_row)  # [B, K]
        token_counts = fold_segments(token_counts, episode_row)  # [B]
        later = episode_row != rows  # [B]
        excluded = later if excluded is None else excluded.bool() | later
    r = rewards.double()  # [B]
    non_finite = ~torch.isfinite(r)  # [B]
    if turn_rewards is not None:
        turn_rewards = turn_rewards.double()  # [B, K]
        live = turn_mask.bool() if turn_mask is not None else torch.ones_like(turn_rewards).bool()
        non_finite |= (live & ~torch.isfinite(turn_rewards)).any(-1)
    out = non_finite if excluded is None else non_finite | excluded.bool()  # [B]
    truncated = truncated & ~out
    valid = ~out & (~truncated if truncation == "mask" else torch.ones_like(truncated))  # [B]
    r = torch.where(valid, r, zero)
    if turn_rewards is not None:
        turn_rewards = torch.where(valid.unsqueeze(-1), turn_rewards, zero)  # [B, K]
    if values is not None:
        values = values.double()  # [B, K+1]
    if truncation in ("zero", "bootstrap"):
        # zero: the cut episode scores 0; bootstrap: V after the last turn replaces R_i.
        r = torch.where(truncated, zero, r)  # [B]

    adv = turn_adv = ret = None
    match estimator:
        case "grpo":
            adv = grpo(r, group_index, valid, std=std, eps=eps)
        case "dr_grpo":
            adv = dr_grpo(r, group_index, valid)
        case "rloo":
            adv = rloo(r, group_index, valid)
        case "reinforce_pp":
            adv = reinforce_pp(
                r,
                group_index,
                valid,
                token_counts=token_counts,
                group_baseline=reinforce_pp_group_baseline,
                eps=eps,
            )
        case "gigpo":
            turn_adv = gigpo(
                r,
                group_index,
                turn_rewards,
                turn_mask,
                anchor_ids,
                valid,
                gamma=gamma,
                step_weight=step_weight,
                norm=gigpo_norm,
                std=std,
                eps=eps,
            )
        case "gae_turn":
            bootstrap = truncated if truncation == "bootstrap" else torch.zeros_like(truncated)
            turn_adv, ret = gae_turn(
                r, turn_rewards, turn_mask, values, bootstrap, valid, gamma=gamma, lam=lam
            )
        case _:
            raise ValueError(
                f"estimator={estimator!r}; expected grpo, dr_grpo, rloo, reinforce_pp, gigpo or gae_turn"
            )
    if segmented:  # every row takes its episode's values
        valid, non_finite = valid[episode_row], non_finite[episode_row]
        adv = None if adv is None else adv[episode_row]
        turn_adv = None if turn_adv is None else turn_adv[episode_row]
        ret = None if ret is None else ret[episode_row]
    if turn_adv is None:
        tokens = broadcast_to_tokens(adv, loss_mask)
    else:
        tokens = turns_to_tokens(turn_adv, turn_index, loss_mask)
    # A diverged critic (or any overflow) must not reach the loss: drop the row, not the step.
    bad = ~torch.isfinite(tokens).all(-1) & valid  # [B]
    if turn_adv is not None:
        bad |= ~torch.isfinite(turn_adv).all(-1) & valid
    if bool(bad.any()):
        valid = valid & ~bad
        non_finite = non_finite | bad
        keep = valid.unsqueeze(-1)
        tokens = torch.where(keep, tokens, zero)
        turn_adv = None if turn_adv is None else torch.where(keep, turn_adv, zero)
        ret = None if ret is None else torch.where(keep, ret, zero)
    kept_mask = loss_mask * valid.unsqueeze(-1).to(loss_mask.dtype)  # [B, T]
    tokens = tokens.to(rewards.dtype)
    turn_adv = None if turn_adv is None else turn_adv.to(rewards.dtype)
    ret = None if ret is None else ret.to(rewards.dtype)
    return Advantages(tokens, kept_mask, valid, non_finite, turn_adv, ret)
