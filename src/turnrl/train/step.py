"""One training step on a collated batch: advantages, then the minibatch loss, accumulated over
micro-batches, then a guarded optimizer step.

The minibatch loss is one function of the whole minibatch (:func:`minibatch_loss`): the policy
loss of :func:`turnrl.algo.losses.policy_loss` plus, for ``gae_turn``, ``value_coef`` times the
critic's value loss. Every normaliser in it (token count N, sequence count B', Dr. GRPO's constant
L, the number of critic turns) is computed over the whole minibatch *before* it is cut into
micro-batches, so the micro-batch losses sum to the minibatch loss and their accumulated
gradients equal its gradient: micro-batching only trades time for memory.

Memory: log-probabilities are computed from the trunk's hidden states with the output layer
applied in chunks of positions, only where a sampled token is scored, each chunk under
activation checkpointing, so no ``[B, T, V]`` float32 logits tensor exists in the forward or the
backward pass; the entropy is computed without a graph unless ``entropy_coef > 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from turnrl.algo.advantages import compute_advantages, no_credit_for_malformed
from turnrl.algo.critic import TurnCritic, turn_boundary_positions, value_loss
from turnrl.algo.losses import policy_loss, sequence_logprobs, token_entropy
from turnrl.policy.hf import shared_prefix_length
from turnrl.train.batch import Batch

if TYPE_CHECKING:
    from turnrl.run.config import TrainConfig
    from turnrl.train.parallel import Dist
    from turnrl.types import Trajectory

Log = Callable[[str], None]

# Positions per output-layer chunk: at a 152k vocabulary one chunk's float32 logits are 0.3 GB.
LOGIT_CHUNK = 512
# Rows of a micro-batch sharing at least this many leading tokens run them once (trunk_hidden).
SHARED_PREFIX_MIN = 32


# ---------------------------------------------------------------------------------------------
# Log-probabilities without full-vocabulary logits
# ---------------------------------------------------------------------------------------------


def _trunk_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(trunk, output layer) of a transformers causal LM (LoRA-wrapped too), or None when the
    logits are more than ``head(hidden)`` (soft-capped or scaled logits) or cannot be split."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return None
    try:
        trunk, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if trunk is None or head is None or trunk is model:
        return None
    return trunk, head


def _scored_chunk(
    head: torch.nn.Module, h: torch.Tensor, y: torch.Tensor, temperature: float, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(y | h) and the entropy of p(· | h). ``h: [n, H]``, ``y: [n]`` → two ``[n]``."""
    z = head(h)  # [n, V]
    z = (z.float() if z.dtype in (torch.float16, torch.bfloat16) else z) / temperature
    lse = torch.logsumexp(z, dim=-1)  # [n]
    logp = z.gather(-1, y.unsqueeze(-1)).squeeze(-1) - lse  # [n]
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        # H = −Σ p log p = lse − Σ p z
        ent = lse - (torch.softmax(z, dim=-1) * z).sum(-1)  # [n]
    return logp, ent


