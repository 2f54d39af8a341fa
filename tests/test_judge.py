"""Judges against a real OpenAI-compatible HTTP stub on loopback: valid, malformed and 500
replies; one call per group; failures mark episodes skipped, never 0."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.openai_stub import OpenAIStub
from turnrl.policy.openai import OpenAIChat, OpenAIError
from turnrl.rewards import Episode, Rubric, apply_results
from turnrl.rewards.judge import (
    BackendChat,
    GroupJudge,
    JudgeError,
    PointwiseJudge,
    parse_score,
    parse_scores,
    transcript,
)
from turnrl.types import TerminationReason, Trajectory


class Stub(OpenAIStub):
    """An OpenAI-compatible /chat/completions server. ``mode`` decides the reply:
    "score" ({"score": 0.8}), "group" (scores read from the prompt: attempt with ANSWER=k
    scores k/10), "malformed" (prose), "http500", "nochoices"."""

    mode = "score"

    def reply(self, body: dict) -> dict | None:
        if self.mode == "http500":
            return None
        prompt = body["messages"][-1]["content"]
        if self.mode == "score":
            content = 'Sure. ```json\n{"score": 0.8}\n```'
        elif self.mode == "group":
            shown = re.findall(r"### Attempt \d+\n.*?ANSWER=(\d)", prompt, re.DOTALL)
            content = json.dumps({"scores": [int(k) / 10 for k in shown]})
        elif self.mode == "malformed":
            content = "I think the agent did quite well overall, maybe 8/10."
        else:
            content = None
        if self.mode == "nochoices":
            return {"choices": []}
        return {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


def chat_for(stub: Stub, **kw) -> OpenAIChat:
    return OpenAIChat("judge-model", stub.url, "sk-test", retries=0, timeout=10, **kw)


def episode(group: str, answer: int) -> Episode:
    traj = Trajectory(
        task_id="t",
        group_id=group,
        prompt_len=0,
        token_ids=[],
        loss_mask=[],
        behavior_logprobs=[],
        policy_versions=[],
        messages=[
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": f"ANSWER={answer}"},
        ],
    )
    return Episode(traj)


RUBRIC = "The answer must be 4."


def test_openai_chat_sends_model_messages_and_key(stub):
    reply = asyncio.run(chat_for(stub).chat([{"role": "user", "content": "hi"}]))
    assert "0.8" in reply
    (req,) = stub.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "judge-model"
    assert req["body"]["messages"] == [{"role": "user", "content": "hi"}]


def test_openai_chat_reads_env_and_rejects_bad_config(stub, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    chat = OpenAIChat(retries=0)
    asyncio.run(chat.chat([{"role": "user", "content": "hi"}]))
    assert stub.requests[-1]["auth"] == "Bearer sk-env"
    assert stub.requests[-1]["body"]["model"] == "env-model"
    monkeypatch.delenv("OPENAI_MODEL")
    with pytest.raises(ValueError, match="model"):
        OpenAIChat(base_url=stub.url)
    with pytest.raises(ValueError, match="base_url"):
        OpenAIChat("m", base_url="ftp://x")


def test_openai_chat_http_errors_raise_after_retries(stub):
    stub.mode = "http500"
    chat = OpenAIChat("m", stub.url, retries=1, backoff_s=0.0, timeout=10)
    with pytest.raises(OpenAIError, match="HTTP 500"):
        asyncio.run(chat.chat([{"role": "user", "content": "hi"}]))
    assert len(stub.requests) == 2  # retried once
    stub.mode = "nochoices"
    with pytest.raises(OpenAIError, match="no choices"):
        asyncio.run(chat_for(stub).chat([{"role": "user", "content": "hi"}]))


def test_pointwise_judge_scores_valid_reply(stub):
    judge = PointwiseJudge(chat_for(stub), RUBRIC)
    (result,) = asyncio.run(Rubric([(judge, 1.0)]).score_group([episode("g", 4)]))
    assert result.reward == pytest.approx(0.8)
    assert result.components["judge"] == pytest.approx(0.8)
    assert result.components["judge/score"] == pytest.approx(0.8)
    assert not result.info["skipped"] and not result.info["judge_skipped"]
    prompt = stub.requests[0]["body"]["messages"][-1]["content"]
    assert RUBRIC in prompt and "ANSWER=4" in prompt and "rules" not in prompt


@pytest.mark.parametrize("mode", ["malformed", "http500"])
def test_pointwise_judge_failure_is_skipped_not_zero(stub, mode):
    stub.mode = mode
    judge = PointwiseJudge(chat_for(stub), RUBRIC)
    rubric = Rubric([(judge, 1.0), (lambda ep: 1.0, 0.0)])
    eps = [episode("g", 4)]
    (result,) = asyncio.run(rubric.score_group(eps))
    assert result.info["skipped"] and result.info["judge_skipped"]
    assert "judge" in result.info["errors"] and "judge" not in result.components
    assert result.components["judge/skipped"] == 1.0
    metrics = apply_results([eps[0].trajectory], [result])
    assert eps[0].trajectory.termination is TerminationReason.ENV_ERROR  # masked by the trainer
    assert metrics["reward/skipped_rate"] == 1.0 and metrics["judge/skipped"] == 1.0


def test_pointwise_judge_retries_then_gives_up(stub):
    stub.mode = "malformed"
    judge = PointwiseJudge(chat_for(stub), RUBRIC, retries=2)
    with pytest.raises(JudgeError, match="not a JSON object"):
        asyncio.run(judge(episode("g", 4)))
    assert len(stub.requests) == 3


def test_group_judge_one_call_per_group_and_scores_map_back(stub):
    stub.mode = "group"
    judge = GroupJudge(chat_for(stub), RUBRIC)
    eps = [episode("g1", a) for a in (1, 2, 3, 4)] + [episode("g2", a) for a in (9, 5)]
    results = asyncio.run(Rubric([(judge, 1.0)]).score_batch(eps))
    assert len(stub.requests) == 2  # one call per group
    assert [r.reward for r in results] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.9, 0.5])
    order = judge.order(eps[:4])
    assert order != [0, 1, 2, 3]  # shown shuffled (position bias) yet mapped back above
    assert [results[i].info.get("errors") for i in range(6)] == [None] * 6


@pytest.mark.parametrize("mode", ["malformed", "http500"])
def test_group_judge_failure_skips_whole_group(stub, mode):
    stub.mode = mode
    judge = GroupJudge(chat_for(stub), RUBRIC)
    eps = [episode("g1", a) for a in (1, 2, 3)]
    results = asyncio.run(Rubric([(judge, 1.0)]).score_batch(eps))
    assert len(stub.requests) == 1
    assert all(r.info["skipped"] and r.info["judge_skipped"] for r in results)
    metrics = apply_results([e.trajectory for e in eps], results)
    assert metrics["judge/skipped"] == 3.0
    assert all(e.trajectory.termination is TerminationReason.ENV_ERROR for e in eps)


def test_group_judge_wrong_count_is_skipped():
    class Chat:
        async def chat(self, messages):
            return '{"scores": [0.5]}'

    results = asyncio.run(
        Rubric([(GroupJudge(Chat(), RUBRIC), 1.0)]).score_group([episode("g", 1), episode("g", 2)])
    )
    assert all(r.info["judge_skipped"] for r in results)


def test_parse_score_and_scores():
    assert parse_score('{"score": 1}') == 1.0
    assert parse_score('blah ```json\n{"score": 0.25}\n``` blah') == 0.25
    for bad in ['{"score": 1.5}', '{"score": true}', '{"scores": 1}', "0.5", '{"score": "0.5"}']:
        with pytest.raises(JudgeError):
            parse_score(bad)
    assert parse_scores('{"scores": [0, 0.5, 1]}', 3) == [0.0, 0.5, 1.0]
    with pytest.raises(JudgeError):
        parse_scores('{"scores": [0, 0.5]}', 3)
    with pytest.raises(JudgeError):
        parse_scores('{"scores": [0, 2, 1]}', 3)


def test_judge_timeout_is_judge_error():
    class Slow:
        async def chat(self, messages):
            await asyncio.sleep(5)
            return '{"score": 1}'

    with pytest.raises(JudgeError, match="timed out"):
        asyncio.run(PointwiseJudge(Slow(), RUBRIC, timeout=0.05)(episode("g", 4)))


def test_transcript_keeps_head_and_tail():
    ep = episode("g", 4)
    ep.trajectory.messages += [{"role": "tool", "content": "x" * 500} for _ in range(20)]
    ep.trajectory.messages.append({"role": "assistant", "content": "FINAL"})
    text = transcript(ep, max_chars=1500)
    assert len(text) <= 1500 + 60
    assert text.startswith("[user] What is 2 + 2?") and text.endswith("FINAL")
    assert "messages dropped" in text


class FakeTokenizer:
    """Just enough tokenizer for BackendChat: a ChatML-ish template over byte ids."""

    eos_token_id = 0
    eos_token = "<eos>"

    def get_vocab(self):
        return {"<|im_end|>": 1, "<eos>": 0}

    def convert_tokens_to_ids(self, token):
        return self.get_vocab()[token]

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [b + 2 for b in text.encode()]}

    def decode(self, ids, skip_special_tokens):
        return bytes(i - 2 for i in ids if i >= 2).decode()


class FakePolicy:
    version = 0

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []

    def generate_batch(self, prompts, params, seeds=None):
        from turnrl.policy.base import Generation

        self.prompts += prompts
        ids = [b + 2 for b in b'{"score": 0.6}'] + [1]
        return [Generation(ids, [0.0] * len(ids), True, 0) for _ in prompts]


def test_backend_chat_runs_a_judge_on_a_local_policy():
    policy, tok = FakePolicy(), FakeTokenizer()
    chat = BackendChat(policy, tok)
    assert 1 in chat.params.stop_token_ids and 0 in chat.params.stop_token_ids
    result = asyncio.run(PointwiseJudge(chat, RUBRIC)(episode("g", 4)))
    assert result.reward == pytest.approx(0.6)
    prompt = tok.decode(policy.prompts[0], True)
    assert prompt.endswith("<assistant>") and RUBRIC in prompt
