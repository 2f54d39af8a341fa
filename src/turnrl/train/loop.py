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

from turnrl.chat import ChatRenderer, check_model_template, check_template
from turnrl.envs.base import blocking_tool_stats
from turnrl.envs.registry import Family
from turnrl.files import create_dir, write_atomic
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import place
from turnrl.rewards.rubric import Rubric, build_rubric, score_trajectories
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.rollout.subagent import start_subagent
from turnrl.train.batch import collate
from turnrl.train.checkpoint import (
    CheckpointError,
    keep_copy,
    load_checkpoint,
    save_checkpoint,
)
from turnrl.train.config import ConfigError, TrainConfig
from turnrl.train.distributed import init_dist
from turnrl.train.evaluate import eval_seed, evaluate_policy
from turnrl.train.export import save_policy, saved_policy
from turnrl.train.failures import BrokenEnv, FailureStop
from turnrl.train.interrupts import resume_hint
from turnrl.train.metrics import (
    MetricsWriter,
    Progress,
    count_resume,
    ending_warning,
    silence_library_progress,
    trajectory_metrics,
)
from turnrl.train.preflight import preflight
from turnrl.train.setup import build_model
from turnrl.train.step import flag_non_finite, make_critic, train_on_batch, zero_reward_streak
from turnrl.train.vllm_sync import push_weights, sampler_lag, vllm_sampler
from turnrl.types import Trajectory
from turnrl.view.export import export_html
from turnrl.view.records import RecordWriter
from turnrl.view.wandb_log import WandbLogger, require_wandb

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
        context=r.context_config(),
    )


def subagent_family(cfg: TrainConfig, family: Family):
    """``family`` with the delegate tool; ConfigError when its env gives a subagent no sub-env."""
    from turnrl.rollout.subagent import with_subagent

    try:
        return with_subagent(family, cfg.subagent.max_turns)
    except ValueError as e:
        raise ConfigError(str(e)) from None


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


