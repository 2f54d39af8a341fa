"""Hand-computed and property tests for turnrl.algo.losses."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from turnrl.algo.losses import (
    aggregate,
    importance_weights,
    kl_penalty,
    policy_loss,
    sequence_logprobs,
    token_entropy,
)

LN = math.log


def row_with_prob(p: float, token: int, V: int = 4) -> torch.Tensor:
    """Logits over V tokens giving `token` probability p and spreading 1 - p over the others."""
    rest = (1 - p) / (V - 1)
    probs = torch.full((V,), rest)
    probs[token] = p
    return probs.log()


def test_two_turn_example_only_policy_tokens_get_gradient():
    """The note: p(a1)=0.5, p(o1)=0.9 (environment), p(a2)=0.2; p(trajectory) = 0.09.

    Tokens: [prompt, a1, o1, a2]; logits[t] predicts token t+1. Only a1 and a2 are in the loss, so
    the masked log-likelihood is log(0.5 * 0.2) and the gradient does not depend on o1's logits.
    """
    ids = torch.tensor([[0, 1, 2, 3]])
    mask = torch.tensor([[0, 1, 0, 1]])

    def grads(p_obs: float) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [
            row_with_prob(0.5, 1),
            row_with_prob(p_obs, 2),
            row_with_prob(0.2, 3),
            torch.zeros(4),
        ]
        logits = torch.stack(rows).unsqueeze(0).requires_grad_(True)  # [1, 4, V]
        logp = sequence_logprobs(logits, ids)  # [1, 4]
        loss, _ = policy_loss(
            logp,
            logp.detach(),
            torch.ones(1, 4),
            mask,
            aggregation="seq-mean-token-sum-norm",
            norm_length=1,
        )
        loss.backward()
        return logp.detach(), logits.grad

    logp, g = grads(0.9)
    assert math.isclose(logp[0, 1:].sum().exp().item(), 0.5 * 0.9 * 0.2, rel_tol=1e-5)  # 0.09
    assert math.isclose((logp * mask).sum().exp().item(), 0.5 * 0.2, rel_tol=1e-5)
    assert torch.all(g[0, 1] == 0)  # the row predicting the observation token gets nothing
    assert torch.all(g[0, 3] == 0)
    assert g[0, 0].abs().sum() > 0 and g[0, 2].abs().sum() > 0
    # d(-log p_a)/d logits = softmax - onehot
    torch.testing.assert_close(g[0, 0], torch.softmax(row_with_prob(0.5, 1), 0) - torch.eye(4)[1])
    _, g_other = grads(0.3)  # change the environment's token logits: same gradient
    torch.testing.assert_close(g_other, g)


def test_sequence_logprobs_and_entropy_alignment():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    lp = sequence_logprobs(logits, ids)
    assert torch.all(lp[:, 0] == 0)
    ref = torch.log_softmax(logits, -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(lp[:, 1:], ref)
    torch.testing.assert_close(
        sequence_logprobs(logits, ids, temperature=0.5)[:, 1:],
        torch.log_softmax(logits * 2, -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1),
    )
    h = token_entropy(logits)
    assert torch.all(h[:, 0] == 0)
    torch.testing.assert_close(
        h[:, 1:], torch.distributions.Categorical(logits=logits[:, :-1]).entropy()
    )


def test_three_aggregations_differ():
    # row 0: one token of loss 4; row 1: three tokens of loss 0; T = 4
    v = torch.tensor([[4.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    m = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
    assert aggregate(v, m, "token-mean").item() == 1.0  # 4 / 4 tokens
    assert aggregate(v, m, "seq-mean-token-mean").item() == 2.0  # (4/1 + 0/3) / 2
    assert aggregate(v, m, "seq-mean-token-sum-norm").item() == 0.5  # (4 + 0) / (2 * 4)
    assert aggregate(v, m, "seq-mean-token-sum-norm", norm_length=2).item() == 1.0
    with pytest.raises(ValueError):
        aggregate(v, m, "sum")


def test_ppo_clip_asymmetric_and_dual_by_hand():
    old = torch.zeros(1, 4)
    ratio = torch.tensor([[1.5, 0.5, 5.0, 1.1]])
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4)
    # per token: -min(rA, clip(r, .8, 1.28) A) = [-1.28, .8, 5, -1.1]
    loss, met = policy_loss(ratio.log(), old, adv, mask, eps_low=0.2, eps_high=0.28)
    torch.testing.assert_close(loss, torch.tensor((-1.28 + 0.8 + 5.0 - 1.1) / 4))
    assert met["clipfrac"].item() == 0.5  # tokens 0 and 1 clipped
    torch.testing.assert_close(met["ratio_max"], torch.tensor(5.0))
    dual, met = policy_loss(
        ratio.log(), old, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip_c=3.0
    )
    torch.testing.assert_close(dual, torch.tensor((-1.28 + 0.8 + 3.0 - 1.1) / 4))  # 5 -> c|A| = 3
    assert met["dual_clipfrac"].item() == 0.25


def test_gspo_sequence_ratio():
    lp = torch.tensor([[LN(2.0), LN(0.5), 0.0]], requires_grad=True)  # token ratios 2, 0.5
    mask = torch.tensor([[1, 1, 0]])
    adv = torch.ones(1, 3)
    loss, met = policy_loss(
        lp, torch.zeros(1, 3), adv, mask, ratio_level="sequence", eps_low=3e-4, eps_high=4e-4
    )
    # s = exp(mean(log 2, log .5)) = 1: loss -1, gradient s * dlogp / 2 tokens (token-mean)
    torch.testing.assert_close(loss, torch.tensor(-1.0))
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.5, -0.5, 0.0]]))
    assert met["clipfrac"].item() == 0.0  # token ratios 2 and 0.5 would be clipped at token level
    tok, met_tok = policy_loss(
        lp.detach(), torch.zeros(1, 3), adv, mask, eps_low=3e-4, eps_high=4e-4
    )
    assert met_tok["clipfrac"].item() == 0.5


def test_importance_weights_each_mode():
    old = torch.tensor([[LN(0.5), LN(0.5), LN(0.9), 0.0]])
    behav = torch.tensor([[LN(0.5), LN(0.1), LN(0.6), 0.0]])  # rho = [1, 5, 1.5, -]
    mask = torch.tensor([[1, 1, 1, 0]])
    w, hit = importance_weights(old, behav, mask, level="token", mode="clamp", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 2.0, 1.5, 0.0]]))
    assert hit.tolist() == [[False, True, False, False]]
    w, _ = importance_weights(old, behav, mask, level="token", mode="mask", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.0, 1.5, 0.0]]))
    # sequence: rho = 1 * 5 * 1.5 = 7.5 on every token
    w, _ = importance_weights(old, behav, mask, level="sequence", mode="clamp", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 2.0, 2.0, 0.0]]))
    w, hit = importance_weights(old, behav, mask, level="sequence", mode="mask", cap=10.0)
    torch.testing.assert_close(w, torch.tensor([[7.5, 7.5, 7.5, 0.0]]))
    w, _ = importance_weights(old, behav, mask, level="sequence", mode="mask", cap=2.0)
    assert torch.all(w == 0)
    w, _ = importance_weights(old, behav, mask, cap=None)
    torch.testing.assert_close(w, torch.tensor([[1.0, 5.0, 1.5, 0.0]]))


def test_policy_loss_with_tis_and_decoupled():
    old = torch.tensor([[LN(0.5), LN(0.5), LN(0.9)]])
    behav = torch.tensor([[LN(0.5), LN(0.1), LN(0.6)]])
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    # ratio 1 against old: per-token -A; weights [1, 2, 1.5]
    loss, met = policy_loss(
        old, old, adv, mask, behavior_logprobs=behav, is_correction="tis", is_cap=2.0
    )
    torch.testing.assert_close(loss, torch.tensor((-1.0 - 2.0 + 1.5) / 3))
    torch.testing.assert_close(met["is_weight_mean"], torch.tensor(4.5 / 3))
    torch.testing.assert_close(met["is_truncated_frac"], torch.tensor(1 / 3))
    loss, met = policy_loss(
        old, old, adv, mask, behavior_logprobs=behav, is_correction="decoupled", is_cap=None
    )
    torch.testing.assert_close(loss, torch.tensor((-1.0 - 5.0 + 1.5) / 3))
    with pytest.raises(ValueError, match="behavior_logprobs"):
        policy_loss(old, old, adv, mask, is_correction="tis")


def test_kl_and_entropy_terms():
    lp = torch.tensor([[LN(0.5), LN(0.25)]])
    ref = torch.tensor([[LN(0.25), LN(0.5)]])
    torch.testing.assert_close(kl_penalty(lp, ref, "k1"), torch.tensor([[LN(2.0), -LN(2.0)]]))
    # k3 = q/p - log(q/p) - 1: q/p = .5 -> .5 + ln2 - 1; q/p = 2 -> 2 - ln2 - 1
    torch.testing.assert_close(
        kl_penalty(lp, ref, "k3"), torch.tensor([[LN(2.0) - 0.5, 1 - LN(2.0)]])
    )
    mask = torch.ones(1, 2)
    adv = torch.zeros(1, 2)
    ent = torch.tensor([[1.0, 3.0]])
    loss, met = policy_loss(
        lp,
        lp,
        adv,
        mask,
        ref_logprobs=ref,
        kl_coef=0.1,
        kl_estimator="k3",
        entropy=ent,
        entropy_coef=0.01,
    )
    torch.testing.assert_close(met["kl"], torch.tensor(0.5 * (LN(2.0) - 0.5 + 1 - LN(2.0))))
    torch.testing.assert_close(loss, 0.1 * met["kl"] - 0.01 * 2.0)


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 6),
    st.integers(0, 10_000),
    st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]),
    st.sampled_from(["token", "sequence"]),
)
def test_ppo_equals_policy_gradient_at_ratio_one(B, T, seed, aggregation, ratio_level):
    """At r = 1 the clip is inactive: loss = agg(-A), grad = agg(-A * d log pi)."""
    gen = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(B, T, generator=gen) * 3).requires_grad_(True)
    adv = torch.randn(B, T, generator=gen)
    mask = (torch.rand(B, T, generator=gen) < 0.7).long()
    loss, met = policy_loss(
        lp,
        lp.detach(),
        adv,
        mask,
        aggregation=aggregation,
        ratio_level=ratio_level,
        dual_clip_c=3.0,
    )
    # GSPO keeps its own per-sequence normalisation whatever the aggregation says
    agg = "seq-mean-token-mean" if ratio_level == "sequence" else aggregation
    pg = aggregate(-adv * lp, mask, agg)  # REINFORCE surrogate
    torch.testing.assert_close(loss, aggregate(-adv, mask, agg))
    (g_ppo,) = torch.autograd.grad(loss, lp)
    (g_pg,) = torch.autograd.grad(pg, lp)
    torch.testing.assert_close(g_ppo, g_pg)
    assert met["clipfrac"].item() == 0.0


def _expected_grad_of_kl_term(estimator: str, theta: torch.Tensor, ref_logits: torch.Tensor):
    """Σ_x π_θ(x) ∇_θ k(x): the exact expectation of the term's per-sample gradient, every
    outcome x of a categorical policy enumerated (the sample itself does not move with θ)."""
    logp = torch.log_softmax(theta, -1)  # [V]
    ref = torch.log_softmax(ref_logits, -1)  # [V]
    terms = kl_penalty(logp.unsqueeze(0), ref.unsqueeze(0), estimator)[0]  # [V] one per x
    (grad,) = torch.autograd.grad((logp.exp().detach() * terms).sum(), theta)
    return grad


@pytest.mark.parametrize("seed", range(5))
def test_kl_terms_have_the_gradient_of_the_kl_they_name(seed):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(6, generator=gen, dtype=torch.float64).requires_grad_(True)
    ref_logits = torch.randn(6, generator=gen, dtype=torch.float64)
    p, q = torch.softmax(theta, -1), torch.softmax(ref_logits, -1)
    forward_kl = (p * (p.log() - q.log())).sum()  # KL(π_θ ‖ π_ref)
    reverse_kl = (q * (q.log() - p.log())).sum()  # KL(π_ref ‖ π_θ)
    (g_fwd,) = torch.autograd.grad(forward_kl, theta, retain_graph=True)
    (g_rev,) = torch.autograd.grad(reverse_kl, theta)
    torch.testing.assert_close(_expected_grad_of_kl_term("k1", theta, ref_logits), g_fwd)
    torch.testing.assert_close(_expected_grad_of_kl_term("k3", theta, ref_logits), g_rev)
    assert not torch.allclose(g_fwd, g_rev)  # the two directions really differ here
    # the values still estimate KL(π_θ ‖ π_ref) without bias
    logp, ref = torch.log_softmax(theta, -1), torch.log_softmax(ref_logits, -1)
    for est in ("k1", "k3"):
        value = (p * kl_penalty(logp.unsqueeze(0), ref.unsqueeze(0), est)[0]).sum()
        torch.testing.assert_close(value, forward_kl)
    # differentiating k1 = log π_θ − log π_ref itself regularises nothing: E[∇ log π_θ] = 0
    naive = (p.detach() * (logp - ref)).sum()
    (g_naive,) = torch.autograd.grad(naive, theta)
    torch.testing.assert_close(g_naive, torch.zeros_like(g_naive))


def test_kl_term_through_policy_loss_has_the_named_gradient():
    """The same check through policy_loss: one row per outcome x, weighted by π(x) through a
    token-sum aggregation (seq-mean-token-sum-norm with L = 1 over V rows, times V)."""
    gen = torch.Generator().manual_seed(7)
    theta = torch.randn(5, generator=gen, dtype=torch.float64).requires_grad_(True)
    ref = torch.log_softmax(torch.randn(5, generator=gen, dtype=torch.float64), -1)
    for est, direction in (("k1", "forward"), ("k3", "reverse")):
        logp = torch.log_softmax(theta, -1)  # [V]
        p = logp.exp().detach()
        lp = logp.unsqueeze(-1)  # [V, 1]: row x holds the one sampled token x
        loss, _ = policy_loss(
            lp,
            lp.detach(),
            torch.zeros_like(lp),
            torch.ones_like(lp),
            aggregation="seq-mean-token-sum-norm",
            norm_length=1,
            ref_logprobs=ref.unsqueeze(-1),
            kl_coef=1.0,
            kl_estimator=est,
        )
        # loss = (1/V) Σ_x k(x); reweight every row by V π(x) via a second pass of the gradient
        (g_rows,) = torch.autograd.grad(loss, lp)
        g = torch.autograd.grad(logp, theta, grad_outputs=g_rows[:, 0] * 5 * p)[0]
        q = ref.exp()
        pp = torch.softmax(theta, -1)
        kl = (
            (pp * (pp.log() - ref)).sum()
            if direction == "forward"
            else (q * (ref - pp.log())).sum()
        )
        (g_kl,) = torch.autograd.grad(kl, theta)
        torch.testing.assert_close(g, g_kl)
