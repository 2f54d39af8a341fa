"""The ``openai`` backend: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM's
server, llama.cpp's server, ...), for judges, simulated users and evaluation.

It cannot train: the endpoint returns text sampled under its own tokenizer and weights we do
not hold, so there are no token ids of ours, no behaviour logprobs to correct against and no
weights to update. It is therefore not a :class:`~turnrl.policy.base.PolicyBackend` (token ids
in/out) but a chat model: ``await chat(messages) -> str`` (what judges, ``ModelUser`` and the
web env's judge take) and ``await reply(messages, tools=...) -> list[Reply]`` (text and native
tool calls, what :mod:`turnrl.rollout.endpoint_agent` drives an episode with).

Only what is configured is sent: no ``temperature`` or ``max_tokens`` unless given, so the
server's own defaults apply. ``n > 1`` asks for n choices and fails if the server returns
another number (some servers ignore ``n``). A request that gets no reply within ``timeout``
raises :class:`OpenAITimeout`.

Uses only the standard library (``urllib`` in a worker thread), so it adds no dependency. The
base URL, key and model come from the arguments or from ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and ``OPENAI_MODEL``; a local server usually needs no key. From YAML, an
endpoint is a mapping (:class:`EndpointConfig`) turned into a client by :func:`endpoint_chat`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import pydantic

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIError(RuntimeError):
    """The endpoint failed (HTTP error, unreachable, or a reply without choices)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OpenAITimeout(OpenAIError):
    """No reply within the client's timeout."""


@dataclass
class Reply:
    """One choice of a chat completion."""

    text: str  # "" where the model only called tools (``content: null``)
    tool_calls: list[dict[str, Any]]  # native calls as sent: {"id", "type", "function": {...}}
    finish_reason: str | None = None


class OpenAIChat:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``retries`` re-sends after a connection error, a timeout or a retryable status (429, 5xx)
    with exponential backoff starting at ``backoff_s``. ``temperature`` and ``max_tokens`` are
    sent only when set. ``extra`` is merged into every request body (e.g. ``{"top_p": 0.9}``
    or a server-specific option).
    """

    trainable = False  # see the module docstring

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        retries: int = 2,
        backoff_s: float = 1.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.model = model or os.environ.get("OPENAI_MODEL", "")
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        problems = []
        if not self.model:
            problems.append("model: give model= or set OPENAI_MODEL")
        if not self.base_url.startswith(("http://", "https://")):
            problems.append(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if timeout <= 0:
            problems.append(f"timeout must be > 0, got {timeout}")
        if retries < 0:
            problems.append(f"retries must be >= 0, got {retries}")
        if max_tokens is not None and max_tokens < 1:
            problems.append(f"max_tokens must be >= 1, got {max_tokens}")
        if problems:
            raise ValueError("OpenAIChat: " + "; ".join(problems))
        self.timeout, self.temperature, self.max_tokens = timeout, temperature, max_tokens
        self.retries, self.backoff_s = retries, backoff_s
        self.extra = dict(extra or {})

    async def chat(self, messages: list[dict[str, Any]]) -> str:
        return (await self.complete(messages))[0]

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int = 1,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> list[str]:
        """``n`` sampled text replies to ``messages``; a choice without text raises."""
        replies = await self.reply(
            messages, n=n, temperature=temperature, max_tokens=max_tokens, seed=seed
        )
        for r in replies:
            if not r.text and r.tool_calls:
                raise OpenAIError(f"reply is a tool call, not text: {str(r.tool_calls)[:200]}")
        return [r.text for r in replies]

    async def reply(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        n: int = 1,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> list[Reply]:
        """``n`` choices (text and native tool calls); ``tools`` are OpenAI function schemas."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        temperature = self.temperature if temperature is None else temperature
        max_tokens = self.max_tokens if max_tokens is None else max_tokens
        for key, value in (
            ("temperature", temperature),
            ("max_tokens", max_tokens),
            ("seed", seed),
            ("tools", tools or None),
            ("n", n if n != 1 else None),
        ):
            if value is not None:
                body[key] = value
        body.update(self.extra)
        raw = await asyncio.to_thread(self._post, "/chat/completions", body)
        choices = raw.get("choices") if isinstance(raw, dict) else None
        if not isinstance(choices, list) or not choices:
            raise OpenAIError(f"reply has no choices: {str(raw)[:200]}")
        if len(choices) != n:
            raise OpenAIError(
                f"asked {self.base_url} for n={n} choices and got {len(choices)}: the server "
                "does not honour n; send n=1 requests instead"
            )
        return [_parse_choice(c) for c in choices]

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(
                self.base_url + path, data=data, headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                try:
                    return json.loads(raw)
                except json.JSONDecodeError:
                    raise OpenAIError(f"reply is not JSON: {raw[:200]!r}") from None
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode(errors="replace")
                error = OpenAIError(f"HTTP {e.code} from {self.base_url}: {detail}", e.code)
                if e.code not in _RETRY_STATUS:
                    raise error from None
            except TimeoutError:
                error = OpenAITimeout(
                    f"{self.base_url} timed out: no reply within {self.timeout}s "
                    f"({attempt + 1} attempt{'s' * bool(attempt)})"
                )
            except (urllib.error.URLError, ConnectionError) as e:
                if isinstance(getattr(e, "reason", None), TimeoutError):
                    error = OpenAITimeout(
                        f"{self.base_url} timed out: no connection within {self.timeout}s"
                    )
                else:
                    error = OpenAIError(f"cannot reach {self.base_url}: {e}")
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2**attempt)
        raise error


