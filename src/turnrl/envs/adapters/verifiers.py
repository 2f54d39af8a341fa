"""verifiers environments as a turnrl env family: ``env.name=verifiers
env.options.env_id=my_env``.

``env_id`` names a verifiers environment module (an Environments Hub package installed with
pip, or a module importable from the working directory) whose ``load_environment(**env_args)``
builds it; ``env.options.env_args`` are those arguments.

The env's own rollout loop runs unchanged: where it would ask a model for the next message,
turnrl's agent supplies it. Each turnrl episode starts the verifiers rollout with a *bridge
client* (a ``verifiers`` ``Client``); the client hands the prompt to turnrl and waits for the
agent's reply, which the env then answers with its ``env_response``, its stop conditions and
its rubric, all as verifiers would run them. The mapping:

- the prompt's system messages are the system prompt, its user messages the task statement;
- tools: the env's tool definitions (typed JSON schemas) are the tools in the chat template;
  each tool call is sent as one assistant message with that call, and the tool messages the
  env returns are the observation; a reply without a tool call is the assistant's plain text
  (the env decides whether it ends the rollout, as a ``ToolEnv`` does);
- the env's other messages (a ``MultiTurnEnv``'s ``env_response``, the final response) are the
  observation text;
- the ending: the rollout completing ends the episode; its stop condition decides how (its own
  ``max_turns`` is a truncation, its timeout TIMEOUT, an error ENV_ERROR, any other a
  termination);
- the reward: the env's rubric scores the finished rollout (``score_rollout``); the grade's
  reward is its weighted sum and every function's score is a component (weight-0 functions,
  the rubric's metrics, included), with the weights in ``info``; the run's rubric takes the
  same functions as its members (:meth:`VerifiersFamily.rubric_members`), each with its
  verifiers weight, so each is logged as ``reward/<name>``;
- tasks: the env's dataset rows; its ``eval_dataset`` rows are the held-out split when it has
  one, else rows are split by a stable hash of their prompt and answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import random
import time
from typing import Any

from turnrl.envs.adapters import require
from turnrl.envs.base import StepResult, ToolEnv, hash_split
from turnrl.envs.scripted import IdleAgent
from turnrl.types import RewardResult, Task, ToolCall

TRUNCATIONS = ("max_turns_reached", "max_total_completion_tokens_reached", "prompt_too_long")


def _text(content: Any) -> str:
    """A message's content as text (a list of parts: its text parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "") for p in content
        ]
        return "".join(str(p) for p in parts if p)
    raise TypeError(f"message content is a {type(content).__name__}, not text or parts")


def _role(message: Any) -> str:
    return message["role"] if isinstance(message, dict) else message.role


def _content(message: Any) -> Any:
    return message.get("content") if isinstance(message, dict) else message.content


def bridge_client_class() -> type:
    """The ``verifiers`` Client subclass that hands each model request to a turnrl episode (a
    function, so that importing this module never imports verifiers)."""
    vf = require("verifiers", "verifiers")
    from verifiers.types import Response, ResponseMessage

    class BridgeClient(vf.Client):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(None)
            self.prompts: asyncio.Queue = asyncio.Queue()
            self.replies: asyncio.Queue = asyncio.Queue()
            self.tools: list = []

        async def get_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            self.tools = list(tools or [])
            await self.prompts.put(list(prompt))
            message = await self.replies.get()
            return Response(
                id=f"turnrl-{time.monotonic_ns()}",
                created=int(time.time()),
                model=model,
                message=ResponseMessage(
                    content=message.content,
                    tool_calls=message.tool_calls,
                    finish_reason="tool_calls" if message.tool_calls else "stop",
                    is_truncated=False,
                ),
            )

        # the abstract provider hooks: nothing goes through a provider here
        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kw):
            raise NotImplementedError

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return response

        async def close(self) -> None:
            return None

    return BridgeClient


