"""The training recipe: one readable function, setup, loop, cleanup.

Per step: the rollout source hands over a batch of episodes (``group_size`` per task) -> the
rubric decides their rewards -> advantages -> policy loss in minibatches -> optimizer step ->
policy version += 1 -> the sampler gets the new weights. Held-out evaluation at the start, the
end and every ``eval_every`` steps; checkpoints every ``checkpoint_every``.

Everything here is a library block built from the config by :mod:`turnrl.run.build`; this
function only wires them, so forking it is the way to a different loop. It runs the same under
torchrun (``trainer.strategy``): every rank trains on the gathered batch, rank 0 alone writes.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from turnrl.chat import ChatRenderer, check_model_template
from turnrl.envs.base import blocking_tool_stats
from turnrl.envs.registry import Family
from turnrl.policy.base import PolicyBackend
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import place
from turnrl.rewards.rubric import Rubric, score_trajectories
from turnrl.rollout.source import NoRollouts
from turnrl.run.build import (
    build_model,
    limits_of,
    renderer_of,
    rollout_source,
    rubric_of,
    sampling_of,
    start_subagent,
    subagent_family,
    wrap_policy,
)
from turnrl.run.config import TrainConfig
from turnrl.run.device import on_cuda, resolve_precision
from turnrl.run.evaluate import eval_seed, evaluate_policy
from turnrl.run.models import named_model
from turnrl.run.preflight import preflight, resolve_strategy
from turnrl.run.rundir import RunDir
from turnrl.run.sampler import after_update, sampler_of
from turnrl.train.batch import collate
from turnrl.train.checkpoint import CheckpointError
from turnrl.train.metrics import (
    Progress,
    ending_warning,
    silence_library_progress,
    trajectory_metrics,
)
from turnrl.train.parallel import Dist, init_dist, launched_world
from turnrl.train.step import make_critic, train_on_batch, zero_reward_streak
from turnrl.types import Task
from turnrl.view.wandb_log import require_wandb

Log = Callable[[str], None]


def train(
    cfg: TrainConfig, *, resume_dir: Path | None = None, quiet: bool = False, log: Log = print
) -> Path:
    """Run training; returns the run directory. Bad model or env options raise ConfigError
    before anything is written."""
    # -- setup: check the machine, build every part, restore a checkpoint ----------------------
    torch.set_num_threads(cfg.threads)
    if cfg.logging.wandb:
        require_wandb()
    silence_library_progress()
    family, train_tasks, eval_tasks = preflight(cfg)
    if cfg.subagent.enabled:  # the delegate tool (turnrl.envs.wrappers)
        family = subagent_family(cfg, family)
    if not named_model(cfg.model.name).from_scratch:  # the template contract, before any write
        check_model_template(cfg.model.name, cfg.model.tool_format)
    # torchrun's processes (this one alone without torchrun): rank 0 alone writes and talks
    d = init_dist(resolve_strategy(cfg, launched_world()), resolve_precision(cfg), on_cuda(cfg))
    if not d.main:
        quiet, log = True, _silent
    run = RunDir(cfg, resume_dir, d, log)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rubric = rubric_of(cfg, family)
    model, tokenizer = d.main_first(lambda: build_model(cfg, family, train_tasks, run.path, log))
    model = place(model, cfg.model.device, cfg.model.dtype)
    renderer = renderer_of(cfg, tokenizer)
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if cfg.algo.kl_coef > 0 else None
    if cfg.optim.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    critic = make_critic(cfg, model)
    # the trainer's view (d.scorer: DDP/FSDP2 over the processes) and the unsharded weights for
    # sampling, eval, export and vLLM (the model itself, or a copy refreshed after each update)
    full = wrap_policy(d, model)
    policy = HFPolicy(full, tokenizer.pad_token_id, autocast=d.precision)
    subagent = None
    if cfg.subagent.enabled:  # frozen before any update; refreshed below when due
        subagent = start_subagent(cfg, family, full, tokenizer, renderer, policy.version)
        log(f"subagent: {subagent.describe}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable += list(critic.parameters()) if critic is not None else []
    optimizer = torch.optim.AdamW(trainable, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    start_step, policy.version = run.resume(model, optimizer, critic)
    if subagent is not None and run.saved:
        subagent.resumed(full, policy.version)
    run.start(full, tokenizer, start_step, train_tasks)
    sampler = sampler_of(cfg, run.path, full, policy)
    # asynchronous or Ray rollouts: one producer, on rank 0; the other ranks get its batches
    producer = cfg.max_staleness > 0 or cfg.rollout.workers != "local"
    source = NoRollouts()
    if d.main or not producer:
        source = rollout_source(
            cfg, family, train_tasks, renderer, full, sampler, policy, start_step, d.share, log
        )
    progress = Progress(cfg.steps, start_step, quiet=quiet, log=log)
    held_out = HeldOut(cfg, family, eval_tasks, renderer, sampler, rubric, run, d, log)
    zero_streak = 0

    # -- the loop -----------------------------------------------------------------------------
    try:
        if held_out.due(start_step) and not run.has_eval(start_step):
            held_out.run(start_step, policy.version, model, optimizer)  # also after a kill
        for step in range(start_step, cfg.steps):
            t0 = time.monotonic()
            # Each episode is capped at episode_timeout_s; a batch far slower than that (with two
            # minutes for new Ray workers to start) means the producer is stuck: fail, not hang.
            trajs, rollout_metrics = source.get_batch(
                step, timeout_s=4 * cfg.rollout.episode_timeout_s + 120
            )
            t1 = time.monotonic()
            reward_metrics = score_trajectories(trajs, rubric, warn=log)
            trajs, reward_metrics, rollout_metrics = d.gather(
                trajs, reward_metrics, rollout_metrics
            )
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
                    cfg, model, ref_model, optimizer, batch, step,
                    critic=critic, log=log, per_token=per_token, dist=d,
                )  # fmt: skip
                d.refresh(model)
                policy.version += 1
            if subagent is not None:
                subagent.step_done(full, step + 1, policy.version)
            lag = after_update(cfg, run.path, sampler, policy, full, trajs, held_out.due(step + 1))
            source.weights_updated(policy.version)
            metrics = {
                "step": step + 1,
                **trajectory_metrics(trajs),
                **reward_metrics,
                **rollout_metrics,
                **train_metrics,
                **(subagent.metrics(trajs) if subagent is not None else {}),
                "time/rollout_s": t1 - t0,
                "time/train_s": time.monotonic() - t1,
                "policy_version": policy.version,
                **lag,
                "run/resumes": run.resumes,
                **blocking_tool_stats(),
            }
            run.write_step(step + 1, metrics, trajs, batch, per_token, renderer)
            run.checkpoint(step + 1, policy.version, model, optimizer, critic, full, tokenizer)
            progress.update(step + 1, metrics)
            if warning := ending_warning(trajs, step + 1):
                log(warning)
            if held_out.due(step + 1):
                held_out.run(step + 1, policy.version, model, optimizer)
    except (KeyboardInterrupt, OSError, CheckpointError) as e:
        e.add_note(run.resume_note())
        raise
    # -- cleanup ------------------------------------------------------------------------------
    finally:
        source.close()
        progress.close()
        run.close()
        family.close()
        d.close()
    run.report()
    return run.path


class HeldOut:
    """The run's held-out evaluation: due at the start, the end and every ``eval_every`` steps;
    rank 0 evaluates alone (sampling needs no other rank), and a new best success is saved as
    ``checkpoints/best.pt`` by every rank (a collective save under FSDP2)."""

    def __init__(
        self,
        cfg: TrainConfig,
        family: Family,
        tasks: list[Task],
        renderer: ChatRenderer,
        sampler: PolicyBackend,
        rubric: Rubric,
        run: RunDir,
        d: Dist,
        log: Log,
    ) -> None:
        self.cfg, self.family, self.tasks, self.renderer = cfg, family, tasks, renderer
        self.sampler, self.rubric, self.rundir, self.d, self.log = sampler, rubric, run, d, log

    def due(self, step: int) -> bool:
        every = self.cfg.eval_every
        return self.cfg.steps > 0 and (
            step in (0, self.cfg.steps) or bool(every and step % every == 0)
        )

    def run(
        self, step: int, version: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        success = self.d.agree(self._evaluate(step) if self.d.main else None)
        if success is not None:
            self.rundir.save_best(step, version, model, optimizer, success)

    def _evaluate(self, step: int) -> float | None:
        """Evaluate and log; the success if it is the best after training began."""
        cfg = self.cfg
        result, trajs = asyncio.run(
            evaluate_policy(
                self.family,
                self.tasks,
                self.renderer,
                self.sampler,
                sampling_of(cfg, self.renderer, evaluation=True),
                limits_of(cfg),
                k=1,
                seed=eval_seed(cfg),
                batch_wait_s=cfg.rollout.batch_wait_s,
                rubric=self.rubric,
            )
        )
        best = self.rundir.write_eval(step, result.as_metrics("eval"), trajs, self.renderer)
        self.log(
            f"eval @ step {step}: held-out success {result.success:.3f} "
            f"± {result.success_stderr:.3f} over {result.episodes} episodes"
        )
        return result.success if step > 0 and result.success > best else None


def _silent(_: str) -> None:
    """The console of ranks other than 0."""
