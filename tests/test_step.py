"""The training step's math through ``train_on_batch``: exact micro-batching, chunked
log-probabilities, non-finite rewards, and a critic that learns a value function."""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from turnrl.algo.advantages import compute_advantages, no_credit_for_malformed
from turnrl.algo.critic import TurnCritic, turn_boundary_positions
from turnrl.algo.losses import sequence_logprobs, token_entropy
from turnrl.run.config import load_config
from turnrl.train.batch import collate
from turnrl.train.step import (
    micro_batches,
    minibatch_loss,
    minibatch_totals,
    token_logprobs,
    train_on_batch,
    trunk_hidden,
    zero_reward_streak,
)
from turnrl.types import TerminationReason, Trajectory, Turn

V = 40


def tiny_lm(dtype=torch.float64, seed=0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).to(dtype)


def trajectory(
    rng: random.Random,
    group: str,
    prompt: int,
    turns: list[tuple[int, int]],
    reward: float,
    termination=TerminationReason.DONE,
) -> Trajectory:
    """A trajectory with ``prompt`` tokens then (action, observation) lengths per turn."""
    ids = [rng.randrange(V) for _ in range(prompt)]
    mask, blp, ver, out = [0] * prompt, [0.0] * prompt, [-1] * prompt, []
    for k, (a, o) in enumerate(turns):
        start = len(ids)
        lps = [-rng.uniform(0.5, 4.0) for _ in range(a)]  # a stale behaviour policy
        ids += [rng.randrange(V) for _ in range(a + o)]
        mask += [1] * a + [0] * o
        blp += lps + [0.0] * o
        ver += [0] * a + [-1] * o
        anchor = ("state", rng.randrange(2))  # few states: real GiGPO step groups
        out.append(
            Turn(start, start + a, start + a, start + a + o, lps, 0, reward=0.1 * k, anchor=anchor)
        )
    return Trajectory(group, group, prompt, ids, mask, blp, ver, out, reward, termination)


def uneven_batch():
    """Uneven lengths, a row with no action tokens (a lost episode), a truncated row, groups."""
    rng = random.Random(3)
    trajs = [
        trajectory(rng, "a", 3, [(4, 2), (2, 3), (5, 0)], 1.0),
        trajectory(rng, "a", 3, [(1, 1)], 0.0),
        trajectory(rng, "a", 3, [(6, 2), (3, 0)], 0.5, TerminationReason.MAX_TURNS),
        trajectory(rng, "a", 3, [], 0.0, TerminationReason.ENV_ERROR),
        trajectory(rng, "b", 2, [(2, 4), (2, 2), (1, 1), (3, 0)], 1.0),
        trajectory(rng, "b", 2, [(7, 1)], 0.0),
        trajectory(rng, "b", 2, [(2, 2), (2, 0)], 1.0),
    ]
    for t in trajs:
        t.validate()
    return collate(trajs, pad_id=0)


class Recorder(torch.optim.Optimizer):
    """Keeps each step's gradients and leaves the weights alone."""

    def __init__(self, params):
        super().__init__(params, {})
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.grads.append(
            [
                torch.zeros_like(p) if p.grad is None else p.grad.clone()
                for g in self.param_groups
                for p in g["params"]
            ]
        )


def reference_gradient(cfg, model, critic, batch):
    """The minibatch loss of the whole batch in one shot, from plain full-vocabulary logits."""
    a = cfg.algo
    critic_on = a.advantage == "gae_turn"
    lengths = batch.attention_mask.sum(-1)
    positions = turn_boundary_positions(batch.turn_index, batch.turn_mask, lengths)
    model.zero_grad(set_to_none=True)
    critic.zero_grad(set_to_none=True)
    with torch.no_grad():
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            output_hidden_states=True,
        )
        old_values = critic.values_from_hidden(out.hidden_states[-1], positions)
        ref = sequence_logprobs(
            ref_model_of(model)(input_ids=batch.input_ids).logits, batch.input_ids
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
        gamma=a.gamma,
    )
    tokens = no_credit_for_malformed(adv.tokens, batch.malformed)
    out = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=True
    )
    logprobs = sequence_logprobs(out.logits, batch.input_ids)
    value_mask = batch.turn_mask * adv.valid.unsqueeze(-1).double()
    loss, _ = minibatch_loss(
        cfg,
        logprobs,
        batch.behavior_logprobs,
        tokens,
        adv.loss_mask,
        behavior_logprobs=batch.behavior_logprobs,
        ref_logprobs=ref,
        entropy=token_entropy(out.logits),
        values=critic.values_from_hidden(out.hidden_states[-1], positions) if critic_on else None,
        old_values=old_values,
        returns=adv.returns,
        value_mask=value_mask,
    )
    loss.backward()
    params = [*model.parameters(), *critic.parameters()]
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]


