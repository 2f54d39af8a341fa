"""Prefix caching in the hf sampler: reusing a previous turn's KV must not change what is
sampled or the logprobs reported, and the cache must respect its token budget."""

from __future__ import annotations

import copy

import pytest
import torch

from turnrl.policy.base import Generation, SamplingParams
from turnrl.policy.hf import (
    CachedPrefix,
    HFPolicy,
    PrefixCache,
    draw_noise,
    pack_rows,
    packed_logits,
    pad_right,
    sample_next,
    shared_prefix_logits,
)
from turnrl.tiny.model import tiny_model, train_tokenizer

STOPS = tuple(range(10, 70))  # many stop ids, so that some turns stop early and some are cut
TURN_END = 8  # what the agent loop appends to a cut turn


@pytest.fixture(scope="module")
def model_and_pad():
    names = [chr(97 + i % 26) + chr(97 + i // 26 % 26) for i in range(400)]
    texts = [
        f"def func_{n}(value):\n    return value * {i} + {i % 7}\n" for i, n in enumerate(names)
    ]
    tok = train_tokenizer(texts, vocab_size=400)
    assert len(tok) >= 390  # random_ids draws below 390
    return tiny_model(tok, seed=0, hidden_size=64, layers=2).eval(), tok.pad_token_id


def random_ids(gen: torch.Generator, n: int) -> list[int]:
    return torch.randint(10, 390, (n,), generator=gen).tolist()


def play(
    policy: HFPolicy, turns: int = 4, params: SamplingParams | None = None
) -> tuple[list[list[int]], list[list[tuple[int, Generation]]]]:
    """Simulated episodes: prompt, generate, append the ids (+ turn end if cut) and an
    observation, generate again. Episode 3 joins at turn 2 (no cached prefix while the others
    have one); prompt and observation lengths differ per episode. Returns the final token
    lists and, per episode, (start offset, generation) of every turn."""
    params = params or SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=STOPS)
    gen = torch.Generator().manual_seed(1)
    seqs = [random_ids(gen, n) for n in (40, 55, 33, 47)]
    log: list[list[tuple[int, Generation]]] = [[] for _ in seqs]
    for k in range(turns):
        rows = [0, 1, 2] + ([3] if k >= 2 else [])
        outs = policy.generate_batch([seqs[r] for r in rows], params, [100 * k + r for r in rows])
        for r, g in zip(rows, outs):
            log[r].append((len(seqs[r]), g))
            seqs[r] = seqs[r] + g.token_ids + ([] if g.stopped else [TURN_END])
            seqs[r] = seqs[r] + random_ids(gen, 2 + 3 * r + k)
    return seqs, log


def test_same_samples_with_and_without_cache(model_and_pad):
    model, pad = model_and_pad
    on, off = HFPolicy(model, pad), HFPolicy(model, pad, prefix_cache_tokens=0)
    seqs_on, log_on = play(on)
    seqs_off, log_off = play(off)
    assert seqs_on == seqs_off
    for turns_on, turns_off in zip(log_on, log_off):
        for (_, a), (_, b) in zip(turns_on, turns_off):
            assert a.token_ids == b.token_ids and a.stopped == b.stopped
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    # Turns 1..3 of episodes 0-2 and turn 3 of episode 3 reused their previous sequence,
    # which is everything but the last sampled id of the previous turn.
    assert on.prefix_cache.hits == 10
    stopped = [g.stopped for turns in log_on for _, g in turns]
    assert any(stopped) and not all(stopped)
    reused = sum(
        log_on[r][k - 1][0] + len(log_on[r][k - 1][1].token_ids) - 1
        for r in range(4)
        for k in range(1, len(log_on[r]))
    )
    assert on.prefix_cache.reused_tokens == reused
    assert off.prefix_cache.hits == 0 and len(off.prefix_cache) == 0


def test_a_group_prompt_is_prefilled_once(model_and_pad):
    """A task group's first turn: rows with one prompt run it through the model once (its KV
    kept), then one token each; samples and logprobs are those of prefilling every row."""
    model, pad = model_and_pad
    gen = torch.Generator().manual_seed(2)
    a, b = random_ids(gen, 60), random_ids(gen, 45)
    prompts = [a, a, a, b, b, random_ids(gen, 50)]  # two groups and a row of its own
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=STOPS)
    on, off = HFPolicy(model, pad), HFPolicy(model, pad, prefix_cache_tokens=0)
    widths = []
    hook = model.model.layers[0].register_forward_hook(lambda m, i, o: widths.append(i[0].shape))
    got = on.generate_batch(prompts, params, seeds=list(range(6)))
    hook.remove()
    want = off.generate_batch(prompts, params, seeds=list(range(6)))
    assert widths[0] == (2, 59, 64)  # a[:-1] and b[:-1] (left-padded), once each
    assert widths[1] == (6, 50, 64)  # then a token of each grouped row; the lone row whole
    assert on.prefix_cache.hits == 5 and on.prefix_cache.reused_tokens == 3 * 59 + 2 * 44
    for x, y in zip(got, want):
        assert x.token_ids == y.token_ids and x.stopped == y.stopped
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)