class VerifiersEnv(ToolEnv):
    """One verifiers rollout, driven by the agent loop through the bridge client."""

    name = "verifiers"
    final_answer = True  # a reply without a tool call is the assistant's text

    def __init__(self, family: VerifiersFamily) -> None:
        self.family = family
        self.vf_env = family.vf_env
        self.tool_timeout_s = family.step_timeout_s
        self.client: Any = None
        self.rollout: asyncio.Task | None = None
        self.state: Any = None
        self.seen = 0  # messages of the rollout's conversation shown so far
        self.calls = 0
        self.schemas: list[dict[str, Any]] = []

    async def reset(self, task: Task) -> str:
        row = self.family.row(task.payload)
        self.client = self.family.client_class()
        self.rollout = asyncio.ensure_future(self.vf_env.rollout(row, self.client, "turnrl", {}))
        prompt = await self._next_prompt()
        if prompt is None:
            raise RuntimeError("the verifiers rollout ended before asking for a reply")
        self.seen = len(prompt)
        system = [_text(_content(m)) for m in prompt if _role(m) == "system"]
        user = [_text(_content(m)) for m in prompt if _role(m) == "user"]
        if len(system) + len(user) != len(prompt):
            roles = sorted({_role(m) for m in prompt} - {"system", "user"})
            raise ValueError(f"a prompt with {roles} messages cannot be a task statement")
        self.instructions = "\n\n".join(system)
        self.schemas = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in self.client.tools
        ]
        return "\n\n".join(user)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.schemas

    async def step(self, call: ToolCall) -> StepResult:
        names = [s["function"]["name"] for s in self.schemas]
        if call.name not in names:
            text = f"Error: unknown tool '{call.name}'. Available tools: {', '.join(names)}."
            return StepResult(text, info={"error": "unknown_tool", "anchor": text})
        vf = require("verifiers", "verifiers")
        self.calls += 1
        tool_call = vf.ToolCall(
            id=f"call_{self.calls}", name=call.name, arguments=json.dumps(call.arguments)
        )
        return await self._reply(vf.AssistantMessage(content=None, tool_calls=[tool_call]))

    async def answer(self, text: str) -> StepResult:
        vf = require("verifiers", "verifiers")
        return await self._reply(vf.AssistantMessage(content=text))

    async def _reply(self, message: Any) -> StepResult:
        await self.client.replies.put(message)
        prompt = await self._next_prompt()
        if prompt is not None:  # the env answered and asks for the next reply
            new = prompt[self.seen + 1 :]  # after the agent's own message
            self.seen = len(prompt)
            text = "\n\n".join(_text(_content(m)) for m in new)
            return StepResult(text, info={"anchor": text})
        state = self.state = self.rollout.result()
        condition = state.get("stop_condition")
        if condition == "has_error":
            raise RuntimeError(f"the verifiers env failed: {state.get('error')!r}")
        if condition == "timeout_reached":
            raise TimeoutError("the verifiers env's own timeout_seconds ran out")
        final = state.get("final_env_response") or []
        text = "\n\n".join(_text(_content(m)) for m in final)
        truncated = condition in TRUNCATIONS
        return StepResult(
            text,
            terminated=not truncated,
            truncated=truncated,
            info={"anchor": text, "stop_condition": condition},
        )

    async def _next_prompt(self) -> list | None:
        """The next prompt the rollout asks a reply to, or None once the rollout has ended
        (its exception, if it raised, re-raised here)."""
        getter = asyncio.ensure_future(self.client.prompts.get())
        try:
            done, _ = await asyncio.wait(
                {getter, self.rollout}, timeout=self.tool_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )  # fmt: skip
        except asyncio.CancelledError:
            getter.cancel()
            raise
        if getter in done:
            return getter.result()
        getter.cancel()
        if self.rollout in done:
            self.rollout.result()  # raises what the rollout raised
            return None
        raise TimeoutError(f"the verifiers env did not answer within {self.tool_timeout_s} s")

    async def grade(self) -> RewardResult:
        if self.rollout is None or not self.rollout.done() or self.rollout.exception():
            return RewardResult(0.0, False, components={"completed": 0.0})
        self.state = self.rollout.result()
        rubric = self.vf_env.rubric
        await rubric.score_rollout(self.state)
        metrics = {k: float(v) for k, v in (self.state.get("metrics") or {}).items()}
        reward = float(self.state["reward"])
        names, weights = rubric._get_reward_func_names(), rubric._get_reward_weights()
        return RewardResult(
            reward=reward,
            success=reward >= self.family.success_threshold,
            components=metrics,
            info={
                "weights": dict(zip(names, [float(w) for w in weights])),
                "stop_condition": self.state.get("stop_condition"),
            },
        )

    async def close(self) -> None:
        if self.rollout is not None and not self.rollout.done():
            self.rollout.cancel()
            try:
                await self.rollout
            except (asyncio.CancelledError, Exception):  # its own cleanup ran, or failed
                pass


