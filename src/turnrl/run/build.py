"""Building a run's parts from its config: the only place that reads the whole config.

Each function takes the validated config (:class:`~turnrl.run.config.TrainConfig`) and returns
one library block, built: the starting policy (:mod:`turnrl.run.models`), the rubric, the
rollout limits and sampling parameters, the subagent, and the rollout source the recipe draws
its batches from (sync, async or Ray: one interface, :class:`turnrl.rollout.source.RolloutSource`).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from turnrl.chat import ChatRenderer, check_template
from turnrl.envs.registry import Family
from turnrl.envs.wrappers import SubagentFamily, with_subagent
from turnrl.policy.base import PolicyBackend, SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.rewards.pipeline import build_rubric
from turnrl.rewards.rubric import Rubric
from turnrl.rollout.agent_loop import RolloutLimits, default_sampling
from turnrl.rollout.source import RolloutSource, SyncRollouts, sample_requests
from turnrl.rollout.subagent import (
    EndpointSubagent,
    ModelSubagent,
    Snapshot,
    SubagentRun,
)
from turnrl.run.config import ConfigError, TrainConfig
from turnrl.run.models import named_model
from turnrl.train.parallel import Dist, ShardError
from turnrl.types import Task

Log = Callable[[str], None]


def build_model(
    cfg: TrainConfig, family: Family, train_tasks: list[Task], run_dir: Path, log: Log = print
) -> tuple[torch.nn.Module, Any]:
    """The starting policy and its tokenizer, built as ``model.name``'s entry says. On resume too
    it is the starting policy (the KL reference is copied from it); the checkpoint then restores
    what training changed. Ctrl-C during set-up (demonstrations, warm-up, SFT) says how to go on."""
    try:
        return named_model(cfg.model.name).build(cfg, family, train_tasks, run_dir, log)
    except KeyboardInterrupt as e:
        e.add_note(f"continue with: turnrl train --resume {run_dir}")
        raise


def wrap_policy(d: Dist, model: torch.nn.Module) -> torch.nn.Module:
    """``d.wrap(model)``: a model FSDP2 cannot shard is a config error (nothing trained yet)."""
    try:
        return d.wrap(model)
    except ShardError as e:
        raise ConfigError(str(e)) from None


def renderer_of(cfg: TrainConfig, tokenizer: Any) -> ChatRenderer:
    """The chat renderer of the run's tokenizer, checked against the token-exact contract."""
    return check_template(tokenizer, cfg.model.tool_format, source=cfg.model.name)


def rubric_of(cfg: TrainConfig, family: Family | None = None) -> Rubric:
    """The run's reward pipeline (``reward.*``): the one place training and eval rewards are
    decided. A family with ``rubric_members()`` (a verifiers env's rubric) gives its own
    weighted functions in place of its grade."""
    r = cfg.reward
    members = family.rubric_members() if hasattr(family, "rubric_members") else None
    return build_rubric(
        r.functions,
        grade_weight=r.grade_weight,
        shaping=r.shaping,
        screeners=r.screeners,
        zero_flagged=r.zero_flagged,
        env_members=members,
    )


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


def sampling_of(
    cfg: TrainConfig, renderer: ChatRenderer, evaluation: bool = False
) -> SamplingParams:
    """The rollouts' sampling parameters; ``evaluation``: held-out evaluation's temperature."""
    r = cfg.rollout
    return default_sampling(
        renderer,
        temperature=r.held_out_temperature if evaluation else r.temperature,
        top_p=r.top_p,
        max_new_tokens=r.max_new_tokens,
    )


# -- the subagent ------------------------------------------------------------------------------