def test_cached_logprobs_match_score(model_and_pad):
    model, pad = model_and_pad
    policy = HFPolicy(model, pad)
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=6, stop_token_ids=STOPS)
    seqs, log = play(policy, params=params)
    assert policy.prefix_cache.hits > 0
    scored = HFPolicy(model, pad).score(seqs, temperature=0.8)
    for r, turns in enumerate(log):
        for start, g in turns:
            got = scored[r][start : start + len(g.token_ids)]
            assert got == pytest.approx(g.logprobs, abs=1e-4)


def test_budget_caps_the_cache(model_and_pad):
    model, pad = model_and_pad
    policy = HFPolicy(model, pad, prefix_cache_tokens=150)
    free = HFPolicy(model, pad, prefix_cache_tokens=0)
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    gen = torch.Generator().manual_seed(2)
    seqs = [random_ids(gen, 50) for _ in range(3)]
    for k in range(3):
        outs = policy.generate_batch(seqs, params, [k, k + 10, k + 20])
        assert [g.token_ids for g in outs] == [
            g.token_ids for g in free.generate_batch(seqs, params, [k, k + 10, k + 20])
        ]
        assert policy.prefix_cache.tokens <= 150
        assert policy.prefix_cache.tokens == sum(
            len(e.tokens) for e in policy.prefix_cache._entries.values()
        )
        # Each sequence holds 55, 64, then 73 tokens: two fit, the oldest (row 0) goes first.
        assert len(policy.prefix_cache) == 2
        seqs = [s + g.token_ids + random_ids(gen, 3) for s, g in zip(seqs, outs)]
    assert policy.prefix_cache.hits == 4  # rows 1 and 2 on turns 1 and 2


def test_prefix_cache_lookup_and_eviction():
    cache = PrefixCache(max_tokens=100, key_len=4)

    def entry(tokens: list[int]) -> CachedPrefix:  # the lookup reads tokens only
        return CachedPrefix(tokens, cache=None, row=0, spans=((0, len(tokens)),))

    cache.put(entry(list(range(10))))
    cache.put(entry(list(range(20))))
    cache.put(entry([9] * 3))  # shorter than key_len: not kept
    cache.put(entry(list(range(200))))  # larger than the budget: not kept
    assert len(cache) == 2 and cache.tokens == 30
    hit = cache.longest_prefix(list(range(25)))
    assert cache.get(hit).tokens == list(range(20))
    assert cache.get(cache.longest_prefix(list(range(15)))).tokens == list(range(10))
    assert cache.longest_prefix([0, 1, 2, 3, 99]) is None
    assert cache.longest_prefix(list(range(5))) is None
    cache.pop(hit)
    assert len(cache) == 1 and cache.tokens == 10
    cache.put(entry([1] * 95))  # evicts the oldest to fit
    assert len(cache) == 1 and cache.tokens == 95