def trunk_hidden(
    trunk: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    min_prefix: int = SHARED_PREFIX_MIN,
) -> torch.Tensor:
    """``trunk(input_ids, attention_mask).last_hidden_state`` for right-padded rows, running
    the tokens every row starts with once: the episodes of one task group share their whole
    prompt (system prompt, tool list, task: most of a short episode), so the prefix's keys and
    values are computed for one row and repeated for the rest. Exact up to float summation
    order; gradients flow through the shared part as usual. Plain forward when the shared prefix
    is short or the trunk recomputes activations (gradient checkpointing keeps no cache).
    Shapes: ``[B, T]`` -> ``[B, T, H]``."""
    B, T = input_ids.shape
    p = shared_prefix_length(input_ids, attention_mask)
    if B < 2 or p < min_prefix or getattr(trunk, "gradient_checkpointing", False):
        return trunk(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state
    head = trunk(input_ids=input_ids[:1, :p], use_cache=True)
    cache = head.cache
    if not hasattr(cache, "batch_repeat_interleave"):  # a model with its own kind of cache
        return trunk(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state
    cache.batch_repeat_interleave(B)
    tail = trunk(
        input_ids=input_ids[:, p:],
        attention_mask=attention_mask,
        cache=cache,
        position_ids=torch.arange(p, T, device=input_ids.device).unsqueeze(0).expand(B, -1),
        use_cache=True,
    ).last_hidden_state  # [B, T - p, H]
    return torch.cat([head.last_hidden_state.expand(B, -1, -1), tail], dim=1)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    chunk: int = LOGIT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log π(x_t | x_<t) and the entropy H_t, aligned like :func:`sequence_logprobs`, at the
    positions ``score_mask`` selects (0 elsewhere), plus the trunk's last hidden states.

    Equal to ``sequence_logprobs(model(...).logits)`` on the selected tokens, but the output layer
    runs on the selected positions only, ``chunk`` at a time, and each chunk is recomputed in the
    backward pass rather than kept: the peak holds one chunk's ``[chunk, V]`` logits instead of
    ``[B, T, V]``. Shapes: ``input_ids, attention_mask, score_mask: [B, T]`` → (``[B, T]``,
    ``[B, T]``, ``[B, T, H]``).
    """
    B, T = input_ids.shape
    split = _trunk_and_head(model)
    if split is None:  # logits are more than a linear head: the plain path
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        logp = sequence_logprobs(out.logits, input_ids, temperature=temperature)  # [B, T]
        src = out.logits if entropy_grad else out.logits.detach()
        ent = token_entropy(src, temperature=temperature)  # [B, T]
        keep = score_mask.bool()
        zero = torch.zeros((), dtype=logp.dtype)
        return torch.where(keep, logp, zero), torch.where(keep, ent, zero), out.hidden_states[-1]
    trunk, head = split
    hidden = trunk_hidden(trunk, input_ids, attention_mask)  # [B, T, H]
    sel = score_mask[:, 1:].bool()  # [B, T-1] token t+1 is scored from the state at t
    h = hidden[:, :-1][sel]  # [N, H]
    y = input_ids[:, 1:][sel]  # [N]
    parts_lp, parts_ent = [], []
    for start in range(0, h.shape[0], chunk):
        hc, yc = h[start : start + chunk], y[start : start + chunk]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(
                _scored_chunk, head, hc, yc, temperature, entropy_grad, use_reentrant=False
            )
        else:
            lp, ent = _scored_chunk(head, hc, yc, temperature, entropy_grad)
        parts_lp.append(lp)
        parts_ent.append(ent)
    dtype = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
    empty = h.new_zeros(0, dtype=dtype)
    lp = torch.cat(parts_lp) if parts_lp else empty  # [N]
    ent = torch.cat(parts_ent) if parts_ent else empty  # [N]
    zeros = torch.zeros(B, T - 1, dtype=dtype, device=input_ids.device)
    logp = F.pad(zeros.masked_scatter(sel, lp), (1, 0))  # [B, T]
    entropy = F.pad(zeros.masked_scatter(sel, ent), (1, 0))  # [B, T]
    return logp, entropy, hidden


# ---------------------------------------------------------------------------------------------
# The minibatch loss
# ---------------------------------------------------------------------------------------------


def micro_batches(
    rows: torch.Tensor, lengths: torch.Tensor, max_rows: int, max_tokens: int | None
) -> list[torch.Tensor]:
    """Cut a minibatch's rows (in order) into micro-batches of at most ``max_rows`` rows and at
    most ``max_tokens`` padded tokens (rows × longest row); a row longer than the budget goes
    alone. Shapes: ``rows: [M]`` indices, ``lengths: [B]`` → list of index tensors."""
    out: list[list[int]] = []
    longest = 0
    for i in rows.tolist():
        n = int(lengths[i])
        cur = out[-1] if out else None
        fits = cur is not None and len(cur) < max_rows
        if fits and max_tokens is not None:
            fits = (len(cur) + 1) * max(longest, n) <= max_tokens
        if fits:
            cur.append(i)
            longest = max(longest, n)
        else:
            out.append([i])
            longest = n
    return [torch.tensor(m, dtype=torch.long) for m in out]


def minibatch_loss(
    cfg: TrainConfig,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    behavior_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
    value_mask: torch.Tensor | None = None,
    totals: dict[str, float] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of one minibatch: policy loss + ``value_coef`` · value loss (``gae_turn``).

    A pure function of tensors. Called on a whole minibatch with ``totals=None`` it is the
    definition; called on a micro-batch with the whole minibatch's :func:`minibatch_totals` it is
    that micro-batch's exact share. Shapes: ``[b, T]`` per-token tensors; ``values, old_values:
    [b, K+1]``, ``returns, value_mask: [b, K]``.
    """
    a = cfg.algo
    t = totals or {}
    loss, metrics = policy_loss(
        logprobs,
        old_logprobs,
        advantages.to(logprobs.dtype),
        loss_mask,
        eps_low=a.eps_low,
        eps_high=a.eps_high,
        dual_clip_c=a.dual_clip,
        ratio_level=a.ratio_level,
        aggregation=a.aggregation,
        norm_length=norm_tokens(cfg),
        total_tokens=t.get("tokens"),
        total_rows=t.get("rows"),
        behavior_logprobs=behavior_logprobs if a.is_correction != "none" else None,
        is_correction=None if a.is_correction == "none" else a.is_correction,
        is_level=a.is_level,
        is_mode=a.is_mode,
        is_cap=a.is_cap,
        ref_logprobs=ref_logprobs,
        kl_coef=a.kl_coef,
        kl_estimator=a.kl_estimator,
        entropy=entropy,
        entropy_coef=a.entropy_coef,
    )
    if values is not None:
        K = returns.shape[1]
        v_loss = value_loss(
            values[:, :K],
            returns.to(values.dtype),
            value_mask,
            old_values=None if a.value_clip is None else old_values[:, :K].to(values.dtype),
            clip=a.value_clip,
            total=t.get("turns"),
        )
        metrics["value_loss"] = v_loss.detach()
        loss = loss + a.value_coef * v_loss
    return loss, metrics


def norm_tokens(cfg: TrainConfig) -> int:
    """Dr. GRPO's constant L: ``algo.norm_tokens``, else the episode's token budget."""
    return cfg.algo.norm_tokens or cfg.rollout.max_context_tokens


def minibatch_totals(loss_mask: torch.Tensor, value_mask: torch.Tensor | None) -> dict[str, float]:
    """N (tokens), B' (rows with a token) and the critic's turn count of a whole minibatch."""
    n = loss_mask.sum(-1)  # [M]
    out = {"tokens": float(n.sum()), "rows": float((n > 0).sum())}
    if value_mask is not None:
        out["turns"] = float(value_mask.sum())
    return out


# ---------------------------------------------------------------------------------------------
# The step
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def _pre_pass(
    cfg: TrainConfig,
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    critic: TurnCritic | None,
    batch: Batch,
    rows: torch.Tensor,
    positions: torch.Tensor | None,
    dist: Dist | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """What stays fixed during the update, computed once: the proximal policy π_old (with an
    importance correction), the reference policy, and the critic's V_old at turn boundaries.
    Under ``dist`` each rank computes its share of ``rows`` (as many passes on every rank, as
    FSDP2 needs) and the shares are summed: each row is non-zero on one rank only."""
    score = dist.scorer if dist is not None else partial(token_logprobs, model)
    a = cfg.algo
    B, T = batch.input_ids.shape
    need_prox, need_ref = a.is_correction != "none", ref_model is not None
    dtype = torch.float64 if next(model.parameters()).dtype == torch.float64 else torch.float32
    dev = batch.input_ids.device
    prox = torch.zeros(B, T, dtype=dtype, device=dev) if need_prox else None
    ref = torch.zeros(B, T, dtype=dtype, device=dev) if need_ref else None
    values = (
        torch.zeros(B, positions.shape[1], dtype=torch.float64, device=dev)
        if critic is not None
        else None
    )
    if not (need_prox or need_ref or critic is not None):
        return prox, ref, values
    was_training = model.training
    model.eval()
    rank = dist.rank if dist is not None else 0
    plans = [
        micro_batches(
            share,
            batch.attention_mask.sum(-1),
            cfg.optim.micro_batch_size,
            cfg.optim.micro_batch_tokens,
        )
        for share in (dist.rows(rows) if dist is not None else [rows])
    ]
    for i in range(max(len(p) for p in plans)):
        if i >= len(plans[rank]):  # another rank's pass: join its collectives, keep nothing
            r = rows[:1]
            T1 = int(batch.attention_mask[r].sum())
            score(batch.input_ids[r, :T1], batch.attention_mask[r, :T1], batch.loss_mask[r, :T1])
            continue
        micro = plans[rank][i]
        Tm = int(batch.attention_mask[micro].sum(-1).max())
        ids, attn = batch.input_ids[micro, :Tm], batch.attention_mask[micro, :Tm]
        mask = batch.loss_mask[micro, :Tm]
        temp = cfg.rollout.temperature
        if need_prox or critic is not None:
            lp, _, hidden = score(ids, attn, mask, temperature=temp)
            if need_prox:
                prox[micro, :Tm] = lp
            if critic is not None:
                values[micro] = critic.values_from_hidden(hidden, positions[micro]).double()
        if need_ref:
            ref[micro, :Tm] = token_logprobs(ref_model, ids, attn, mask, temperature=temp)[0]
    model.train(was_training)
    if dist is not None:
        prox, ref, values = (dist.sum(t) for t in (prox, ref, values))
    return prox, ref, values


def train_on_batch(
    cfg: TrainConfig,
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    step: int,
    *,
    critic: TurnCritic | None = None,
    log: Log = print,
    per_token: dict[str, torch.Tensor] | None = None,
    dist: Dist | None = None,
) -> dict[str, float]:
    """Advantages, then the minibatch loss over micro-batches with gradient accumulation, then
    an optimizer step per minibatch unless its gradient is non-finite (then skipped, counted).

    ``per_token``, when given, is filled with ``[B, T]`` tensors for the trajectory records:
    ``advantages``, and the ``trainer_logprobs`` and ``ratios`` each row had when it was first
    trained on this step (NaN where it was not trained).

    ``dist``: under torch.distributed every rank holds the same batch and trains on its share of
    each minibatch's rows (see :mod:`turnrl.train.parallel`); the gradient and every metric
    are the one-process ones."""
    a = cfg.algo
    score = dist.scorer if dist is not None else partial(token_logprobs, model)
    world, rank = (dist.world, dist.rank) if dist is not None else (1, 0)
    batch = batch.to(next(model.parameters()).device)
    lengths = batch.attention_mask.sum(-1)  # [B]
    positions = prox = ref_lp = old_values = None
    if critic is not None:  # the advantages need V_old: one pass over every row with actions
        positions = turn_boundary_positions(batch.turn_index, batch.turn_mask, lengths)
        acted = (batch.loss_mask.sum(-1) > 0).nonzero().flatten()
        prox, ref_lp, old_values = _pre_pass(
            cfg, model, ref_model, critic, batch, acted, positions, dist
        )
    adv = compute_advantages(
        a.advantage,
        rewards=batch.rewards,
        group_index=batch.group_index,
        loss_mask=batch.loss_mask,
        truncated=batch.truncated,
        truncation=a.truncation,
        excluded=batch.excluded,
        turn_index=batch.turn_index,
        turn_rewards=batch.turn_rewards,
        turn_mask=batch.turn_mask,
        anchor_ids=batch.anchor_ids,
        values=old_values,
        episode_row=batch.episode_row,
        std=a.std,
        eps=a.eps,
        gamma=a.gamma,
        lam=a.lam,
        step_weight=a.gigpo_weight,
        gigpo_norm=a.gigpo_norm,
    )
    adv.tokens = no_credit_for_malformed(adv.tokens, batch.malformed)
    if per_token is not None:
        per_token["advantages"] = adv.tokens.detach().cpu()
        per_token["trainer_logprobs"] = torch.full(batch.loss_mask.shape, float("nan"))
        per_token["ratios"] = torch.full(batch.loss_mask.shape, float("nan"))
    value_mask = None
    if critic is not None:
        value_mask = batch.turn_mask * adv.valid.unsqueeze(-1).to(batch.turn_mask.dtype)  # [B, K]
    # Rows whose advantages are all 0 add no policy gradient; without KL/entropy/value terms they
    # are left out (as DAPO's dynamic sampling does), which on CPU halves the work of a step.
    has_signal = (adv.tokens.abs() * adv.loss_mask).sum(-1) > 0  # [B]
    signal = bool(has_signal.any())
    if a.kl_coef > 0 or a.entropy_coef > 0 or critic is not None:
        has_signal = adv.loss_mask.sum(-1) > 0
    rows = has_signal.nonzero().flatten()
    row_ids = torch.arange(len(batch.episode_row), device=batch.episode_row.device)
    first_rows = batch.episode_row == row_ids  # [B] one row per episode
    out: dict[str, float] = {
        "train/rows": float(len(rows)),
        "train/no_signal": float(not signal),
        "train/excluded_infra": float(batch.excluded[first_rows].sum()),  # episodes, not rows
        "train/non_finite": float(adv.non_finite.sum()),
        "train/skipped_steps": 0.0,
        "adv/abs_mean": float(
            (adv.tokens.abs() * adv.loss_mask).sum() / adv.loss_mask.sum().clamp(min=1)
        ),
    }
    if not signal:
        log(
            f"step {step + 1}: no training signal: every advantage is 0 "
            f"({int(adv.valid.sum())} of {len(adv.valid)} episodes in the loss)"
        )
    if len(rows) == 0:
        return out | {"loss": 0.0}
    if critic is None:  # π_old and π_ref only where the loss will read them
        prox, ref_lp, _ = _pre_pass(cfg, model, ref_model, None, batch, rows, None, dist)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    gen = torch.Generator().manual_seed(cfg.seed * 100_003 + step)
    sums: dict[str, float] = {}
    maxes: dict[str, float] = {}
    tokens_seen, losses, vlosses, skipped, grad_norms = 0.0, [], [], 0, 0.0
    outside = list(critic.parameters()) if critic is not None else []  # not in DDP/FSDP2
    model.train()
    for epoch in range(cfg.optim.epochs):
        perm = rows[torch.randperm(len(rows), generator=gen).to(rows.device)]
        for mb in perm.split(cfg.optim.minibatch_size):
            optimizer.zero_grad(set_to_none=True)
            # a group's rows side by side, so a micro-batch shares its prompt (trunk_hidden);
            # the minibatch loss is a sum over its rows, so their order does not change it
            mb = mb[torch.argsort(batch.group_index[mb] * len(lengths) + mb)]
            totals = minibatch_totals(
                adv.loss_mask[mb], None if value_mask is None else value_mask[mb]
            )
            # Each rank's share of the rows, cut into micro-batches; every rank runs as many
            # passes as the busiest one (the extra ones of weight 0), and weighs its loss by the
            # world size, so the ranks' averaged gradients are the whole minibatch's.
            plans = [
                micro_batches(
                    share, lengths, cfg.optim.micro_batch_size, cfg.optim.micro_batch_tokens
                )
                for share in (dist.rows(mb) if dist is not None else [mb])
            ]
            passes = max(len(p) for p in plans)
            mb_loss = mb_vloss = 0.0
            for i in range(passes):
                real = i < len(plans[rank])
                micro = plans[rank][i] if real else mb[:1]
                sync = dist.no_sync(last=i == passes - 1) if dist is not None else nullcontext()
                with sync:
                    T = int(lengths[micro].max())
                    mask = adv.loss_mask[micro, :T]
                    logprobs, entropy, hidden = score(
                        batch.input_ids[micro, :T],
                        batch.attention_mask[micro, :T],
                        mask,
                        temperature=cfg.rollout.temperature,
                        entropy_grad=a.entropy_coef > 0,
                    )  # [b, T] x2, [b, T, H]
                    behavior = batch.behavior_logprobs[micro, :T]
                    # Synchronous hf sampling uses these very weights in fp32, so the sampler's
                    # logprobs are the trust region's centre; with a correction it is the
                    # proximal policy and the sampler's logprobs only enter the importance weight.
                    old = behavior if prox is None else prox[micro, :T]
                    if per_token is not None and epoch == 0 and real:
                        untrained = ~mask.bool()  # [b, T] values exist on trained tokens only
                        lp = logprobs.detach().float()
                        per_token["trainer_logprobs"][micro.cpu(), :T] = lp.masked_fill(
                            untrained, float("nan")
                        ).cpu()
                        per_token["ratios"][micro.cpu(), :T] = (
                            (lp - old.float()).exp().masked_fill(untrained, float("nan")).cpu()
                        )
                    values = None
                    if critic is not None:
                        values = critic.values_from_hidden(hidden, positions[micro])  # [b, K+1]
                    loss, m = minibatch_loss(
                        cfg,
                        logprobs,
                        old,
                        adv.tokens[micro, :T],
                        mask,
                        behavior_logprobs=behavior,
                        ref_logprobs=None if ref_lp is None else ref_lp[micro, :T],
                        entropy=entropy if a.entropy_coef > 0 else None,
                        values=values,
                        old_values=None if old_values is None else old_values[micro],
                        returns=None if adv.returns is None else adv.returns[micro],
                        value_mask=None if value_mask is None else value_mask[micro],
                        totals=totals,
                    )
                    (loss * (world if real else 0.0)).backward()
                if not real:
                    continue
                mb_loss += loss.item()
                w = float(mask.sum())
                tokens_seen += w
                sums["entropy"] = sums.get("entropy", 0.0) + float((entropy.detach() * mask).sum())
                if ref_lp is not None:
                    k1 = (logprobs.detach() - ref_lp[micro, :T]) * mask
                    sums["kl"] = sums.get("kl", 0.0) + float(k1.sum())
                for k, v in m.items():
                    if k.endswith("_max"):
                        maxes[k] = max(maxes.get(k, -math.inf), float(v))
                    elif k == "value_loss":  # this micro-batch's share of the minibatch's
                        mb_vloss += float(v)
                    elif k not in ("kl", "entropy"):  # partial sums under totals; logged above
                        sums[k] = sums.get(k, 0.0) + float(v) * w
            if dist is not None:  # the minibatch's loss, and the critic's gradient, over ranks
                mb_loss, mb_vloss = dist.total([mb_loss, mb_vloss])
                dist.sync_grads(outside)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
            if hasattr(grad_norm, "full_tensor"):  # FSDP2: a replicated DTensor
                grad_norm = grad_norm.full_tensor()
            if not (math.isfinite(mb_loss) and bool(torch.isfinite(grad_norm))):
                # A non-finite gradient would turn every weight into NaN in one AdamW step.
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            losses.append(mb_loss)
            vlosses.append(mb_vloss)
            grad_norms += float(grad_norm) * totals["tokens"]
            optimizer.step()
    if dist is not None:  # each rank's sums over its own rows, added up
        parts = dist.gather_stats((sums, maxes, tokens_seen))
        sums = {k: sum(p[0].get(k, 0.0) for p in parts) for k in {k for p in parts for k in p[0]}}
        maxes = {
            k: max(p[1].get(k, -math.inf) for p in parts) for k in {k for p in parts for k in p[1]}
        }
        tokens_seen = sum(p[2] for p in parts)
        if per_token is not None:
            for k in ("trainer_logprobs", "ratios"):
                per_token[k] = dist.merge_nan(per_token[k])
    if losses:
        sums["grad_norm"] = grad_norms
    out.update({f"train/{k}": v / max(tokens_seen, 1.0) for k, v in sums.items()})
    out.update({f"train/{k}": v for k, v in maxes.items()})
    out["train/skipped_steps"] = float(skipped)
    if skipped:
        log(f"step {step + 1}: skipped {skipped} optimizer step(s) with a non-finite gradient")
    out["loss"] = sum(losses) / len(losses) if losses else float("nan")
    if critic is not None:
        out["train/value_loss"] = sum(vlosses) / len(vlosses) if vlosses else float("nan")
    out["entropy"] = out.pop("train/entropy")
    out["kl"] = out.pop("train/kl", out.get("train/approx_kl", 0.0))
    return out


def make_critic(cfg: TrainConfig, model: torch.nn.Module) -> TurnCritic | None:
    """``gae_turn``'s critic: a linear value head on the policy's own trunk (see docs/math.md)."""
    if cfg.algo.advantage != "gae_turn":
        return None
    return TurnCritic.sharing(model)


def zero_reward_streak(streak: int, trajs: list[Trajectory], log: Log, every: int = 3) -> int:
    """Count consecutive steps whose every reward is 0 and warn each ``every`` of them: a policy
    that never succeeds gets no gradient from any group-relative estimator."""
    streak = streak + 1 if not any(t.reward for t in trajs) else 0
    if streak and streak % every == 0:
        log(
            f"warning: {streak} steps in a row with every reward 0: nothing to learn from; "
            "check the warm start, the task difficulty or the reward"
        )
    return streak