_REF = {}


def ref_model_of(model):
    return _REF[id(model)]


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
@pytest.mark.parametrize(
    "advantage", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "gae_turn"]
)
def test_micro_batches_accumulate_to_the_minibatch_gradient(aggregation, ratio_level, advantage):
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=guess",
            f"algo.advantage={advantage}",
            f"algo.aggregation={aggregation}",
            f"algo.ratio_level={ratio_level}",
            "algo.truncation=mask",
            "algo.kl_coef=0.1",
            "algo.entropy_coef=0.01",
            *(["algo.value_clip=0.1"] if advantage == "gae_turn" else []),
            "algo.norm_tokens=16",
            "algo.eps_low=0.05",  # stale behaviour logprobs: many ratios are clipped
            "optim.grad_clip=1e9",
            "optim.minibatch_size=8",  # one minibatch of the whole batch
            "optim.micro_batch_size=3",
            "optim.micro_batch_tokens=40",  # some micro-batches hold one row
        ],
    )
    batch = uneven_batch()
    batch.behavior_logprobs = batch.behavior_logprobs.double()
    model = tiny_lm()
    _REF[id(model)] = tiny_lm(seed=1).requires_grad_(False)
    critic = TurnCritic.sharing(model).double()
    torch.nn.init.normal_(critic.value_head.weight, std=0.5)  # a critic with opinions
    expected = reference_gradient(cfg, model, critic, batch)
    # the same step, micro-batched by train_on_batch (value head always last, as here)
    opt = Recorder([*model.parameters(), *critic.parameters()])
    m = train_on_batch(
        cfg,
        model,
        _REF[id(model)],
        opt,
        batch,
        step=0,
        critic=critic if advantage == "gae_turn" else None,
        log=lambda s: None,
    )
    assert m["train/rows"] == 5  # the lost episode has no tokens, the truncated one is masked
    assert len(opt.grads) == 1
    got = opt.grads[0]
    if advantage != "gae_turn":  # no critic: its head gets no gradient
        expected = expected[: len(list(model.parameters()))]
        got = got[: len(expected)]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-12)


def test_micro_batches_respect_row_and_token_budgets():
    lengths = torch.tensor([10, 3, 7, 30, 2, 2])
    rows = torch.arange(6)
    assert [m.tolist() for m in micro_batches(rows, lengths, 8, None)] == [[0, 1, 2, 3, 4, 5]]
    assert [m.tolist() for m in micro_batches(rows, lengths, 2, None)] == [[0, 1], [2, 3], [4, 5]]
    # 20 padded tokens: [10, 3] -> 2x10; 7 would make 3x10; 30 alone; [2, 2]
    assert [m.tolist() for m in micro_batches(rows, lengths, 8, 20)] == [[0, 1], [2], [3], [4, 5]]


def test_chunked_logprobs_equal_full_logits_and_keep_no_vocab_tensor():
    model = tiny_lm()
    batch = uneven_batch()
    ids, attn, mask = batch.input_ids, batch.attention_mask, batch.loss_mask
    logits = model(input_ids=ids, attention_mask=attn).logits
    lp, ent, hidden = token_logprobs(
        model, ids, attn, mask, temperature=0.7, chunk=5, entropy_grad=True
    )
    keep = mask.bool()
    ref_lp = sequence_logprobs(logits, ids, temperature=0.7)
    ref_ent = token_entropy(logits, temperature=0.7)
    torch.testing.assert_close(lp[keep], ref_lp[keep])
    torch.testing.assert_close(ent[keep], ref_ent[keep])
    assert torch.all(lp[~keep] == 0) and hidden.shape[:2] == ids.shape
    (g,) = torch.autograd.grad((lp * 0.3 + ent).sum(), model.lm_head.weight)
    (g_ref,) = torch.autograd.grad(
        (torch.where(keep, ref_lp, 0) * 0.3 + torch.where(keep, ref_ent, 0)).sum(),
        model.lm_head.weight,
    )
    torch.testing.assert_close(g, g_ref)
    # with entropy_coef 0 the entropy is a plain number: no graph through it
    _, ent0, _ = token_logprobs(model, ids, attn, mask)
    assert not ent0.requires_grad