def test_weight_change_empties_the_cache(model_and_pad):
    model, pad = model_and_pad
    policy = HFPolicy(model, pad)
    params = SamplingParams(temperature=1.0, max_new_tokens=4)
    prompt = list(range(10, 50))
    first = policy.generate_batch([prompt], params, [0])[0]
    assert len(policy.prefix_cache) == 1
    nxt = prompt + first.token_ids + [11, 12]
    weight = model.model.norm.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(1.5)  # an in-place update, as an optimizer step makes
        out = policy.generate_batch([nxt], params, [1])[0]
        assert policy.prefix_cache.hits == 0
        ref = HFPolicy(model, pad, prefix_cache_tokens=0).generate_batch([nxt], params, [1])[0]
        assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
        policy.version += 1  # a version bump alone also invalidates
        policy.generate_batch([nxt + out.token_ids], params, [2])
        assert policy.prefix_cache.hits == 0
    finally:
        with torch.no_grad():
            weight.copy_(saved)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_batched_sampling_draws_what_multinomial_per_row_draws(temperature, top_p):
    """The decode loop used to call torch.multinomial once per row; the batched argmax over
    the same exponential draws must give the very same tokens, so seeds keep their samples."""
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(0)) * 3
    gens = [torch.Generator().manual_seed(s) for s in range(6)]
    ref_gens = [torch.Generator().manual_seed(s) for s in range(6)]
    noise = torch.empty(6, 300)
    for _ in range(5):
        token, logp = sample_next(logits, temperature, top_p, draw_noise(noise, gens))
        probs = torch.softmax(logits / temperature, -1)
        if top_p < 1.0:
            sorted_p, order = probs.sort(-1, descending=True)
            sorted_p = sorted_p * (sorted_p.cumsum(-1) - sorted_p < top_p)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        ref = [int(torch.multinomial(probs[b], 1, generator=g)) for b, g in enumerate(ref_gens)]
        assert token.tolist() == ref
        expected = torch.log_softmax(logits / temperature, -1).gather(-1, token[:, None])
        assert logp.tolist() == pytest.approx(expected.squeeze(-1).tolist())


def test_top_p_samples_only_the_nucleus():
    # probs [0.1, 0.2, 0.7]: top_p 0.6 keeps only the 0.7 token, 0.8 keeps 0.7 and 0.2.
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7]])).expand(4000, 3)
    noise = torch.empty(4000, 3).exponential_(generator=torch.Generator().manual_seed(0))
    assert set(sample_next(logits, 1.0, 0.6, noise)[0].tolist()) == {2}
    token, logp = sample_next(logits, 1.0, 0.8, noise)
    assert set(token.tolist()) == {1, 2}
    assert (token == 1).float().mean().item() == pytest.approx(0.2 / 0.9, abs=0.03)
    assert logp[token == 1][0].item() == pytest.approx(float(torch.log(torch.tensor(0.2))))


def test_sampling_frequencies_follow_the_tempered_softmax():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]]).expand(20000, 4)
    noise = torch.empty(20000, 4).exponential_(generator=torch.Generator().manual_seed(0))
    token, _ = sample_next(logits, 0.7, 1.0, noise)
    freq = torch.bincount(token, minlength=4).float() / 20000
    assert freq.tolist() == pytest.approx(torch.softmax(logits[0] / 0.7, -1).tolist(), abs=0.01)


def test_row_samples_do_not_depend_on_batch_or_budget(model_and_pad):
    """A row's tokens depend on its prompt and seed only: not on the other rows, nor on the
    max_new_tokens the batcher picked for the batch (it then cuts the row to its own)."""
    model, pad = model_and_pad
    policy = HFPolicy(model, pad, prefix_cache_tokens=0)
    gen = torch.Generator().manual_seed(3)
    a, b = random_ids(gen, 40), random_ids(gen, 52)
    both = policy.generate_batch([a, b], SamplingParams(max_new_tokens=12), [7, 8])
    alone = policy.generate_batch([b], SamplingParams(max_new_tokens=5), [8])[0]
    assert both[1].token_ids[:5] == alone.token_ids
    assert both[1].logprobs[:5] == pytest.approx(alone.logprobs, abs=1e-5)


