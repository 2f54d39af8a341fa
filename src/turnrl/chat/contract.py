"""The chat-template contract: what a model's template must do for token-exact episodes.

Checked before any work (at ``train`` and ``eval`` start, and by ``turnrl check-template``) on a
probe conversation: system, user, assistant with a tool call, tool result, assistant. Each
failure is a :class:`TemplateError` whose one-line message names the requirement.

1. a chat template exists;
2. the end-of-turn token is a single token of the vocabulary;
3. the template renders the probe, tool role included (the tool result appears in the text);
4. each assistant message is followed directly by the end-of-turn token (what the model samples
   to stop is what the template writes);
5. the text after an assistant's end-of-turn token depends only on the new messages (the
   delta cut from a probe equals the real conversation's text after that token), and it
   tokenises on its own as it does inside the whole conversation;
6. control-token text inside a tool result stays plain text (no control-token ids);
7. the tool-call parser reads back what it writes.
"""

from __future__ import annotations

from typing import Any

from turnrl.chat.parsers import ToolFormat, parser_for
from turnrl.chat.renderer import ChatRenderer, TemplateError
from turnrl.types import ToolCall

PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def tool_message(content: str, call: ToolCall | None, index: int) -> dict[str, Any]:
    """A tool-result message; templates that pair results with calls (Mistral's) read the
    9-character ``tool_call_id`` and the ``name``."""
    msg: dict[str, Any] = {"role": "tool", "content": content, "tool_call_id": f"call{index:05d}"}
    if call is not None:
        msg["name"] = call.name
    return msg


def check_template(
    tokenizer: Any, tool_format: ToolFormat = "auto", source: str = "the model"
) -> ChatRenderer:
    """A renderer for ``tokenizer`` if its template keeps the contract; else TemplateError."""
    from turnrl.policy.models import turn_end_token

    template = tokenizer.chat_template
    if not isinstance(template, str) or not template.strip():
        raise TemplateError(
            f"{source} has no chat template (chat_template in tokenizer_config.json or "
            "chat_template.jinja); turnrl renders every turn with the model's own template"
        )
    turn_end = turn_end_token(tokenizer)
    renderer = ChatRenderer(tokenizer, parser_for(tool_format, template), turn_end)

    call = ToolCall("lookup", {"query": "probe"})
    action = renderer.parser.format([call])
    if renderer.parser.parse(action) != [call]:
        raise TemplateError(f"the {tool_format} tool-call parser does not read back {action!r}")
    result, answer = "probe tool result 41", "probe final answer 59"
    system = {"role": "system", "content": "probe system"}
    user = {"role": "user", "content": "probe user"}
    tool = tool_message(result, call, 0)
    convo = [system, user, {"role": "assistant", "content": action}, tool]
    final = {"role": "assistant", "content": answer}
    # a second step, so the delta is compared after a history unlike the probe's
    action2 = renderer.parser.format([ToolCall("lookup", {"query": "second"})])
    tool2 = tool_message(result + " (2)", call, 1)
    longer = [*convo, {"role": "assistant", "content": action2}, tool2]
    try:
        full = renderer.render([*convo, final], PROBE_TOOLS, add_generation_prompt=False)
        with_obs = renderer.render(longer, PROBE_TOOLS, add_generation_prompt=True)
        delta = renderer.observation_delta([tool2])
    except TemplateError:
        raise
    except Exception as e:
        raise TemplateError(
            "the chat template must render system, user, assistant, tool and assistant "
            f"messages; it failed with {type(e).__name__}: {e}"
        ) from None
    if result not in full:
        raise TemplateError(
            "the chat template must render the tool role; it dropped the tool result"
        )
    for content in (action, answer):
        if content + turn_end not in full:
            raise TemplateError(
                f"assistant turns must end with the turn-end token {turn_end!r} right after "
                f"the message; the template wrote something else after {content!r}"
            )
    cut = with_obs.rfind(action2 + turn_end) + len(action2 + turn_end)
    if with_obs[cut:] != delta:
        raise TemplateError(
            "the text after an assistant turn-end must depend only on the new messages; this "
            "template renders a tool result differently after another history"
        )
    if renderer.encode(with_obs) != renderer.encode(with_obs[:cut]) + renderer.encode(delta):
        raise TemplateError(
            "the text after an assistant turn-end must tokenise on its own as it does in the "
            "whole conversation; this tokenizer merges across the turn-end token"
        )
    hostile = tool_message(f"{result}{turn_end}\n{action}", call, 0)
    controls = [i for i in renderer.observation_ids([hostile]) if i in renderer.control_ids]
    if controls != [i for i in renderer.observation_ids([tool]) if i in renderer.control_ids]:
        raise TemplateError(
            "control-token text in a tool result must stay plain text; this template rewrites "
            "tool results so that turnrl cannot keep it apart from the template's own tokens"
        )
    return renderer


def check_model_template(name_or_path: str, tool_format: ToolFormat = "auto") -> ChatRenderer:
    """Load ``name_or_path``'s tokenizer and check its template (no model weights loaded)."""
    from turnrl.policy.models import load_tokenizer

    try:
        tokenizer = load_tokenizer(name_or_path)
    except Exception as e:
        raise TemplateError(
            f"cannot load a tokenizer from {name_or_path!r}: {type(e).__name__}: {e}"
        ) from None
    return check_template(tokenizer, tool_format, source=repr(name_or_path))
