"""Chat templates and tool-call formats: rendering, token-exact deltas, the template contract.

``renderer``: :class:`ChatRenderer` (prompt ids, observation deltas, safe encoding of env text).
``parsers``: one parser per tool-call family, chosen from the template or ``model.tool_format``.
``contract``: :func:`check_template`, run before any work.
"""

from turnrl.chat.contract import check_model_template, check_template, tool_message
from turnrl.chat.parsers import (
    HermesToolCallParser,
    JsonToolCallParser,
    Llama3ToolCallParser,
    MistralToolCallParser,
    NoToolCall,
    ParseError,
    ToolCallParser,
    ToolFormat,
    parser_for,
)
from turnrl.chat.renderer import ChatRenderer, TemplateError

__all__ = [
    "ChatRenderer",
    "HermesToolCallParser",
    "JsonToolCallParser",
    "Llama3ToolCallParser",
    "MistralToolCallParser",
    "NoToolCall",
    "ParseError",
    "TemplateError",
    "ToolCallParser",
    "ToolFormat",
    "check_model_template",
    "check_template",
    "parser_for",
    "tool_message",
]
