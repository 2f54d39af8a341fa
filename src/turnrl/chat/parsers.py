"""Tool-call formats: parse a sampled action into calls, and format calls as the family writes
them (the text of scripted demonstrations).

A parser raises :class:`NoToolCall` for a reply that holds no attempt at a call (a plain-text
answer, which an env may accept as its final answer) and :class:`ParseError` for an attempt that
is malformed (shown to the model, counted as a parse error).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, Protocol

from turnrl.types import ToolCall

ToolFormat = Literal["auto", "hermes", "llama3", "mistral", "json"]


class ParseError(ValueError):
    """A malformed tool call; the message is shown to the model."""


class NoToolCall(ParseError):
    """The reply holds no tool call at all: a plain-text answer."""


class ToolCallParser(Protocol):
    # how the tool list tells a model whose template has no tool support to write a call
    how: str

    def parse(self, text: str) -> list[ToolCall]: ...
    def format(self, calls: list[ToolCall]) -> str: ...


def _call(obj: Any, args_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall:
    """A ToolCall from a decoded JSON object ``{"name": ..., "arguments"|"parameters": {...}}``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ParseError('tool call must be a JSON object with a string "name"')
    args: Any = {}
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            raise ParseError(f'"{key}" is a string that is not valid JSON') from None
    if not isinstance(args, dict):
        raise ParseError('"arguments" must be a JSON object')
    return ToolCall(obj["name"], args)


def _json_values(text: str, what: str) -> list[Any]:
    """Decode consecutive JSON values (separated by whitespace or ``;``) filling ``text``."""
    decoder, values, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n;":
            pos += 1
        if pos == len(text):
            return values
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise ParseError(f"{what} is not valid JSON ({e.msg} at char {e.pos})") from None
        values.append(value)


