"""A frozen model that writes the summaries of ``rollout.context=summarize``.

With ``rollout.summarizer=NAME_OR_PATH`` the policy does not write its own summary: this model
reads the policy's current context as text and writes one, which enters the next segment's
prefix as an observation (mask 0), so no gradient reaches it. It has its own tokenizer and
chat template and never changes during the run. One copy per process is loaded on first use
and shared by every episode; its generations run one at a time in a worker thread (summaries
are rare next to actions).
"""

from __future__ import annotations

import asyncio
import functools
import threading

from turnrl.rollout.context import SUMMARY_REQUEST


class FrozenSummarizer:
    def __init__(self, name_or_path: str) -> None:
        from turnrl.chat.contract import check_template
        from turnrl.policy.hf import HFPolicy
        from turnrl.policy.models import load_model, load_tokenizer

        tok = load_tokenizer(name_or_path)
        self.renderer = check_template(tok, source=f"rollout.summarizer {name_or_path}")
        self.policy = HFPolicy(load_model(name_or_path).eval(), tok.pad_token_id)
        self._lock = threading.Lock()

    def _summarize(self, conversation: str, max_new_tokens: int, seed: int) -> str:
        from turnrl.policy.base import SamplingParams

        messages = [{"role": "user", "content": f"{conversation}\n\n{SUMMARY_REQUEST}"}]
        ids = self.renderer.prompt_ids(messages, None)
        params = SamplingParams(
            temperature=0.0,  # greedy: the same context gets the same summary
            max_new_tokens=max_new_tokens,
            stop_token_ids=(self.renderer.turn_end_id,),
        )
        with self._lock:
            gen = self.policy.generate_batch([ids], params, [seed])[0]
        return self.renderer.action_text(gen.token_ids)

    async def summarize(self, conversation: str, max_new_tokens: int, seed: int) -> str:
        """A summary of ``conversation`` (the policy's context as text), greedy decoded."""
        return await asyncio.to_thread(self._summarize, conversation, max_new_tokens, seed)


_LOADING = threading.Lock()


def frozen_summarizer(name_or_path: str) -> FrozenSummarizer:
    """The process's one copy of the summarizer model (episodes that ask at once wait for the
    first load instead of loading copies)."""
    with _LOADING:
        return _load(name_or_path)


@functools.cache
def _load(name_or_path: str) -> FrozenSummarizer:
    return FrozenSummarizer(name_or_path)