def _parse_choice(choice: Any) -> Reply:
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise OpenAIError(f"choice without a message: {str(choice)[:200]}")
    content, calls = message.get("content"), message.get("tool_calls") or []
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls
    ):
        raise OpenAIError(f"malformed tool_calls: {str(calls)[:200]}")
    if not isinstance(content, str) and not (content is None and calls):
        raise OpenAIError(f"choice without text content or tool calls: {str(choice)[:200]}")
    return Reply(content or "", calls, choice.get("finish_reason"))


class EndpointConfig(pydantic.BaseModel):
    """An endpoint as written in YAML, e.g. ``env.options.judge`` or
    ``env.options.user_backend``. The key is read from the environment variable named by
    ``api_key_env`` so that it never lands in a run's saved config."""

    model_config = pydantic.ConfigDict(extra="forbid")

    base_url: str
    model: str = pydantic.Field(min_length=1)
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout: float = pydantic.Field(60.0, gt=0)
    retries: int = pydantic.Field(2, ge=0)
    temperature: float | None = pydantic.Field(None, ge=0)
    max_tokens: int | None = pydantic.Field(None, ge=1)
    extra: dict[str, Any] = {}

    @pydantic.field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {v!r}")
        return v


def endpoint_chat(value: Any, field: str) -> Any:
    """A chat model for an option that takes one: an object with ``async chat(messages)``
    as it is, or an :class:`EndpointConfig` mapping as an :class:`OpenAIChat`. A bad mapping
    raises ValueError naming ``field`` and each bad key."""
    if value is None or callable(getattr(value, "chat", None)):
        return value
    if not isinstance(value, dict):
        raise ValueError(
            f"{field}: expected an endpoint mapping {{base_url, model, ...}}, got {value!r}"
        )
    try:
        spec = EndpointConfig.model_validate(value)
    except pydantic.ValidationError as e:
        raise ValueError(
            "; ".join(
                f"{field}.{'.'.join(str(x) for x in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
                for err in e.errors()
            )
        ) from None
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    return OpenAIChat(
        spec.model,
        spec.base_url,
        key or "",
        timeout=spec.timeout,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        retries=spec.retries,
        extra=spec.extra,
    )