def test_eager_attention_decodes_like_scoring(model_and_pad):
    """Models whose attention takes no boolean mask as is get transformers' own masks; the
    prefix-cached turns must still report the logprobs that scoring recomputes."""
    model, pad = model_and_pad
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    policy = HFPolicy(eager, pad)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=STOPS)
    seqs, log = play(policy, params=params)
    assert policy.prefix_cache.hits > 0
    scored = policy.score(seqs)
    for r, turns in enumerate(log):
        for start, g in turns:
            assert scored[r][start : start + len(g.token_ids)] == pytest.approx(
                g.logprobs, abs=1e-4
            )


def plain_logits(model, ids, attn):
    return model(input_ids=ids, attention_mask=attn).logits


def logits_and_grads(model, forward, ids, attn):
    """``forward``'s logits and the parameter gradients of their sum over unpadded positions."""
    model.zero_grad()
    logits = forward(model, ids, attn)
    (logits * attn.unsqueeze(-1)).sum().backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_shared_prefix_logits_match_the_plain_forward_and_its_gradients(model_and_pad):
    """Training's shared-prefix forward: same logits and same gradients as one plain forward
    over right-padded rows that start with the same 40 tokens."""
    model, pad = model_and_pad
    model = copy.deepcopy(model).train()
    gen = torch.Generator().manual_seed(3)
    head = random_ids(gen, 40)
    rows = [head + random_ids(gen, n) for n in (12, 30, 5)]
    ids, attn = pad_right(rows, pad, torch.device("cpu"))

    plain, g_plain = logits_and_grads(model, plain_logits, ids, attn)
    shared, g_shared = logits_and_grads(model, shared_prefix_logits, ids, attn)
    valid = attn.bool()
    assert torch.allclose(shared[valid], plain[valid], atol=1e-5)
    for a, b in zip(g_shared, g_plain):  # float32 sums in another order: relative 1e-5
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))
    # Rows with nothing in common fall back to the plain forward.
    other = torch.tensor([random_ids(gen, 20), random_ids(gen, 20)])
    assert torch.equal(
        shared_prefix_logits(model, other, torch.ones_like(other)),
        model(input_ids=other, attention_mask=torch.ones_like(other)).logits,
    )


def test_pack_rows_fills_rows_longest_first():
    # widths 10: 7 opens row 0, 6 row 1, 3 fits row 0, 3 fits row 1, 2 fits nowhere but row 2
    assert pack_rows([3, 7, 2, 6, 3], 10) == [[1, 0], [3, 4], [2]]
    assert pack_rows([10, 10], 10) == [[0], [1]]


def test_packed_logits_match_the_plain_forward_and_its_gradients(model_and_pad):
    """SFT's packed forward: rows of very different lengths laid end to end must see exactly
    what they saw alone (block-diagonal mask, positions from 0), so logits and gradients equal
    the plain right-padded forward's; padded positions get logits 0."""
    model, pad = model_and_pad
    model = copy.deepcopy(model).train()
    gen = torch.Generator().manual_seed(4)
    rows = [random_ids(gen, n) for n in (50, 7, 30, 12, 43, 1)]  # 6 rows pack into 3
    assert len(pack_rows([len(r) for r in rows], 50)) == 3
    ids, attn = pad_right(rows, pad, torch.device("cpu"))

    plain, g_plain = logits_and_grads(model, plain_logits, ids, attn)
    packed, g_packed = logits_and_grads(model, packed_logits, ids, attn)
    valid = attn.bool()
    assert torch.allclose(packed[valid], plain[valid], atol=1e-5)
    assert torch.equal(packed[~valid], torch.zeros_like(packed[~valid]))
    for a, b in zip(g_packed, g_plain):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))