def subagent_family(cfg: TrainConfig, family: Family) -> SubagentFamily:
    """``family`` with the delegate tool; ConfigError when its env gives a subagent no sub-env."""
    try:
        return with_subagent(family, cfg.subagent.max_turns)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def start_subagent(
    cfg: TrainConfig,
    family: SubagentFamily,
    model: torch.nn.Module,
    tokenizer: Any,
    renderer: ChatRenderer,
    version: int,
) -> SubagentRun:
    """Build the run's subagent (``subagent.*``) and hand it to ``family``'s envs."""
    s = cfg.subagent
    limits = RolloutLimits(
        max_turns=s.max_turns,
        max_context_tokens=s.max_context_tokens,
        max_new_tokens=s.max_new_tokens,
        max_obs_tokens=cfg.rollout.max_obs_tokens,
        max_parse_errors=cfg.rollout.max_parse_errors,
        episode_timeout_s=s.timeout_s,
    )
    snapshot = None
    if isinstance(s.model, dict):
        from turnrl.policy.openai import endpoint_chat

        chat = endpoint_chat({"max_tokens": s.max_new_tokens, **s.model}, "subagent.model")
        run = SubagentRun(EndpointSubagent(chat, limits, s.concurrency))
        run.describe = f"endpoint {chat.model} @ {chat.base_url}"
    else:
        if s.model == "snapshot":
            snapshot = Snapshot(model, tokenizer.pad_token_id, version)
            policy, sub_renderer = snapshot.policy, renderer
        else:
            from turnrl.policy.models import load_model, load_tokenizer, place

            tok = load_tokenizer(s.model, cfg.model.trust_remote_code)
            loaded = load_model(s.model, cfg.model.dtype, cfg.model.device)
            loaded = place(loaded, cfg.model.device, cfg.model.dtype).eval().requires_grad_(False)
            policy = HFPolicy(loaded, tok.pad_token_id)
            sub_renderer = check_template(tok, "auto", source=s.model)
        sub = ModelSubagent(policy, sub_renderer, limits, s.temperature, s.concurrency, cfg.seed)
        run = SubagentRun(sub, snapshot, s.refresh_every)
        run.describe = (
            f"snapshot of the policy at version {version}"
            + (f", refreshed every {s.refresh_every} steps" if s.refresh_every else ", frozen")
            if snapshot is not None
            else f"model {s.model}"
        )
    family.subagent = run.subagent
    return run


def eval_subagent(
    cfg: TrainConfig,
    family: Family,
    run_dir: Path | None,
    model: torch.nn.Module,
    tokenizer: Any,
    renderer: ChatRenderer,
) -> SubagentFamily:
    """``family`` with the subagent of the run being evaluated (``turnrl eval``): a snapshot
    that was never refreshed is the run's starting policy again (``run_dir/warm_start`` for a
    model built from scratch, else ``model.name``); a refreshed one is the evaluated policy, as
    it was after the run's last refresh at the latest."""
    wrapped = subagent_family(cfg, family)
    start = model
    if cfg.subagent.model == "snapshot" and not cfg.subagent.refresh_every and run_dir is not None:
        from turnrl.policy.models import load_model, place

        m = cfg.model
        warm = run_dir / "warm_start"
        source = warm if (warm / "config.json").exists() else m.name
        start = place(load_model(source, m.dtype, m.device, m.trust_remote_code), m.device, m.dtype)
    start_subagent(cfg, wrapped, start, tokenizer, renderer, 0)
    return wrapped


# -- where rollouts come from --------------------------------------------------------------------


def rollout_source(
    cfg: TrainConfig,
    family: Family,
    train_tasks: list[Task],
    renderer: ChatRenderer,
    model: torch.nn.Module,
    sampler: PolicyBackend,
    policy: HFPolicy,
    start_step: int,
    share: Callable[[list, int], list] | None = None,
    log: Log = print,
) -> RolloutSource:
    """The batches the recipe trains on: synchronous (each step's episodes sampled with the
    current weights, ``share`` of them on this rank), asynchronous in-process
    (``max_staleness`` >= 1), or Ray actors (``rollout.workers=ray``)."""
    params = sampling_of(cfg, renderer)
    r = cfg.rollout
    if r.workers == "local" and cfg.max_staleness == 0:
        return SyncRollouts(
            lambda step: sample_requests(
                train_tasks, step, cfg.seed, r.tasks_per_step, r.group_size
            ),
            family.make_env,
            renderer,
            sampler,
            params,
            limits_of(cfg),
            max_concurrency=r.max_concurrency,
            batch_wait_s=r.batch_wait_s,
            share=(lambda reqs: share(reqs, r.group_size)) if share is not None else None,
        )
    requests = (
        sample_requests(train_tasks, k, cfg.seed, r.tasks_per_step, r.group_size)
        for k in itertools.count(start_step)
    )
    batch_size = r.tasks_per_step * r.group_size
    if r.workers == "ray":  # at max_staleness 0 every batch comes from the current weights
        from turnrl.rollout.ray_workers import RayRollouts, WorkerSpec

        d = cfg.ray
        spec = WorkerSpec.for_env(
            cfg.env.name,
            cfg.env.options,
            renderer=renderer,
            model=copy.deepcopy(model).cpu(),
            pad_token_id=policy.pad_token_id,
            params=params,
            limits=limits_of(cfg),
            max_concurrency=r.max_concurrency,
            batch_wait_s=r.batch_wait_s,
            version=policy.version,
        )
        return RayRollouts(
            requests,
            spec,
            policy,
            batch_size=batch_size,
            max_staleness=cfg.max_staleness,
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
        max_staleness=cfg.max_staleness,
        inflight=cfg.inflight,
        sync_every=cfg.sync_every,
        max_concurrency=r.max_concurrency,
        batch_wait_s=r.batch_wait_s,
    )