def test_shared_prompt_runs_once_with_the_plain_forward_values_and_gradients():
    """A group's rows share their prompt: trunk_hidden runs it for one row and repeats its
    keys and values; hidden states and every weight's gradient equal the plain forward."""
    model = tiny_lm()
    trunk = model.get_decoder()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, V, (3, 50), generator=g)
    ids[:, :40] = ids[0, :40]  # a shared prompt of 40 tokens, then each row its own
    attn = torch.ones_like(ids)
    attn[1, 45:] = 0  # right padding
    calls = []
    hook = trunk.layers[0].register_forward_hook(lambda m, i, o: calls.append(i[0].shape))
    shared = trunk_hidden(trunk, ids, attn, min_prefix=32)
    hook.remove()
    assert calls == [(1, 40, 16), (3, 10, 16)]  # the prompt once, then each row's tail
    plain = trunk(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
    keep = attn.bool()
    torch.testing.assert_close(shared[keep], plain[keep], rtol=0, atol=1e-12)
    w = torch.randn(shared.shape, generator=g, dtype=shared.dtype) * attn[..., None]
    grads = torch.autograd.grad((shared * w).sum(), list(trunk.parameters()))
    ref = torch.autograd.grad((plain * w).sum(), list(trunk.parameters()))
    # equal but for float error: even the plain forward's gradient for one row times three and
    # for three equal rows differ by ~1e-8 of their norm in float64 on the CPU
    for a, b in zip(grads, ref):
        assert float((a - b).norm()) <= 1e-6 * float(b.norm())
    # below the threshold (or with one row) it is the plain forward
    calls.clear()
    hook = trunk.layers[0].register_forward_hook(lambda m, i, o: calls.append(i[0].shape))
    trunk_hidden(trunk, ids, attn, min_prefix=41)
    hook.remove()
    assert calls == [(3, 50, 16)]


def totals_of(mask):
    return minibatch_totals(mask, None)


def test_totals_count_tokens_and_nonempty_rows():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert totals_of(mask) == {"tokens": 3.0, "rows": 2.0}


# ---------------------------------------------------------------------------------------------
# Non-finite rewards
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("advantage", ["grpo", "rloo", "reinforce_pp", "gigpo", "gae_turn"])
@pytest.mark.parametrize("truncation", ["mask", "zero"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("extra", [[], ["algo.kl_coef=0.1", "algo.entropy_coef=0.01"]])
def test_non_finite_reward_is_masked_and_never_reaches_the_weights(
    advantage, truncation, bad, extra
):
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=guess",
            f"algo.advantage={advantage}",
            f"algo.truncation={truncation}",
            *extra,
        ],
    )
    rng = random.Random(0)
    trajs = [
        trajectory(rng, "a", 2, [(3, 1), (2, 0)], 1.0),
        trajectory(rng, "a", 2, [(2, 1)], 0.0),
        trajectory(rng, "a", 2, [(3, 0)], bad),  # the poisoned episode
        trajectory(rng, "a", 2, [(2, 2), (1, 0)], 1.0, TerminationReason.MAX_TURNS),
        trajectory(rng, "b", 2, [(2, 0)], 0.0),
        trajectory(rng, "b", 2, [(2, 1), (2, 0)], 1.0),
        trajectory(rng, "a", 2, [(2, 0)], 0.0),
    ]
    trajs[1].turns[0].reward = -bad  # a poisoned per-turn reward too
    # (the rubric flags such an episode and leaves it out of its group before training:
    # tests/test_rewards.py; here the trainer's own guard, should one get through)
    logs: list[str] = []
    batch = collate(trajs, pad_id=0)
    model = tiny_lm(torch.float32)
    ref = tiny_lm(torch.float32, seed=1).requires_grad_(False) if cfg.algo.kl_coef else None
    critic = TurnCritic.sharing(model) if advantage == "gae_turn" else None
    params = [*model.parameters(), *(critic.parameters() if critic else [])]
    opt = torch.optim.AdamW(params, lr=1e-2)
    m = train_on_batch(cfg, model, ref, opt, batch, 0, critic=critic, log=logs.append)
    assert m["train/non_finite"] == 2
    assert m["train/rows"] > 0 and m["train/skipped_steps"] == 0
    assert all(torch.isfinite(p).all() for p in params)
    # the group of the poisoned rows still trains on its healthy members
    adv = compute_advantages(
        "grpo",
        rewards=batch.rewards,
        group_index=batch.group_index,
        loss_mask=batch.loss_mask,
        truncated=batch.truncated,
        truncation="mask",
        turn_rewards=batch.turn_rewards,
        turn_mask=batch.turn_mask,
        eps=0.0,
    )
    assert adv.valid.tolist() == [True, False, False, False, True, True, True]
    assert adv.tokens[0].max() == 1 and adv.tokens[-1].min() == -1  # as if alone: [1, 0]
    assert torch.isfinite(adv.tokens).all()


def test_non_finite_gradient_skips_the_optimizer_step():
    cfg = load_config(None, ["model.name=tiny", "env.name=guess"])
    batch = uneven_batch()
    model = tiny_lm(torch.float32)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")  # a diverged weight: NaN logits, NaN loss
    before = [p.detach().clone() for p in model.parameters()]
    logs: list[str] = []
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    m = train_on_batch(cfg, model, None, opt, batch, 0, log=logs.append)
    assert m["train/skipped_steps"] == 1 and math.isnan(m["loss"])
    assert any("non-finite gradient" in line for line in logs)
    for p, q in zip(before, model.parameters()):
        assert torch.equal(p, q.detach()) or (p.isnan() == q.isnan()).all()


def test_no_signal_step_says_so():
    cfg = load_config(None, ["model.name=tiny", "env.name=guess"])
    rng = random.Random(0)
    trajs = [trajectory(rng, "a", 2, [(2, 0)], 1.0) for _ in range(4)]
    logs: list[str] = []
    model = tiny_lm(torch.float32)
    m = train_on_batch(
        cfg,
        model,
        None,
        torch.optim.AdamW(model.parameters()),
        collate(trajs, 0),
        4,
        log=logs.append,
    )
    assert m["train/no_signal"] == 1.0 and m["train/rows"] == 0
    assert logs == [
        "step 5: no training signal: every advantage is 0 (4 of 4 episodes in the loss)"
    ]


def test_infra_failures_leave_their_group():
    rng = random.Random(0)
    trajs = [trajectory(rng, "a", 2, [(2, 0)], 1.0) for _ in range(3)]
    trajs.append(trajectory(rng, "a", 2, [(2, 0)], 0.0, TerminationReason.ENV_ERROR))
    trajs.append(trajectory(rng, "a", 2, [(2, 0)], 0.0, TerminationReason.TIMEOUT))
    batch = collate(trajs, 0)
    assert batch.excluded.tolist() == [False, False, False, True, True]
    for truncation in ("zero", "mask"):
        adv = compute_advantages(
            "grpo",
            rewards=batch.rewards,
            group_index=batch.group_index,
            loss_mask=batch.loss_mask,
            truncated=batch.truncated,
            truncation=truncation,
            excluded=batch.excluded,
        )
        # three successes and two infra failures: nothing to learn, not +0.8 each
        assert torch.all(adv.tokens == 0)
        assert adv.valid.tolist() == [True, True, True, False, False]


# ---------------------------------------------------------------------------------------------
# The critic
# ---------------------------------------------------------------------------------------------


def test_critic_learns_the_value_of_a_toy_env():
    """Two-turn episodes whose outcome is fixed by the first prompt token (token 1: reward 1,
    token 2: reward 0, both 50 % of the time); training through train_on_batch with gae_turn
    must make V at both turn boundaries approach the expected return of the state."""
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=guess",
            "algo.advantage=gae_turn",
            "optim.lr=0.01",
            "optim.micro_batch_size=4",
        ],
    )
    model = tiny_lm(torch.float32)
    critic = TurnCritic.sharing(model)
    opt = torch.optim.AdamW([*model.parameters(), *critic.parameters()], lr=0.01)
    rng = random.Random(0)

    def episode(good: bool, i: int) -> Trajectory:
        t = trajectory(rng, f"g{i}", 3, [(2, 2), (2, 0)], float(good))
        t.token_ids[0] = 1 if good else 2
        for turn in t.turns:
            turn.reward = 0.0
        return t

    def values(batch):
        lengths = batch.attention_mask.sum(-1)
        pos = turn_boundary_positions(batch.turn_index, batch.turn_mask, lengths)
        with torch.no_grad():
            _, _, hidden = token_logprobs(
                model, batch.input_ids, batch.attention_mask, batch.loss_mask
            )
            return critic.values_from_hidden(hidden, pos)[:, :2]  # V before turns 0 and 1

    for step in range(60):
        trajs = [episode(i % 2 == 0, i) for i in range(8)]
        train_on_batch(
            cfg, model, None, opt, collate(trajs, 0), step, critic=critic, log=lambda s: None
        )
    test = collate([episode(True, 0), episode(False, 1)], 0)
    v = values(test)
    torch.testing.assert_close(v, torch.tensor([[1.0, 1.0], [0.0, 0.0]]), atol=0.15, rtol=0)


