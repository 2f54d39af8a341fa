"""The environment contract.

An environment is a plain class whose tools are typed methods. The agent loop calls:

``await env.reset(task) -> str``
    Start an episode and return the first user message (the task statement). After reset,
    ``env.instructions`` holds the system prompt for this episode (rules, policy, persona).

``await env.step(call) -> StepResult``
    Run one tool call. ``StepResult.terminated`` means the task itself ended (the agent
    submitted, the user hung up): no future reward exists, so a critic must bootstrap from 0.
    ``truncated`` means a limit outside the task cut the episode (a step budget the env
    enforces): the state still has value, so bootstrapping from V(s) is correct. The agent loop
    adds its own truncations (turns, tokens, wall clock) on top.

``await env.grade() -> RewardResult``
    Score the finished episode (called once, after the last step, for every ending): what the
    env measured (``components``, ``flags``, ``success``) and its own verdict (``reward``). The
    run's rubric (:mod:`turnrl.rewards.rubric`) decides the reward training sees from it.

``env.measure() -> dict[str, float]``
    Optional: numbers the env measures of its current state (the tools and user envs:
    ``progress``, the share of the way from the initial state to the goal). Read after reset
    and after every turn; a rubric may turn their changes into per-turn rewards
    (``reward.shaping``, :mod:`turnrl.rewards.sources`). Default: nothing measured.

``await env.close()``
    Release resources. Always called, also after errors.

``await env.answer(text) -> StepResult``
    Only for envs with ``final_answer = True``: a reply without a tool call is the agent's
    final answer; the env records it (``grade`` scores it) and returns ``terminated=True`` to
    end the episode (or an observation asking for more). Without ``final_answer`` such a reply
    is a format error shown to the model.

``env.subagent_env() -> ToolEnv``
    Optional: where a subagent works when the agent delegates (the ``subagent`` config
    section adds a ``delegate(task)`` tool, :mod:`turnrl.envs.wrappers`). Called during
    an episode, so the returned env may hold a view of this episode's state (a document only
    the subagent can read). Its ``reset`` receives a Task whose payload holds the delegated
    text as ``"task"``; the sub-episode's answer is the observation of the step that ends it
    (a finishing tool returns the answer itself, ``ToolOutput(answer, done=True)``, or a
    ``final_answer`` env's ``answer(text)`` returns it). The default (``None``): a view of this
    env's own state offering the tools named in ``subagent_tools`` and a plain-text final
    answer; an env with neither cannot enable the subagent. The sub-env is closed after its
    episode.

Env changes from the outside (an added tool, a recorded answer) are wrappers
(:mod:`turnrl.envs.wrappers`), as in Gymnasium.

Tools are listed in the class attribute ``tools`` (method names). Each method's type hints
and docstring become the JSON schema shown to the model; arguments are validated by pydantic
before the method runs, so a wrong type becomes an observation the model can read.

A tool method returns ``str`` (the observation) or a :class:`ToolOutput` to also emit a
per-turn reward (the rubric weighs it with the env's grade), end the episode, or attach a
screenshot.

A tool may be ``async def`` (it runs on the event loop, so it must never block) or a plain
``def``: a plain method runs on its own daemon thread, so a blocking call (``time.sleep``,
``subprocess.run``, a slow database) overlaps with other episodes and never freezes the run.
One env's calls are sequential, but each may run on a different thread (an sqlite connection
needs ``check_same_thread=False``). ``tool_timeout_s`` caps one call; the agent loop's episode
timeout caps them all. A call past either ends its episode with TIMEOUT. A thread cannot be
killed: one still running after its timeout is counted as stuck (``blocking_tool_stats``) and
its slot is given to new calls; when ``MAX_STUCK_THREADS`` are stuck at once, further blocking
calls fail (ENV_ERROR) rather than pile up threads without bound.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pydantic

from turnrl.types import RewardResult, Task, ToolCall


@dataclass
class ToolOutput:
    content: str
    reward: float = 0.0
    done: bool = False
    image: bytes | None = None  # PNG, for vision models


@dataclass
class StepResult:
    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # "anchor", "image", "error", ...


class ToolError(Exception):
    """Raised by a tool for a bad request; its message becomes the observation."""


def tool_schema(method: Any) -> dict[str, Any]:
    """OpenAI-style function schema from a typed method (name, description, parameters)."""
    sig = inspect.signature(method, eval_str=True)
    fields: dict[str, Any] = {}
    for name, param in sig.parameters.items():
        if name == "self":
            continue
        annotation = param.annotation if param.annotation is not inspect.Parameter.empty else Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, default)
    model = pydantic.create_model(f"{method.__name__}_args", **fields)
    params = model.model_json_schema()
    params.pop("title", None)
    for prop in params.get("properties", {}).values():
        prop.pop("title", None)
    doc = inspect.getdoc(method) or ""
    return {
        "type": "function",
        "function": {
            "name": method.__name__,
            "description": doc.split("\n\n")[0].replace("\n", " "),
            "parameters": params,
        },
    }


def hash_split(key: str) -> str:
    """``"test"`` for ~20 % of keys, by a stable hash: a held-out split over generated tasks
    that needs no list of what training saw (the tools env splits by goal statement, the user
    env by order id)."""
    return "test" if zlib.crc32(key.encode()) % 5 == 0 else "train"


class ToolEnv:
    """Shared tool dispatch for environments. Subclasses define ``tools``, ``reset``,
    the tool methods and ``grade``; they may override ``anchor`` and ``close``."""

    name: ClassVar[str] = "env"
    tools: ClassVar[tuple[str, ...]] = ()
    tool_timeout_s: ClassVar[float | None] = None  # per call; None: only the episode timeout
    final_answer: ClassVar[bool] = False  # a reply without a tool call ends the episode
    subagent_tools: ClassVar[tuple[str, ...]] = ()  # tools a subagent may call on this state
    instructions: str = ""

    async def reset(self, task: Task) -> str:
        raise NotImplementedError

    async def grade(self) -> RewardResult:
        raise NotImplementedError

    async def close(self) -> None:
        return None

    async def answer(self, text: str) -> StepResult:
        """The agent's plain-text final answer (envs with ``final_answer = True``)."""
        raise NotImplementedError(f"{type(self).__name__} sets final_answer but has no answer()")

    def subagent_env(self) -> ToolEnv | None:
        """The env a subagent works in when the agent delegates (see the module docstring);
        None: a view of this env's own state offering ``subagent_tools``
        (:class:`turnrl.envs.wrappers.SharedStateEnv`)."""
        return None

    def anchor(self, observation: str) -> Any:
        """The env state after a step, hashable; GiGPO groups steps by it. Default: the
        observation text (two steps that saw the same thing are in the same state)."""
        return observation

    def measure(self) -> dict[str, float]:
        """Numbers measured of the current state, read after reset and after every turn (a
        rubric may shape per-turn rewards from their changes). Default: none."""
        return {}

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool_schema(getattr(self, name)) for name in self.tools]

    async def step(self, call: ToolCall) -> StepResult:
        if call.name not in self.tools:
            known = ", ".join(self.tools)
            return StepResult(
                f"Error: unknown tool '{call.name}'. Available tools: {known}.",
                info={"error": "unknown_tool", "anchor": self.anchor("unknown_tool")},
            )
        method = getattr(self, call.name)
        try:
            validated = _validate_arguments(method, call.arguments)
        except ToolError as e:
            text = f"Error: {e}"
            return StepResult(text, info={"error": "bad_arguments", "anchor": self.anchor(text)})
        try:
            if inspect.iscoroutinefunction(method):
                call_out = method(**validated)
            else:
                call_out = run_blocking(method, validated)
            out = await asyncio.wait_for(call_out, self.tool_timeout_s)
            if inspect.isawaitable(out):  # a plain method that returned an awaitable
                out = await asyncio.wait_for(out, self.tool_timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"tool '{call.name}' ran past tool_timeout_s={self.tool_timeout_s}"
            ) from None
        except ToolError as e:
            text = f"Error: {e}"
            return StepResult(text, info={"error": "tool_error", "anchor": self.anchor(text)})
        if isinstance(out, str):
            out = ToolOutput(out)
        info: dict[str, Any] = {"anchor": self.anchor(out.content)}
        if out.image is not None:
            info["image"] = out.image
        return StepResult(out.content, reward=out.reward, terminated=out.done, info=info)


