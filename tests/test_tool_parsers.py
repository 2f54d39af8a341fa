"""Tool-call formats: each family's parser reads its own and the family's variants, writes what
it reads, tells a plain-text reply (NoToolCall) from a malformed call (ParseError), and is picked
from the template text or by name."""

from __future__ import annotations

import pytest

from tests.chat_families import template
from turnrl.chat import (
    HermesToolCallParser,
    JsonToolCallParser,
    Llama3ToolCallParser,
    MistralToolCallParser,
    NoToolCall,
    ParseError,
    parser_for,
)
from turnrl.types import ToolCall

CALLS = [ToolCall("read_file", {"path": "a.py", "n": 3}), ToolCall("grep", {"q": "ünï 漢"})]
PARSERS = [
    HermesToolCallParser(),
    Llama3ToolCallParser(),
    MistralToolCallParser(),
    MistralToolCallParser(args_style=True),
    JsonToolCallParser(),
]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: f"{type(p).__name__}")
def test_format_then_parse_round_trips(parser):
    for calls in (CALLS[:1], CALLS):
        assert parser.parse(parser.format(calls)) == calls
    with pytest.raises(NoToolCall):
        parser.parse("The answer is 7.")


@pytest.mark.parametrize(
    "parser, text, calls",
    [
        (Llama3ToolCallParser(), '<|python_tag|>{"name": "f", "parameters": {"x": 1}}', 1),
        (Llama3ToolCallParser(), ' {"name": "f", "arguments": {"x": 1}}; {"name": "g"} ', 2),
        (Llama3ToolCallParser(), '{"name": "f", "parameters": "{\\"x\\": 1}"}', 1),
        (MistralToolCallParser(), '[TOOL_CALLS] [{"name": "f", "arguments": {"x": 1}}]', 1),
        (MistralToolCallParser(), '[TOOL_CALLS]f[ARGS]{"x": 1}[TOOL_CALLS]g[ARGS]{}', 2),
        (MistralToolCallParser(), '[TOOL_CALLS]f[CALL_ID]abc123def[ARGS]{"x": 1}', 1),
        (JsonToolCallParser(), 'Sure:\n```json\n{"name": "f", "arguments": {"x": 1}}\n```', 1),
        (JsonToolCallParser(), '[{"name": "f", "arguments": {}}, {"name": "g"}]', 2),
    ],
)
def test_variants_of_each_family_parse(parser, text, calls):
    parsed = parser.parse(text)
    assert len(parsed) == calls and parsed[0].name == "f"


@pytest.mark.parametrize(
    "parser, text",
    [
        (HermesToolCallParser(), '<tool_call>{"name": "f", "arguments": {}'),
        (HermesToolCallParser(), "<tool_call>{oops}</tool_call>"),
        (Llama3ToolCallParser(), '{"name": "f", "parameters": {"x": }'),
        (Llama3ToolCallParser(), "<|python_tag|>print(1)"),
        (Llama3ToolCallParser(), '{"parameters": {}}'),
        (MistralToolCallParser(), "[TOOL_CALLS][{]"),
        (MistralToolCallParser(), "[TOOL_CALLS]f{}"),
        (MistralToolCallParser(), '[TOOL_CALLS][{"name": "f", "arguments": [1]}]'),
        (JsonToolCallParser(), '{"name": 3}'),
    ],
)
def test_malformed_calls_are_parse_errors_not_plain_text(parser, text):
    with pytest.raises(ParseError) as e:
        parser.parse(text)
    assert not isinstance(e.value, NoToolCall)


def test_parser_is_picked_from_the_template_or_by_name():
    assert isinstance(parser_for("auto", template("qwen2.5")), HermesToolCallParser)
    assert isinstance(parser_for("auto", template("llama3")), Llama3ToolCallParser)
    mistral = parser_for("auto", template("mistral"))
    assert isinstance(mistral, MistralToolCallParser) and not mistral.args_style
    newer = parser_for("auto", "{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}")
    assert isinstance(newer, MistralToolCallParser) and newer.args_style
    assert isinstance(parser_for("auto", None), HermesToolCallParser)
    assert isinstance(parser_for("json", template("qwen2.5")), JsonToolCallParser)
    assert isinstance(parser_for("llama3", None), Llama3ToolCallParser)
