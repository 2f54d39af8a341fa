"""Hand-computed and property tests for turnrl.algo.advantages."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from turnrl.algo.advantages import (
    acted_on_anchors,
    anchor_ids_exact,
    anchor_ids_similar,
    compute_advantages,
    discounted_returns,
    dr_grpo,
    gigpo,
    grpo,
    no_credit_for_malformed,
    reinforce_pp,
    rloo,
    step_rewards,
)
from turnrl.types import Trajectory, Turn


def layout(turns_per_row: list[int], prompt: int = 2, act: int = 2, obs: int = 2):
    """Token layout prompt + (a_k + o_k)*: returns loss_mask [B, T], turn_index [B, T], turn_mask [B, K]."""
    B, K = len(turns_per_row), max(turns_per_row)
    T = prompt + K * (act + obs)
    loss_mask = torch.zeros(B, T, dtype=torch.long)
    turn_index = torch.full((B, T), -1, dtype=torch.long)
    turn_mask = torch.zeros(B, K, dtype=torch.long)
    for i, n in enumerate(turns_per_row):
        for k in range(n):
            s = prompt + k * (act + obs)
            loss_mask[i, s : s + act] = 1
            turn_index[i, s : s + act] = k
            turn_mask[i, k] = 1
    return loss_mask, turn_index, turn_mask


# ---------------------------------------------------------------- the note's example


def test_note_example_grpo_population_std():
    """Four 3-turn trajectories, rewards [1, 0, 0, 1] -> [1, -1, -1, 1] on every action token."""
    loss_mask, turn_index, _ = layout([3, 3, 3, 3])
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    out = compute_advantages(
        "grpo",
        rewards=rewards,
        group_index=torch.zeros(4, dtype=torch.long),
        loss_mask=loss_mask,
        eps=0.0,
    )
    expected = torch.tensor([1.0, -1.0, -1.0, 1.0])
    for i in range(4):
        for k in range(3):
            assert torch.equal(out.tokens[i][turn_index[i] == k], expected[i].repeat(2))
    assert torch.all(out.tokens[loss_mask == 0] == 0)  # prompt and observations: nothing
    assert (out.tokens != 0).sum() == 4 * 3 * 2
    # with the default eps the values are 0.5 / (0.5 + 1e-6)
    default = compute_advantages(
        "grpo", rewards=rewards, group_index=torch.zeros(4, dtype=torch.long), loss_mask=loss_mask
    )
    torch.testing.assert_close(default.tokens, out.tokens, atol=1e-5, rtol=0)


def test_episode_estimators_hand_values():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1])
    s = math.sqrt(1 / 3)  # sample std of [1, 0, 0, 1]
    torch.testing.assert_close(
        grpo(r, g, std="sample", eps=0.0),
        torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 1 / math.sqrt(2), -1 / math.sqrt(2)]),
    )
    torch.testing.assert_close(dr_grpo(r, g), torch.tensor([0.5, -0.5, -0.5, 0.5, 1.0, -1.0]))
    # RLOO: R_i - mean of the others: 1 - 1/3, 0 - 2/3; 3 - 1, 1 - 3
    torch.testing.assert_close(rloo(r, g), torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0]))


def test_reinforce_pp_batch_normalisation():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    g = torch.arange(4)  # singleton groups: the group baseline is the reward itself
    assert torch.all(reinforce_pp(r, g) == 0)
    # no group baseline, each trajectory once: mean .5, std .5 -> [1, -1, -1, 1]
    torch.testing.assert_close(
        reinforce_pp(r, g, group_baseline=False, eps=0.0), torch.tensor([1.0, -1.0, -1.0, 1.0])
    )
    # token-weighted (row 0 has 3 tokens): mu = 4/6, var = 2/9
    sigma = math.sqrt(2 / 9)
    got = reinforce_pp(r, g, token_counts=torch.tensor([3, 1, 1, 1]), group_baseline=False, eps=0.0)
    torch.testing.assert_close(got, torch.tensor([1 / 3, -2 / 3, -2 / 3, 1 / 3]) / sigma)


# ---------------------------------------------------------------- GiGPO


def gigpo_batch():
    """Task group 0: A visits s0 -> s1 -> s2 (reward 1); B visits s0 -> s2 (reward 0, per-turn reward
    0.2 on its first turn); C visits s0 -> s1 (reward 0). Task group 1: D acts once at s1 (reward 1).
    s1 is shared by A and C at step 1; s2 by A at step 2 and B at step 1."""
    s0, s1, s2 = 10, 11, 12
    anchor_ids = torch.tensor([[s0, s1, s2], [s0, s2, -1], [s0, s1, -1], [s1, -1, -1]])
    turn_mask = (anchor_ids >= 0).long()
    turn_rewards = torch.tensor(
        [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    )
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    group_index = torch.tensor([0, 0, 0, 1])
    return rewards, group_index, turn_rewards, turn_mask, anchor_ids


def test_gigpo_returns_by_hand():
    rewards, _, turn_rewards, turn_mask, _ = gigpo_batch()
    r = step_rewards(rewards, turn_rewards, turn_mask)
    torch.testing.assert_close(
        r, torch.tensor([[0.0, 0.0, 1.0], [0.2, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    )
    R = discounted_returns(r, turn_mask, gamma=0.5)
    torch.testing.assert_close(
        R, torch.tensor([[0.25, 0.5, 1.0], [0.2, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    )


def test_gigpo_mean_norm_by_hand():
    rewards, group_index, turn_rewards, turn_mask, anchor_ids = gigpo_batch()
    adv = gigpo(rewards, group_index, turn_rewards, turn_mask, anchor_ids, gamma=0.5, norm="mean")
    # Episode: totals E = [1, 0.2, 0] (mean 0.4) -> [0.6, -0.2, -0.4]; D alone -> 0.
    # Step groups (returns): s0 {A .25, B .2, C 0} mean .15; s1 {A .5, C 0} mean .25;
    # s2 {A 1 (step 2), B 0 (step 1)} mean .5; D's s1 is in another task group -> singleton -> 0.
    expected = torch.tensor(
        [
            [0.6 + 0.10, 0.6 + 0.25, 0.6 + 0.5],
            [-0.2 + 0.05, -0.2 - 0.5, 0.0],
            [-0.4 - 0.15, -0.4 - 0.25, 0.0],
            [0.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(adv, expected)
    half = gigpo(
        rewards,
        group_index,
        turn_rewards,
        turn_mask,
        anchor_ids,
        gamma=0.5,
        norm="mean",
        step_weight=0.5,
    )
    torch.testing.assert_close(half[0, 2], torch.tensor(0.6 + 0.25))


def test_gigpo_mean_std_and_tokens():
    rewards, group_index, turn_rewards, turn_mask, anchor_ids = gigpo_batch()
    adv = gigpo(rewards, group_index, turn_rewards, turn_mask, anchor_ids, gamma=0.5, eps=0.0)
    e = (torch.tensor([1.0, 0.2, 0.0]) - 0.4) / torch.tensor([1.0, 0.2, 0.0]).std()
    s0 = torch.tensor([0.25, 0.2, 0.0])
    a_s0 = (s0 - s0.mean()) / s0.std()
    r2 = 1 / math.sqrt(2)  # any two-element step group normalises to +-1/sqrt(2) (sample std)
    expected = torch.tensor(
        [
            [e[0] + a_s0[0], e[0] + r2, e[0] + r2],
            [e[1] + a_s0[1], e[1] - r2, 0],
            [e[2] + a_s0[2], e[2] - r2, 0],
            [0, 0, 0],
        ]
    )
    torch.testing.assert_close(adv, expected)
    loss_mask, turn_index, _ = layout([3, 2, 2, 1])
    out = compute_advantages(
        "gigpo",
        rewards=rewards,
        group_index=group_index,
        loss_mask=loss_mask,
        turn_index=turn_index,
        turn_rewards=turn_rewards,
        turn_mask=turn_mask,
        anchor_ids=anchor_ids,
        gamma=0.5,
        std="sample",
        eps=0.0,
    )
    torch.testing.assert_close(out.turns, expected)
    for i, k in [(0, 0), (0, 2), (1, 1), (2, 0)]:
        torch.testing.assert_close(out.tokens[i][turn_index[i] == k], expected[i, k].expand(2))
    assert torch.all(out.tokens[loss_mask == 0] == 0)


def test_anchor_helpers():
    ids = anchor_ids_exact([[("s", 0), ("s", 1)], [("s", 0)], [("s", 1), ("s", 0), "x"]])
    assert ids.tolist() == [[0, 1, -1], [0, -1, -1], [1, 0, 2]]
    texts = [["ls: a.py b.py", "x = 1"], ["ls: a.py b.py ", "y = 2"], ["ls: a.py b.py"]]
    sim = anchor_ids_similar(texts, [0, 0, 1], threshold=0.9)
    assert sim[0, 0] == sim[1, 0]  # near-identical listing, same task group
    assert sim[0, 1] != sim[1, 1]  # different edits
    assert sim[2, 0] != sim[0, 0]  # identical text but another task group
    traj = Trajectory(
        task_id="t",
        group_id="g",
        prompt_len=0,
        token_ids=[],
        loss_mask=[],
        behavior_logprobs=[],
        policy_versions=[],
        turns=[Turn(0, 0, 0, 0, [], 0, anchor="after0"), Turn(0, 0, 0, 0, [], 0, anchor="after1")],
    )
    assert acted_on_anchors(traj) == [("<initial>", "t"), "after0"]


# ---------------------------------------------------------------- gae_turn and truncation


def gae_batch():
    """Row 0: 3 turns, terminated, R=1. Row 1: 2 turns, truncated, per-turn reward 0.1 on turn 0."""
    loss_mask, turn_index, turn_mask = layout([3, 2])
    kw = dict(
        rewards=torch.tensor([1.0, 0.0]),
        group_index=torch.tensor([0, 1]),
        loss_mask=loss_mask,
        turn_index=turn_index,
        turn_rewards=torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]]),
        turn_mask=turn_mask,
        values=torch.tensor([[0.5, 0.6, 0.8, 0.9], [0.2, 0.4, 0.7, 9.0]]),
        truncated=torch.tensor([False, True]),
        gamma=0.9,
        lam=0.8,
    )
    return kw


def test_gae_turn_bootstrap_by_hand():
    kw = gae_batch()
    out = compute_advantages("gae_turn", truncation="bootstrap", **kw)
    # row 0: d2 = 1 - .8 = .2; d1 = .9*.8 - .6 = .12; d0 = .9*.6 - .5 = .04; gl = .72
    # row 1 (bootstrap from V_2 = .7): d1 = .9*.7 - .4 = .23; d0 = .1 + .9*.4 - .2 = .26
    a = torch.tensor([[0.04 + 0.72 * 0.264, 0.264, 0.2], [0.26 + 0.72 * 0.23, 0.23, 0.0]])
    torch.testing.assert_close(out.turns, a)
    torch.testing.assert_close(out.returns, a + torch.tensor([[0.5, 0.6, 0.8], [0.2, 0.4, 0.0]]))
    ti = kw["turn_index"]
    assert torch.all(out.tokens[1][ti[1] == 0] == a[1, 0])
    assert torch.all(out.tokens[kw["loss_mask"] == 0] == 0)


def test_gae_turn_mask_and_zero():
    kw = gae_batch()
    masked = compute_advantages("gae_turn", **kw)  # default truncation="mask"
    assert torch.all(masked.tokens[1] == 0) and not masked.valid[1]
    assert torch.all(masked.loss_mask[1] == 0) and torch.equal(
        masked.loss_mask[0], kw["loss_mask"][0]
    )
    zero = compute_advantages("gae_turn", truncation="zero", **kw)
    # row 1 treated as terminated with reward 0: d1 = -.4, d0 = .26 -> A0 = .26 - .72*.4
    torch.testing.assert_close(zero.turns[1], torch.tensor([0.26 - 0.288, -0.4, 0.0]))
    kept = compute_advantages("gae_turn", truncation="keep", **{**kw, "rewards": torch.ones(2)})
    # row 1 treated as terminated with its own R=1: d1 = 1 - .4 = .6, d0 = .26 -> A0 = .26 + .72*.6
    torch.testing.assert_close(kept.turns[1], torch.tensor([0.26 + 0.432, 0.6, 0.0]))


def test_truncation_policy_for_group_estimators():
    loss_mask, _, _ = layout([1, 1, 1, 1, 1])
    g = torch.zeros(5, dtype=torch.long)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0])
    truncated = torch.tensor([False, False, False, False, True])
    base = dict(rewards=rewards, group_index=g, loss_mask=loss_mask, truncated=truncated, eps=0.0)
    masked = compute_advantages("grpo", **base)
    assert masked.tokens[:, 2].tolist() == [1.0, -1.0, -1.0, 1.0, 0.0]  # R=5 left out of the stats
    zero = compute_advantages("rloo", truncation="zero", **base)
    # rewards [1, 0, 0, 1, 0]: RLOO = R_i - mean of other four
    torch.testing.assert_close(zero.tokens[:, 2], torch.tensor([0.75, -0.5, -0.5, 0.75, -0.5]))
    kept = compute_advantages("rloo", truncation="keep", **base)
    # rewards [1, 0, 0, 1, 5] as graded: R_i - mean of the other four
    torch.testing.assert_close(kept.tokens[:, 2], torch.tensor([-0.5, -1.75, -1.75, -0.5, 4.5]))
    with pytest.raises(ValueError, match="'keep'"):
        compute_advantages("grpo", truncation="drop", **base)
    with pytest.raises(ValueError, match="bootstrap"):
        compute_advantages("grpo", truncation="bootstrap", **base)
    with pytest.raises(ValueError, match="anchor_ids"):
        compute_advantages("gigpo", **base)
    with pytest.raises(ValueError, match="estimator"):
        compute_advantages("ppo", **base)


# ---------------------------------------------------------------- properties

rewards_st = st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=2, max_size=12)


def groups_for(n: int, draw_seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(draw_seed)
    return torch.randint(0, 3, (n,), generator=gen)


@settings(max_examples=40, deadline=None)
@given(
    rewards_st,
    st.integers(0, 1000),
    st.sampled_from(["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "gae_turn"]),
)
def test_masked_tokens_get_zero(rs, seed, estimator):
    n = len(rs)
    gen = torch.Generator().manual_seed(seed)
    turns = torch.randint(1, 4, (n,), generator=gen).tolist()
    loss_mask, turn_index, turn_mask = layout(turns)
    out = compute_advantages(
        estimator,
        rewards=torch.tensor(rs),
        group_index=groups_for(n, seed),
        loss_mask=loss_mask,
        truncated=torch.rand(n, generator=gen) < 0.3,
        turn_index=turn_index,
        turn_rewards=torch.rand(turn_mask.shape, generator=gen),
        turn_mask=turn_mask,
        anchor_ids=torch.randint(0, 3, turn_mask.shape, generator=gen),
        values=torch.rand(n, turn_mask.shape[1] + 1, generator=gen),
        gamma=0.9,
    )
    assert torch.all(out.tokens[loss_mask == 0] == 0)
    assert torch.all(out.tokens[~out.valid] == 0)
    assert torch.isfinite(out.tokens).all()


@settings(max_examples=40, deadline=None)
@given(rewards_st, st.floats(-100, 100, allow_nan=False), st.integers(0, 1000))
def test_grpo_shift_invariant(rs, c, seed):
    r = torch.tensor(rs, dtype=torch.float64)
    g = groups_for(len(rs), seed)
    torch.testing.assert_close(grpo(r + c, g), grpo(r, g), atol=1e-6, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rewards_st, st.integers(0, 1000))
def test_rloo_group_sums_to_zero(rs, seed):
    r = torch.tensor(rs, dtype=torch.float64)
    g = groups_for(len(rs), seed)
    adv = rloo(r, g)
    for gid in g.unique():
        assert abs(float(adv[g == gid].sum())) < 1e-9


@settings(max_examples=30, deadline=None)
@given(
    st.floats(-5, 5, allow_nan=False),
    st.integers(2, 8),
    st.sampled_from(["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo"]),
)
def test_all_equal_group_gives_zero(value, n, estimator):
    loss_mask, turn_index, turn_mask = layout([3] * n)
    out = compute_advantages(
        estimator,
        rewards=torch.full((n,), value),
        group_index=torch.zeros(n, dtype=torch.long),
        loss_mask=loss_mask,
        turn_index=turn_index,
        turn_rewards=torch.zeros(turn_mask.shape),
        turn_mask=turn_mask,
        anchor_ids=torch.tensor([[0, 1, 2]] * n),
        gamma=0.9,
    )
    assert torch.allclose(out.tokens, torch.zeros_like(out.tokens), atol=1e-5)


def test_malformed_turns_keep_blame_but_get_no_credit():
    """Two episodes of two turns (tokens 0-1 turn 0, tokens 2-3 turn 1); turn 1 of each is
    malformed. The winner (A = +1) keeps +1 on its good turn and gets 0 on the garbled one; the
    loser (A = -1) keeps -1 everywhere; padding (0) stays 0."""
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0], [-1.0, -1.0, -1.0, -1.0, 0.0]])
    malformed = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 1, 1, 0]], dtype=torch.bool)
    out = no_credit_for_malformed(adv, malformed)
    assert out.tolist() == [[1.0, 1.0, 0.0, 0.0, 0.0], [-1.0, -1.0, -1.0, -1.0, 0.0]]


# ---------------------------------------------------------------- precision and anchors


def test_group_statistics_in_float64():
    # float32 rewards near 1e6: a float32 mean would give [0, 0, 0, 2.31]
    rewards = torch.tensor([1e6, 1e6, 1e6, 1e6 + 0.125], dtype=torch.float32)
    adv = grpo(rewards, torch.zeros(4, dtype=torch.long), eps=0.0)
    s = math.sqrt(3)
    torch.testing.assert_close(adv, torch.tensor([-1 / s, -1 / s, -1 / s, s]))


def test_gigpo_sums_equal_turn_rewards_to_equal_returns_whatever_the_order():
    turn_rewards = torch.tensor([[1e6, 0.1, 0.2], [0.2, 0.1, 1e6]], dtype=torch.float32)
    adv = gigpo(
        torch.zeros(2),
        torch.zeros(2, dtype=torch.long),
        turn_rewards,
        torch.ones(2, 3),
        torch.tensor([[0, 1, 2], [5, 3, 4]]),  # no step groups: A = episode advantage
    )
    # equal episode returns: no episode-level advantage (float32 sums gave ±0.7)
    assert adv[:, 0].abs().max() < 1e-3


def test_parse_error_anchors_never_alias_different_states():
    def traj(*turns):
        return Trajectory("t", "g", 0, [], [], [], [], turns=list(turns))

    ok = Turn(0, 0, 0, 0, [], 0, anchor="X")
    bad = Turn(0, 0, 0, 0, [], 0, anchor=("parse_error",), parse_error="no JSON")
    a = acted_on_anchors(traj(bad, ok, ok))  # fails from the initial state
    b = acted_on_anchors(traj(ok, bad, ok))  # fails from X
    c = acted_on_anchors(traj(bad, bad, ok))
    init = ("<initial>", "t")
    assert a == [init, ("parse_error", init), "X"]
    assert b == [init, "X", ("parse_error", "X")]
    assert c == [init, ("parse_error", init), ("parse_error", ("parse_error", init))]
    assert a[1] != b[2]  # after a parse error, different states stay different step groups


def test_unhashable_states_get_ids_after_a_parse_error():
    ok = Turn(0, 0, 0, 0, [], 0, anchor={"files": ["a.py"]})
    bad = Turn(0, 0, 0, 0, [], 0, anchor=("parse_error",), parse_error="no JSON")
    anchors = acted_on_anchors(Trajectory("t", "g", 0, [], [], [], [], turns=[ok, bad, ok]))
    assert anchors[2] == ("parse_error", "{'files': ['a.py']}")
    assert anchor_ids_exact([anchors]).tolist() == [[0, 1, 2]]