class HermesToolCallParser:
    """Hermes/Qwen style: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    how = "<tool_call>{json}</tool_call>"
    pattern = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str) -> list[ToolCall]:
        bodies = self.pattern.findall(text)
        if not bodies:
            if "<tool_call>" in text:
                raise ParseError("a <tool_call> tag was opened but never closed with </tool_call>")
            raise NoToolCall(
                'no tool call found; reply with <tool_call>{"name": ..., "arguments": {...}}'
                "</tool_call>"
            )
        calls = []
        for body in bodies:
            try:
                obj = json.loads(body)
            except json.JSONDecodeError as e:
                raise ParseError(f"tool call is not valid JSON ({e.msg} at char {e.pos})") from None
            calls.append(_call(obj, ("arguments",)))
        return calls

    def format(self, calls: list[ToolCall]) -> str:
        return "".join(
            "<tool_call>"
            + json.dumps({"name": c.name, "arguments": c.arguments}, separators=(",", ":"))
            + "</tool_call>"
            for c in calls
        )


class Llama3ToolCallParser:
    """Llama 3.x JSON tool calls: ``{"name": ..., "parameters": {...}}``, the whole reply,
    optionally after ``<|python_tag|>``; several calls are separated by ``;``."""

    how = '{"name": ..., "parameters": {...}} as the whole reply'
    tag = "<|python_tag|>"

    def parse(self, text: str) -> list[ToolCall]:
        body = text.split(self.tag, 1)[1] if self.tag in text else text
        body = body.strip()
        if not body.startswith("{"):
            if self.tag in text:
                raise ParseError(f"{self.tag} must be followed by a JSON tool call")
            raise NoToolCall(
                'no tool call found; reply with {"name": ..., "parameters": {...}} alone'
            )
        values = _json_values(body, "tool call")
        return [_call(v, ("parameters", "arguments")) for v in values]

    def format(self, calls: list[ToolCall]) -> str:
        return "; ".join(
            json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False)
            for c in calls
        )


class MistralToolCallParser:
    """Mistral ``[TOOL_CALLS]``: the JSON list ``[TOOL_CALLS][{"name": ..., "arguments":
    {...}}]`` (v3 tokenizers) or ``[TOOL_CALLS]name[ARGS]{...}`` per call (newer ones; an
    optional ``[CALL_ID]id`` before ``[ARGS]``). Both parse; ``args_style`` picks what
    :meth:`format` writes."""

    how = '[TOOL_CALLS][{"name": ..., "arguments": {...}}]'
    tag = "[TOOL_CALLS]"
    segment = re.compile(r"^([^\[\]{}\s]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\](.*)$", re.DOTALL)

    def __init__(self, args_style: bool = False) -> None:
        self.args_style = args_style
        if args_style:
            self.how = "[TOOL_CALLS]name[ARGS]{json}"

    def parse(self, text: str) -> list[ToolCall]:
        if self.tag not in text:
            raise NoToolCall(f"no tool call found; reply with {self.how}")
        parts = [p.strip() for p in text.split(self.tag)[1:]]
        if len(parts) == 1 and parts[0].startswith("["):
            values = _json_values(parts[0], "[TOOL_CALLS] list")
            if len(values) != 1 or not isinstance(values[0], list) or not values[0]:
                raise ParseError("[TOOL_CALLS] must be followed by one JSON list of calls")
            return [_call(v) for v in values[0]]
        calls = []
        for part in parts:
            m = self.segment.match(part)
            if m is None:
                raise ParseError("[TOOL_CALLS] must be followed by a JSON list or name[ARGS]{json}")
            values = _json_values(m.group(2), "[ARGS]")
            if len(values) != 1:
                raise ParseError("[ARGS] must be followed by one JSON object")
            calls.append(_call({"name": m.group(1), "arguments": values[0]}))
        return calls

    def format(self, calls: list[ToolCall]) -> str:
        if self.args_style:
            return "".join(
                f"{self.tag}{c.name}[ARGS]{json.dumps(c.arguments, ensure_ascii=False)}"
                for c in calls
            )
        body = [{"name": c.name, "arguments": c.arguments} for c in calls]
        return self.tag + json.dumps(body, ensure_ascii=False)


class JsonToolCallParser:
    """Plain JSON, for templates with no tool format of their own: the first JSON object (or
    list of objects) in the reply, optionally in a Markdown code fence. A reply without ``{``
    or ``[`` is plain text."""

    how = '{"name": ..., "arguments": {...}}'
    fence = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)

    def parse(self, text: str) -> list[ToolCall]:
        fenced = self.fence.search(text)
        body = fenced.group(1) if fenced else text
        starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
        if not starts:
            raise NoToolCall(f"no tool call found; reply with {self.how}")
        try:
            value, _ = json.JSONDecoder().raw_decode(body, min(starts))
        except json.JSONDecodeError as e:
            raise ParseError(f"tool call is not valid JSON ({e.msg} at char {e.pos})") from None
        return [_call(v) for v in (value if isinstance(value, list) else [value])]

    def format(self, calls: list[ToolCall]) -> str:
        objs = [{"name": c.name, "arguments": c.arguments} for c in calls]
        return json.dumps(objs[0] if len(objs) == 1 else objs, ensure_ascii=False)


def parser_for(tool_format: ToolFormat, chat_template: str | None) -> ToolCallParser:
    """The parser for ``tool_format``; ``auto`` reads the family from the template's own text
    (a template with no tool format gets Hermes, which the tool list then describes)."""
    template = chat_template or ""
    if tool_format == "auto":
        if "[TOOL_CALLS]" in template:
            tool_format = "mistral"
        elif "<|python_tag|>" in template or '"parameters": ' in template:
            tool_format = "llama3"
        else:
            tool_format = "hermes"
    if tool_format == "hermes":
        return HermesToolCallParser()
    if tool_format == "llama3":
        return Llama3ToolCallParser()
    if tool_format == "mistral":
        return MistralToolCallParser(args_style="[ARGS]" in template)
    if tool_format == "json":
        return JsonToolCallParser()
    raise ValueError(f"unknown tool format {tool_format!r}")
