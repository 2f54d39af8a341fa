"""The multi-turn agent loop: token-in, token-out episodes run concurrently.

Each episode keeps one growing list of token ids. Sampled ids are appended exactly as the
sampler returned them (loss_mask 1); each observation is appended as the token delta of the
chat template (loss_mask 0). Nothing is ever decoded and re-encoded, so the trainer scores the
very tokens that were sampled.

Episode endings (see ``TerminationReason``): the env says the task is done (DONE); the turn cap
or the env's own step limit (MAX_TURNS: a step result with ``truncated``); the token budget
(CONTEXT_LIMIT: the next generation or observation would not fit, and it is not appended); the
wall clock (TIMEOUT); an env exception (ENV_ERROR, message kept); too many malformed tool calls
(PARSE_ERRORS). Errors never escape an episode.

A reply with no tool call at all is, for an env that declares ``final_answer``, its final
answer: it goes to the env's ``answer(text)``, and the episode ends there (DONE) when the env
says terminated (else its observation is shown and the episode goes on). For other envs it is
a format error shown to the model, like a malformed call.

Env text is encoded with control-token text kept plain (see ``ChatRenderer.observation_ids``),
so no tool result can forge a turn boundary.

Long episodes: ``RolloutLimits.context`` picks a strategy (:mod:`turnrl.rollout.context`).
Before each turn, a context past its threshold is rewritten (old tool results replaced by a
placeholder, or a summary sampled from the policy) and the episode continues in a new
*segment* that opens with the rewritten context (mask 0). The budget and ``CONTEXT_LIMIT``
apply to the current segment's tokens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from turnrl.chat import ChatRenderer, NoToolCall, ParseError, tool_message
from turnrl.envs.base import StepResult, ToolEnv
from turnrl.policy.base import SamplingParams
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.context import (
    PLACEHOLDER,
    SUMMARY_HEADER,
    SUMMARY_REQUEST,
    ContextConfig,
    drop_old_observations,
    summary_context,
)
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall, Trajectory, Turn, is_hack

MALFORMED = ("unknown_tool", "bad_arguments")


@dataclass(frozen=True)
class RolloutLimits:
    max_turns: int = 10
    max_context_tokens: int = 2048
    max_new_tokens: int = 128  # per turn
    max_obs_tokens: int = 512  # per tool result; longer ones are clipped with a marker
    max_parse_errors: int = 3
    episode_timeout_s: float = 300.0
    context: ContextConfig = ContextConfig()


@dataclass
class EpisodeRequest:
    task: Task
    group_id: str
    seed: int


class EpisodeLog:
    """The bookkeeping both agent loops share (this one and the endpoint's,
    :mod:`turnrl.rollout.endpoint_agent`): the episode's wall clock, what the env reported of
    each turn (its steps' rewards, the state's anchor and measures, malformed calls), how the
    episode ended, the env's grade, closing the env, and the Trajectory it becomes."""

    def __init__(self, timeout_s: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.termination = TerminationReason.MAX_TURNS
        self.error: str | None = None
        self.result: RewardResult | None = None
        self.parse_errors = 0  # malformed actions and calls the env rejected as malformed
        self.env_time = 0.0  # seconds inside env.step
        self.reset_measures: dict[str, float] = {}

    def remaining(self) -> float:
        """Seconds left on the episode's clock; raises TimeoutError once it ran out."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise asyncio.TimeoutError
        return left

    async def reset(self, env: ToolEnv, task: Task) -> list[dict[str, Any]]:
        """Start the episode under the clock and measure where it starts; the opening
        messages (the env's instructions, then the task statement)."""
        first = await asyncio.wait_for(env.reset(task), self.remaining())
        self.measure(env)
        return [
            {"role": "system", "content": env.instructions},
            {"role": "user", "content": first},
        ]

    async def step(self, env: ToolEnv, call: ToolCall, turn: Turn) -> StepResult:
        """Run one tool call under the clock and record it on ``turn``: its reward, the state
        it left (the anchor), and whether the env rejected it as malformed."""
        t0 = time.monotonic()
        step = await asyncio.wait_for(env.step(call), self.remaining())
        self.env_time += time.monotonic() - t0
        turn.env_reward += step.reward
        turn.anchor = step.info.get("anchor", step.observation)
        if step.info.get("error") in MALFORMED:
            self.parse_errors += 1
            turn.malformed = True
        return step

    def measure(self, env: ToolEnv, turn: Turn | None = None) -> None:
        """What the env measures of its state, after reset (no ``turn``) or after ``turn``."""
        measures = {k: float(v) for k, v in env.measure().items()}
        if turn is None:
            self.reset_measures = measures
        else:
            turn.measures = measures

    def turn_ends_episode(
        self,
        env: ToolEnv,
        turn: Turn,
        terminated: bool,
        max_parse_errors: int,
        truncated: bool = False,
    ) -> bool:
        """After a turn: measure the env's state, and whether the episode ends here (the env
        said the task is done, the env's own step limit cut it, or too many malformed actions),
        recording why."""
        self.measure(env, turn)
        if terminated:
            self.termination = TerminationReason.DONE
        elif truncated:  # the env's own step limit: a truncation, as the turn cap is
            self.termination = TerminationReason.MAX_TURNS
        elif self.parse_errors >= max_parse_errors:
            self.termination = TerminationReason.PARSE_ERRORS
        else:
            return False
        return True

    async def grade(self, env: ToolEnv) -> None:
        """The env's grade of the finished episode (at least a second, even on a spent clock)."""
        self.result = await asyncio.wait_for(env.grade(), max(self.remaining(), 1.0))

    def ended(self, termination: TerminationReason, error: str) -> None:
        self.termination, self.error = termination, error

    def timed_out(self, message: str = "") -> None:
        self.ended(TerminationReason.TIMEOUT, message or "episode wall-clock limit reached")

    def crashed(self, e: Exception) -> None:
        """A crashing env ends its episode, never the run."""
        self.ended(TerminationReason.ENV_ERROR, f"{type(e).__name__}: {e}")

    async def close(self, env: ToolEnv) -> None:
        try:
            await asyncio.wait_for(env.close(), 30)
        except Exception as e:
            self.error = self.error or f"close failed: {type(e).__name__}: {e}"

    def times(self) -> dict[str, float]:
        return {"time/episode_s": time.monotonic() - self.start, "time/env_s": self.env_time}

    def trajectory(
        self,
        request: EpisodeRequest,
        turns: list[Turn],
        messages: list[dict[str, Any]],
        metrics: dict[str, float],
        **tokens: Any,
    ) -> Trajectory:
        """The episode as the trainer sees it: ``tokens`` are the Trajectory's token fields
        (``prompt_len``, ``token_ids``, ``loss_mask``, ... ; an endpoint's episode has none);
        the grade's metrics join ``metrics``."""
        result = self.result
        if result is not None:
            metrics.update(grade_metrics(result))
        return Trajectory(
            task_id=request.task.id,
            group_id=request.group_id,
            prompt_len=tokens.pop("prompt_len", 0),
            token_ids=tokens.pop("token_ids", []),
            loss_mask=tokens.pop("loss_mask", []),
            behavior_logprobs=tokens.pop("behavior_logprobs", []),
            policy_versions=tokens.pop("policy_versions", []),
            turns=turns,
            reward=result.reward if result is not None else 0.0,
            termination=self.termination,
            error=self.error,
            metrics=metrics,
            flags=list(result.flags) if result is not None else [],
            messages=messages,
            graded=result,
            reset_measures=self.reset_measures,
            **tokens,
        )


@dataclass
class _Episode:
    """Mutable token buffers of one episode while it runs; ``starts`` are the offsets where a
    rewritten context (a new segment) begins, and ``parts`` is the current segment cut into
    the pieces it was appended in, each with whether it is a tool result (droppable)."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    parts: list[tuple[list[int], bool]] = field(default_factory=list)

    @property
    def context(self) -> list[int]:
        """The ids the policy sees now: the current segment."""
        return self.ids[self.starts[-1] :] if self.starts else self.ids

    def start_segment(self, parts: list[tuple[list[int], bool]]) -> None:
        """Open a new segment whose prefix (mask 0) is ``parts`` joined."""
        self.starts.append(len(self.ids))
        self.append([i for ids, _ in parts for i in ids])
        self.parts = list(parts)

    def drop_empty_segment(self, turns: list[Turn]) -> None:
        """A segment opened just before the episode ended (a timeout before its first
        generation) trains nothing: remove it, so every segment holds an action."""
        if self.starts and not any(t.action_start >= self.starts[-1] for t in turns):
            cut = self.starts.pop()
            del self.ids[cut:], self.mask[cut:], self.logprobs[cut:], self.versions[cut:]

    def append(
        self,
        ids: list[int],
        logprobs: list[float] | None = None,
        version: int = -1,
        tool_result: bool = False,
    ) -> None:
        self.parts.append((list(ids), tool_result))
        self.ids += ids
        if logprobs is None:
            self.mask += [0] * len(ids)
            self.logprobs += [0.0] * len(ids)
            self.versions += [-1] * len(ids)
        else:
            self.mask += [1] * len(ids)
            self.logprobs += logprobs
            self.versions += [version] * len(ids)


def clip_observation(text: str, renderer: ChatRenderer, max_tokens: int) -> str:
    """``text`` cut to ``max_tokens`` tokens with a visible marker. The cut never splits a
    character: a token boundary inside a multi-byte character moves back to the character."""
    ids = renderer.env_ids(text)
    if len(ids) <= max_tokens:
        return text
    keep = max_tokens
    kept = renderer.decode(ids[:keep])
    while keep > 0 and not text.startswith(kept):  # a partial character decodes as U+FFFD
        keep -= 1
        kept = renderer.decode(ids[:keep])
    return f"{kept}\n[... {len(ids) - keep} tokens clipped ...]"


async def run_episode(
    env: ToolEnv,
    request: EpisodeRequest,
    renderer: ChatRenderer,
    batcher: GenerationBatcher,
    limits: RolloutLimits,
) -> Trajectory:
    """Play one episode and grade it. Always returns a Trajectory; always closes the env."""
    log = EpisodeLog(limits.episode_timeout_s)
    remaining = log.remaining
    ep = _Episode()
    turns: list[Turn] = []
    messages: list[dict[str, Any]] = []
    prompt_len = 0
    summaries = 0
    summary_time = 0.0

    batcher.episode_started()
    try:
        try:
            messages = await log.reset(env, request.task)
            ep.append(renderer.prompt_ids(messages, env.tool_schemas()))
            prompt_len = len(ep.ids)
            asked = False  # the last observation asked for a summary
            for k in range(limits.max_turns):
                if asked:
                    summaries += 1
                    remaining()
                    t0 = time.monotonic()
                    await _summarize(
                        ep, messages, turns, env, renderer, batcher, limits,
                        request.seed * 1000 + 500 + k,
                    )  # fmt: skip
                    summary_time += time.monotonic() - t0
                elif limits.context.due(len(ep.context)):
                    _drop_observations(ep, renderer, limits.context.keep_observations)
                budget = limits.max_context_tokens - len(ep.context)
                if budget <= 0:
                    log.termination = TerminationReason.CONTEXT_LIMIT
                    break
                remaining()
                gen = await batcher.generate(
                    ep.context, min(limits.max_new_tokens, budget), request.seed * 1000 + k
                )
                remaining()
                a_start = len(ep.ids)
                ep.append(gen.token_ids, gen.logprobs, gen.policy_version)
                a_end = len(ep.ids)
                action = renderer.action_text(gen.token_ids)
                messages.append({"role": "assistant", "content": action})
                turn = Turn(a_start, a_end, a_end, a_end, list(gen.logprobs), gen.policy_version)
                turns.append(turn)
                if not gen.stopped:
                    # Cut at max_new_tokens: close the turn as the template would. The model
                    # did not sample this token, so it carries no gradient.
                    if len(ep.context) >= limits.max_context_tokens:
                        log.termination = TerminationReason.CONTEXT_LIMIT
                        break
                    ep.append([renderer.turn_end_id])

                observations, terminated, truncated, calls = [], False, False, []
                try:
                    calls = renderer.parser.parse(action)
                except ParseError as e:
                    if isinstance(e, NoToolCall) and env.final_answer:  # the reply is the answer
                        step = await asyncio.wait_for(env.answer(action), remaining())
                        turn.env_reward += step.reward
                        turn.anchor = step.info.get("anchor", ("answer", step.observation))
                        terminated, truncated = step.terminated, step.truncated
                        observations.append(step.observation)  # shown if the env goes on
                    else:
                        log.parse_errors += 1
                        turn.parse_error = str(e)
                        turn.malformed = True
                        observations.append(f"Error: {e}")
                        turn.anchor = ("parse_error",)
                else:
                    turn.tool_calls = calls
                    for call in calls:
                        step = await log.step(env, call, turn)
                        observations.append(step.observation)
                        if step.terminated:
                            terminated = True
                            break
                        if step.truncated:
                            truncated = True
                            break
                if log.turn_ends_episode(
                    env, turn, terminated, limits.max_parse_errors, truncated=truncated
                ):
                    break
                obs_messages = [
                    tool_message(
                        clip_observation(o, renderer, limits.max_obs_tokens),
                        calls[i] if i < len(calls) else None,
                        k * 10 + i,
                    )
                    for i, o in enumerate(observations)
                ]
                delta = renderer.observation_ids(obs_messages)
                asked = limits.context.asks_summary(len(ep.context) + len(delta))
                if asked and limits.context.policy_summarizes:  # with the filling observation
                    obs_messages.append({"role": "user", "content": SUMMARY_REQUEST})
                    delta = renderer.observation_ids(obs_messages)
                if len(ep.context) + len(delta) >= limits.max_context_tokens:
                    log.termination = TerminationReason.CONTEXT_LIMIT
                    break
                turn.obs_start = len(ep.ids)
                ep.append(delta, tool_result=True)
                turn.obs_end = len(ep.ids)
                messages.extend(obs_messages)
            await log.grade(env)
        except asyncio.TimeoutError as e:  # the episode's clock, or one tool call's
            log.timed_out(str(e))
        except Exception as e:  # a crashing env ends its episode, never the run
            log.crashed(e)
    finally:
        ep.drop_empty_segment(turns)
        batcher.episode_finished()
        await log.close(env)

    metrics: dict[str, float] = {
        "turns": float(len(turns)),
        "tokens": float(len(ep.ids)),
        "action_tokens": float(sum(ep.mask)),
        "parse_errors": float(log.parse_errors),
        "segments": float(len(ep.starts) + 1),
        "summaries": float(summaries),
        "time/summary_s": summary_time,
        **log.times(),
    }
    return log.trajectory(
        request,
        turns,
        messages,
        metrics,
        prompt_len=prompt_len,
        token_ids=ep.ids,
        loss_mask=ep.mask,
        behavior_logprobs=ep.logprobs,
        policy_versions=ep.versions,
        segment_starts=list(ep.starts),
    )


def _drop_observations(ep: _Episode, renderer: ChatRenderer, keep: int) -> None:
    """Open a new segment whose prefix is the current one with every tool result but the last
    ``keep`` replaced by a placeholder result. Tokens are spliced, not rendered: everything the
    policy sampled reappears as the very ids it sampled (mask 0 now). Skipped when it would not
    shorten the context (which then grows on to ``CONTEXT_LIMIT``)."""
    placeholder = renderer.observation_ids([tool_message(PLACEHOLDER, None, 0)])
    new = drop_old_observations(ep.parts, placeholder, keep)
    if sum(len(ids) for ids, _ in new) < len(ep.context):
        ep.start_segment(new)


async def _summarize(
    ep: _Episode,
    messages: list[dict[str, Any]],
    turns: list[Turn],
    env: ToolEnv,
    renderer: ChatRenderer,
    batcher: GenerationBatcher,
    limits: RolloutLimits,
    seed: int,
) -> None:
    """Sample the summary the last observation asked for, then open a new segment holding the
    task and the summary (rendered afresh, mask 0). The summary is a turn: sampled (mask 1) and
    trained in the segment whose prefix produced it; it calls no tool and leaves the env's
    state as it was. A frozen summarizer instead reads the context as text; its summary is an
    observation (mask 0), seen only in the new segment's prefix."""
    cfg = limits.context
    if cfg.summarizer is not None:
        from turnrl.rollout.summarizer import frozen_summarizer

        model = await asyncio.to_thread(frozen_summarizer, cfg.summarizer)  # loads once
        summary = await model.summarize(renderer.decode(ep.context), cfg.summary_max_tokens, seed)
        messages.append({"role": "user", "content": f"{SUMMARY_HEADER}\n{summary}"})
    else:
        budget = limits.max_context_tokens - len(ep.context)
        gen = await batcher.generate(ep.context, min(cfg.summary_max_tokens, budget), seed)
        a_start = len(ep.ids)
        ep.append(gen.token_ids, gen.logprobs, gen.policy_version)
        summary = renderer.action_text(gen.token_ids)
        messages.append({"role": "assistant", "content": summary})
        state = turns[-1].anchor if turns else None
        turns.append(
            Turn(a_start, len(ep.ids), len(ep.ids), len(ep.ids), list(gen.logprobs),
                 gen.policy_version, anchor=("summary", state))
        )  # fmt: skip
    prefix = renderer.prompt_ids(summary_context(messages, summary), env.tool_schemas())
    ep.start_segment([(prefix, False)])


def grade_metrics(result: RewardResult) -> dict[str, float]:
    """An episode's grade as metrics: true and proxy success, whether it was flagged, and every
    reward component (``reward/NAME``)."""
    out = {"success": float(result.success), "hacked": float(is_hack(result.flags))}
    if result.proxy_success is not None:
        out["proxy_success"] = float(result.proxy_success)
    out.update({f"reward/{name}": float(value) for name, value in result.components.items()})
    return out


async def collect(
    requests: list[EpisodeRequest],
    make_env: Callable[[], ToolEnv],
    renderer: ChatRenderer,
    batcher: GenerationBatcher,
    limits: RolloutLimits,
    max_concurrency: int = 64,
) -> list[Trajectory]:
    """Run all episodes concurrently (at most ``max_concurrency`` at once), in request order."""

    async def play(req: EpisodeRequest) -> Trajectory:
        return await run_episode(make_env(), req, renderer, batcher, limits)

    return await in_order(requests, play, max_concurrency)


async def in_order(
    requests: list[EpisodeRequest],
    play: Callable[[EpisodeRequest], Awaitable[Trajectory]],
    max_concurrency: int,
) -> list[Trajectory]:
    """``play`` every request, at most ``max_concurrency`` at once; results in request order."""
    gate = asyncio.Semaphore(max_concurrency)

    async def one(req: EpisodeRequest) -> Trajectory:
        async with gate:
            return await play(req)

    return list(await asyncio.gather(*(one(r) for r in requests)))


def default_sampling(
    renderer: ChatRenderer,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int | None = None,
) -> SamplingParams:
    """Sampling that stops at the end of the assistant's turn. ``max_new_tokens`` None: the
    params' default (the agent loop asks for at most the episode's per-turn budget anyway)."""
    extra = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    return SamplingParams(
        temperature=temperature, top_p=top_p, stop_token_ids=(renderer.turn_end_id,), **extra
    )
