"""Context strategies: rewritten contexts become segments, each trained on exactly the prefix
its tokens were sampled from; an episode still counts once in every statistic."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from turnrl.algo.advantages import compute_advantages, fold_segments, segment_value_columns
from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.guess import GuessFamily
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import turn_end_token
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect, default_sampling
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.context import PLACEHOLDER, SUMMARY_REQUEST, ContextConfig
from turnrl.run.config import ConfigError, load_config
from turnrl.run.preflight import checked_config
from turnrl.tiny.model import tiny_model, train_tokenizer
from turnrl.train.batch import collate
from turnrl.types import TerminationReason, Trajectory, Turn

FAMILY = GuessFamily(1, 200)


@pytest.fixture(scope="module")
def tiny():
    texts = [
        json.dumps({"name": "guess", "arguments": {"number": i}}) + " higher lower correct"
        for i in range(300)
    ]
    tok = train_tokenizer(texts, vocab_size=700)
    return tok, HFPolicy(tiny_model(tok, seed=0), tok.pad_token_id)


class Recording:
    """Wraps a backend and keeps every (prompt, generation) it served."""

    def __init__(self, backend):
        self.backend, self.version = backend, backend.version
        self.seen: list[tuple[list[int], object]] = []

    def generate_batch(self, prompts, params, seeds=None):
        out = self.backend.generate_batch(prompts, params, seeds)
        self.seen += [(list(p), g) for p, g in zip(prompts, out)]
        return out


def rollout(tiny, context: ContextConfig, n: int = 3, max_turns: int = 8):
    tok, policy = tiny
    renderer = ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))
    recorder = Recording(policy)
    limits = RolloutLimits(
        max_turns=max_turns,
        max_new_tokens=24,
        max_parse_errors=100,
        max_context_tokens=800,
        context=context,
    )
    reqs = [EpisodeRequest(t, "g", i) for i, t in enumerate(FAMILY.tasks("train", n))]

    async def go():
        batcher = GenerationBatcher(recorder, default_sampling(renderer))
        return await collect(reqs, FAMILY.make_env, renderer, batcher, limits)

    return asyncio.run(go()), recorder, renderer


STRATEGIES = {
    "truncate": ContextConfig("truncate"),
    "drop_observations": ContextConfig("drop_observations", threshold=300, keep_observations=1),
    "summarize": ContextConfig("summarize", threshold=300, summary_max_tokens=24),
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_segments_are_what_the_sampler_saw(tiny, strategy):
    """Each action's prompt is exactly its segment's tokens before it, its ids are the sampled
    ids, the mask is 1 exactly on them, and a fresh forward pass over each segment alone gives
    the behaviour logprobs."""
    trajs, recorder, renderer = rollout(tiny, STRATEGIES[strategy])
    served = {tuple(p + g.token_ids): g for p, g in recorder.seen}
    sampled = 0
    for traj in trajs:
        traj.validate()
        if strategy == "truncate":
            assert traj.segment_starts == [] and traj.termination in (
                TerminationReason.CONTEXT_LIMIT,
                TerminationReason.MAX_TURNS,
            )
        else:
            assert len(traj.segment_starts) >= 1, traj.termination  # the context was rewritten
        for start, end in traj.segments():
            ids = traj.token_ids[start:end]
            assert len(ids) <= 800  # every segment fits the budget
            turns = [u for u in traj.turns if start <= u.action_start < end]
            for u in turns:
                prompt_and_action = tuple(ids[: u.action_end - start])
                gen = served[prompt_and_action]  # the sampler was given exactly this prefix
                assert traj.token_ids[u.action_start : u.action_end] == gen.token_ids
                assert traj.behavior_logprobs[u.action_start : u.action_end] == gen.logprobs
                sampled += len(gen.token_ids)
            mask = traj.loss_mask[start:end]
            assert sum(mask) == sum(u.action_end - u.action_start for u in turns)
            rescored = tiny[1].score([ids], temperature=1.0)[0]
            for i, m in enumerate(mask):
                if m:
                    assert abs(rescored[i] - traj.behavior_logprobs[start + i]) < 1e-4
            if start > 0:  # a rewritten context opens with a fresh rendering, mask 0
                text = renderer.decode(ids[: turns[0].action_start - start])
                assert not any(mask[: turns[0].action_start - start])
                assert text.startswith(renderer.decode(traj.token_ids[: traj.prompt_len])[:40])
                if strategy == "drop_observations":
                    assert PLACEHOLDER in text
                if strategy == "summarize":
                    assert "Summary of your work so far" in text
    assert sampled == sum(len(g.token_ids) for _, g in recorder.seen)  # nothing sampled is lost
    if strategy == "summarize":
        asked = [m for t in trajs for m in t.messages if m["content"] == SUMMARY_REQUEST]
        written = sum(t.metrics["summaries"] for t in trajs)
        assert asked and 0 < written <= len(asked)  # the last request may end the episode


def test_collate_rows_per_segment_and_episode_stats_count_once(tiny):
    trajs, _, _ = rollout(tiny, STRATEGIES["drop_observations"], n=2)
    batch = collate(trajs, 0)
    rows = sum(len(t.segments()) for t in trajs)
    assert batch.input_ids.shape[0] == rows > len(trajs)
    first = [0, len(trajs[0].segments())]
    assert batch.episode_row.tolist() == [first[0]] * first[1] + [first[1]] * (rows - first[1])
    # every row's tokens and mask, joined back, are the episode's
    joined = batch.per_episode(batch.input_ids.double(), pad=-1)
    for e, t in enumerate(trajs):
        assert joined[e, : len(t.token_ids)].long().tolist() == t.token_ids
    assert int(batch.loss_mask.sum()) == sum(t.num_action_tokens for t in trajs)
    # turns keep their episode numbering; a row holds only its own
    for b in range(rows):
        own = set(batch.turn_index[b][batch.turn_index[b] >= 0].tolist())
        assert own == set(batch.turn_mask[b].nonzero().flatten().tolist())


def _seg_traj(reward: float, turns_per_segment: list[int], anchors: list, gid: str = "g"):
    """A hand-made segmented episode: each segment is 2 prompt tokens then 1-token actions
    each followed by a 1-token observation."""
    ids, mask, lp, ver, turns, starts = [], [], [], [], [], []
    k = 0
    for j, n in enumerate(turns_per_segment):
        if j:
            starts.append(len(ids))
        ids += [1, 2]
        mask += [0, 0]
        lp += [0.0, 0.0]
        ver += [-1, -1]
        for _ in range(n):
            a = len(ids)
            ids += [3, 4]
            mask += [1, 0]
            lp += [-0.5, 0.0]
            ver += [0, -1]
            turns.append(Turn(a, a + 1, a + 1, a + 2, [-0.5], 0, anchor=anchors[k]))
            k += 1
    t = Trajectory("task", gid, 2, ids, mask, lp, ver, turns, reward=reward)
    t.segment_starts = starts
    t.validate()
    return t


def test_grpo_and_gigpo_over_segments_count_each_episode_once():
    """Two episodes of one task: A (reward 1) in segments of 2 + 1 turns, B (reward 0) in one
    segment of 3 turns. GRPO: mean 0.5, sample std (gigpo's) 0.7071 → A^E = ±0.7071 on every row
    of each episode, not weighted by its number of rows. GiGPO (γ = 1, w = 1): turn 0 of both acts
    on the initial state (step group {A0, B0}: returns 1 and 0 → ±0.7071); turn 1 acts on "x"
    in both (A1, B1: returns 1, 0 → ±0.7071); turn 2 acts on "y" (A) vs "z" (B): singletons → 0.
    A: [1.414, 1.414, 0.707]; B: [−1.414, −1.414, −0.707]."""
    a = _seg_traj(1.0, [2, 1], ["x", "y", "done"])
    b = _seg_traj(0.0, [3], ["x", "z", "done"])
    batch = collate([a, b], 0)
    assert batch.episode_row.tolist() == [0, 0, 2]
    args = dict(
        rewards=batch.rewards,
        group_index=batch.group_index,
        loss_mask=batch.loss_mask,
        episode_row=batch.episode_row,
        turn_index=batch.turn_index,
        turn_rewards=batch.turn_rewards,
        turn_mask=batch.turn_mask,
        anchor_ids=batch.anchor_ids,
    )
    g = compute_advantages("grpo", std="sample", **args)
    s = 2**-0.5
    per_row = [float(g.tokens[r][batch.loss_mask[r].bool()].unique()) for r in range(3)]
    assert per_row == pytest.approx([s, s, -s], abs=1e-5)
    gi = compute_advantages("gigpo", gamma=1.0, **args)
    assert gi.turns[0].tolist() == pytest.approx([2 * s, 2 * s, s], abs=1e-5)
    assert gi.turns[1].tolist() == pytest.approx([2 * s, 2 * s, s], abs=1e-5)  # same episode
    assert gi.turns[2].tolist() == pytest.approx([-2 * s, -2 * s, -s], abs=1e-5)
    # tokens: row 0 holds A's turns 0 and 1, row 1 A's turn 2
    assert gi.tokens[0][batch.loss_mask[0].bool()].tolist() == pytest.approx(
        [2 * s, 2 * s], abs=1e-5
    )
    assert gi.tokens[1][batch.loss_mask[1].bool()].tolist() == pytest.approx([s], abs=1e-5)
    # the same episodes unsegmented give the same advantages
    a1, b1 = _seg_traj(1.0, [3], ["x", "y", "done"]), b
    flat = collate([a1, b1], 0)
    gf = compute_advantages(
        "gigpo",
        gamma=1.0,
        rewards=flat.rewards,
        group_index=flat.group_index,
        loss_mask=flat.loss_mask,
        turn_index=flat.turn_index,
        turn_rewards=flat.turn_rewards,
        turn_mask=flat.turn_mask,
        anchor_ids=flat.anchor_ids,
    )
    assert gf.turns[0].tolist() == pytest.approx(gi.turns[0].tolist())


def test_gae_turn_over_segments_reads_each_value_in_its_own_segment():
    """One episode, turns 0, 1 in segment 0 and turn 2 in segment 1, reward 1 at the end, γ = λ = 1.
    Row 0 reads V_0 = 0.1, V_1 = 0.2; row 1 reads V_2 = 0.3 and V_3 = 0.9 (after the last turn,
    at its last token). Terminated: A_k = R − V_k = [0.9, 0.8, 0.7]; with bootstrap on a truncated
    episode the final reward is replaced by V_3: A_k = V_3 − V_k = [0.8, 0.7, 0.6]. Values a row
    does not own are never read (set to 99 here)."""
    t = _seg_traj(1.0, [2, 1], ["x", "y", "z"])
    batch = collate([t], 0)
    assert segment_value_columns(batch.turn_mask, batch.episode_row).tolist() == [
        [True, True, False, False],
        [False, False, True, True],
    ]
    values = torch.tensor([[0.1, 0.2, 99.0, 99.0], [99.0, 99.0, 0.3, 0.9]], dtype=torch.float64)
    args = dict(
        rewards=batch.rewards,
        group_index=batch.group_index,
        loss_mask=batch.loss_mask,
        episode_row=batch.episode_row,
        turn_index=batch.turn_index,
        turn_rewards=batch.turn_rewards,
        turn_mask=batch.turn_mask,
        values=values,
        lam=1.0,
    )
    done = compute_advantages("gae_turn", **args)
    assert torch.allclose(done.turns, torch.tensor([[0.9, 0.8, 0.7]] * 2, dtype=torch.float64))
    assert torch.allclose(done.returns, torch.ones(2, 3, dtype=torch.float64))
    cut = compute_advantages(
        "gae_turn", truncated=torch.tensor([True, True]), truncation="bootstrap", **args
    )
    assert torch.allclose(cut.turns, torch.tensor([[0.8, 0.7, 0.6]] * 2, dtype=torch.float64))
    masked = compute_advantages("gae_turn", truncated=torch.tensor([True, True]), **args)
    assert not masked.valid.any() and not masked.loss_mask.any()  # both rows leave together
    assert fold_segments(batch.turn_mask, batch.episode_row).tolist() == [[1, 1, 1], [0, 0, 0]]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["rollout.context=summarize", "rollout.context_threshold=512"],
            "rollout.context_threshold=512 must be > 0 and below max_context_tokens=512",
        ),
        (["rollout.context=forget"], "rollout.context: Input should be 'truncate'"),
        (
            ["rollout.context=summarize", "rollout.context_threshold=450"],
            "leaves no room for the summary",
        ),
    ],
)
def test_bad_context_config_fails_in_one_line(overrides, message, tmp_path):
    base = [
        "model.name=tiny",
        "env.name=guess",
        "rollout.max_context_tokens=512",
        f"runs_dir={tmp_path}",
    ]
    with pytest.raises(ConfigError) as e:
        load_config(None, base + overrides)
    assert message in str(e.value) and len(str(e.value).splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_bad_context_config_from_the_cli_exits_2_before_writing(tmp_path):
    from typer.testing import CliRunner

    from turnrl.cli import app

    args = [
        "train",
        "model.name=tiny",
        "env.name=guess",
        f"runs_dir={tmp_path}",
        "rollout.context=forget",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "rollout.context" in result.output and not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "strategy, estimator, staleness",
    [
        ("truncate", "grpo", 0),
        ("drop_observations", "gigpo", 0),
        ("summarize", "gae_turn", 0),
        ("summarize", "grpo", 1),  # asynchronous rollouts
    ],
)
def test_one_training_step_with_each_strategy(
    strategy, estimator, staleness, tmp_path, monkeypatch
):
    """The real loop: rollouts with the strategy, one row per segment in the step, the
    trajectory records joined back per episode."""
    import gzip

    from turnrl.run.recipe import train

    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=guess",
            "env.options={low: 1, high: 200}",
            "env.eval_tasks=2",
            f"runs_dir={tmp_path}",
            "steps=1",
            f"max_staleness={staleness}",
            "rollout.tasks_per_step=2",
            "rollout.group_size=2",
            "rollout.max_turns=6",
            "rollout.max_new_tokens=24",
            "rollout.max_parse_errors=10",
            "rollout.max_context_tokens=1024",
            f"rollout.context={strategy}",
            "rollout.context_threshold=256",
            "rollout.summary_max_tokens=24",
            f"algo.advantage={estimator}",
            "algo.truncation=zero",
            "algo.entropy_coef=0.01",  # every row is trained, even with all rewards 0
            "tiny.vocab_size=320",
            "tiny.hidden_size=32",
            "tiny.layers=1",
            "threads=1",
        ],
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "loss" in r)
    assert step["loss"] == step["loss"]  # finite: the step ran
    if strategy == "truncate":
        assert step["episode/segments_mean"] == 1.0 and step["train/rows"] == 4
    else:
        assert step["episode/segments_mean"] > 1.0
        assert step["train/rows"] == round(4 * step["episode/segments_mean"])
    (records,) = run_dir.glob("**/step-*1.jsonl.gz")
    recs = [json.loads(x) for x in gzip.open(records, "rt").read().splitlines()]
    assert recs
    for rec in recs:  # per-token records cover the whole episode, every segment
        assert len(rec["advantages"]) == len(rec["ids"])


# --- the long-horizon family: web compare=N -------------------------------------------------


@pytest.fixture(scope="module")
def compare_family():
    from turnrl.envs.web.family import WebFamily

    fam = WebFamily(compare=4)
    yield fam
    fam.close()


def _play(fam, tasks, make_agent):
    from turnrl.envs.scripted import run_scripted

    async def go():
        return await asyncio.gather(
            *(run_scripted(fam.make_env(), t, make_agent(t)) for t in tasks)
        )

    return asyncio.run(go())


def test_compare_expert_reads_every_page_and_outgrows_a_1024_token_context(compare_family):
    """The expert opens each of the 4 pages, finds its number, then answers the largest; its
    episode, rendered with SmolLM2's chat template, is longer than 1,024 tokens."""
    from tests.chat_families import smollm2
    from turnrl.chat import tool_message
    from turnrl.chat.contract import check_template
    from turnrl.envs.web.corpus import wiki_path
    from turnrl.types import ToolCall

    fam = compare_family
    tasks = fam.tasks("train", 6) + fam.tasks("test", 6)
    episodes = _play(fam, tasks, fam.expert)
    renderer = check_template(smollm2())
    for e in episodes:
        p = e.task.payload
        assert e.result.success and len(p["compare"]) == 4
        assert e.calls[-1] == ToolCall("answer", {"text": p["answer"]})
        opened = [c.arguments["url"] for c in e.calls if c.name == "open"]
        assert opened == [wiki_path(t) for t in p["compare"]]
        values = [o.splitlines()[-1].rsplit(" ", 1)[-1] for o in e.observations if o[0] == "'"]
        assert len(values) == 4 and p["compare"][values.index(max(values, key=int))] == p["answer"]
        messages = [
            {"role": "system", "content": e.instructions},
            {"role": "user", "content": e.first_message},
        ]
        for i, (call, obs) in enumerate(zip(e.calls, e.observations)):
            messages.append({"role": "assistant", "content": renderer.parser.format([call])})
            messages.append(tool_message(obs, call, i))
        n = len(renderer.encode(renderer.render(messages, e.tools, add_generation_prompt=False)))
        assert n > 1024, n
    firsts = {
        split: {t.payload["compare"][0] for t in fam.tasks(split)} for split in ("train", "test")
    }
    assert not firsts["train"] & firsts["test"]  # held out by first entity


def test_noisy_compare_expert_recovers(compare_family):
    fam = compare_family
    tasks = fam.tasks("train", 12)
    episodes = _play(fam, tasks, lambda t: fam.expert(t, seed=3, noise=0.3))
    assert sum(e.result.success for e in episodes) >= 10
    assert sum(len(e.calls) for e in episodes) > 9 * len(tasks)  # mistakes cost turns


def test_compare_option_is_checked():
    from turnrl.envs.web.family import WebFamily

    with pytest.raises(ValueError, match="compare"):
        WebFamily(compare=1)
    with pytest.raises(ValueError, match="compare"):
        WebFamily(compare=9)


def test_frozen_summarizer_writes_an_observation_the_policy_never_sampled(tiny, tmp_path):
    """rollout.summarizer: a frozen model (its own tokenizer and template, here a tiny random
    model saved to a folder) writes the summary. The policy is never asked: every sampled token
    is an action, the summary enters the next segment's prefix with mask 0, and each segment
    still rescores to the behaviour logprobs."""
    tok, policy = tiny
    path = tmp_path / "summarizer"
    tiny_model(tok, seed=1).save_pretrained(path)
    tok.save_pretrained(path)
    frozen = ContextConfig("summarize", threshold=300, summary_max_tokens=24, summarizer=str(path))
    trajs, recorder, renderer = rollout(tiny, frozen)
    served = {tuple(p + g.token_ids): g for p, g in recorder.seen}
    assert sum(len(t.turns) for t in trajs) == len(recorder.seen)  # no summary turns
    for traj in trajs:
        traj.validate()
        assert traj.segment_starts and traj.metrics["summaries"] == len(traj.segment_starts)
        assert not any(m["content"] == SUMMARY_REQUEST for m in traj.messages)
        for start, end in traj.segments():
            ids = traj.token_ids[start:end]
            turns = [u for u in traj.turns if start <= u.action_start < end]
            for u in turns:
                assert (
                    served[tuple(ids[: u.action_end - start])].token_ids
                    == (traj.token_ids[u.action_start : u.action_end])
                )
            rescored = policy.score([ids], temperature=1.0)[0]
            for i, m in enumerate(traj.loss_mask[start:end]):
                if m:
                    assert abs(rescored[i] - traj.behavior_logprobs[start + i]) < 1e-4
            if start > 0:
                head = turns[0].action_start - start
                assert "Summary of your work so far" in renderer.decode(ids[:head])
                assert not any(traj.loss_mask[start : start + head])


def test_summarizer_option_needs_summarize_and_a_model(tmp_path):
    base = ["model.name=tiny", "env.name=guess", f"runs_dir={tmp_path}"]
    with pytest.raises(ConfigError, match="only used with context=summarize"):
        load_config(None, base + ["rollout.summarizer=smollm2"])
    with pytest.raises(ConfigError, match="no such model directory"):
        checked_config(
            None, base + ["rollout.context=summarize", f"rollout.summarizer={tmp_path}/x"]
        )


def test_an_excluded_segmented_episode_counts_once(tiny):
    """An episode that ended in an env error leaves its group whole, however many rows its
    segments make: ``train/excluded_infra`` counts episodes."""
    from turnrl.train.step import train_on_batch

    broken = _seg_traj(0.0, [2, 1, 1], ["x", "y", "z", "w"])
    broken.termination = TerminationReason.ENV_ERROR
    trajs = [broken, _seg_traj(1.0, [2], ["x", "y"]), _seg_traj(0.0, [2], ["x", "z"])]
    batch = collate(trajs, 0)
    assert len(batch.episode_row) == 5  # 3 rows for the broken episode
    cfg = load_config(None, ["model.name=tiny", "env.name=guess"])
    model = tiny_model(tiny[0], seed=0, hidden_size=32, layers=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = train_on_batch(cfg, model, None, optimizer, batch, 0, log=lambda *_: None)
    assert out["train/excluded_infra"] == 1.0