def train(
    cfg: TrainConfig, *, resume_dir: Path | None = None, quiet: bool = False, log: Log = print
) -> Path:
    """Run training; returns the run directory. Bad model or env options raise ConfigError
    before anything is written."""
    torch.set_num_threads(cfg.threads)
    if cfg.logging.wandb:
        require_wandb()
    silence_library_progress()
    family, train_tasks, eval_tasks = preflight(cfg)
    if cfg.subagent.enabled:  # the delegate tool (turnrl.rollout.subagent)
        family = subagent_family(cfg, family)
    if cfg.model.name != "tiny":  # the template contract, before anything is written
        check_model_template(cfg.model.name, cfg.model.tool_format)
    # torchrun's processes (this one alone without torchrun): rank 0 alone writes and talks
    d = init_dist(cfg)
    if not d.main:
        quiet, log = True, _silent
    run_dir = d.agree(resume_dir or _new_run_dir(cfg))
    if d.main:
        create_dir(run_dir)  # a read-only runs_dir: bad input, nothing written (exit 2)
        log(f"run directory: {run_dir}  (resume: turnrl train --resume {run_dir})")
        write_atomic(run_dir / "config.yaml", yaml.safe_dump(cfg.model_dump(), sort_keys=False))
        resume_hint(f"continue with: turnrl train --resume {run_dir}")
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    rubric = rubric_of(cfg)
    model, tokenizer = d.main_first(lambda: build_model(cfg, family, train_tasks, run_dir, log=log))
    model = place(model, cfg.model.device, cfg.model.dtype)
    renderer = check_template(tokenizer, cfg.model.tool_format, source=cfg.model.name)
    params = _sampling(cfg, renderer)
    ref_model = None
    if cfg.algo.kl_coef > 0:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    if cfg.optim.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    critic = make_critic(cfg, model)
    # the trainer's view (d.scorer: DDP/FSDP2 over the processes) and the unsharded weights for
    # sampling, eval, export and vLLM (the model itself, or a copy refreshed after each update)
    full = d.wrap(model)
    policy = HFPolicy(full, tokenizer.pad_token_id)
    subagent = None
    if cfg.subagent.enabled:  # frozen before any update; refreshed below when due
        subagent = start_subagent(cfg, family, full, tokenizer, renderer, policy.version)
        log(f"subagent: {subagent.describe}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable += list(critic.parameters()) if critic is not None else []
    optimizer = torch.optim.AdamW(trainable, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)

    start_step, resumes = 0, 0
    if resume_dir is not None:
        resumes = d.agree(count_resume(run_dir) if d.main else 0)
    ckpt = run_dir / "checkpoints" / "last.pt"
    if resume_dir is not None and ckpt.exists():
        state = load_checkpoint(ckpt, model, optimizer, critic=critic, dist=d)
        start_step, policy.version = state["step"], state["version"]
        log(f"resumed {run_dir} at step {start_step}")
        if subagent is not None:
            subagent.resumed(full, policy.version)
    if d.main and saved_policy(run_dir) is None:  # a fresh run: its starting policy
        save_policy(run_dir, full, tokenizer, cfg.model.name, start_step)
    sampler = policy if cfg.rollout.backend == "hf" else vllm_sampler(cfg, run_dir, full, policy)
    writer = records = wandb_log = None
    if d.main:
        writer = MetricsWriter(run_dir, resume_step=start_step if resume_dir is not None else None)
        records = RecordWriter(
            run_dir,
            record_groups=cfg.logging.record_groups,
            records_mb=cfg.logging.records_mb,
            token_text=lambda i: tokenizer.decode([i]),
            tiers={t.id: t.payload.get("tier") for t in train_tasks},
            truncate_from=start_step,
        )
        wandb_log = WandbLogger(run_dir, cfg) if cfg.logging.wandb else None
    # asynchronous or Ray rollouts: one producer, on rank 0; the other ranks get its batches
    producer = cfg.mode != "sync" or cfg.distributed.backend != "local"
    rollouts = None
    if d.main:
        rollouts = make_rollouts(
            cfg, family, train_tasks, renderer, full, policy, params, start_step, log
        )
    progress = Progress(cfg.steps, start_step, quiet=quiet, log=log)

    def run_eval(step: int) -> None:
        success = d.agree(_eval_and_log(step) if d.main else None)
        if success is not None:  # the best so far: a collective save under FSDP2
            save_checkpoint(
                ckpt.with_name("best.pt"),
                step=step,
                version=policy.version,
                model=model,
                optimizer=optimizer,
                extra={"eval/success": success},
                dist=d,
            )

    def _eval_and_log(step: int) -> float | None:
        """Rank 0 evaluates alone (sampling needs no other rank); the success if the best."""
        result, trajs = asyncio.run(
            evaluate_policy(
                family,
                eval_tasks,
                renderer,
                sampler,
                _sampling(cfg, renderer, evaluation=True),
                limits_of(cfg),
                k=1,
                seed=eval_seed(cfg),
                batch_wait_s=cfg.rollout.batch_wait_s,
                rubric=rubric,
            )
        )
        best = writer.best_eval()
        writer.write_eval(step, result.as_metrics("eval"), trajs[:3], renderer)
        if wandb_log is not None:
            wandb_log.log(step, result.as_metrics("eval"))
        cut = result.timeouts + result.env_errors
        log(
            f"eval @ step {step}: held-out success {result.success:.3f} "
            f"± {result.success_stderr:.3f} over {result.episodes} episodes"
            + (f" ({result.timeouts} timeout, {result.env_errors} env_error)" if cut else "")
        )
        return result.success if step > 0 and result.success > best else None

    zero_streak = 0
    failures = FailureStop(
        family.name, cfg.rollout.env_failure_share, cfg.rollout.env_failure_steps
    )

    def eval_due(step: int) -> bool:
        return cfg.steps > 0 and (
            step in (0, cfg.steps) or bool(cfg.eval_every and step % cfg.eval_every == 0)
        )

    saved = start_step  # the step of checkpoints/last.pt
    try:
        if eval_due(start_step) and d.agree(d.main and not writer.has_eval(start_step)):
            run_eval(start_step)  # also one a kill interrupted right after its checkpoint
        for step in range(start_step, cfg.steps):
            t0 = time.monotonic()
            rollout_metrics: dict[str, float] = {}
            if not producer:  # this rank's share of the step's task groups
                requests = d.share(sample_requests(cfg, train_tasks, step), cfg.rollout.group_size)
                trajs = rollout(cfg, family, requests, renderer, sampler, params)
            elif rollouts is not None:
                # Each episode is capped at episode_timeout_s; a batch far slower than that
                # (with two minutes for new Ray workers to start) means the producer is
                # stuck, which must fail the run, not hang it.
                trajs, rollout_metrics = rollouts.get_batch(
                    step, timeout_s=4 * cfg.rollout.episode_timeout_s + 120
                )
            else:  # rank 0's producer: its batch comes in the gather below
                trajs = []
            t1 = time.monotonic()
            reward_metrics = score_trajectories(trajs, rubric)
            trajs, reward_metrics, rollout_metrics = d.gather(
                trajs, reward_metrics, rollout_metrics
            )
            flag_non_finite(trajs, cfg.env.name, log)
            zero_streak = zero_reward_streak(zero_streak, trajs, log)
            a = cfg.algo
            batch = collate(
                trajs,
                tokenizer.pad_token_id,
                anchors=a.anchors,
                anchor_similarity=a.anchor_similarity,
            )
            per_token: dict[str, torch.Tensor] = {}
            with policy.lock:  # no sampling from half-updated weights
                train_metrics = train_on_batch(
                    cfg,
                    model,
                    ref_model,
                    optimizer,
                    batch,
                    step,
                    critic=critic,
                    log=log,
                    per_token=per_token,
                    dist=d,
                )
                d.refresh(model)
                policy.version += 1
            if subagent is not None:
                subagent.step_done(full, step + 1, policy.version)
            # vLLM samples with the weights of its last push (each token records that version);
            # a held-out evaluation always sees the trainer's current weights
            if sampler is not policy and (
                policy.version - sampler.version >= cfg.sync_every or eval_due(step + 1)
            ):
                push_weights(cfg, run_dir, sampler, full, policy.version)
            if rollouts is not None:
                rollouts.weights_updated(policy.version)
            t2 = time.monotonic()
            metrics = {
                "step": step + 1,
                **trajectory_metrics(trajs),
                **reward_metrics,
                **rollout_metrics,
                **train_metrics,
                **(subagent.metrics(trajs) if subagent is not None else {}),
            }
            metrics["time/rollout_s"], metrics["time/train_s"] = t1 - t0, t2 - t1
            metrics["policy_version"] = policy.version
            if sampler is not policy:  # versions the trained tokens lagged the trainer by
                metrics.update(sampler_lag(trajs, policy.version - 1))
            metrics["run/resumes"] = resumes
            metrics.update(blocking_tool_stats())
            if d.main:
                writer.write(metrics, trajs[:2], renderer)
                if len(batch.episode_row) > len(trajs):  # segment rows back to episodes
                    per_token = {k: batch.per_episode(v) for k, v in per_token.items()}
                recorded = records.write(step + 1, trajs, per_token)
                if wandb_log is not None:
                    wandb_log.log(step + 1, metrics, recorded)
            keep = cfg.checkpoint_keep_every and (step + 1) % cfg.checkpoint_keep_every == 0
            if keep or (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
                save_checkpoint(
                    ckpt,
                    step=step + 1,
                    version=policy.version,
                    model=model,
                    optimizer=optimizer,
                    critic=critic,
                    dist=d,
                )
                saved = step + 1
                if d.main:
                    save_policy(run_dir, full, tokenizer, cfg.model.name, step + 1)
                if keep and d.main:
                    keep_copy(ckpt, step + 1, cfg.checkpoint_keep)
            progress.update(step + 1, metrics)
            if warning := ending_warning(trajs, step + 1):
                log(warning)
            failures.after_step(trajs, step + 1)  # a broken env: BrokenEnv, after the save
            if eval_due(step + 1):
                run_eval(step + 1)
    except (KeyboardInterrupt, OSError, CheckpointError, BrokenEnv) as e:
        e.add_note(
            f"the last checkpoint is step {saved} of {cfg.steps}; continue with: "
            f"turnrl train --resume {run_dir}"
            if saved
            else f"no checkpoint yet; start over with: turnrl train --resume {run_dir}"
        )
        raise
    finally:
        if rollouts is not None:
            rollouts.close()
        progress.close()
        if writer is not None:
            writer.close()
        if wandb_log is not None:
            wandb_log.close()
        family.close()
        d.close()
    if d.main:
        try:
            export_html([run_dir], run_dir / "report.html")
        except OSError as e:
            e.add_note(f"all {cfg.steps} steps are saved; rebuild it with: turnrl report {run_dir}")
            raise
    return run_dir


def make_rollouts(
    cfg: TrainConfig,
    family,
    train_tasks,
    renderer,
    model,
    policy,
    params,
    start_step: int,
    log: Log = print,
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
            version=policy.version,
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
            max_replacements=d.max_replacements,
            address=d.address,
            num_cpus=d.num_cpus,
            log=log,
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


def _silent(_: str) -> None:
    """The console of ranks other than 0."""


def _new_run_dir(cfg: TrainConfig) -> Path:
    base = Path(cfg.runs_dir) / cfg.name
    if not base.exists():
        return base
    digest = hashlib.sha1(json.dumps(cfg.model_dump(), sort_keys=True).encode()).hexdigest()[:6]
    return Path(cfg.runs_dir) / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"