# ---------------------------------------------------------------------------------------------
# Honest logs
# ---------------------------------------------------------------------------------------------


def test_entropy_metric_is_the_mean_token_entropy_once():
    """A model with a zero output layer is uniform: every token's entropy is exactly ln V."""
    cfg = load_config(None, ["model.name=tiny", "env.name=guess", "optim.micro_batch_size=2"])
    model = tiny_lm(torch.float32)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    m = train_on_batch(cfg, model, None, opt, uneven_batch(), 0, log=lambda s: None)
    assert m["train/rows"] > 0
    assert m["entropy"] == pytest.approx(math.log(V), rel=1e-6)


def test_zero_reward_streak_warns_every_third_step():
    rng = random.Random(0)
    zero = [trajectory(rng, "a", 2, [(2, 0)], 0.0) for _ in range(2)]
    some = [trajectory(rng, "a", 2, [(2, 0)], 1.0), *zero]
    logs: list[str] = []
    streak = 0
    for trajs in [zero, zero, some, zero, zero, zero, zero, zero, zero]:
        streak = zero_reward_streak(streak, trajs, logs.append)
    assert streak == 6 and len(logs) == 2
    assert logs[0].startswith("warning: 3 steps in a row with every reward 0")


def test_chunked_logprobs_through_a_lora_model():
    """A LoRA-wrapped model (peft) splits into trunk and head too, adapters included."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_lm(torch.float32),
        LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    batch = uneven_batch()
    ids, attn, mask = batch.input_ids, batch.attention_mask, batch.loss_mask
    lp, _, _ = token_logprobs(model, ids, attn, mask, chunk=7)
    ref = sequence_logprobs(model(input_ids=ids, attention_mask=attn).logits, ids)
    keep = mask.bool()
    torch.testing.assert_close(lp[keep], ref[keep])
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    grads = torch.autograd.grad(lp.sum(), lora)
    assert all(g.abs().sum() > 0 for g in grads)


def test_logged_metrics_do_not_depend_on_micro_batching():
    def metrics(micro: int) -> dict:
        cfg = load_config(
            None,
            [
                "model.name=tiny",
                "env.name=guess",
                "algo.advantage=gae_turn",
                "algo.aggregation=seq-mean-token-mean",
                "algo.kl_coef=0.1",
                f"optim.micro_batch_size={micro}",
            ],
        )
        model = tiny_lm()
        critic = TurnCritic.sharing(model).double()
        torch.nn.init.normal_(critic.value_head.weight, std=0.5)
        opt = Recorder([*model.parameters(), *critic.parameters()])
        ref = tiny_lm(seed=1).requires_grad_(False)
        return train_on_batch(cfg, model, ref, opt, uneven_batch(), 0, critic=critic, log=print)

    one, many = metrics(8), metrics(1)
    for key in ("loss", "train/value_loss", "entropy", "kl", "train/clipfrac", "train/ratio_max"):
        assert one[key] == pytest.approx(many[key], rel=1e-9), key
    assert one["train/value_loss"] > 0
