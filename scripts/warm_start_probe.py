"""Does a tiny model copy its arguments from context, or guess them? Teacher-forced probe.

Plays the noise-free expert on held-out tasks, feeds each demonstration to the model and
reports, per tool argument, how often the model's most likely next token is the expert's first
token of that argument's value (where the copy is chosen), and how often every token of the
value is (an order id's first token is the ``#`` every id starts with; its digits come after).
A model that ignores its context scores the argument's base rate; a default warm start that
copied nothing scored 0.475 on `new` (the operator to write), exactly what picking by the bug's operator
family alone gives.

    .venv/bin/python scripts/warm_start_probe.py MODEL_DIR [--env code --option tiers=[0]]
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
import yaml
from transformers import LlamaForCausalLM

from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.registry import make_family
from turnrl.policy.models import turn_end_token
from turnrl.run.config import load_config
from turnrl.tiny.model import load_tokenizer
from turnrl.tiny.sft import value_spans
from turnrl.train.sft import play_demonstrations, render_demo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a tiny model folder (a run's model/ or a cached warm start)")
    ap.add_argument("--env", default="code")
    ap.add_argument("--option", action="append", default=[], help="env option key=value (YAML)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--max-turns", type=int, default=6)
    args = ap.parse_args()
    options = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in args.option)}
    if args.env == "code" and not options:
        options = {"tiers": [0]}
    torch.set_num_threads(2)
    model = LlamaForCausalLM.from_pretrained(args.model).eval()
    tok = load_tokenizer(args.model)
    renderer = ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))
    family = make_family(args.env, options)
    tasks = family.tasks(args.split, args.tasks, seed=0)
    episodes = play_demonstrations(family, tasks, 0.0, 0, args.max_turns)
    limits = load_config().rollout  # rendered as SFT renders them
    hits, whole, seen = collections.Counter(), collections.Counter(), collections.Counter()
    for ep in episodes:
        demo = render_demo(ep, renderer, ep.tools, limits.max_obs_tokens, limits.max_context_tokens)
        if demo is None:
            continue
        with torch.no_grad():
            predicted = model(torch.tensor([demo.token_ids])).logits[0].argmax(-1).tolist()
        right = [i > 0 and predicted[i - 1] == t for i, t in enumerate(demo.token_ids)]
        v = demo.value_mask  # values never touch: a frame token lies between any two
        positions = iter(i for i in range(len(v)) if v[i] and not v[i - 1])
        for call in ep.calls:
            spans = value_spans(call, renderer)[1]
            keys = [k for k, v in call.arguments.items() if json.dumps(v) != '""']
            if len(spans) != len(keys):  # a value the spans could not place: skip the call
                keys = [None] * len(spans)
            for key, (first, end) in zip(keys, spans):
                at = next(positions)
                if key is not None:
                    name = f"{call.name}.{key}"
                    seen[name] += 1
                    hits[name] += right[at]
                    whole[name] += all(right[at : at + end - first])
    print(f"{args.model}: {args.env} {options} {args.split}, {len(episodes)} expert episodes")
    print(f"  {'argument':28s} first token   whole value")
    for name in sorted(seen):
        n = seen[name]
        print(f"  {name:28s} {hits[name] / n:.3f}       {whole[name] / n:.3f}   ({n})")


if __name__ == "__main__":
    main()
