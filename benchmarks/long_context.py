"""Context strategies on the long-horizon web family at a fixed context budget.

The task family: ``web`` with ``compare=N``: "Which of A, B, C and D has the largest
population?". An agent must open N pages, read one number on each and remember all N until it
answers; an expert episode is longer than a 1,024-token context.

The policy acts only on what its context shows (no memory outside the tokens it is given):
``ContextReader`` decodes the prompt it is handed, reads the question, the values visible in
``find`` results (and in its own notes and summaries), and opens the next page whose value it
cannot see, finds the value, or answers with the largest. Asked for a summary, it writes the
values it can see. With ``notes`` it also copies each value it reads into its reply ("Noted:
A = 123"), so its own turns carry the information. Its actions are encoded with SmolLM2's
tokenizer and chat template (real token counts); a tiny random model of SmolLM2's vocabulary
scores each action over the whole context, as a sampler's forward pass would (the time per
episode grows with the context it reads).

So the table measures whether a strategy keeps the information this policy needs (success),
what it costs the trainer (tokens in the rows it trains on: every segment's tokens, and the
sampled ones among them) and the wall time per episode. ``unlimited`` (no budget) is the
ceiling; ``truncate`` is today's behaviour.

    .venv/bin/python benchmarks/long_context.py [--tasks 16] [--compare 4] [--budget 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

import torch

from turnrl.chat.contract import check_template
from turnrl.envs.web.corpus import LABELS, wiki_path
from turnrl.envs.web.family import WebFamily
from turnrl.envs.web.questions import SUPERLATIVES
from turnrl.policy.base import Generation, SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import SMOLLM2, load_tokenizer
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.context import SUMMARY_REQUEST, ContextConfig
from turnrl.types import TerminationReason, ToolCall

_ATTR = {phrase: attr for attr, phrase in SUPERLATIVES.items()}
_QUESTION = re.compile(r"Question: Which of (.+) has (.+)\?")
_MESSAGE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
_NOTE = re.compile(r"^(?:Noted: )?([A-Z][\w ]*?) = (\d+)\s*$", re.MULTILINE)


class ContextReader:
    """Decides the next reply from the visible conversation only (see the module docstring)."""

    def __init__(self, notes: bool, format_call) -> None:
        self.notes, self.format_call = notes, format_call

    def act(self, messages: list[tuple[str, str]]) -> str:
        question = _QUESTION.search(messages[1][1])
        names, phrase = question.group(1), question.group(2)
        titles = names.rsplit(" and ", 1)
        titles = titles[0].split(", ") + titles[1:]
        label = LABELS[_ATTR[phrase]]
        path_title = {wiki_path(t): t for t in titles}
        found = re.compile(
            rf"'{re.escape(label)}:' in (/wiki/\S+):\np\d+: {re.escape(label)}: (\d+)"
        )
        known: dict[str, int] = {}
        noted: set[str] = set()
        for i, (role, content) in enumerate(messages):
            if role == "tool":
                for path, value in found.findall(content):
                    if path in path_title:
                        known[path_title[path]] = int(value)
            if role == "assistant" or i == 1:  # its notes, or a summary inside the task
                for title, value in _NOTE.findall(content):
                    if title in titles:
                        known[title] = int(value)
                        noted.add(title)
        if messages[-1][0] == "user" and SUMMARY_REQUEST in messages[-1][1]:
            lines = [f"{t} = {known[t]}" for t in titles if t in known]
            left = [t for t in titles if t not in known]
            return "\n".join(lines + ([f"Still to read: {', '.join(left)}"] if left else []))
        note = ""
        if self.notes:
            new = [t for t in titles if t in known and t not in noted]
            note = "".join(f"Noted: {t} = {known[t]}\n" for t in new)
        missing = [t for t in titles if t not in known]
        if not missing:
            best = max(titles, key=lambda t: known[t])
            return note + self.format_call(ToolCall("answer", {"text": best}))
        path = wiki_path(missing[0])
        last_tool = next((c for r, c in reversed(messages) if r == "tool"), "")
        if last_tool.startswith(f"{path} (page"):
            return note + self.format_call(ToolCall("find", {"text": f"{label}:"}))
        return note + self.format_call(ToolCall("open", {"url": path}))


class ReaderBackend:
    """A sampler whose replies come from :class:`ContextReader`; a tiny model scores them over
    the whole context (the forward pass a real sampler would run)."""

    version = 0

    def __init__(self, renderer, scorer: HFPolicy, notes: bool) -> None:
        self.renderer, self.scorer = renderer, scorer
        self.reader = ContextReader(notes, lambda c: renderer.parser.format([c]))

    def generate_batch(self, prompts, params: SamplingParams, seeds=None) -> list[Generation]:
        out = []
        for prompt in prompts:
            messages = _MESSAGE.findall(self.renderer.decode(prompt))[:-1]  # [-1]: our turn
            text = self.reader.act([(r, c.strip("\n")) for r, c in messages])
            ids = self.renderer.encode(text) + [self.renderer.turn_end_id]
            out.append(Generation(ids, self.score(prompt, ids), True, self.version))
        return out

    @torch.no_grad()
    def score(self, prompt: list[int], ids: list[int]) -> list[float]:
        """log p(ids | prompt): the trunk reads the whole context, the head only the reply."""
        model = self.scorer.model
        seq = torch.tensor([prompt + ids])  # [1, T]
        hidden = model.model(input_ids=seq).last_hidden_state[0, len(prompt) - 1 : -1]  # [N, H]
        logp = model.lm_head(hidden).float().log_softmax(-1)  # [N, V]
        return logp.gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1).tolist()


def run_config(family, tasks, renderer, scorer, notes, limits) -> dict[str, float]:
    backend = ReaderBackend(renderer, scorer, notes)
    reqs = [EpisodeRequest(t, t.id, i) for i, t in enumerate(tasks)]

    async def go():
        batcher = GenerationBatcher(backend, SamplingParams(stop_token_ids=(renderer.turn_end_id,)))
        return await collect(reqs, family.make_env, renderer, batcher, limits, max_concurrency=4)

    t0 = time.monotonic()
    trajs = asyncio.run(go())
    wall = time.monotonic() - t0
    n = len(trajs)
    for t in trajs:
        t.validate()
    return {
        "success": sum(t.metrics.get("success", 0.0) for t in trajs) / n,
        "context_limit": sum(t.termination is TerminationReason.CONTEXT_LIMIT for t in trajs) / n,
        "turns": sum(len(t.turns) for t in trajs) / n,
        "segments": sum(len(t.segments()) for t in trajs) / n,
        "tokens": sum(len(t.token_ids) for t in trajs) / n,
        "sampled": sum(t.num_action_tokens for t in trajs) / n,
        "peak": max(e - s for t in trajs for s, e in t.segments()),
        "time_s": wall / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--compare", type=int, default=4)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--threshold", type=int, default=768)
    ap.add_argument("--max-turns", type=int, default=24)
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok = load_tokenizer(SMOLLM2)
    renderer = check_template(tok)
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    scorer = HFPolicy(LlamaForCausalLM(config).eval(), tok.pad_token_id)
    family = WebFamily(compare=args.compare)
    tasks = family.tasks("test", args.tasks)
    base = dict(max_turns=args.max_turns, max_new_tokens=192, max_obs_tokens=512)
    configs = {
        "unlimited": RolloutLimits(max_context_tokens=1_000_000, **base),
        "truncate": RolloutLimits(max_context_tokens=args.budget, **base),
        "drop_observations": RolloutLimits(
            max_context_tokens=args.budget,
            context=ContextConfig("drop_observations", args.threshold, keep_observations=1),
            **base,
        ),
        "summarize": RolloutLimits(
            max_context_tokens=args.budget,
            context=ContextConfig("summarize", args.threshold, summary_max_tokens=192),
            **base,
        ),
    }
    print(
        f"web compare={args.compare}, {len(tasks)} held-out tasks, budget {args.budget} tokens, "
        f"threshold {args.threshold}, max_turns {args.max_turns} (SmolLM2 tokenizer)"
    )
    head = (
        "| policy | strategy | success | context_limit | turns | segments | tokens/episode "
        "| sampled/episode | tokens vs truncate | peak context | time/episode (s) |"
    )
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    try:
        for notes in (False, True):
            rows = {}
            for name, limits in configs.items():
                rows[name] = run_config(family, tasks, renderer, scorer, notes, limits)
            for name, r in rows.items():
                ratio = r["tokens"] / rows["truncate"]["tokens"]
                print(
                    f"| {'reader+notes' if notes else 'reader'} | {name} | {r['success']:.2f} "
                    f"| {r['context_limit']:.2f} | {r['turns']:.1f} | {r['segments']:.2f} "
                    f"| {r['tokens']:.0f} | {r['sampled']:.0f} | {ratio:.2f}x | {r['peak']} "
                    f"| {r['time_s']:.2f} |"
                )
    finally:
        family.close()


if __name__ == "__main__":
    main()
