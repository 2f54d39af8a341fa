"""OpenEnv environment servers as a turnrl env family: ``env.name=openenv
env.options.server=my_env.server.app:app`` (started here) or ``env.options.base_url=URL``.

An OpenEnv environment is an HTTP server (``POST /reset``, ``POST /step`` with
``{"action": {...}}``, each answered ``{"observation": {...}, "reward": r, "done": d}``;
``GET /health``). One server runs one episode at a time, so the family keeps a pool:

- ``server``: a FastAPI app built with OpenEnv's ``create_app``/``create_fastapi_app``, by
  import path; ``servers`` processes of it are started on 127.0.0.1 (``uvicorn``, a free port
  each) when the family is built (before anything is written: one that cannot start stops the
  run), restarted when one has died, and stopped when the family closes (the end of the run,
  or with the process that started them);
- ``base_url``: servers already running (one URL or a list); the family never starts or stops
  them.

The mapping: the action becomes one tool, ``step``, whose arguments are the action's fields
(typed from the ``action`` dataclass when given, else a free JSON object); the observation's
fields are the observation text (a lone text field as it is, else one ``name: value`` line per
field); the server's ``done`` is a termination; the episode's reward is the sum of the
server's step rewards (its return), success a return of at least ``success_threshold``. The
task's seed is sent with each reset (``{"seed": s}``); a server that ignores it starts every
task alike. Faults stay in the episode: a server that dies or refuses the connection, or
answers with something that is not the protocol, ends the episode with ENV_ERROR; one that
does not answer within ``step_timeout_s`` with TIMEOUT.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from turnrl.envs.adapters import require
from turnrl.envs.base import StepResult, ToolEnv, hash_split
from turnrl.envs.scripted import IdleAgent
from turnrl.types import RewardResult, Task, ToolCall

INSTRUCTIONS = (
    "You are acting in an environment. Call the step tool with your action each turn; "
    "the environment answers with what it observes next."
)
START_TIMEOUT_S = 60.0


class ProtocolError(ValueError):
    """The server answered with something that is not OpenEnv's step/reset payload."""


class ActionRejected(ValueError):
    """The server refused an action as invalid (HTTP 422)."""


def parse_result(payload: Any) -> tuple[dict[str, Any], float, bool]:
    """``(observation, reward, done)`` of a /reset or /step answer; ProtocolError otherwise."""
    if not isinstance(payload, dict) or not isinstance(payload.get("observation"), dict):
        raise ProtocolError(f"no observation object in the server's answer: {payload!r:.120}")
    reward, done = payload.get("reward"), payload.get("done", False)
    if reward is None:
        reward = 0.0
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise ProtocolError(f"reward {reward!r} is not a finite number")
    if not isinstance(done, bool):
        raise ProtocolError(f"done {done!r} is not a boolean")
    return payload["observation"], float(reward), done


def observation_text(observation: dict[str, Any]) -> str:
    """A lone text field as it is; else one ``name: value`` line per field (values as JSON
    unless text)."""
    if len(observation) == 1 and isinstance(next(iter(observation.values())), str):
        return next(iter(observation.values()))
    return "\n".join(
        f"{k}: {v if isinstance(v, str) else json.dumps(v, sort_keys=True)}"
        for k, v in observation.items()
    )


def action_model(action_cls: Any) -> Any:
    """A pydantic model of an OpenEnv action dataclass's fields (``metadata`` left out): its
    JSON schema is the tool's parameters, and it checks a call's arguments before they are
    sent (a wrong type is an observation the model reads, not a server error)."""
    import typing

    import pydantic

    if not (isinstance(action_cls, type) and is_dataclass(action_cls)):
        raise ValueError(f"env.options.action: {action_cls!r} is not an action dataclass")
    hints = typing.get_type_hints(action_cls)
    spec: dict[str, Any] = {}
    for f in fields(action_cls):
        if f.name == "metadata":
            continue
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = ...
        spec[f.name] = (hints.get(f.name, Any), default)
    config = pydantic.ConfigDict(extra="forbid")
    return pydantic.create_model(f"{action_cls.__name__}_args", __config__=config, **spec)


@dataclass
class Server:
    url: str
    process: subprocess.Popen | None = None  # None: not started here