MAX_STUCK_THREADS = 64
_threads_lock = threading.Lock()
_threads = {"running": 0, "stuck": 0, "started": 0}


def blocking_tool_stats() -> dict[str, float]:
    """Threads running plain tool methods now, and how many of them are stuck (their episode
    gave up on them by timeout or cancellation, but the call has not returned yet)."""
    with _threads_lock:
        return {
            "env/tool_threads": float(_threads["running"]),
            "env/stuck_threads": float(_threads["stuck"]),
        }


async def run_blocking(fn: Any, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` on a daemon thread, awaited without blocking the event loop.

    Why not ``asyncio.to_thread``: its executor's threads are joined at interpreter exit, so
    one hung tool would hang the process at exit, and its fixed pool would be exhausted by
    calls that never return. A daemon thread per call (~0.1 ms) has neither problem; the only
    bound needed is on stuck threads, since live ones are bounded by the episodes running.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()
    state = {"done": False, "abandoned": False}
    with _threads_lock:
        if _threads["stuck"] >= MAX_STUCK_THREADS:
            raise RuntimeError(
                f"{_threads['stuck']} blocking tool calls are stuck past their timeouts "
                f"(limit {MAX_STUCK_THREADS}); threads cannot be killed, so no more are "
                "started: bound the blocking call inside the tool or make the tool async"
            )
        _threads["running"] += 1
        _threads["started"] += 1

    def deliver(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, fn(**kwargs)
        except BaseException as e:  # delivered to the awaiting episode
            ok, value = False, e
        with _threads_lock:
            state["done"] = True
            _threads["running"] -= 1
            if state["abandoned"]:
                _threads["stuck"] -= 1
                return  # nobody waits any more (the loop may even be closed)
        try:
            loop.call_soon_threadsafe(deliver, ok, value)
        except RuntimeError:  # the event loop closed meanwhile
            pass

    name = f"tool-{getattr(fn, '__name__', 'call')}"
    threading.Thread(target=work, name=name, daemon=True).start()
    try:
        return await fut
    except asyncio.CancelledError:
        with _threads_lock:
            if not state["done"]:
                state["abandoned"] = True
                _threads["stuck"] += 1
        raise


_ADAPTERS: dict[Any, type[pydantic.BaseModel]] = {}


def _validate_arguments(method: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    func = method.__func__ if hasattr(method, "__func__") else method
    model = _ADAPTERS.get(func)
    if model is None:
        sig = inspect.signature(method, eval_str=True)
        fields = {
            n: (
                p.annotation if p.annotation is not inspect.Parameter.empty else Any,
                ... if p.default is inspect.Parameter.empty else p.default,
            )
            for n, p in sig.parameters.items()
        }
        model = pydantic.create_model(
            f"{func.__name__}_args",
            __config__=pydantic.ConfigDict(extra="forbid", strict=False),
            **fields,
        )
        _ADAPTERS[func] = model
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments of '{func.__name__}' must be a JSON object")
    try:
        parsed = model.model_validate(arguments)
    except pydantic.ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or 'arguments'}: {err['msg']}"
            for err in e.errors()
        )
        raise ToolError(f"bad arguments for '{func.__name__}': {problems}") from None
    return {name: getattr(parsed, name) for name in model.model_fields}
