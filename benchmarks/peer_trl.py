"""TRL's GRPOTrainer beside turnrl on the same work: held-out success against training time.

Both sides start from the same model (a turnrl SFT warm start, or ``--start DIR``), train for
the recipe's ``steps`` RL steps on the same tasks in the same order, with the same batch shape
and sampling budget, and are scored by turnrl's own evaluator (the run's held-out tasks and
sampling seed) at the same step counts. It writes one plot and one table:

    OUT/peer_trl.png    held-out success against training wall-clock, both sides
    OUT/peer_trl.md     the table, the time turnrl needs to reach TRL's final success, the ratio
    OUT/peer_trl.json   every figure, the settings, versions and machine load
    OUT/turnrl/         the turnrl run (metrics.jsonl, trajectories for ``turnrl view``)
    OUT/trl/log_history.json   TRL's per-step logs (reward, tool calls, completion lengths)

The target of issue 41: turnrl reaches TRL's final held-out success in at most half of TRL's
training time (ratio <= 0.5). turnrl's time to reach it is its training time at the first
checkpoint scoring at least TRL's final success (so, at checkpoint granularity, an upper
bound); when TRL's final success is no better than the start there is no ratio.

Install TRL (an optional extra used by this benchmark alone; the lock keeps torch and
transformers where they are):

    .venv/bin/pip install -e '.[peer]' -c requirements.lock

Run it on a recipe or config (key=value overrides as for ``turnrl train``):

    .venv/bin/python benchmarks/peer_trl.py --recipe NAME [key=value ...] [--out DIR]
    .venv/bin/python benchmarks/peer_trl.py --config FILE --start RUN/model
    .venv/bin/python benchmarks/peer_trl.py --quick --config FILE    # smoke: 2 steps, tiny sizes

Without ``--start`` the start is made by turnrl's warm start (``turnrl train ... steps=0``, the
recipe's ``sft`` section) into ``OUT/warm-start``, and reused from there by later runs with the
same config; a recipe without SFT starts both sides from ``model.name`` itself. ``--eval-every
K`` (default: the config's ``eval_every``, else steps/4) sets the checkpoint steps. ``--sides
trl`` (or ``turnrl``) runs one side; the table still compares both when OUT's ``peer_trl.json``
holds the other side, finished, from the same config and start (so a side can be rerun alone).

What is the same on both sides
------------------------------
- The starting weights; with ``model.lora`` both train fresh LoRA adapters of the config's rank,
  alpha and target modules on top of them (a turnrl recipe run instead keeps training the
  adapters its SFT made; here both sides start from the merged warm start).
- The tasks: TRL's dataset lists, in order and unshuffled, the very tasks turnrl samples at each
  step (``sample_requests``), each repeated ``group_size`` times by TRL's sampler.
- The prompt tokens: TRL renders each prompt with a ChatML template that writes the system
  message, the tool list and the statement exactly as turnrl's renderer does (the tool list in
  the system message, as the warm start was trained on), and tool results as turnrl's
  observation deltas; both are checked token for token before TRL starts.
- The env: TRL's environment is a thin synchronous wrapper around the turnrl env's own tools
  (each tool a method, so TRL shows it as one); a tool call goes through ``env.step``, so
  argument checks and error messages are the env's, and a tool result is clipped to
  ``rollout.max_obs_tokens`` as turnrl clips it. The reward is the env's grade.
- Sampling: temperature, top_p, ``rollout.max_new_tokens`` per turn, at most
  ``rollout.max_turns`` model turns (TRL: ``max_tool_calling_iterations = max_turns - 1``).
- The update: AdamW at ``optim.lr`` (constant, no warm-up; TRL's scheduler is set to constant),
  ``optim.weight_decay``, gradient clipping at ``optim.grad_clip``, ``optim.epochs`` passes
  (TRL: ``num_iterations``), an optimizer step per ``optim.minibatch_size`` episodes split in
  micro-batches of ``optim.micro_batch_size`` (TRL: ``gradient_accumulation_steps``), PPO clip
  ``algo.eps_low``/``algo.eps_high``, KL coefficient ``algo.kl_coef`` (k3 on both),
  token or sequence ratios (``algo.ratio_level``).
- Hardware and threads: one process, ``threads`` torch threads, float32 weights with bf16
  autocast only where ``trainer.mixed_precision`` asks (auto: on CUDA only; so on the CPU,
  TRL's CPU settings: ``use_cpu``, no vLLM, bf16 off); activation checkpointing as
  ``optim.gradient_checkpointing`` says (TRL's own default is on: it would recompute every
  forward pass to save memory that turnrl's side does not save).

Where the two setups differ (and cannot be made identical)
----------------------------------------------------------
- Episode end: a turnrl env ends the episode (``done()`` terminates it). TRL's environment API
  has no way to end one: the model is asked for another turn after every tool result, and the
  rollout ends only on a reply without a tool call or at the turn cap. The wrapper refuses calls
  after the env ended the episode (TRL shows the refusal as the tool's error, the pattern of
  TRL's own environment examples), so the env's state, and its grade, are those turnrl would see;
  but TRL samples and trains those extra turns, and turnrl does not.
- Reward: turnrl decides it with the run's rubric (the env's grade and the rule screeners that
  zero a flagged episode, ``reward.*``); TRL's is the env's grade alone. On the tools env the
  screeners (test edits, exit calls, grader access) have nothing to flag.
- A reply with no tool call ends a TRL rollout; turnrl shows the model a format error and goes
  on (until ``rollout.max_parse_errors``). A call to an unknown tool is TRL's own error text.
- Truncations: with ``algo.truncation=zero`` an episode the env did not end scores 0 on both
  sides; with ``keep`` it keeps its grade on both. With ``mask`` turnrl drops it from its group;
  TRL has no such option and keeps it (``mask_truncated_completions`` drops only rollouts cut
  by the token budget).
- Token budget: turnrl caps each episode's context at ``rollout.max_context_tokens``; TRL caps the
  completion (every turn and tool result after the prompt) at ``max_completion_length``, set to
  ``max_context_tokens`` minus the longest prompt.
- Advantages: GRPO (or Dr. GRPO) on both; TRL's group std is the sample std, turnrl's the
  population std by default. turnrl leaves rows whose advantages are all 0 out of the update
  (DAPO's dynamic sampling), TRL computes them; this is one of turnrl's savings, not a setting.
- Loss aggregation: ``token-mean`` is TRL's ``dapo`` (normalised by the tokens of the whole
  accumulated minibatch), ``seq-mean-token-mean`` its ``grpo``, ``seq-mean-token-sum-norm`` its
  ``dr_grpo`` (TRL's constant is ``max_completion_length``).
- Generation: turnrl batches concurrent episodes turn by turn and reuses the prompt's KV cache
  across turns; TRL generates each turn as one padded ``model.generate`` call over the rollouts
  still calling tools. That is the difference being measured.
- Behaviour log-probabilities: turnrl's sampler returns them (the same fp32 weights); TRL
  recomputes them with a forward pass when one generation feeds several optimizer steps.

The time axis is training time only, on both sides: the sum of turnrl's step times
(``time/rollout_s + time/train_s`` in metrics.jsonl: rollouts, grading and the update) and of
TRL's optimizer steps (from ``on_step_begin`` of an RL step's first optimizer step to
``on_step_end`` of its last: generation, tools, rewards and the update). Evaluation, checkpoint
writing and model loading count on neither side. Timings on a shared machine are noisy: the
JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import platform
import shutil
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from turnrl.chat import ChatRenderer, check_template
from turnrl.policy.models import load_model, load_tokenizer, resolve_device
from turnrl.rollout.agent_loop import RolloutLimits, clip_observation
from turnrl.rollout.source import sample_requests
from turnrl.run.build import limits_of
from turnrl.run.config import ConfigError, TrainConfig, load_config, merge
from turnrl.run.device import resolve_precision
from turnrl.run.models import named_model
from turnrl.types import Task, ToolCall

# --quick: the same code path at smoke-test size; not a figure
QUICK = [
    "steps=2",
    "eval_every=1",
    "env.eval_tasks=2",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=32",
    "sft.episodes=4",
    "sft.epochs=1",
    "sft.batch_size=4",
    "optim.minibatch_size=4",
    "optim.micro_batch_size=2",
]

# TRL's loss_type for turnrl's algo.aggregation
LOSS_TYPES = {
    "token-mean": "dapo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum-norm": "dr_grpo",
}

# SmolLM2's ChatML template with Hermes tool calls written into assistant turns, for TRL (which
# requires a template that renders tool calls). The tool list is already in the system message
# (turnrl's rendering for a template without tool support), so ``tools`` is not rendered again.
CHATML_TOOLS_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{{ '<tool_call>' + {'name': call['function']['name'], "
    "'arguments': call['function']['arguments']} | tojson + '</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def log(line: str) -> None:
    print(line, flush=True)


# ------------------------------------------------------------------------------ config


def benchmark_config(
    recipe: str | None, config_file: str | None, overrides: list[str], quick: bool
) -> TrainConfig:
    """The recipe/config with the overrides (``--quick`` sizes first, the user's win)."""
    items = ([f"recipe={recipe}"] if recipe else []) + (QUICK if quick else []) + overrides
    cfg = load_config(config_file, items)
    problems = unsupported(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
    return cfg


def unsupported(cfg: TrainConfig) -> list[str]:
    """Settings TRL's GRPOTrainer has no counterpart for, each naming its field."""
    a, r, o = cfg.algo, cfg.rollout, cfg.optim
    out = []
    if cfg.max_staleness or r.workers != "local" or r.sampler != "hf":
        out.append(
            "max_staleness/rollout.workers/rollout.sampler: only synchronous local hf runs compare"
        )
    if cfg.subagent.enabled:
        out.append("subagent.enabled: TRL has no subagent")
    if r.context != "truncate":
        out.append(f"rollout.context={r.context}: TRL has no context strategies")
    if a.advantage not in ("grpo", "dr_grpo"):
        out.append(f"algo.advantage={a.advantage}: TRL's GRPOTrainer has grpo and dr_grpo")
    if a.is_correction != "none":
        out.append("algo.is_correction: synchronous runs need none")
    if a.dual_clip is not None or a.entropy_coef != 0:
        out.append("algo.dual_clip/algo.entropy_coef: not compared")
    if a.kl_coef > 0 and a.kl_estimator != "k3":
        out.append("algo.kl_estimator: TRL's KL is k3")
    if cfg.reward.functions or cfg.reward.shaping or cfg.reward.grade_weight != 1.0:
        out.append(
            "reward.functions/reward.shaping/reward.grade_weight: the TRL side rewards the env's "
            "grade alone, once per episode"
        )
    if named_model(cfg.model.name).from_scratch:
        out.append(f"model.name={cfg.model.name}: a model built from scratch has no chat template")
    batch = r.tasks_per_step * r.group_size
    if batch % o.minibatch_size or o.minibatch_size % o.micro_batch_size:
        out.append(
            f"optim.minibatch_size={o.minibatch_size}, optim.micro_batch_size="
            f"{o.micro_batch_size}: must divide tasks_per_step x group_size = {batch} (and "
            "each other) to map onto TRL's batches"
        )
    if cfg.steps < 1:
        out.append("steps: at least 1")
    return out


def with_settings(cfg: TrainConfig, **changes: Any) -> TrainConfig:
    """``cfg`` with changes, validated again; ``__`` in a key nests (``model__name=...``)."""
    top: dict[str, Any] = {}
    for key, value in changes.items():
        node = top
        *parents, leaf = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return TrainConfig.model_validate(merge(cfg.model_dump(), top))


def checkpoint_steps(cfg: TrainConfig, every: int | None) -> list[int]:
    k = every or cfg.eval_every or max(1, cfg.steps // 4)
    return sorted({*range(0, cfg.steps + 1, k), cfg.steps})


# ------------------------------------------------------------------------------ the start


def start_model(cfg: TrainConfig, out: Path, start: str | None) -> str:
    """The model both sides start from: ``--start``, turnrl's warm start (made once in
    OUT/warm-start), or ``model.name`` itself when the config has no SFT."""
    if start is not None:
        if start != "smollm2" and not (Path(start) / "config.json").is_file():
            raise SystemExit(f"--start {start}: not a model directory (no config.json)")
        return start
    if not (cfg.sft.enabled and cfg.sft.episodes > 0):
        return cfg.model.name
    from turnrl.run.recipe import train

    sft_cfg = with_settings(cfg, steps=0, runs_dir=str(out), name="warm-start")
    run = out / "warm-start"
    want = yaml.safe_dump(sft_cfg.model_dump(), sort_keys=False)
    if (run / "model" / "turnrl.json").is_file():
        if (run / "config.yaml").read_text() != want:
            raise SystemExit(
                f"{run} holds a warm start of another config; remove it or pass --start"
            )
        log(f"warm start: reusing {run / 'model'}")
        return str(run / "model")
    shutil.rmtree(run, ignore_errors=True)
    t0 = time.monotonic()
    train(sft_cfg, quiet=True, log=lambda line: log(f"[warm start] {line}"))
    log(f"warm start: {run / 'model'} in {time.monotonic() - t0:.0f}s (reuse: --start)")
    return str(run / "model")


def rl_config(cfg: TrainConfig, start: str, out: Path, steps: list[int], name: str):
    every = min(b - a for a, b in zip(steps, steps[1:])) if len(steps) > 1 else cfg.steps
    return with_settings(
        cfg,
        model__name=start,
        sft__enabled=False,
        runs_dir=str(out),
        name=name,
        eval_every=every,
        checkpoint_every=max(every, 1),
    )


# ------------------------------------------------------------------------------ results


@dataclass
class Point:
    side: str  # "turnrl" or "trl"
    step: int  # RL steps done
    train_s: float  # training wall-clock up to this step (evaluation and saving excluded)
    success: float  # held-out success (turnrl's evaluator)
    success_stderr: float
    episodes: int


def run_turnrl(cfg: TrainConfig) -> list[Point]:
    """``turnrl train`` in this process; its own held-out evals at the checkpoint steps."""
    from turnrl.run.recipe import train

    run = Path(cfg.runs_dir) / cfg.name
    shutil.rmtree(run, ignore_errors=True)
    train(cfg, quiet=True, log=lambda line: log(f"[turnrl] {line}"))
    return turnrl_points(run)


def earlier_points(out: Path, cfg: TrainConfig, start: str, side: str) -> list[Point]:
    """The ``side`` of an earlier run in OUT (``--sides`` naming the other), or none: the
    points of ``OUT/peer_trl.json`` when it ran the same config from the same start to the
    last step."""
    try:
        earlier = json.loads((out / "peer_trl.json").read_text())
    except (OSError, ValueError):
        return []
    same = earlier.get("start") == start and earlier.get("config") == cfg.model_dump(mode="json")
    points = [Point(**p) for p in earlier.get("points", []) if p["side"] == side] if same else []
    return points if max((p.step for p in points), default=-1) == cfg.steps else []


def turnrl_points(run: Path) -> list[Point]:
    """Held-out evals from a run's metrics.jsonl, each at the sum of the step times before."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    elapsed, clock = 0.0, {0: 0.0}
    for r in rows:
        if "time/rollout_s" in r:
            elapsed += r["time/rollout_s"] + r["time/train_s"]
            clock[int(r["step"])] = elapsed
    return [
        Point(
            "turnrl",
            int(r["step"]),
            clock[int(r["step"])],
            r["eval/success"],
            r["eval/success_stderr"],
            int(r["eval/episodes"]),
        )
        for r in rows
        if "eval/success" in r
    ]


def evaluate_dir(cfg: TrainConfig, model_dir: str) -> tuple[float, float, int]:
    """turnrl's held-out evaluation of a model directory (``turnrl eval MODEL``'s path)."""
    from turnrl.run.evaluate import run_eval

    out = run_eval(with_settings(cfg, model__name=model_dir), None, baselines=False)
    return out["success"], out["success_stderr"], int(out["episodes"])


# ------------------------------------------------------------------------------ TRL's env


class PeerEnv:
    """A turnrl env as TRL's ``environment_factory`` builds it: ``reset(**row)`` starts the
    row's task, each of the env's tools is a method (added per tool set by
    :func:`env_class`), ``get_reward()`` grades the episode. TRL calls it from one thread; the
    env's async methods run on this object's own event loop.

    Only ``reset``, ``get_reward`` and the tool methods are public functions: TRL shows every
    other public method to the model as a tool."""

    family: Any = None
    renderer: ChatRenderer | None = None
    limits: RolloutLimits = RolloutLimits()
    zero_truncated = True  # algo.truncation=zero: an episode the env did not end scores 0

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._env: Any = None
        self.ended = False  # the env ended the episode (terminated or truncated)
        self.terminated = False
        self.graded: Any = None

    def _run(self, coro):
        return self._loop.run_until_complete(coro)

    def reset(self, **row: Any) -> None:
        if self._env is not None:
            self._run(self._env.close())
        self._env = self.family.make_env()
        self._run(self._env.reset(Task.from_json(row["task"])))
        self.ended = self.terminated = False
        self.graded = None
        return None  # the prompt (system, tools, statement) is the row's

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.ended:
            raise ValueError("the episode has ended; reply without a tool call")
        step = self._run(self._env.step(ToolCall(name, arguments)))
        if step.terminated or step.truncated:
            self.ended, self.terminated = True, step.terminated
        return clip_observation(step.observation, self.renderer, self.limits.max_obs_tokens)

    def get_reward(self) -> float:
        self.graded = self._run(self._env.grade())
        self._run(self._env.close())
        self._env = None
        if self.zero_truncated and not self.terminated:
            return 0.0
        return float(self.graded.reward)


def tool_method(name: str, method: Callable, schema: dict[str, Any]) -> Callable:
    """A method named ``name`` that calls the env's tool through ``env.step``, with the tool's
    parameters, type hints and a Google-style docstring (TRL builds its tool schema from
    them). It takes any keyword arguments: the env checks them and answers as in turnrl."""
    hints = typing.get_type_hints(method)
    params = [
        p.replace(annotation=hints.get(p.name, Any))
        for p in inspect.signature(method).parameters.values()
    ]

    def call(self: PeerEnv, **arguments: Any) -> str:
        return self._call(name, arguments)

    fn = schema["function"]
    props = fn.get("parameters", {}).get("properties", {})
    doc = fn.get("description") or name
    if params:
        doc += "\n\nArgs:\n" + "\n".join(
            f"    {p.name}: {props.get(p.name, {}).get('description') or 'the ' + p.name}"
            for p in params
        )
    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    call.__signature__ = inspect.Signature([self_param, *params], return_annotation=str)
    call.__annotations__ = {**{p.name: p.annotation for p in params}, "return": str}
    return call


def env_class(key: str, env: Any, base: type[PeerEnv]) -> type[PeerEnv]:
    """A PeerEnv subclass whose methods are the tools ``env`` offers after its reset."""
    clash = {"reset", "get_reward"} & set(env.tools)
    if clash:
        raise SystemExit(f"env tools {sorted(clash)}: TRL reserves these method names")
    schemas = {s["function"]["name"]: s for s in env.tool_schemas()}
    methods = {name: tool_method(name, getattr(env, name), schemas[name]) for name in env.tools}
    return type(f"PeerEnv_{key}", (base,), methods)


@dataclass
class Rows:
    """TRL's dataset rows and the env class of each tool set."""

    rows: list[dict[str, Any]]  # prompt (messages), task (JSON), environment (tool-set key)
    classes: dict[str, type[PeerEnv]]
    prompt_ids: list[list[int]]  # turnrl's first prompt of each row


def build_rows(cfg: TrainConfig, family: Any, train_tasks: list[Task], renderer) -> Rows:
    """One row per task turnrl samples, in turnrl's order (step by step); the prompt holds
    what turnrl's agent loop renders first: the env's instructions with the tool list, and
    the task statement."""

    class Base(PeerEnv):
        pass

    Base.family, Base.renderer, Base.limits = family, renderer, limits_of(cfg)
    Base.zero_truncated = cfg.algo.truncation == "zero"
    keys: dict[tuple[str, ...], str] = {}
    classes: dict[str, type[PeerEnv]] = {}
    rows, prompt_ids, made = [], [], {}
    r = cfg.rollout
    for step in range(cfg.steps):
        requests = sample_requests(train_tasks, step, cfg.seed, r.tasks_per_step, r.group_size)
        for req in requests[:: r.group_size]:
            task = req.task
            if task.id not in made:
                env = family.make_env()
                loop = asyncio.new_event_loop()
                try:
                    first = loop.run_until_complete(env.reset(task))
                    system = {"role": "system", "content": env.instructions}
                    messages = [system, {"role": "user", "content": first}]
                    schemas = env.tool_schemas()
                    tools = tuple(env.tools)
                    if tools not in keys:
                        keys[tools] = f"tools{len(keys)}"
                        classes[keys[tools]] = env_class(keys[tools], env, Base)
                    made[task.id] = (
                        renderer.with_tools(messages, schemas),
                        renderer.prompt_ids(messages, schemas),
                        keys[tools],
                    )
                finally:
                    loop.run_until_complete(env.close())
                    loop.close()
            messages, ids, key = made[task.id]
            rows.append({"prompt": messages, "task": task.to_json(), "environment": key})
            prompt_ids.append(ids)
    return Rows(rows, classes, prompt_ids)


def trl_tokenizer(start: str, renderer: ChatRenderer):
    """The tokenizer TRL gets: the start's, with the ChatML tool template and TRL's Hermes
    response parser (``<tool_call>{json}</tool_call>``, the format of SmolLM2 in turnrl)."""
    from trl.chat_template_utils import qwen3_template

    if renderer.template_takes_tools or type(renderer.parser).__name__ != "HermesToolCallParser":
        raise SystemExit(
            "peer_trl.py compares models whose chat template has no tool support and whose "
            "tool calls turnrl writes as <tool_call>{json}</tool_call> (SmolLM2)"
        )
    tok = load_tokenizer(start)
    tok.chat_template = CHATML_TOOLS_TEMPLATE
    tok.response_template = qwen3_template
    tok.padding_side = "left"
    return tok


def check_same_tokens(tok, renderer: ChatRenderer, rows: Rows) -> None:
    """Each TRL prompt, rendered as TRL renders it (with the row's tool methods), must be the
    tokens turnrl's agent loop starts the episode with."""
    tools = {
        key: [f for name, f in vars(cls).items() if inspect.isfunction(f)]
        for key, cls in rows.classes.items()
    }
    for row, ids in zip(rows.rows, rows.prompt_ids):
        trl_ids = tok.apply_chat_template(
            row["prompt"],
            tools=tools[row["environment"]],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if list(trl_ids) != list(ids):
            raise SystemExit(
                "the TRL side would render a prompt differently from turnrl:\n"
                f"turnrl: {renderer.decode(ids)!r}\nTRL:    {renderer.decode(list(trl_ids))!r}"
            )


def check_tool_suffix(trainer, renderer: ChatRenderer) -> None:
    """A tool result appended by TRL must be the observation delta turnrl appends."""
    from turnrl.chat import tool_message

    text = "probe tool result 41"
    ours = renderer.observation_ids([tool_message(text, ToolCall("probe", {}), 0)])
    theirs = trainer._get_tool_suffix_ids([{"role": "tool", "name": "probe", "content": text}])
    if list(theirs) != list(ours):
        raise SystemExit(
            "TRL would append tool results as other tokens than turnrl:\n"
            f"turnrl: {renderer.decode(ours)!r}\nTRL:    {renderer.decode(list(theirs))!r}"
        )


def trl_args(cfg: TrainConfig, out: Path, max_completion: int):
    from trl import GRPOConfig

    r, o, a = cfg.rollout, cfg.optim, cfg.algo
    batch = r.tasks_per_step * r.group_size
    updates = batch // o.minibatch_size  # optimizer steps per RL step and epoch
    device = resolve_device(cfg.model.device)
    # turnrl's trainer.mixed_precision (auto: bf16 on CUDA only): float32 weights under bf16
    # autocast, which is what TRL's bf16 does too
    bf16 = resolve_precision(cfg) is not None
    return GRPOConfig(
        output_dir=str(out),
        seed=cfg.seed,
        use_cpu=device.type == "cpu",
        bf16=bool(bf16),
        max_steps=cfg.steps * updates * o.epochs,
        per_device_train_batch_size=o.micro_batch_size,
        gradient_accumulation_steps=o.minibatch_size // o.micro_batch_size,
        steps_per_generation=batch // o.micro_batch_size,
        num_generations=r.group_size,
        num_iterations=o.epochs,
        shuffle_dataset=False,
        learning_rate=o.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=o.weight_decay,
        max_grad_norm=o.grad_clip,
        optim="adamw_torch",
        # TRL turns activation checkpointing on by default; both sides follow the config
        activation_checkpointing=o.gradient_checkpointing,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=0,
        max_completion_length=max_completion,
        generation_kwargs={"max_new_tokens": r.max_new_tokens},
        max_tool_calling_iterations=r.max_turns - 1,
        beta=a.kl_coef,
        epsilon=a.eps_low,
        epsilon_high=a.eps_high,
        importance_sampling_level=a.ratio_level,
        loss_type=LOSS_TYPES[a.aggregation],
        scale_rewards="group" if a.advantage == "grpo" else "none",
        mask_truncated_completions=a.truncation == "mask",
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def run_trl(cfg: TrainConfig, start: str, out: Path, steps: list[int]) -> list[Point]:
    """TRL's GRPOTrainer on the same work; checkpoints at ``steps`` (RL steps) are written as
    model directories and scored afterwards by turnrl's evaluator."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from turnrl.run.preflight import env_tasks
    from turnrl.train.export import write_policy

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory: see docstring
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    shutil.rmtree(out, ignore_errors=True)
    family, train_tasks, _ = env_tasks(cfg)
    plain_tok = load_tokenizer(start)
    renderer = check_template(plain_tok, cfg.model.tool_format, source=start)
    rows = build_rows(cfg, family, train_tasks, renderer)
    tok = trl_tokenizer(start, renderer)
    check_same_tokens(tok, renderer, rows)
    longest = max(len(ids) for ids in rows.prompt_ids)
    max_completion = cfg.rollout.max_context_tokens - longest
    if max_completion < cfg.rollout.max_new_tokens:
        raise SystemExit(
            f"rollout.max_context_tokens={cfg.rollout.max_context_tokens} leaves "
            f"{max_completion} tokens after the longest prompt ({longest})"
        )
    model = load_model(start, "float32", cfg.model.device)
    peft_config = None
    if cfg.model.lora:
        from peft import LoraConfig

        m = cfg.model
        peft_config = LoraConfig(
            r=m.lora_rank,
            lora_alpha=m.lora_alpha,
            target_modules=m.lora_targets,
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
    r, o = cfg.rollout, cfg.optim
    per_rl_step = (r.tasks_per_step * r.group_size // o.minibatch_size) * o.epochs
    saved: dict[int, tuple[float, str]] = {}

    class Clock(TrainerCallback):
        """Training time per RL step, and the checkpoint model directories (not timed)."""

        def __init__(self) -> None:
            self.elapsed, self.t0 = 0.0, None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step % per_rl_step == 0:
                self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step % per_rl_step:
                return
            self.elapsed += time.perf_counter() - self.t0
            step = state.global_step // per_rl_step
            if step in steps:
                path = out / f"step-{step}"
                write_policy(path, model, plain_tok, start, step, adapter_out=None)
                saved[step] = (self.elapsed, str(path))

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs and state.global_step % per_rl_step == 0:
                log(
                    f"[trl] step {state.global_step // per_rl_step}/{cfg.steps}: train reward "
                    f"{logs['reward']:.3f}, {self.elapsed:.1f}s of training"
                )

    trainer = GRPOTrainer(
        model=model,
        args=trl_args(cfg, out, max_completion),
        train_dataset=Dataset.from_list(rows.rows),
        processing_class=tok,
        environment_factory=rows.classes,
        peft_config=peft_config,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)
    check_tool_suffix(trainer, renderer)
    log(
        f"[trl] GRPOTrainer: {len(rows.rows)} prompts x {r.group_size}, "
        f"{trainer.args.max_steps} optimizer steps, tool sets {sorted(rows.classes)}"
    )
    trainer.train()
    # TRL's per-step logs (rewards, tool calls and failures, completion lengths) for diagnosis
    (out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    family.close()
    del trainer, model
    points = []
    for step in steps:
        if step == 0:
            path, elapsed = start, 0.0
        else:
            elapsed, path = saved[step]
        success, stderr, episodes = evaluate_dir(cfg, path)
        log(f"[trl] eval @ step {step}: held-out success {success:.3f} ± {stderr:.3f}")
        points.append(Point("trl", step, elapsed, success, stderr, episodes))
        if step > 0:
            shutil.rmtree(path, ignore_errors=True)  # 0.5 GB each; the figures are kept
    return points


# ------------------------------------------------------------------------------ report


def time_to_reach(points: list[Point], target: float) -> Point | None:
    """The first checkpoint of ``points`` whose held-out success is at least ``target``."""
    return next((p for p in sorted(points, key=lambda p: p.step) if p.success >= target), None)


def summary(turnrl: list[Point], trl: list[Point]) -> dict[str, Any]:
    trl_final = max(trl, key=lambda p: p.step)
    trl_start = min(trl, key=lambda p: p.step)
    reached = time_to_reach(turnrl, trl_final.success)
    out: dict[str, Any] = {
        "trl_final_success": trl_final.success,
        "trl_final_train_s": trl_final.train_s,
        "turnrl_final_success": max(turnrl, key=lambda p: p.step).success,
        "turnrl_final_train_s": max(turnrl, key=lambda p: p.step).train_s,
        "turnrl_reaches_at_step": reached.step if reached else None,
        "turnrl_reaches_after_s": reached.train_s if reached else None,
        "ratio": None,
        "trl_gained": trl_final.success > trl_start.success,
    }
    # without a gain over the start, the start itself "reaches" TRL's figure: no ratio
    if out["trl_gained"] and reached is not None:
        out["ratio"] = reached.train_s / trl_final.train_s
    return out


def markdown(points: list[Point], s: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        f"Held-out success ({meta['eval_episodes']} episodes per checkpoint, turnrl's "
        f"evaluator) against training time; {meta['describe']}.",
        "",
        "| side | step | training time (min) | held-out success |",
        "|---|---|---|---|",
    ]
    for p in sorted(points, key=lambda p: (p.side, p.step)):
        lines.append(
            f"| {p.side} | {p.step} | {p.train_s / 60:.1f} | "
            f"{100 * p.success:.1f} ± {100 * p.success_stderr:.1f} % |"
        )
    lines.append("")
    head = (
        f"TRL's final success {100 * s['trl_final_success']:.1f} % after "
        f"{s['trl_final_train_s'] / 60:.1f} min of training; "
    )
    if not s["trl_gained"]:
        tail = "no gain over the start, so no time to reach it (ratio: none)."
    elif s["ratio"] is None:
        tail = "turnrl does not reach it within its steps (ratio: none)."
    else:
        tail = (
            f"turnrl reaches it at step {s['turnrl_reaches_at_step']} after "
            f"{s['turnrl_reaches_after_s'] / 60:.1f} min: **ratio {s['ratio']:.2f}** "
            "(target <= 0.5)."
        )
    lines.append(head + tail)
    lines.append(
        f"Machine: {meta['machine']}; load average {meta['load_before']} before, "
        f"{meta['load_after']} after."
    )
    return "\n".join(lines) + "\n"


def plot(points: list[Point], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for side, color in (("turnrl", "tab:blue"), ("trl", "tab:orange")):
        ps = sorted((p for p in points if p.side == side), key=lambda p: p.step)
        ax.errorbar(
            [p.train_s / 60 for p in ps],
            [100 * p.success for p in ps],
            yerr=[100 * p.success_stderr for p in ps],
            marker="o",
            capsize=3,
            color=color,
            label="turnrl" if side == "turnrl" else "TRL GRPOTrainer",
        )
    ax.set_xlabel("training wall-clock (min; evaluation excluded)")
    ax.set_ylabel("held-out success (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine() -> str:
    import torch
    import transformers

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    try:
        import trl

        versions += f", trl {trl.__version__}"
    except ImportError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {versions}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="key=value config overrides")
    ap.add_argument("--recipe", help="a turnrl recipe (turnrl envs lists them)")
    ap.add_argument("--config", help="a turnrl config YAML file")
    ap.add_argument("--start", help="the model both sides start from (skips the warm start)")
    ap.add_argument("--eval-every", type=int, help="RL steps between checkpoints")
    ap.add_argument("--out", default="peer_trl_out", help="output folder")
    ap.add_argument("--sides", default="turnrl,trl", help="which sides to run")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 steps, tiny sizes")
    args = ap.parse_args()
    if not (args.recipe or args.config):
        ap.error("give --recipe NAME or --config FILE (the run both sides reproduce)")
    sides = args.sides.split(",")
    if "trl" in sides:
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit(
                "TRL is not installed: .venv/bin/pip install -e '.[peer]' -c requirements.lock"
            )
    try:
        cfg = benchmark_config(args.recipe, args.config, args.overrides, args.quick)
    except ConfigError as e:
        sys.exit(f"config error:\n{e}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    steps = checkpoint_steps(cfg, args.eval_every)
    start = start_model(cfg, out, args.start)
    log(f"start: {start}; checkpoints at steps {steps}")
    points: list[Point] = []
    turnrl_cfg = rl_config(cfg, start, out, steps, "turnrl")
    for side in ("turnrl", "trl"):
        if side not in sides and (earlier := earlier_points(out, cfg, start, side)):
            log(f"{side}: the finished side in {out / 'peer_trl.json'} (same config and start)")
            points += earlier
    if "turnrl" in sides:
        points += run_turnrl(turnrl_cfg)
        gc.collect()  # its model and optimizer, before TRL loads its own
    if "trl" in sides:
        points += run_trl(rl_config(cfg, start, out, steps, "trl"), start, out / "trl", steps)
    r = cfg.rollout
    describe = (
        f"{cfg.model.name}{' + LoRA' if cfg.model.lora else ''} on {cfg.env.name} "
        f"{cfg.env.options or ''}, {cfg.steps} steps of {r.tasks_per_step} tasks x "
        f"{r.group_size}, lr {cfg.optim.lr}"
    )
    meta = {
        "describe": describe,
        "command": " ".join(sys.argv),
        "start": start,
        "machine": machine(),
        "load_before": load_before,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "eval_episodes": points[0].episodes if points else 0,
        "config": cfg.model_dump(mode="json"),
    }
    result: dict[str, Any] = {"points": [asdict(p) for p in points], **meta}
    by_side = {s: [p for p in points if p.side == s] for s in ("turnrl", "trl")}
    if by_side["turnrl"] and by_side["trl"]:
        result["summary"] = summary(by_side["turnrl"], by_side["trl"])
        (out / "peer_trl.md").write_text(markdown(points, result["summary"], meta))
        log((out / "peer_trl.md").read_text())
    (out / "peer_trl.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(points, out / "peer_trl.png", describe)
    log(f"wrote {out / 'peer_trl.json'}, {out / 'peer_trl.png'}")


if __name__ == "__main__":
    main()
