"""Chat rendering with the tokenizer's own template, observation deltas, and safe encoding.

The agent loop never re-renders history. It tokenises the first prompt once, appends sampled
ids as they are, and for each new observation tokenises only the *delta*: the template renders
a probe conversation whose last assistant message is a marker, followed by the new messages and
a generation prompt, and the text after the marker's turn-end token is what the template writes
for the new messages. Only what follows the last assistant turn-end is read, so templates that
render the *last* assistant turn differently (Qwen3's empty reasoning block) or rewrite older
turns (dropping reasoning from history) still give exact deltas. The delta includes whatever
the template writes after the turn-end token (ChatML's newline), which the model never sampled
and so gets loss_mask 0.

Env text (tool results, task statements) is encoded with control-token text as plain text: a
file holding ``<|im_end|>\\n<|im_start|>assistant`` must not end the turn for the model. The
env's strings are wrapped in private-use markers before rendering, so after rendering the
template's own control tokens (unmarked) and the env's (marked) can be told apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from turnrl.chat.parsers import ToolCallParser

# Private-use characters around control-token text from env strings; stripped from env text
# first, so they cannot be forged.
_START, _END = "\U000f0000", "\U000f0001"
# The probe assistant message whose turn-end marks where new messages begin.
PROBE_MARK = "turnrl-probe-assistant-7f3a"
PROBE_BASE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


class TemplateError(ValueError):
    """The chat template cannot carry token-exact episodes; the message names the requirement."""


def control_tokens(tokenizer: Any) -> list[str]:
    """Added tokens that steer the chat: every special one, and non-special ones the template
    writes itself (Qwen's ``<tool_response>``). Tokens an env merely shares with the vocabulary
    (a tool name added to a small BPE) stay ordinary text."""
    template = tokenizer.chat_template or ""
    out = []
    for tok in getattr(tokenizer, "added_tokens_decoder", {}).values():
        text = str(tok.content)
        if text and (tok.special or text in template):
            out.append(text)
    out += [t for t in getattr(tokenizer, "all_special_tokens", []) if t and t not in out]
    return sorted(set(out), key=len, reverse=True)


@dataclass
class ChatRenderer:
    """Renders messages with ``tokenizer.apply_chat_template`` and cuts observation deltas.

    ``turn_end`` is the text of the token that ends an assistant turn (ChatML ``<|im_end|>``);
    it is also the generation stop token.
    """

    tokenizer: Any
    parser: ToolCallParser
    turn_end: str

    def __post_init__(self) -> None:
        self.turn_end_id = self.tokenizer.convert_tokens_to_ids(self.turn_end)
        if not (isinstance(self.turn_end_id, int) and self.turn_end_id >= 0):
            raise TemplateError(
                f"turn-end token {self.turn_end!r} is not a single token of this tokenizer"
            )
        self.template_takes_tools = "tools" in (self.tokenizer.chat_template or "")
        self.controls = control_tokens(self.tokenizer)
        alternatives = "|".join(map(re.escape, self.controls)) or "(?!)"
        self._control_re = re.compile(alternatives)
        self._marked_re = re.compile(f"{_START}({alternatives}){_END}|[{_START}{_END}]")
        self.control_ids = {
            i for i in self.tokenizer.convert_tokens_to_ids(self.controls) if isinstance(i, int)
        }

    # --- rendering -------------------------------------------------------------------------

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict] | None = None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        messages = self.with_tools(messages, tools)
        kwargs = {"tools": tools} if tools and self.template_takes_tools else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def with_tools(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> list[dict]:
        """The messages as the template is given them: a template without tool support gets the
        tool schemas appended to the system message (one JSON line each, with how to call one);
        one with tool support gets the messages unchanged and ``tools`` beside them."""
        if not tools or self.template_takes_tools:
            return messages
        listing = "\n".join(json.dumps(t["function"], separators=(",", ":")) for t in tools)
        how = getattr(self.parser, "how", "<tool_call>{json}</tool_call>")
        text = f"\n\nTools (call one per turn as {how}):\n{listing}"
        out = [dict(m) for m in messages]
        if out and out[0]["role"] == "system":
            out[0]["content"] += text
        else:
            out.insert(0, {"role": "system", "content": text.strip()})
        return out

    def observation_delta(self, new_messages: list[dict[str, Any]]) -> str:
        """Text to append after a sampled turn-end token so that the sequence continues as the
        template renders ``new_messages`` followed by a generation prompt."""
        after = self.tokenizer.apply_chat_template(
            [*PROBE_BASE, {"role": "assistant", "content": PROBE_MARK}, *new_messages],
            tokenize=False,
            add_generation_prompt=True,
        )
        return after[self._probe_turn_end(after) :]

    def _probe_turn_end(self, rendered: str) -> int:
        """Index just after the turn-end token that closes the probe assistant message."""
        at = rendered.rfind(PROBE_MARK)
        end = rendered.find(self.turn_end, at) if at >= 0 else -1
        if end < 0:
            raise TemplateError(
                f"assistant turns must end with the turn-end token {self.turn_end!r}; "
                "the template wrote none after the assistant message"
            )
        return end + len(self.turn_end)

    # --- encoding --------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Template text: control-token text becomes control tokens."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_plain(self, text: str) -> list[int]:
        """Text that must never yield an added token (control-token text from an env)."""
        backend = self.tokenizer.backend_tokenizer
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        pieces = [text]
        if backend.pre_tokenizer is not None:
            pieces = [p for p, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
        return [t.id for p in pieces for t in backend.model.tokenize(p)]

    def mark(self, text: str) -> str:
        """Wrap control-token text in an env string so :meth:`encode_marked` keeps it plain."""
        text = text.replace(_START, "").replace(_END, "")
        return self._control_re.sub(lambda m: f"{_START}{m.group(0)}{_END}", text)

    def encode_marked(self, text: str) -> list[int]:
        """Encode rendered text: marked control-token text as plain text, the rest (with the
        template's own control tokens) normally. Unmarked text is encoded exactly as
        :meth:`encode` would; a marker splits the text so nothing joins across it."""
        pieces = self._marked_re.split(text)  # [text, token|None, text, token|None, ..., text]
        ids = self.encode(pieces[0]) if pieces[0] else []
        for i in range(1, len(pieces), 2):
            if pieces[i]:
                ids += self.encode_plain(pieces[i])
            if pieces[i + 1]:
                ids += self.encode(pieces[i + 1])
        return ids

    def env_ids(self, text: str) -> list[int]:
        """The ids of an env string on its own (for counting and clipping)."""
        return self.encode_marked(self.mark(text))

    def _marked_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**m, "content": self.mark(m["content"])} if isinstance(m.get("content"), str) else m
            for m in messages
        ]

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> list[int]:
        """The first prompt; the env's messages are encoded with control-token text plain."""
        marked = self._marked_messages(messages)
        return self.encode_marked(self.render(marked, tools, add_generation_prompt=True))

    def observation_ids(self, new_messages: list[dict[str, Any]]) -> list[int]:
        """Ids of :meth:`observation_delta`, with the env's control-token text plain."""
        return self.encode_marked(self.observation_delta(self._marked_messages(new_messages)))

    # --- decoding --------------------------------------------------------------------------

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def action_text(self, ids: list[int]) -> str:
        """The assistant message content of a sampled action (turn-end token removed)."""
        text = self.decode(ids)
        return text[: -len(self.turn_end)] if text.endswith(self.turn_end) else text
