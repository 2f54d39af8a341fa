"""Evaluation: success, pass@k and pass^k on held-out tasks, and scripted baselines; one path
for a local policy and for a model behind an OpenAI-compatible endpoint.

Both agents play the same requests (tasks from ``env.tasks`` or the env's own, the first
``env.eval_tasks`` of the test split, seeds from :func:`eval_seed`), and every episode's reward,
flags and success are decided by the run's rubric (:func:`turnrl.run.build.rubric_of`), as in
training. Only how an episode is played differs: token-in/token-out with our sampler
(:mod:`turnrl.rollout.agent_loop`), or on messages with the endpoint
(:mod:`turnrl.rollout.endpoint_agent`).

``turnrl eval`` scores a run's latest policy (by default exactly what the run's own held-out
evaluation scored), a bare model (``turnrl eval smollm2 env.name=tools``) or an endpoint, prints
the endings by reason, and keeps the episodes as records ``turnrl view`` opens token by token.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from turnrl.chat import ChatRenderer, check_model_template
from turnrl.envs.registry import Family
from turnrl.envs.scripted import run_scripted
from turnrl.policy.base import PolicyBackend, SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import load_model, load_tokenizer, place, with_lora
from turnrl.policy.openai import OpenAIChat, OpenAIError, OpenAITimeout
from turnrl.rewards.pipeline import build_rubric
from turnrl.rewards.rubric import Rubric, score_trajectories_async
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.endpoint_agent import collect_endpoint
from turnrl.run.build import eval_subagent, limits_of, renderer_of, rubric_of, sampling_of
from turnrl.run.config import ConfigError, TrainConfig
from turnrl.run.device import resolve_precision
from turnrl.run.models import named_model
from turnrl.run.preflight import check_machine, env_tasks
from turnrl.train.export import saved_policy
from turnrl.train.metrics import MetricsWriter, silence_library_progress
from turnrl.types import Task, TerminationReason, Trajectory, is_hack
from turnrl.view.records import RecordWriter


@dataclass
class EvalResult:
    success: float  # mean true success over all episodes
    success_stderr: float  # standard error of ``success`` over the tasks drawn (success_stderr())
    pass_at_k: float  # share of tasks with at least one success in k tries
    pass_hat_k: float  # share of tasks where all k tries succeed (tau-bench's pass^k)
    reward: float
    turns: float
    hack_rate: float
    truncation_rate: float
    k: int
    episodes: int
    # mean proxy success (what the training reward's tests say) where the env grades one,
    # next to ``success`` to measure reward drift on held-out tasks; None where it grades none
    proxy_success: float | None = None
    # episodes per ending (TerminationReason value: done, max_turns, context_limit, timeout,
    # env_error, parse_errors)
    endings: dict[str, int] = field(default_factory=dict)

    def as_metrics(self, prefix: str) -> dict[str, float]:
        out = {
            f"{prefix}/{k}": float(v)
            for k, v in self.__dict__.items()
            if v is not None and k != "endings"
        }
        out.update({f"{prefix}/ending/{k}": float(v) for k, v in self.endings.items()})
        return out


def eval_seed(cfg: TrainConfig) -> int:
    """The sampling seed of held-out evaluation, in the run and in ``turnrl eval`` alike: with
    the same tasks (``env.eval_tasks`` of the test split) both sample the same episodes, so a
    checkpoint scores the same in either (apart from batching's float noise)."""
    return cfg.seed + 7


def success_stderr(per_task: list[float]) -> float:
    """Standard error of the mean success, with tasks as the sampled unit.

        se = sqrt( sum_t (s_t - s)^2 / T ) / sqrt(T),   s = sum_t s_t / T

    with s_t the mean success of task t's k episodes and T tasks. Why report it: held-out
    success at temperature 1 on a few dozen tasks moves by several points between two sampling
    seeds (0.062 and 0.150 for one model on the same 80 tasks), so a gain must be read against it. With k > 1 the episodes of one task are not independent,
    hence per task, not per episode.
    """
    if not per_task:
        return 0.0
    return statistics.pstdev(per_task) / math.sqrt(len(per_task))


def summarize(trajs: list[Trajectory], k: int) -> EvalResult:
    by_task: dict[str, list[bool]] = {}
    for t in trajs:
        by_task.setdefault(t.task_id, []).append(t.metrics.get("success", 0.0) > 0)
    n = max(len(trajs), 1)
    proxies = [t.metrics["proxy_success"] for t in trajs if "proxy_success" in t.metrics]
    return EvalResult(
        success=sum(t.metrics.get("success", 0.0) for t in trajs) / n,
        success_stderr=success_stderr([sum(v) / len(v) for v in by_task.values()]),
        pass_at_k=sum(any(v) for v in by_task.values()) / max(len(by_task), 1),
        pass_hat_k=sum(all(v) for v in by_task.values()) / max(len(by_task), 1),
        reward=sum(t.reward for t in trajs) / n,
        turns=sum(len(t.turns) for t in trajs) / n,
        hack_rate=sum(is_hack(t.flags) for t in trajs) / n,  # tampering, not findings
        truncation_rate=sum(t.truncated for t in trajs) / n,
        k=k,
        episodes=len(trajs),
        proxy_success=sum(proxies) / len(proxies) if proxies else None,
        endings={r.value: sum(t.termination is r for t in trajs) for r in TerminationReason},
    )


Play = Callable[[list[EpisodeRequest]], Awaitable[list[Trajectory]]]


def eval_requests(tasks: list[Task], k: int, seed: int) -> list[EpisodeRequest]:
    """k episodes per task, with seeds that depend only on (seed, task index, try)."""
    return [
        EpisodeRequest(task, f"eval-{task.id}", seed * 100_000 + i * k + j)
        for i, task in enumerate(tasks)
        for j in range(k)
    ]


async def evaluate(
    play: Play, tasks: list[Task], k: int = 1, seed: int = 0, rubric: Rubric | None = None
) -> tuple[EvalResult, list[Trajectory]]:
    """The one evaluation: k episodes per task played by ``play`` (a local policy or an
    endpoint), their rewards decided by ``rubric`` (the run's; default: the env's grade and the
    rule screener), summarised."""
    trajs = await play(eval_requests(tasks, k, seed))
    await score_trajectories_async(trajs, rubric if rubric is not None else build_rubric())
    return summarize(trajs, k), trajs


def local_player(
    family: Family,
    renderer: ChatRenderer,
    backend: PolicyBackend,
    params: SamplingParams,
    limits: RolloutLimits,
    batch_wait_s: float = 0.05,
) -> Play:
    """Episodes played token-in/token-out by ``backend`` (batched generation)."""

    async def play(requests: list[EpisodeRequest]) -> list[Trajectory]:
        batcher = GenerationBatcher(backend, params, max_wait_s=batch_wait_s)
        try:
            return await collect(requests, family.make_env, renderer, batcher, limits)
        finally:
            await batcher.close()

    return play


def endpoint_player(
    family: Family, chat: OpenAIChat, limits: RolloutLimits, max_concurrency: int = 8
) -> Play:
    """Episodes played on messages by the model behind an OpenAI-compatible endpoint."""

    async def play(requests: list[EpisodeRequest]) -> list[Trajectory]:
        return await collect_endpoint(requests, family.make_env, chat, limits, max_concurrency)

    return play


async def evaluate_policy(
    family: Family,
    tasks: list[Task],
    renderer: ChatRenderer,
    backend: PolicyBackend,
    params: SamplingParams,
    limits: RolloutLimits,
    k: int = 1,
    seed: int = 0,
    batch_wait_s: float = 0.05,
    rubric: Rubric | None = None,
) -> tuple[EvalResult, list[Trajectory]]:
    """:func:`evaluate` with a local policy (the training loop's held-out evaluation)."""
    play = local_player(family, renderer, backend, params, limits, batch_wait_s)
    return await evaluate(play, tasks, k, seed, rubric)


async def evaluate_scripted(
    family: Family, tasks: list[Task], which: str = "baseline", seed: int = 0
) -> float:
    """Mean true success of a scripted agent: ``baseline`` (do nothing), ``random`` or ``expert``."""

    async def one(i: int, task: Task) -> float:
        if which == "baseline":
            agent = family.baseline(task)
        elif which == "random":
            agent = family.random_agent(task, seed=seed + i)  # type: ignore[attr-defined]
        else:
            agent = family.expert(task, seed=seed + i)
        ep = await run_scripted(family.make_env(), task, agent)
        return float(ep.result.success) if ep.result else 0.0

    gate = asyncio.Semaphore(16)

    async def gated(i: int, task: Task) -> float:
        async with gate:
            return await one(i, task)

    scores = await asyncio.gather(*(gated(i, t) for i, t in enumerate(tasks)))
    return sum(scores) / max(len(scores), 1)


# -- turnrl eval -------------------------------------------------------------------------------


def load_policy(cfg: TrainConfig, run_dir: Path | None) -> tuple[Any, Any]:
    """(model, tokenizer) of a run's latest policy (``run_dir/model``), or of ``model.name``
    when there is no run; placed per ``model.device``/``model.dtype``. A run made before
    ``run_dir/model`` held the trained policy gets its checkpoint applied to the warm start."""
    m = cfg.model
    saved = saved_policy(run_dir) if run_dir is not None else None
    if saved is not None:
        tok = load_tokenizer(saved, m.trust_remote_code)
        return load_model(saved, m.dtype, m.device, m.trust_remote_code), tok
    if run_dir is not None and (run_dir / "model" / "config.json").exists():
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
        tok = PreTrainedTokenizerFast.from_pretrained(run_dir / "model")
    else:
        model = load_model(m.name, m.dtype, m.device, m.trust_remote_code)
        tok = load_tokenizer(m.name, m.trust_remote_code)
    ckpt = run_dir / "checkpoints" / "last.pt" if run_dir is not None else None
    if ckpt is not None and ckpt.exists():
        import torch

        if m.lora:
            model = with_lora(model, m.lora_rank, m.lora_alpha, m.lora_targets)
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"], strict=False)
    return place(model, m.device, m.dtype), tok


def run_eval(
    cfg: TrainConfig,
    run_dir: Path | None,
    k: int = 1,
    n_tasks: int | None = None,
    baselines: bool = True,
    chat: OpenAIChat | None = None,
    records: Path | None = None,
) -> dict[str, Any]:
    """``turnrl eval``: ``n_tasks`` (None: ``env.eval_tasks``) held-out tasks, k episodes each,
    played by the run's policy (``run_dir``), the model ``model.name`` (no run), or ``chat``
    (an endpoint). ``records``: a directory to keep the episodes in (``turnrl view`` opens it).
    Raises OpenAIError when every episode failed on the endpoint (nothing was measured)."""
    import torch

    torch.set_num_threads(cfg.threads)
    silence_library_progress()
    check_machine(cfg, training=False)
    if chat is None and run_dir is None:
        if named_model(cfg.model.name).from_scratch:
            raise ConfigError(
                f"eval: the {cfg.model.name} model is built from scratch by a run (its tokenizer "
                "comes from the env); evaluate that run's directory, such as runs/NAME"
            )
        check_model_template(cfg.model.name, cfg.model.tool_format)  # before any weights load
    if n_tasks is not None:
        cfg.env.eval_tasks = n_tasks
    family, _, tasks = env_tasks(cfg, train=False)
    try:
        renderer = tokenizer = None
        if chat is None:
            model, tokenizer = load_policy(cfg, run_dir)
            renderer = renderer_of(cfg, tokenizer)
            if cfg.subagent.enabled:  # the run's delegate tool and its frozen subagent
                family = eval_subagent(cfg, family, run_dir, model, tokenizer, renderer)
            policy = HFPolicy(model, tokenizer.pad_token_id, autocast=resolve_precision(cfg))
            params = sampling_of(cfg, renderer, evaluation=True)
            play = local_player(
                family, renderer, policy, params, limits_of(cfg), cfg.rollout.batch_wait_s
            )
        else:
            play = endpoint_player(family, chat, limits_of(cfg), cfg.rollout.max_concurrency)
        result, trajs = asyncio.run(
            evaluate(play, tasks, k, eval_seed(cfg), rubric_of(cfg, family))
        )
        failed = [t.error for t in trajs if t.error and t.error.startswith("endpoint:")]
        if chat is not None and trajs and len(failed) == len(trajs):
            raise (OpenAITimeout if "timed out" in failed[0] else OpenAIError)(
                f"every episode failed; first: {failed[0].removeprefix('endpoint: ')}"
            )
        out: dict[str, Any] = {"env": cfg.env.name, "tasks": len(tasks)}
        if chat is not None:
            out["endpoint"] = f"{chat.model} @ {chat.base_url}"
        out.update({k_: v for k_, v in result.__dict__.items() if k_ != "endings"})
        out[f"pass^{k}"] = out.pop("pass_hat_k")
        out[f"pass@{k}"] = out.pop("pass_at_k")
        out.update({f"ending/{r}": n for r, n in result.endings.items()})
        if chat is not None:
            out["endpoint_errors"] = len(failed)
        if records is not None:
            out["records"] = str(write_records(records, cfg, result, trajs, renderer, tokenizer))
        if baselines:
            if hasattr(family, "baseline"):
                out["baseline/do_nothing"] = asyncio.run(
                    evaluate_scripted(family, tasks, "baseline")
                )
            if hasattr(family, "random_agent"):
                out["baseline/random"] = asyncio.run(
                    evaluate_scripted(family, tasks, "random", seed=cfg.seed)
                )
        return out
    finally:
        family.close()


def records_dir(cfg: TrainConfig, target: str, run_dir: Path | None = None) -> Path:
    """Where ``turnrl eval`` keeps its episodes: ``eval-TARGET-ENV`` beside the evaluated run
    (in ``runs_dir`` for a model or an endpoint), with a time suffix when that exists."""

    def safe(text: str) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)

    folder = run_dir.parent if run_dir is not None else Path(cfg.runs_dir)
    name = safe(Path(target).name or target)
    base = folder / f"eval-{name}-{safe(cfg.env.name.split(':')[-1])}"
    return (
        base
        if not base.exists()
        else base.with_name(f"{base.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    )


def write_records(
    folder: Path,
    cfg: TrainConfig,
    result: EvalResult,
    trajs: list[Trajectory],
    renderer: ChatRenderer | None,
    tokenizer: Any,
) -> Path:
    """An evaluation as a directory ``turnrl view`` opens: its config, one ``eval/*`` metrics
    row (step 0) and every episode's record (token by token for a local policy; an endpoint's
    episodes carry messages only)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    writer = MetricsWriter(folder)
    try:
        writer.write_eval(0, result.as_metrics("eval"), trajs[:3], renderer)
    finally:
        writer.close()
    text = (lambda i: tokenizer.decode([i])) if tokenizer is not None else (lambda i: "")
    groups = len({t.group_id for t in trajs})
    RecordWriter(folder, record_groups=groups, records_mb=64.0, token_text=text).write(0, trajs)
    return folder
