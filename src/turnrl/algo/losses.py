"""Policy losses: PPO clip (asymmetric, dual), GSPO, KL and entropy terms, off-policy correction.

Pure functions over per-token tensors; the trainer computes ``logprobs`` with
:func:`sequence_logprobs` from the model's logits and passes everything else from the batch.

Notation
--------
B, T        trajectories, padded token length; index i, t
m_{i,t}     loss mask: 1 on sampled action tokens (``loss_mask``)
π_θ         the policy being updated (``logprobs``, with gradient)
π_old       the policy the trust region is centred on (``old_logprobs``): the trainer's logprobs
            at the start of this update (the *proximal* policy in the decoupled objective)
μ           the behaviour policy that sampled the tokens (``behavior_logprobs``: the sampler's
            own logprobs, possibly stale by a few versions or from another engine)
π_ref       a frozen reference policy (``ref_logprobs``)
r_{i,t}     π_θ / π_old (token ratio);  s_i = exp(mean_t m log r_{i,t}) (GSPO's sequence ratio)
w_{i,t}     importance weight π_old / μ, truncated at C (``is_cap``)
A_{i,t}     advantage
ε_l, ε_h    lower and upper clip ranges (``eps_low``, ``eps_high``); c the dual-clip bound
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k3"]


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """float32 for half-precision logits (their log-softmax is too coarse), else unchanged."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def sequence_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """log p(x_t | x_{<t}) aligned to the token: out[:, t] scores ``input_ids[:, t]``; out[:, 0] = 0.

    ``logits[:, t]`` predicts token t+1 (the transformers convention), so the logits are shifted
    by one. ``temperature`` must match the sampler's for ratios against behaviour logprobs to mean
    anything. Shapes: ``logits: [B, T, V]``, ``input_ids: [B, T]`` → ``[B, T]``, float32 for
    half-precision logits, else their dtype.
    Ref: the autoregressive factorisation log p(x) = Σ_t log p(x_t | x_{<t}) (Bengio et al. 2003).
    """
    B, T, V = logits.shape
    z = _upcast(logits[:, :-1]) / temperature  # [B, T-1, V]
    # cross_entropy is a fused log-softmax + gather: no [B, T, V] log-prob tensor is kept.
    nll = F.cross_entropy(z.reshape(-1, V), input_ids[:, 1:].reshape(-1), reduction="none")
    return F.pad(-nll.view(B, T - 1), (1, 0))  # [B, T]


def token_entropy(logits: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """H_t = −Σ_v p(v | x_{<t}) log p(v | x_{<t}), aligned like :func:`sequence_logprobs`.

    out[:, t] is the entropy of the distribution token t was drawn from; out[:, 0] = 0. Shapes:
    ``[B, T, V]`` → ``[B, T]``. Ref: entropy bonus of Williams & Peng 1991 and Mnih et al. 2016
    ("A3C"), as used in PPO's L^{CLIP+VF+S}.
    """
    logp = torch.log_softmax(_upcast(logits[:, :-1]) / temperature, dim=-1)  # [B, T-1, V]
    h = -(logp.exp() * logp).sum(-1)  # [B, T-1]
    return F.pad(h, (1, 0))  # [B, T]


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation = "token-mean",
    *,
    norm_length: int | None = None,
    total_tokens: float | torch.Tensor | None = None,
    total_rows: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    Let N_i = Σ_t m_{i,t}, N = Σ_i N_i and B' the number of rows with N_i > 0.
      ``token-mean``:              Σ_{i,t} m v / N  (every token weighs the same; DAPO)
      ``seq-mean-token-mean``:     (1/B') Σ_i (Σ_t m v / N_i)  (every sequence weighs the same;
                                   the original GRPO, which favours short sequences' tokens)
      ``seq-mean-token-sum-norm``: (1/B') Σ_i Σ_t m v / L with a constant L = ``norm_length``
                                   (Dr. GRPO: no length-dependent normalisation at all; T, the
                                   padded length, when not given)
    Every mode is Σ_{i,t} c_i m v with a per-row weight c_i, so a minibatch split into
    micro-batches sums to the same scalar when N and B' are those of the *whole* minibatch:
    pass them as ``total_tokens`` and ``total_rows`` (and a fixed ``norm_length``).
    Shapes: ``values, mask: [B, T]`` → scalar. Refs: Yu et al. 2025, "DAPO", arXiv:2503.14476;
    Liu et al. 2025, "Dr. GRPO", arXiv:2503.20783.
    """
    m = mask.to(values.dtype)  # [B, T]
    per_row = torch.where(m > 0, values, torch.zeros_like(values)).sum(-1)  # [B]
    n = m.sum(-1)  # [B]
    tokens = n.sum().clamp(min=1) if total_tokens is None else max(float(total_tokens), 1.0)
    rows = (n > 0).sum().clamp(min=1) if total_rows is None else max(float(total_rows), 1.0)
    match mode:
        case "token-mean":
            return per_row.sum() / tokens
        case "seq-mean-token-mean":
            return (per_row / n.clamp(min=1)).sum() / rows
        case "seq-mean-token-sum-norm":
            return per_row.sum() / (rows * (norm_length or values.shape[-1]))
        case _:
            raise ValueError(
                f"aggregation={mode!r}; expected token-mean, seq-mean-token-mean or seq-mean-token-sum-norm"
            )


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3"
) -> torch.Tensor:
    """Per-token KL loss term on tokens sampled from π_θ; its *value* estimates a KL and its
    *gradient* is what the name below says (checked by exact enumeration in the tests).

    ``k1``: value k1 = log π_θ − log π_ref (unbiased estimate of KL(π_θ ‖ π_ref)), written as
      sg[k1]·(log π_θ − sg[log π_θ]) + sg[k1] so that its gradient is k1·∇log π_θ, the
      score-function gradient of KL(π_θ ‖ π_ref) — the same update as putting −β·k1 in the
      reward (InstructGPT). Differentiating k1 itself would give ∇log π_θ, whose expectation
      under π_θ is 0: a penalty that regularises nothing.
    ``k3``: value ρ − log ρ − 1 with ρ = π_ref/π_θ (unbiased, ≥ 0, low-variance estimate of
      KL(π_θ ‖ π_ref); GRPO's choice). Its gradient is (1 − ρ)∇log π_θ, whose expectation is
      ∇KL(π_ref ‖ π_θ): as a loss term k3 pulls towards the reference by the *reverse*
      (mass-covering) direction, not the KL its value estimates.
    Per token, conditioned on the prefix: the effect of a token on later tokens' KL is not
    credited (as in every per-token KL loss). Shapes: ``[B, T]`` → ``[B, T]``. Refs: Schulman
    2020, "Approximating KL Divergence" (joschu.net/blog/kl-approx.html); Ouyang et al. 2022
    "InstructGPT" (KL in the reward); Shao et al. 2024 "DeepSeekMath" (k3 loss); Tang & Munos
    2025, "On a few pitfalls in KL divergence gradient estimation for RL", arXiv:2506.09477.
    """
    log_ratio = ref_logprobs - logprobs  # [B, T] log(π_ref/π_θ)
    match estimator:
        case "k1":
            k1 = (-log_ratio).detach()  # [B, T]
            return k1 * (logprobs - logprobs.detach()) + k1
        case "k3":
            log_ratio = log_ratio.clamp(-20, 20)  # exp overflow guard on far-off tokens
            return log_ratio.exp() - log_ratio - 1
        case _:
            raise ValueError(f"kl_estimator={estimator!r}; expected 'k1' or 'k3'")


