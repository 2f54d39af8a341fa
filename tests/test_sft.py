"""SFT warm start: demonstration rendering, and the tiny lab's value mask, weighted value loss
and copy rows (turnrl.tiny.sft)."""

from __future__ import annotations

import pytest
import torch

from turnrl.algo.losses import sequence_logprobs
from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.scripted import ScriptedEpisode
from turnrl.tiny.model import tiny_model, tool_call_tokens, train_tokenizer
from turnrl.tiny.sft import TinyTerms, value_mask
from turnrl.train import sft
from turnrl.train.sft import batch_logits, render_demo, sft_train
from turnrl.types import Task, ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace old with new.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "old": {}, "new": {}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
EDIT = ToolCall("edit_file", {"path": "stats.py", "old": " -", "new": " +"})


def renderer() -> ChatRenderer:
    parser = HermesToolCallParser()
    texts = [parser.format([EDIT]), "Files:\nstats.py", "    return a - b"] * 20
    tok = train_tokenizer(texts, vocab_size=400, extra_tokens=tool_call_tokens(TOOLS))
    return ChatRenderer(tok, parser, "<|im_end|>")


def episode() -> ScriptedEpisode:
    return ScriptedEpisode(
        task=Task(id="t", env="code", payload={}),
        instructions="You fix bugs. A long constant system prompt.",
        first_message="Files:\nstats.py",
        tools=TOOLS,
        calls=[EDIT, ToolCall("submit", {})],
        observations=["Edited stats.py at line 3.", "submitted"],
        terminated=True,
    )


def test_tiny_template_leaves_out_the_system_turn_and_the_tool_list():
    r = renderer()
    text = r.render(
        [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "hi"}],
        TOOLS,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_value_mask_marks_exactly_the_argument_values():
    r = renderer()
    demo = render_demo(episode(), r, TOOLS, max_obs_tokens=64, max_tokens=512)
    values = value_mask(demo, episode().calls, r)
    # Runs of value tokens: path, old and new, each sharing weight 1; nothing of the frame,
    # nothing for submit.
    runs: list[tuple[list[str], list[float]]] = []
    for t, v, prev in zip(demo.token_ids, values, [0.0] + values):
        if v and not prev:
            runs.append(([], []))
        if v:
            runs[-1][0].append(r.tokenizer.decode([t]))
            runs[-1][1].append(v)
    assert ["".join(tokens) for tokens, _ in runs] == ["stats.py", " -", " +"]
    assert len(runs[0][0]) > 1  # the path is several tokens, each weighing 1/n
    for _, shares in runs:
        assert shares == pytest.approx([1 / len(shares)] * len(shares))
    assert all(m for m, v in zip(demo.loss_mask, values) if v)  # values are actions
    first_action = demo.loss_mask.index(1)
    assert r.tokenizer.decode(demo.token_ids[:first_action]) == r.render(
        [{"role": "user", "content": "Files:\nstats.py"}], TOOLS, add_generation_prompt=True
    )


def test_sft_loss_adds_the_weighted_mean_over_argument_values():
    """loss = mean over action tokens + w * mean over value tokens, on the model's own log-probs."""
    r = renderer()
    demo = render_demo(episode(), r, TOOLS, max_obs_tokens=64, max_tokens=512)
    model = tiny_model(r.tokenizer, hidden_size=32, layers=1)
    ids = torch.tensor([demo.token_ids])
    with torch.no_grad():
        lp = sequence_logprobs(model(input_ids=ids).logits, ids)[0]
    shares = value_mask(demo, episode().calls, r)
    m, v = torch.tensor(demo.loss_mask).float(), torch.tensor(shares).float()
    actions, values = -(lp * m).sum() / m.sum(), -(lp * v).sum() / v.sum()
    assert 0 < v.sum() < m.sum()  # the values of one edit call; its frame and submit are not
    losses = sft_train(
        model,
        [demo],
        epochs=1,
        lr=1e-3,
        batch_size=1,
        pad_id=0,
        seed=0,
        extra=TinyTerms([shares], value_weight=2.0, copy_rows=0),
    )
    assert losses[0] == pytest.approx((actions + 2.0 * values).item(), rel=1e-4)


