"""The synchronous RL loop: one readable function (setup, loop, cleanup).

Per step: sample tasks -> run ``group_size`` episodes per task concurrently -> grade ->
advantages -> policy loss in minibatches -> optimizer step -> policy version += 1.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from turnrl.algo.advantages import compute_advantages, no_credit_for_malformed
from turnrl.algo.losses import policy_loss, sequence_logprobs, token_entropy
from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.registry import Family, make_family
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import turn_end_token
from turnrl.rewards.rubric import Rubric, build_rubric, score_trajectories
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.train.batch import Batch, collate
from turnrl.train.checkpoint import load_checkpoint, save_checkpoint
from turnrl.train.config import TrainConfig
from turnrl.train.evaluate import evaluate_policy
from turnrl.train.metrics import MetricsWriter, Progress, trajectory_metrics
from turnrl.train.setup import build_model
from turnrl.types import Trajectory

Log = Callable[[str], None]


def limits_of(cfg: TrainConfig) -> RolloutLimits:
    r = cfg.rollout
    return RolloutLimits(
        max_turns=r.max_turns,
        max_context_tokens=r.max_context_tokens,
        max_new_tokens=r.max_new_tokens,
        max_obs_tokens=r.max_obs_tokens,
        max_parse_errors=r.max_parse_errors,
        episode_timeout_s=r.episode_timeout_s,
    )


def rubric_of(cfg: TrainConfig) -> Rubric:
    """The run's reward pipeline (``reward.*``): the one place training and eval rewards are
    decided."""
    r = cfg.reward
    return build_rubric(
        r.functions, grade_weight=r.grade_weight, screeners=r.screeners, zero_flagged=r.zero_flagged
    )


def sample_requests(cfg: TrainConfig, tasks: list, step: int) -> list[EpisodeRequest]:
    """Tasks and episode seeds for a step, a pure function of (seed, step): resumable."""
    rng = random.Random(f"{cfg.seed}-{step}")
    chosen = rng.sample(tasks, min(cfg.rollout.tasks_per_step, len(tasks)))
    return [
        EpisodeRequest(task, f"s{step}-{task.id}", rng.randrange(2**20))
        for task in chosen
        for _ in range(cfg.rollout.group_size)
    ]


def rollout(
    cfg: TrainConfig, family: Family, requests, renderer, policy, params
) -> list[Trajectory]:
    async def go() -> list[Trajectory]:
        batcher = GenerationBatcher(policy, params, max_wait_s=cfg.rollout.batch_wait_s)
        try:
            return await collect(
                requests,
                family.make_env,
                renderer,
                batcher,
                limits_of(cfg),
                cfg.rollout.max_concurrency,
            )
        finally:
            await batcher.close()

    return asyncio.run(go())


def train_on_batch(
    cfg: TrainConfig,
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    step: int,
) -> dict[str, float]:
    """Advantages, then the clipped policy loss over minibatches with gradient accumulation."""
    a = cfg.algo
    adv = compute_advantages(
        a.advantage,
        rewards=batch.rewards,
        group_index=batch.group_index,
        loss_mask=batch.loss_mask,
        truncated=batch.truncated,
        truncation=a.truncation,
        turn_index=batch.turn_index,
        turn_rewards=batch.turn_rewards,
        turn_mask=batch.turn_mask,
        anchor_ids=batch.anchor_ids,
        std=a.std,
        eps=a.eps,
        gamma=a.gamma,
        lam=a.lam,
        step_weight=a.gigpo_weight,
        gigpo_norm=a.gigpo_norm,
    )
    adv.tokens = no_credit_for_malformed(adv.tokens, batch.malformed)
    # Rows whose advantages are all 0 add no policy gradient; without KL/entropy terms they are
    # skipped (as DAPO's dynamic sampling does), which on CPU halves the work of a typical step.
    has_signal = (adv.tokens.abs() * adv.loss_mask).sum(-1) > 0  # [B]
    if a.kl_coef > 0 or a.entropy_coef > 0:
        has_signal = adv.loss_mask.sum(-1) > 0
    rows = has_signal.nonzero().flatten()
    out: dict[str, float] = {
        "train/rows": float(len(rows)),
        "adv/abs_mean": float(
            (adv.tokens.abs() * adv.loss_mask).sum() / adv.loss_mask.sum().clamp(min=1)
        ),
    }
    if len(rows) == 0:
        return out
    proximal = None
    if a.is_correction != "none":
        # The proximal policy pi_old: this model before any update of this step, computed once.
        proximal = torch.zeros_like(batch.behavior_logprobs)
        with torch.no_grad():
            for micro in rows.split(cfg.optim.micro_batch_size):
                T = int(batch.attention_mask[micro].sum(-1).max())
                ids = batch.input_ids[micro, :T]
                logits = model(input_ids=ids, attention_mask=batch.attention_mask[micro, :T]).logits
                proximal[micro, :T] = sequence_logprobs(
                    logits, ids, temperature=cfg.rollout.temperature
                )
    gen = torch.Generator().manual_seed(cfg.seed * 100_003 + step)
    sums: dict[str, float] = {}
    weights = 0.0
    model.train()
    for _ in range(cfg.optim.epochs):
        perm = rows[torch.randperm(len(rows), generator=gen)]
        for mb in perm.split(cfg.optim.minibatch_size):
            optimizer.zero_grad(set_to_none=True)
            mb_tokens = adv.loss_mask[mb].sum().clamp(min=1)
            for micro in mb.split(cfg.optim.micro_batch_size):
                T = int(batch.attention_mask[micro].sum(-1).max())
                ids = batch.input_ids[micro, :T]
                attn = batch.attention_mask[micro, :T]
                mask = adv.loss_mask[micro, :T]
                logits = model(input_ids=ids, attention_mask=attn).logits  # [b, T, V]
                logprobs = sequence_logprobs(
                    logits, ids, temperature=cfg.rollout.temperature
                )  # [b, T]
                entropy = token_entropy(
                    logits if a.entropy_coef > 0 else logits.detach(),
                    temperature=cfg.rollout.temperature,
                )
                ref_lp = None
                if ref_model is not None:
                    with torch.no_grad():
                        ref_lp = sequence_logprobs(
                            ref_model(input_ids=ids, attention_mask=attn).logits,
                            ids,
                            temperature=cfg.rollout.temperature,
                        )
                behavior = batch.behavior_logprobs[micro, :T]
                # Synchronous hf sampling uses these very weights in fp32, so the sampler's
                # logprobs are the trust region's centre; with a correction it is the proximal
                # policy and the sampler's logprobs only enter the importance weight.
                old = behavior if proximal is None else proximal[micro, :T]
                loss, m = policy_loss(
                    logprobs,
                    old,
                    adv.tokens[micro, :T],
                    mask,
                    eps_low=a.eps_low,
                    eps_high=a.eps_high,
                    dual_clip_c=a.dual_clip,
                    ratio_level=a.ratio_level,
                    aggregation=a.aggregation,
                    behavior_logprobs=behavior if a.is_correction != "none" else None,
                    is_correction=None if a.is_correction == "none" else a.is_correction,
                    is_level=a.is_level,
                    is_mode=a.is_mode,
                    is_cap=a.is_cap,
                    ref_logprobs=ref_lp,
                    kl_coef=a.kl_coef,
                    kl_estimator=a.kl_estimator,
                    entropy=entropy,
                    entropy_coef=a.entropy_coef,
                )
                share = float(mask.sum() / mb_tokens)  # token share of this micro-batch
                (loss * share).backward()
                w = float(mask.sum())
                weights += w
                sums["loss"] = sums.get("loss", 0.0) + loss.item() * w
                sums["entropy"] = sums.get("entropy", 0.0) + float((entropy.detach() * mask).sum())
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + float(v) * w
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm) * float(mb_tokens)
            optimizer.step()
    out.update({k if "/" in k else f"train/{k}": v / max(weights, 1.0) for k, v in sums.items()})
    out["loss"] = out.pop("train/loss")
    out["entropy"] = out.pop("train/entropy")
    out["kl"] = out.get("train/kl", out.get("train/approx_kl", 0.0))
    return out


def train(
    cfg: TrainConfig, *, resume_dir: Path | None = None, quiet: bool = False, log: Log = print
) -> Path:
    """Run training; returns the run directory."""
    torch.set_num_threads(cfg.threads)
    run_dir = resume_dir or _new_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    rubric = rubric_of(cfg)
    family = make_family(cfg.env.name, cfg.env.options)
    train_tasks = family.tasks("train", cfg.env.train_tasks, seed=cfg.seed)
    eval_tasks = family.tasks("test", cfg.env.eval_tasks, seed=cfg.seed)
    model, tokenizer = build_model(cfg, family, train_tasks, run_dir, log=log)
    renderer = ChatRenderer(tokenizer, HermesToolCallParser(), turn_end_token(tokenizer))
    policy = HFPolicy(model, tokenizer.pad_token_id)
    params = _sampling(cfg, renderer)
    ref_model = None
    if cfg.algo.kl_coef > 0:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=cfg.optim.lr,
        weight_decay=cfg.optim.weight_decay,
    )

    start_step = 0
    ckpt = run_dir / "checkpoints" / "last.pt"
    if resume_dir is not None and ckpt.exists():
        state = load_checkpoint(ckpt, model, optimizer)
        start_step, policy.version = state["step"], state["version"]
        log(f"resumed {run_dir} at step {start_step}")
    writer = MetricsWriter(run_dir, truncate_from=start_step)
    rollouts = make_rollouts(cfg, family, train_tasks, renderer, model, policy, params, start_step)
    progress = Progress(cfg.steps, start_step, quiet=quiet, log=log)

    def run_eval(step: int) -> None:
        result, trajs = asyncio.run(
            evaluate_policy(
                family,
                eval_tasks,
                renderer,
                policy,
                _sampling(cfg, renderer, evaluation=True),
                limits_of(cfg),
                k=1,
                seed=cfg.seed + 7,
                batch_wait_s=cfg.rollout.batch_wait_s,
                rubric=rubric,
            )
        )
        writer.write_eval(step, result.as_metrics("eval"), trajs[:3], renderer)
        log(
            f"eval @ step {step}: held-out success {result.success:.3f} "
            f"± {result.success_stderr:.3f} over {result.episodes} episodes"
        )

    try:
        if start_step == 0 and cfg.steps > 0:
            run_eval(0)
        for step in range(start_step, cfg.steps):
            t0 = time.monotonic()
            rollout_metrics: dict[str, float] = {}
            if rollouts is None:
                requests = sample_requests(cfg, train_tasks, step)
                trajs = rollout(cfg, family, requests, renderer, policy, params)
            else:
                # Each episode is capped at episode_timeout_s; a batch far slower than that
                # means the producer is stuck, which must fail the run, not hang it.
                trajs, rollout_metrics = rollouts.get_batch(
                    step, timeout_s=4 * cfg.rollout.episode_timeout_s
                )
            t1 = time.monotonic()
            reward_metrics = score_trajectories(trajs, rubric)
            batch = collate(trajs, tokenizer.pad_token_id)
            with policy.lock:  # no sampling from half-updated weights
                train_metrics = train_on_batch(cfg, model, ref_model, optimizer, batch, step)
                policy.version += 1
            if rollouts is not None:
                rollouts.weights_updated(policy.version)
            t2 = time.monotonic()
            metrics = {
                "step": step + 1,
                **trajectory_metrics(trajs),
                **reward_metrics,
                **rollout_metrics,
                **train_metrics,
            }
            metrics["time/rollout_s"], metrics["time/train_s"] = t1 - t0, t2 - t1
            metrics["policy_version"] = policy.version
            writer.write(metrics, trajs[:2], renderer)
            if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
                save_checkpoint(
                    ckpt, step=step + 1, version=policy.version, model=model, optimizer=optimizer
                )
            progress.update(step + 1, metrics)
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 != cfg.steps:
                run_eval(step + 1)
        if cfg.steps > 0 and start_step < cfg.steps:
            run_eval(cfg.steps)
    finally:
        if rollouts is not None:
            rollouts.close()
        progress.close()
        writer.close()
        family.close()
    from turnrl.report.html import write_report

    write_report(run_dir)
    return run_dir


def make_rollouts(
    cfg: TrainConfig, family, train_tasks, renderer, model, policy, params, start_step: int
):
    """None for synchronous local rollouts; else a producer with ``get_batch``/``weights_updated``:
    asynchronous in-process (``mode=async``) or Ray actors (``distributed.backend=ray``)."""
    if cfg.mode == "sync" and cfg.distributed.backend == "local":
        return None
    requests = (sample_requests(cfg, train_tasks, k) for k in itertools.count(start_step))
    batch_size = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    # Sync over Ray is async with no staleness allowed: every batch comes from current weights.
    staleness = cfg.max_staleness if cfg.mode == "async" else 0
    if cfg.distributed.backend == "ray":
        from turnrl.distributed.ray_workers import RayRollouts, WorkerSpec

        d = cfg.distributed
        spec = WorkerSpec.for_env(
            cfg.env.name,
            cfg.env.options,
            renderer=renderer,
            model=copy.deepcopy(model).cpu(),
            pad_token_id=policy.pad_token_id,
            params=params,
            limits=limits_of(cfg),
            max_concurrency=cfg.rollout.max_concurrency,
            batch_wait_s=cfg.rollout.batch_wait_s,
        )
        return RayRollouts(
            requests,
            spec,
            policy,
            batch_size=batch_size,
            max_staleness=staleness,
            num_workers=d.num_workers,
            sync_every=cfg.sync_every,
            max_retries=d.max_retries,
            address=d.address,
            num_cpus=d.num_cpus,
        )
    from turnrl.rollout.async_rollout import AsyncRollouts

    return AsyncRollouts(
        requests,
        family.make_env,
        renderer,
        policy,
        params,
        limits_of(cfg),
        batch_size=batch_size,
        max_staleness=staleness,
        inflight=cfg.inflight,
        sync_every=cfg.sync_every,
        max_concurrency=cfg.rollout.max_concurrency,
        batch_wait_s=cfg.rollout.batch_wait_s,
    )


def _sampling(cfg: TrainConfig, renderer: ChatRenderer, evaluation: bool = False):
    from turnrl.policy.base import SamplingParams

    return SamplingParams(
        temperature=cfg.rollout.held_out_temperature if evaluation else cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        max_new_tokens=cfg.rollout.max_new_tokens,
        stop_token_ids=(renderer.turn_end_id,),
    )


def _new_run_dir(cfg: TrainConfig) -> Path:
    base = Path(cfg.runs_dir) / cfg.name
    if not base.exists():
        return base
    digest = hashlib.sha1(json.dumps(cfg.model_dump(), sort_keys=True).encode()).hexdigest()[:6]
    return Path(cfg.runs_dir) / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"
