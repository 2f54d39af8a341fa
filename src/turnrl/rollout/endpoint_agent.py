"""An external model behind an OpenAI-compatible endpoint as the agent, for evaluation.

The token-in/token-out loop (:mod:`turnrl.rollout.agent_loop`) needs our token ids; an
endpoint has its own tokenizer and returns messages. So this runner works on messages: the
same env contract (``reset``/``step``/``grade``/``close``), the env's tools sent as
``tools=`` (OpenAI function schemas), and the same endings and metrics, so
evaluation (:mod:`turnrl.run.evaluate`) scores them with the same rubric and summarises them
like any others. They carry no token ids (nothing here can be trained).

Two reply styles work: native ``tool_calls`` (``content`` may be null), answered with one
``tool`` message per call id; and tool calls written as text in ``content`` (Hermes
``<tool_call>`` JSON by default), answered with a ``user`` message holding the
``<tool_response>`` blocks, since an API ``tool`` message must name a call id.

An endpoint failure ends the episode as ENV_ERROR with the endpoint's message; a request
that times out ends it as TIMEOUT, its error saying so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from turnrl.chat import HermesToolCallParser, ParseError, ToolCallParser
from turnrl.envs.base import ToolEnv
from turnrl.policy.openai import OpenAIChat, OpenAIError, OpenAITimeout
from turnrl.rollout.agent_loop import EpisodeLog, EpisodeRequest, RolloutLimits, in_order
from turnrl.types import TerminationReason, ToolCall, Trajectory, Turn

CHARS_PER_TOKEN = 4  # observations are clipped by characters: there is no tokenizer of ours


def clip_text(text: str, max_tokens: int) -> str:
    cap = max_tokens * CHARS_PER_TOKEN
    if len(text) <= cap:
        return text
    return f"{text[:cap]}\n[... {len(text) - cap} characters clipped ...]"


def native_call(raw: dict[str, Any]) -> ToolCall:
    """A ``tool_calls`` entry as a ToolCall; arguments that are not a JSON object raise
    ParseError (shown to the model, as for text calls)."""
    fn = raw["function"]
    name, args = fn.get("name"), fn.get("arguments") or {}
    if not isinstance(name, str) or not name:
        raise ParseError("tool call without a function name")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ParseError(f"tool call arguments are not valid JSON ({e.msg})") from None
    if not isinstance(args, dict):
        raise ParseError("tool call arguments must be a JSON object")
    return ToolCall(name, args)


async def run_endpoint_episode(
    env: ToolEnv,
    request: EpisodeRequest,
    chat: OpenAIChat,
    limits: RolloutLimits,
    parser: ToolCallParser | None = None,
) -> Trajectory:
    """Play one episode with the endpoint as the agent and grade it. Always returns a
    Trajectory; always closes the env."""
    parser = parser or HermesToolCallParser()
    log = EpisodeLog(limits.episode_timeout_s)
    remaining = log.remaining
    turns: list[Turn] = []
    messages: list[dict[str, Any]] = []

    async def run_call(call: ToolCall, turn: Turn) -> tuple[str, bool, bool]:
        """(observation, terminated, truncated) of one call."""
        step = await log.step(env, call, turn)
        return step.observation, step.terminated, step.truncated

    try:
        try:
            messages = await log.reset(env, request.task)
            tools = env.tool_schemas()
            for _ in range(limits.max_turns):
                (reply,) = await asyncio.wait_for(chat.reply(messages, tools=tools), remaining())
                turn = Turn(0, 0, 0, 0, [], -1)
                turns.append(turn)
                terminated = stop = False
                if reply.tool_calls:  # native: one tool message per call id
                    messages.append(
                        {
                            "role": "assistant",
                            "content": reply.text or None,
                            "tool_calls": reply.tool_calls,
                        }
                    )
                    for raw in reply.tool_calls:
                        if terminated or stop:
                            text = "not run: an earlier call in this turn ended the episode"
                        else:
                            try:
                                call = native_call(raw)
                            except ParseError as e:
                                log.parse_errors += 1
                                turn.malformed, turn.parse_error = True, str(e)
                                text = f"Error: {e}"
                            else:
                                turn.tool_calls.append(call)
                                text, terminated, stop = await run_call(call, turn)
                        messages.append(
                            {
                                "role": "tool",
                                "tool_call_id": raw.get("id", ""),
                                "content": clip_text(text, limits.max_obs_tokens),
                            }
                        )
                else:  # tool calls written as text
                    messages.append({"role": "assistant", "content": reply.text})
                    observations = []
                    try:
                        calls = parser.parse(reply.text)
                    except ParseError as e:
                        log.parse_errors += 1
                        turn.malformed, turn.parse_error = True, str(e)
                        turn.anchor = ("parse_error",)
                        observations.append(f"Error: {e}")
                    else:
                        turn.tool_calls = calls
                        for call in calls:
                            text, terminated, stop = await run_call(call, turn)
                            observations.append(text)
                            if terminated or stop:
                                break
                    if not terminated:
                        messages.append(
                            {
                                "role": "user",
                                "content": "\n".join(
                                    "<tool_response>\n"
                                    f"{clip_text(o, limits.max_obs_tokens)}\n</tool_response>"
                                    for o in observations
                                ),
                            }
                        )
                if log.turn_ends_episode(env, turn, terminated, limits.max_parse_errors):
                    break
            await log.grade(env)
        except asyncio.TimeoutError:
            log.timed_out()
        except OpenAITimeout as e:
            log.ended(TerminationReason.TIMEOUT, f"endpoint: {e}")
        except OpenAIError as e:
            log.ended(TerminationReason.ENV_ERROR, f"endpoint: {e}")
        except Exception as e:  # a crashing env ends its episode, never the evaluation
            log.crashed(e)
    finally:
        await log.close(env)

    metrics = {"turns": float(len(turns)), "parse_errors": float(log.parse_errors), **log.times()}
    return log.trajectory(request, turns, messages, metrics)


async def collect_endpoint(
    requests: list[EpisodeRequest],
    make_env: Callable[[], ToolEnv],
    chat: OpenAIChat,
    limits: RolloutLimits,
    max_concurrency: int = 8,
) -> list[Trajectory]:
    """All episodes, at most ``max_concurrency`` requests in flight, in request order."""

    async def play(req: EpisodeRequest) -> Trajectory:
        return await run_endpoint_episode(make_env(), req, chat, limits)

    return await in_order(requests, play, max_concurrency)