class ServerPool:
    """Servers handed out one per episode. Started servers are started by :meth:`start` (at
    the family's construction, so a server that cannot start stops the run before it starts)
    and restarted when found dead."""

    def __init__(self, app: str | None, urls: list[str], size: int) -> None:
        self.app, self.size = app, size
        self.servers = [Server(u.rstrip("/")) for u in urls]
        # each env runs on an event loop of its own: a plain list under a thread lock, polled
        self.free = list(self.servers)
        self._lock = threading.Lock()
        # the threads that start servers live as long as the pool: a server is signalled to
        # stop when the thread that started it ends (``_die_with_parent``)
        self.starter = ThreadPoolExecutor(size, thread_name_prefix="openenv-start")
        self.logs = tempfile.TemporaryDirectory(prefix="turnrl-openenv-")

    def start(self) -> None:
        """Start ``size`` servers of ``app`` at once; RuntimeError (the others stopped) if one
        cannot start."""
        ports = [_free_port() for _ in range(self.size)]
        servers = [Server(f"http://127.0.0.1:{port}") for port in ports]
        futures = [self.starter.submit(self._launch, s) for s in servers]
        self.servers = servers
        with self._lock:
            self.free = list(servers)
        errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            self.close()
            raise failed[0]

    async def acquire(self) -> Server:
        """A free server (waiting for one is bounded by the episode's own timeout)."""
        while True:
            with self._lock:
                server = self.free.pop(0) if self.free else None
            if server is not None:
                break
            await asyncio.sleep(0.02)
        if server.process is not None and server.process.poll() is not None:  # it died
            try:
                await asyncio.get_running_loop().run_in_executor(self.starter, self._launch, server)
            except BaseException:
                self.release(server)  # the next episode tries again
                raise
        return server

    def release(self, server: Server) -> None:
        with self._lock:
            self.free.append(server)

    def _launch(self, server: Server) -> None:
        port = server.url.rsplit(":", 1)[1]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
        cmd = [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1",
               "--port", port, "--log-level", "warning"]  # fmt: skip
        log = os.path.join(self.logs.name, f"{port}.log")  # a file: a pipe nobody reads fills
        with open(log, "ab") as err:
            server.process = subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        import httpx

        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                lines = [ln for ln in open(log, errors="replace").read().splitlines() if ln.strip()]
                last = lines[-1] if lines else f"exit status {server.process.returncode}"
                raise RuntimeError(f"the OpenEnv server {self.app} exited: {last}")
            try:
                if httpx.get(f"{server.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        server.process.kill()
        server.process.wait()
        raise RuntimeError(f"the OpenEnv server {self.app} did not answer /health in time")

    def close(self) -> None:
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                server.process.terminate()
                try:
                    server.process.wait(10)
                except subprocess.TimeoutExpired:
                    server.process.kill()
                    server.process.wait()
        with self._lock:
            self.free = []
        self.starter.shutdown(wait=False)
        self.logs.cleanup()


def _die_with_parent() -> None:
    """In the server process before it starts: SIGTERM when the thread that started it ends
    (with its process: a trainer killed with SIGKILL leaves no server behind)."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OpenEnvEnv(ToolEnv):
    """One episode on one server of the pool."""

    name = "openenv"

    def __init__(self, family: OpenEnvFamily) -> None:
        self.family = family
        self.tool_timeout_s = family.step_timeout_s
        self.server: Server | None = None
        self.client: Any = None
        self.rewards: list[float] = []
        self.done = False

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [self.family.schema]

    async def reset(self, task: Task) -> str:
        httpx = require("httpx", "openenv")
        self.instructions = INSTRUCTIONS
        self.rewards, self.done = [], False
        self.server = await self.family.pool.acquire()
        self.client = httpx.AsyncClient(base_url=self.server.url, timeout=self.tool_timeout_s)
        observation, _, _ = await self._post("/reset", {"seed": int(task.payload["seed"])})
        return observation_text(observation)

    async def step(self, call: ToolCall) -> StepResult:
        if call.name != "step":
            text = f"Error: unknown tool '{call.name}'. Available tools: step."
            return StepResult(text, info={"error": "unknown_tool", "anchor": text})
        model = self.family.action_model
        arguments = call.arguments if model is not None else call.arguments.get("action")
        problem = None if isinstance(arguments, dict) else "the action must be a JSON object"
        if model is not None and problem is None:
            import pydantic

            try:
                model.model_validate(arguments)
            except pydantic.ValidationError as e:
                problem = "; ".join(
                    f"{'.'.join(str(x) for x in err['loc']) or 'action'}: {err['msg']}"
                    for err in e.errors()
                )
        if problem is None:
            try:
                observation, reward, done = await self._post("/step", {"action": arguments})
            except ActionRejected as e:  # a free-form action the server's schema refuses
                problem = str(e)
        if problem is not None:
            text = f"Error: bad action for 'step': {problem}"
            return StepResult(text, info={"error": "bad_arguments", "anchor": text})
        self.rewards.append(reward)
        self.done = done
        text = observation_text(observation)
        return StepResult(text, terminated=done, info={"anchor": text, "server_reward": reward})

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float, bool]:
        import httpx

        try:
            response = await self.client.post(path, json=body)
        except httpx.TimeoutException:
            raise TimeoutError(f"the OpenEnv server did not answer {path} in time") from None
        except httpx.HTTPError as e:
            raise ConnectionError(f"the OpenEnv server failed on {path}: {e!r}") from None
        if response.status_code == 422 and path == "/step":  # the action does not fit
            raise ActionRejected(f"the server rejected it: {response.text[:200]}")
        if response.status_code != 200:
            raise ProtocolError(
                f"{path} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            payload = response.json()
        except ValueError:
            raise ProtocolError(f"{path} answered with no JSON: {response.text[:120]!r}") from None
        return parse_result(payload)

    async def grade(self) -> RewardResult:
        ret = sum(self.rewards)
        return RewardResult(
            reward=ret,
            success=self.done and ret >= self.family.success_threshold,
            components={"return": ret, "steps": float(len(self.rewards)), "done": float(self.done)},
        )

    async def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()
        if self.server is not None:
            self.family.pool.release(self.server)
            self.server = None


class OpenEnvFamily:
    """Tasks are reset seeds (split by a stable hash); see the module docstring for options."""

    name = "openenv"

    def __init__(
        self,
        server: str | None = None,
        base_url: str | list[str] | None = None,
        action: str | None = None,
        servers: int = 2,
        success_threshold: float = 1.0,
        step_timeout_s: float = 30.0,
    ) -> None:
        require("httpx", "openenv")
        if (server is None) == (base_url is None):
            raise ValueError(
                "env.options: give exactly one of server (an app to start) or base_url"
            )
        if servers < 1:
            raise ValueError(f"env.options.servers: must be >= 1, got {servers}")
        if step_timeout_s <= 0:
            raise ValueError(f"env.options.step_timeout_s: must be > 0, got {step_timeout_s}")
        if server is not None:
            require("openenv_core", "openenv")
            require("uvicorn", "openenv")
            module, sep, attr = server.partition(":")
            if not sep or not attr:
                raise ValueError(f"env.options.server: {server!r} is not pkg.module:app")
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            try:
                found = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                found = None
            if found is None:
                raise ValueError(f"env.options.server: no module {module!r} to serve")
        urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
        self.pool = ServerPool(server, urls, servers if server is not None else len(urls))
        self.action_model: Any = None
        if action is None:
            params = {
                "type": "object",
                "properties": {"action": {"type": "object", "description": "the action's fields"}},
                "required": ["action"],
            }
        else:
            from turnrl.envs.registry import load_target

            self.action_model = action_model(load_target(action))
            params = self.action_model.model_json_schema()
            params.pop("title", None)
            for prop in params.get("properties", {}).values():
                prop.pop("title", None)
        self.schema = {
            "type": "function",
            "function": {
                "name": "step",
                "description": "Act in the environment: the action's fields as arguments.",
                "parameters": params,
            },
        }
        self.success_threshold, self.step_timeout_s = success_threshold, step_timeout_s
        if server is not None:
            try:
                self.pool.start()
            except RuntimeError as e:
                raise ValueError(f"env.options.server: {e}") from None

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        n = n or 64
        out, k = [], 0
        while len(out) < n:
            s = seed * 1_000_003 + k
            if hash_split(f"openenv/{s}") == split:
                out.append(Task(f"openenv-{s}", self.name, {"seed": s}, split))
            k += 1
        return out

    def make_env(self) -> OpenEnvEnv:
        return OpenEnvEnv(self)

    def baseline(self, task: Task) -> IdleAgent:
        return IdleAgent()

    def close(self) -> None:
        self.pool.close()
