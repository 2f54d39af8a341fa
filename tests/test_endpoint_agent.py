"""An external model behind an OpenAI-compatible endpoint as the agent, against a stub server
on loopback that plays the guess game by bisection: native ``tool_calls`` replies
(``content: null``) and text tool calls both finish the task through ``turnrl eval
--endpoint``; unset sampling parameters are not sent; n>1 is checked; timeouts are reported
as timeouts; bad judge/user endpoints in env options are config errors naming the field."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from typer.testing import CliRunner

from tests.openai_stub import OpenAIStub
from turnrl.cli import app
from turnrl.envs.registry import make_family
from turnrl.policy.openai import OpenAIChat, OpenAIError, OpenAITimeout
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits
from turnrl.rollout.endpoint_agent import run_endpoint_episode
from turnrl.types import TerminationReason, ToolCall

GUESS = ["model.name=tiny", "env.name=guess", "env.options={low: 1, high: 16}"]


def bisect(messages: list[dict]) -> int:
    """The next guess, read from the conversation so far (either reply style)."""
    low, high = map(int, re.findall(r"\d+", messages[1]["content"]))
    guess = None
    for m in messages[2:]:
        if m["role"] == "assistant":
            if m.get("tool_calls"):
                guess = json.loads(m["tool_calls"][0]["function"]["arguments"])["number"]
            else:
                guess = json.loads(re.search(r"<tool_call>(.*)</tool_call>", m["content"])[1])[
                    "arguments"
                ]["number"]
        elif "higher" in m["content"]:
            low = guess + 1
        elif "lower" in m["content"]:
            high = guess - 1
    return (low + high) // 2


class Stub(OpenAIStub):
    """``mode``: "native" (tool_calls, content null), "text" (<tool_call> in content),
    "user" (a simulated customer's line), "slow" (replies after 1 s), "n" (as many
    choices as asked), "n_ignored" (always one choice)."""

    mode = "user"

    def reply(self, body: dict) -> dict:
        if self.mode == "slow":
            time.sleep(1.0)
        message: dict = {"role": "assistant", "content": "Sure, happy to help."}
        if self.mode == "native":
            n = bisect(body["messages"])
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": f"call_{len(body['messages'])}",
                    "type": "function",
                    "function": {"name": "guess", "arguments": json.dumps({"number": n})},
                }
            ]
        elif self.mode == "text":
            n = bisect(body["messages"])
            call = json.dumps({"name": "guess", "arguments": {"number": n}})
            message["content"] = f"Let me bisect.\n<tool_call>{call}</tool_call>"
        count = body.get("n", 1) if self.mode == "n" else 1
        return {"choices": [{"message": message, "finish_reason": "stop"}] * count}


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


@pytest.mark.parametrize("mode", ["native", "text"])
def test_endpoint_agent_solves_guess_through_the_cli(stub, mode, tmp_path):
    stub.mode = mode
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(
        app,
        ["eval", *GUESS, "--endpoint", stub.url, "--model", "stub", "--tasks", "3"]
        + ["--no-baselines", "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    results = json.loads(out.read_text())
    assert results["success"] == 1.0 and results["episodes"] == 3
    assert results["turns"] > 1 and results["endpoint_errors"] == 0
    body = stub.bodies[-1]
    assert body["model"] == "stub"
    assert [t["function"]["name"] for t in body["tools"]] == ["guess", "give_up"]
    assert "temperature" not in body and "max_tokens" not in body and "n" not in body
    answers = [m for m in body["messages"][2:] if m["role"] != "assistant"]
    if mode == "native":  # each call answered by its id
        assert all(m["role"] == "tool" and m["tool_call_id"].startswith("call_") for m in answers)
    else:
        assert all(m["role"] == "user" and "<tool_response>" in m["content"] for m in answers)


def test_configured_sampling_parameters_are_sent(stub):
    chat = OpenAIChat("m", stub.url, timeout=10, retries=0, temperature=0.3, max_tokens=40)
    asyncio.run(chat.chat([{"role": "user", "content": "hi"}]))
    assert stub.bodies[-1]["temperature"] == 0.3 and stub.bodies[-1]["max_tokens"] == 40


def test_n_choices_are_honoured_or_refused(stub):
    chat = OpenAIChat("m", stub.url, timeout=10, retries=0)
    stub.mode = "n"
    assert len(asyncio.run(chat.complete([{"role": "user", "content": "hi"}], n=3))) == 3
    assert stub.bodies[-1]["n"] == 3
    stub.mode = "n_ignored"
    with pytest.raises(OpenAIError, match="n=3 choices and got 1"):
        asyncio.run(chat.complete([{"role": "user", "content": "hi"}], n=3))


def test_endpoint_timeout_is_reported_as_a_timeout(stub):
    stub.mode = "slow"
    family = make_family("guess", {"low": 1, "high": 16})
    (task,) = family.tasks("test", 1)
    chat = OpenAIChat("m", stub.url, timeout=0.3, retries=0)
    traj = asyncio.run(
        run_endpoint_episode(family.make_env(), EpisodeRequest(task, "g", 0), chat, RolloutLimits())
    )
    assert traj.termination is TerminationReason.TIMEOUT
    assert "timed out" in traj.error and "0.3s" in traj.error
    r = CliRunner().invoke(
        app,
        ["eval", *GUESS, "--endpoint", stub.url, "--model", "m", "--tasks", "1"]
        + ["--timeout", "0.3", "--no-baselines"],
    )
    assert r.exit_code == 1 and "timed out: no reply within 0.3s" in " ".join(r.output.split())


def test_bad_endpoint_options_are_config_errors_naming_the_field():
    bad = {"base_url": "ftp://x", "model": "m", "key": "sk"}
    with pytest.raises(ValueError) as e:
        make_family("user", {"user": "model", "user_backend": bad})
    assert "user_backend.base_url: must start with http://" in str(e.value)
    assert "user_backend.key: Extra inputs are not permitted" in str(e.value)
    with pytest.raises(ValueError, match="judge.base_url: Field required"):
        make_family("web", {"judge": {"model": "m"}, "n_entities": 20})
    with pytest.raises(ValueError, match="judge: expected an endpoint mapping"):
        make_family("web", {"judge": "http://localhost:8000/v1", "n_entities": 20})
    r = CliRunner().invoke(app, ["eval", *GUESS, "--endpoint", "ftp://x", "--model", "m"])
    assert r.exit_code == 2 and "base_url must start with http://" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["eval", "runs/x", "--model", "m"])
    assert r.exit_code == 2 and "go with --endpoint" in r.output


def test_simulated_user_endpoint_from_yaml_options(stub, monkeypatch):
    stub.mode = "user"
    monkeypatch.setenv("MY_KEY", "sk-user")
    family = make_family(
        "user",
        {
            "user": "model",
            "user_backend": {"base_url": stub.url, "model": "customer", "api_key_env": "MY_KEY"},
        },
    )
    (task,) = family.tasks("test", 1)

    async def talk():
        env = family.make_env()
        await env.reset(task)
        return await env.step(ToolCall("send_message", {"text": "How can I help?"}))

    step = asyncio.run(talk())
    assert "happy to help" in step.observation
    assert stub.bodies[-1]["model"] == "customer"
    assert stub.bodies[-1]["messages"][-1] == {"role": "user", "content": "How can I help?"}
    assert isinstance(family.options.user_backend, OpenAIChat)
    assert family.options.user_backend.api_key == "sk-user"


def test_timeout_error_class_is_an_openai_error():
    assert issubclass(OpenAITimeout, OpenAIError)