class VerifiersFamily:
    """The verifiers environment ``env_id`` built once with ``env_args``; its envs run
    concurrent rollouts of it. ``success_threshold``: the rubric reward that counts as success
    (verifiers has no notion of success). ``step_timeout_s`` caps each wait for the env."""

    name = "verifiers"

    def __init__(
        self,
        env_id: str,
        env_args: dict[str, Any] | None = None,
        success_threshold: float = 1.0,
        step_timeout_s: float = 60.0,
    ) -> None:
        vf = require("verifiers", "verifiers")
        if step_timeout_s <= 0:
            raise ValueError(f"env.options.step_timeout_s: must be > 0, got {step_timeout_s}")
        import os
        import sys

        if os.getcwd() not in sys.path:  # an env module beside the run, as for env.name
            sys.path.insert(0, os.getcwd())
        from verifiers.utils.env_utils import import_env_module

        env_args = dict(env_args or {})
        try:
            loader = import_env_module(env_id).load_environment
        except (ImportError, AttributeError) as e:
            raise ValueError(f"env.options.env_id: cannot load {env_id!r} ({e})") from None
        try:
            inspect.signature(loader).bind(**env_args)
        except TypeError as e:
            raise ValueError(f"env.options.env_args: {env_id}: {e}") from None
        self.vf_env = vf.load_environment(env_id, **env_args)
        rubric = self.vf_env.rubric
        groups = [n for n, f in zip(rubric._get_reward_func_names(), rubric._get_reward_funcs())
                  if rubric._is_group_func(f)]  # fmt: skip
        if groups:
            raise ValueError(
                f"env.options.env_id: {env_id}'s rubric has group reward functions {groups}; "
                "turnrl grades each episode on its own"
            )
        self.env_id, self.success_threshold = env_id, success_threshold
        self.step_timeout_s = step_timeout_s
        self.client_class = bridge_client_class()
        train = self.vf_env.get_dataset()
        held = self.vf_env.eval_dataset if self.vf_env.eval_dataset is not None else None
        if held is not None:
            held = self.vf_env.get_eval_dataset()
        self.sources = {"dataset": train, "eval_dataset": held}

    def row(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = self.sources[payload["source"]]
        if data is None or not 0 <= payload["index"] < len(data):
            raise ValueError(
                f"{self.env_id} has no row {payload['index']} in its {payload['source']}"
            )
        return dict(data[payload["index"]])

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        if self.sources["eval_dataset"] is not None:
            source = "dataset" if split == "train" else "eval_dataset"
            indices = list(range(len(self.sources[source])))
        else:
            source, data = "dataset", self.sources["dataset"]
            indices = [i for i in range(len(data)) if hash_split(_key(data[i])) == split]
        random.Random(f"{self.env_id}-{seed}").shuffle(indices)
        return [
            Task(
                f"vf-{self.env_id}-{source}-{i}",
                self.name,
                {"env_id": self.env_id, "source": source, "index": i},
                split,
            )
            for i in indices[: n or len(indices)]
        ]

    def make_env(self) -> VerifiersEnv:
        return VerifiersEnv(self)

    def rubric_members(self) -> list[tuple[VerifiersMember, float]]:
        """The env's rubric as turnrl rubric members: one per verifiers function, reading its
        score from the grade, with its verifiers weight (0: a metric). The run's rubric uses
        them in place of the grade (:func:`turnrl.rewards.pipeline.build_rubric`)."""
        r = self.vf_env.rubric
        names, weights = r._get_reward_func_names(), r._get_reward_weights()
        return [(VerifiersMember(n), float(w)) for n, w in zip(names, weights)]

    def baseline(self, task: Task) -> IdleAgent:
        return IdleAgent()

    def close(self) -> None:
        return None


class VerifiersMember:
    """A turnrl reward function for one verifiers rubric function: its score in the episode's
    grade. An episode whose rollout did not complete was not scored by verifiers: 0."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, episode: Any) -> float:
        graded = episode.graded
        if graded is None:
            raise ValueError("the episode has no grade")
        if graded.components.get("completed") == 0.0:
            return 0.0
        return float(graded.components[self.name])


def _key(row: dict[str, Any]) -> str:
    """A row's identity for the hash split: its prompt and answer (the row index left out)."""
    keep = {k: row.get(k) for k in ("prompt", "question", "answer", "info", "task")}
    return hashlib.sha1(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()