def importance_weights(
    old_logprobs: torch.Tensor,
    behavior_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: Literal["token", "sequence"] = "token",
    mode: Literal["clamp", "mask"] = "clamp",
    cap: float | None = 2.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance weights for tokens sampled by μ but trained as if from π_old.

    token level: ρ_{i,t} = π_old(x_t)/μ(x_t); sequence level: ρ_i = Π_t (π_old/μ)^{m_{i,t}} on
    every token of row i. ``clamp``: w = min(ρ, C) (truncated IS, bias traded for bounded
    variance); ``mask``: w = ρ·[ρ ≤ C] (tokens/sequences beyond the cap drop out). ``cap=None``
    keeps ρ untruncated. Returns (w ``[B, T]`` detached, 0 off the mask; ``truncated [B, T]``
    bool where the cap acted). Refs: Yao et al. 2025, "Your Efficient RL Framework Secretly
    Brings You Off-Policy RL Training" (TIS); Espeholt et al. 2018, "IMPALA" (truncated ρ).
    """
    m = mask.bool()  # [B, T]
    log_rho = torch.where(
        m, old_logprobs - behavior_logprobs, torch.zeros_like(old_logprobs)
    ).detach()
    if level == "sequence":
        log_rho = log_rho.sum(-1, keepdim=True).expand_as(log_rho)  # [B, T]
    elif level != "token":
        raise ValueError(f"is_level={level!r}; expected 'token' or 'sequence'")
    rho = log_rho.clamp(max=30).exp()  # [B, T]
    if cap is None:
        hit = torch.zeros_like(m)
        w = rho
    elif mode == "clamp":
        hit = rho > cap
        w = rho.clamp(max=cap)
    elif mode == "mask":
        hit = rho > cap
        w = torch.where(hit, torch.zeros_like(rho), rho)
    else:
        raise ValueError(f"is_mode={mode!r}; expected 'clamp' or 'mask'")
    return torch.where(m, w, torch.zeros_like(w)), hit & m


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float | None = None,
    ratio_level: Literal["token", "sequence"] = "token",
    aggregation: Aggregation = "token-mean",
    norm_length: int | None = None,
    total_tokens: float | torch.Tensor | None = None,
    total_rows: float | torch.Tensor | None = None,
    behavior_logprobs: torch.Tensor | None = None,
    is_correction: Literal["tis", "decoupled"] | None = None,
    is_level: Literal["token", "sequence"] = "token",
    is_mode: Literal["clamp", "mask"] = "clamp",
    is_cap: float | None = 2.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: KLEstimator = "k3",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate with optional off-policy correction, KL and entropy terms.

    Per token: L_t = w_t · max(−A r_t, −A clip(r_t, 1 − ε_l, 1 + ε_h)); with dual clip, for A < 0
    L_t = min(L_t, −c A) (bounds the loss when r explodes on a negative advantage). The scalar is
    aggregate(L) + β·aggregate(KL_t) − α·aggregate(H_t) with the same ``aggregation``.

    * ``ratio_level="sequence"`` is GSPO: r_{i,t} = sg[s_i] · π_θ(x_t)/sg[π_θ(x_t)], so the value
      (and the clipping) uses the length-normalised sequence ratio s_i and the gradient is
      s_i ∇log π_θ(x_t) (GSPO-token; equals GSPO when A is constant over the sequence). The
      policy term then always uses GSPO's own normalisation, (1/B') Σ_i (1/N_i) Σ_t, whatever
      ``aggregation`` says (which still applies to the KL and entropy terms): with token-mean a
      sequence would weigh by its length, which is not GSPO's objective. Use small ε (≈3e-4, 4e-4).
    * ``is_correction="tis"``: w = min(π_old/μ, C) when the sampler (μ) differs from the trainer's
      π_old for the same weights (another engine, precision) or is slightly stale.
    * ``is_correction="decoupled"``: ``old_logprobs`` are the *proximal* policy's (the trainer's
      logprobs at the start of this update) and w = π_prox/μ corrects for stale behaviour; the trust
      region stays centred on π_prox rather than on the stale μ. Same formula, different meaning of
      ``old_logprobs``; ``is_cap=None`` leaves w untruncated.
      Both use :func:`importance_weights` (``is_level``, ``is_mode``, ``is_cap``).
    * ``total_tokens``, ``total_rows``: N and B' of the whole minibatch when this call sees one
      micro-batch of it (see :func:`aggregate`); the micro-batch losses then sum to the loss of
      the whole minibatch, and so do their gradients. ``norm_length`` is Dr. GRPO's constant L.
    * ``ref_logprobs`` with ``kl_coef > 0``: KL to a frozen reference, ``kl_estimator`` k1 or k3.
    * ``entropy: [B, T]`` (:func:`token_entropy`) with ``entropy_coef > 0``: entropy bonus.

    Shapes: every tensor input ``[B, T]``; ``loss_mask`` should already exclude rows the advantage
    estimator masked (``Advantages.loss_mask``). Returns (scalar loss, metrics of detached 0-dim
    tensors: approx_kl, clipfrac, dual_clipfrac, ratio_mean, ratio_max, and when used is_weight_mean,
    is_weight_max, is_truncated_frac, kl, entropy). Refs: Schulman et al. 2017, "PPO",
    arXiv:1707.06347; Ye et al. 2020, "Mastering Complex Control in MOBA Games" (dual clip);
    Yu et al. 2025, "DAPO" (ε_low ≠ ε_high), arXiv:2503.14476; Zheng et al. 2025, "GSPO",
    arXiv:2507.18071; Hilton et al. 2022, "Batch Size-Invariance for Policy Optimization"
    (decoupled objective), arXiv:2110.00641; Fu et al. 2025, "AReaL", arXiv:2505.24298.
    """
    m = loss_mask.bool()  # [B, T]
    mf = m.to(logprobs.dtype)  # [B, T]
    n_tokens = mf.sum().clamp(min=1)
    advantages = advantages.detach()
    old_logprobs = old_logprobs.detach()
    log_ratio = torch.where(m, logprobs - old_logprobs, torch.zeros_like(logprobs))  # [B, T]
    if ratio_level == "sequence":
        seq_log_ratio = (log_ratio * mf).sum(-1) / mf.sum(-1).clamp(min=1)  # [B] log s_i
        log_ratio = seq_log_ratio.detach().unsqueeze(-1) + logprobs - logprobs.detach()  # [B, T]
        log_ratio = torch.where(m, log_ratio, torch.zeros_like(log_ratio))
    elif ratio_level != "token":
        raise ValueError(f"ratio_level={ratio_level!r}; expected 'token' or 'sequence'")
    ratio = log_ratio.clamp(max=20).exp()  # [B, T] r
    pg1 = -advantages * ratio  # [B, T]
    pg2 = -advantages * ratio.clamp(1 - eps_low, 1 + eps_high)  # [B, T]
    pg = torch.maximum(pg1, pg2)  # [B, T]
    metrics: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        metrics["clipfrac"] = ((pg2 > pg1) & m).sum() / n_tokens
        # approx KL(π_old ‖ π_θ) by k3 on the same samples (cleanrl's approx_kl).
        metrics["approx_kl"] = (((ratio - 1) - log_ratio) * mf).sum() / n_tokens
        metrics["ratio_mean"] = (ratio * mf).sum() / n_tokens
        metrics["ratio_max"] = torch.where(m, ratio, torch.zeros_like(ratio)).max()
    if dual_clip_c is not None:
        assert dual_clip_c > 1, f"dual_clip_c={dual_clip_c} must be > 1"
        bound = -advantages * dual_clip_c  # [B, T]
        dual = (advantages < 0) & (pg > bound)  # [B, T]
        pg = torch.where(dual, bound, pg)
        metrics["dual_clipfrac"] = ((dual & m).sum() / n_tokens).detach()

    if is_correction is not None:
        if is_correction not in ("tis", "decoupled"):
            raise ValueError(
                f"is_correction={is_correction!r}; expected None, 'tis' or 'decoupled'"
            )
        if behavior_logprobs is None:
            raise ValueError(f"is_correction={is_correction!r} needs behavior_logprobs")
        w, hit = importance_weights(
            old_logprobs, behavior_logprobs, m, level=is_level, mode=is_mode, cap=is_cap
        )  # [B, T] x2
        pg = pg * w
        metrics["is_weight_mean"] = (w * mf).sum() / n_tokens
        metrics["is_weight_max"] = w.max()
        metrics["is_truncated_frac"] = hit.sum() / n_tokens

    norms = dict(norm_length=norm_length, total_tokens=total_tokens, total_rows=total_rows)
    pg_aggregation = "seq-mean-token-mean" if ratio_level == "sequence" else aggregation
    loss = aggregate(pg, m, pg_aggregation, **norms)
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs.detach(), kl_estimator)  # [B, T]
        kl_term = aggregate(kl, m, aggregation, **norms)
        metrics["kl"] = kl_term.detach()
        if kl_coef:
            loss = loss + kl_coef * kl_term
    if entropy is not None:
        ent_term = aggregate(entropy, m, aggregation, **norms)
        metrics["entropy"] = ent_term.detach()
        if entropy_coef:
            loss = loss - entropy_coef * ent_term
    return loss, metrics