def test_demo_tokenizer_learns_every_episodes_tools():
    """Episodes may show different tool lists (the tools env narrows them per task): every
    tool's name and argument frames become single tokens, not only the first episode's."""
    from dataclasses import replace

    from turnrl.tiny.warm_start import env_tokenizer

    first = replace(episode(), tools=TOOLS[1:], calls=[ToolCall("submit", {})])
    second = replace(episode(), tools=TOOLS[:1])
    tok = env_tokenizer([first, second], vocab_size=400)
    for token in ("edit_file", '","old":"', "submit"):
        assert tok.convert_tokens_to_ids(token) != tok.unk_token_id, token
        assert len(tok.tokenize(token)) == 1, token


def test_numeric_arguments_get_their_frame_as_one_token():
    """``{"event_id":2}`` has no quote before the value: its frame is ``"event_id":``."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "move_event",
                "parameters": {
                    "type": "object",
                    "properties": {"day": {"type": "string"}, "event_id": {"type": "integer"}},
                },
            },
        }
    ]
    parser = HermesToolCallParser()
    calls = [ToolCall("move_event", {"event_id": 2}), ToolCall("move_event", {"day": "mon"})]
    calls.append(ToolCall("move_event", {"day": "mon", "event_id": 7}))
    texts = [parser.format([c]) for c in calls] * 20
    tok = train_tokenizer(texts, vocab_size=300, extra_tokens=tool_call_tokens(tools))
    assert '"event_id":' in tok.tokenize(parser.format([calls[0]]))
    assert '","event_id":' in tok.tokenize(parser.format([calls[2]]))
    assert '"day":"' in tok.tokenize(parser.format([calls[1]]))


@pytest.mark.parametrize("shared", [60, 0])
def test_batch_logits_takes_the_cheaper_exact_forward(shared, monkeypatch):
    """Demos sharing a long prefix run it once; demos of varied lengths with little in common
    are packed. Either way the logits are the plain forward's."""
    tok = renderer().tokenizer
    model = tiny_model(tok, hidden_size=32, layers=1)
    gen = torch.Generator().manual_seed(0)
    ids_of = lambda n: torch.randint(10, len(tok), (n,), generator=gen).tolist()  # noqa: E731
    head = ids_of(shared)
    rows = [head + ids_of(n) for n in (40, 3, 25, 9)]
    ids = torch.zeros((4, max(map(len, rows))), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, : len(r)], attn[b, : len(r)] = torch.tensor(r), 1
    used = []
    for name in ("shared_prefix_logits", "packed_logits"):
        real = getattr(sft, name)
        monkeypatch.setattr(sft, name, lambda *a, _r=real, _n=name: used.append(_n) or _r(*a))
    with torch.no_grad():
        got = batch_logits(model, ids, attn)
        want = model(input_ids=ids, attention_mask=attn).logits
    assert used == (["shared_prefix_logits"] if shared else ["packed_logits"])
    assert torch.allclose(got[attn.bool()], want[attn.bool()], atol=1e-5)


def test_copy_rows_join_the_step_but_not_the_reported_loss():
    """With copy rows the step also trains on them (the weights move differently), while the
    loss it reports stays the demonstrations' own."""
    r = renderer()
    demo = render_demo(episode(), r, TOOLS, max_obs_tokens=64, max_tokens=512)
    runs = {}
    for rows in (0, 4):
        model = tiny_model(r.tokenizer, hidden_size=32, layers=1)
        losses = sft_train(
            model,
            [demo],
            epochs=1,
            lr=1e-3,
            batch_size=1,
            pad_id=0,
            seed=0,
            extra=TinyTerms([[0.0] * len(demo.token_ids)], value_weight=0.0, copy_rows=rows),
        )
        runs[rows] = (losses, model.model.embed_tokens.weight.detach().clone())
    assert runs[0][0] == pytest.approx(runs[4][0], rel=1e-6)
    assert not torch.equal(runs[0][1], runs[4][1])
