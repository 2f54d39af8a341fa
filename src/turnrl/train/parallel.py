"""Data-parallel training on torch.distributed: the process group, each rank's share of the work,
and the policy wrapped in DDP or FSDP2 (``trainer.strategy``).

Launched by ``torchrun`` (``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` in the environment), every rank
runs the same training loop, and N processes compute what one process computes:

- rollouts: rank r runs a contiguous share of whole task groups (a group is never split); the
  trajectories are gathered, so every rank holds the batch in the one-process order and computes
  the same advantages;
- the update: each minibatch's normalisers (token and row counts) are computed over the whole
  minibatch; rank r back-propagates the loss of its share of the rows times the world size, so
  the gradient average DDP and FSDP2 take is the one-process gradient;
- every rank runs the same number of forward/backward passes (a rank with fewer rows adds passes
  of weight 0), as the collectives inside DDP and FSDP2 require.

Rank 0 alone writes (metrics, records, checkpoints, the report, the console). Checkpoints hold the
full state gathered on rank 0, in the one-process format, so a run resumes on any number of
processes and under any strategy.
"""

from __future__ import annotations

import copy
import gc
import os
import random
import socket
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")

# reward metrics that count episodes of the batch (the others are per-episode means)
COUNTS = {"judge/skipped"}


def launched_world() -> int:
    """The number of processes torchrun started (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass
class Dist:
    """This process's place in the group (rank 0 of 1 without torchrun) and, after :meth:`wrap`,
    the trainer's view of the policy."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    strategy: str = "none"
    precision: torch.dtype | None = None
    scorer: nn.Module | None = None  # forward = token_logprobs of the policy, wrapped
    full: nn.Module | None = None  # the unsharded weights: sampling, eval, export
    _owned: bool = field(default=False, repr=False)  # this object started the process group

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def group(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def share(self, requests: list[T], group_size: int) -> list[T]:
        """This rank's contiguous share of whole groups (``group_size`` requests each)."""
        if self.world == 1:
            return requests
        groups = [requests[i : i + group_size] for i in range(0, len(requests), group_size)]
        per, extra = divmod(len(groups), self.world)
        start = self.rank * per + min(self.rank, extra)
        mine = groups[start : start + per + (self.rank < extra)]
        return [r for g in mine for r in g]

    def gather(
        self, trajs: list, reward_metrics: dict[str, float], rollout_metrics: dict[str, float]
    ) -> tuple[list, dict[str, float], dict[str, float]]:
        """Every rank's trajectories in rank order (the one-process order), their reward metrics
        as the per-episode means over all of them, and rank 0's rollout metrics."""
        if not self.group:
            return trajs, reward_metrics, rollout_metrics
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, (trajs, reward_metrics, rollout_metrics))
        n = sum(len(p[0]) for p in parts)
        keys = {k for p in parts for k in p[1]}
        merged = {k: sum(p[1].get(k, 0.0) * len(p[0]) for p in parts) / max(n, 1) for k in keys}
        for k in keys & COUNTS:  # counts, not per-episode means
            merged[k] = sum(p[1].get(k, 0.0) for p in parts)
        return [t for p in parts for t in p[0]], merged, parts[0][2]

    def main_first(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0, then on the others: what rank 0 writes (the tiny model's warm
        start in the run directory), they read."""
        if not self.group or self.world == 1:
            return fn()
        out = fn() if self.main else None
        dist.barrier()
        return out if self.main else fn()

    def agree(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank: a decision only rank 0 can take (eval, resume)."""
        if not self.group or self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """``t`` summed over the ranks (in place; None stays None)."""
        if t is not None and self.group and self.world > 1:
            dist.all_reduce(t)
        return t

    def total(self, values: list[float]) -> list[float]:
        """Element-wise sums over the ranks."""
        if not self.group or self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    @property
    def device(self) -> torch.device:
        if self.group and dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    # -- the update ----------------------------------------------------------------------

    def rows(self, mb: torch.Tensor) -> list[torch.Tensor]:
        """Each rank's share of a minibatch's rows, contiguous, in rank order."""
        return list(torch.tensor_split(mb, self.world)) if self.world > 1 else [mb]

    def no_sync(self, last: bool):
        """DDP reduces gradients once per minibatch, on its last backward pass."""
        if self.strategy == "ddp" and not last:
            return self.scorer.no_sync()
        return nullcontext()

    def sync_grads(self, params: list[nn.Parameter]) -> None:
        """Average the gradients of parameters outside the wrapped policy (the critic's head)
        as DDP averages the rest."""
        if not self.group or self.world == 1:
            return
        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.world

    def merge_nan(self, t: torch.Tensor) -> torch.Tensor:
        """Per-token values each rank filled on its own rows (NaN elsewhere), merged."""
        if not self.group or self.world == 1:
            return t
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, t)
        out = parts[0].clone()
        for p in parts[1:]:
            out = torch.where(torch.isnan(out), p, out)
        return out

    def gather_stats(self, stats: T) -> list[T]:
        if not self.group or self.world == 1:
            return [stats]
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, stats)
        return parts

    # -- the model -----------------------------------------------------------------------

    def wrap(self, model: nn.Module) -> nn.Module:
        """Set :attr:`scorer` (DDP or FSDP2 over this group, or the plain policy) and
        :attr:`full`; returns :attr:`full`. Call it before the optimizer is built (FSDP2
        replaces the parameters by shards)."""
        if self.group and self.world > 1:  # every rank starts from rank 0's weights
            for t in model.state_dict().values():
                dist.broadcast(t.data, src=0)
        scorer = Scorer(model, self.precision if self.strategy != "fsdp2" else None)
        self.full = model
        if self.strategy == "ddp":
            ids = [self.local_rank] if next(model.parameters()).is_cuda else None
            self.scorer = nn.parallel.DistributedDataParallel(
                scorer, device_ids=ids, forward_sync_buffers=False
            )
        elif self.strategy == "fsdp2":
            self.full = copy.deepcopy(model)
            self.scorer = shard(scorer, model, self.precision)
        else:
            self.scorer = scorer
        return self.full

    def refresh(self, model: nn.Module) -> None:
        """After an update under FSDP2: the full weights (sampling, eval, export) become the
        trained ones. Collective."""
        if self.strategy == "fsdp2":
            self.full.load_state_dict(self.full_state(model, everywhere=True), strict=False)

    def full_state(self, model: nn.Module, everywhere: bool = False) -> dict[str, torch.Tensor]:
        """The trainable weights, full, under the one-process names (on rank 0 only unless
        ``everywhere``). Collective under FSDP2."""
        from turnrl.train.checkpoint import trainable_state

        if self.strategy != "fsdp2":
            return trainable_state(model)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=not everywhere)
        sd = get_model_state_dict(model, options=opts)
        names = {n for n, p in model.named_parameters() if p.requires_grad}
        return {k: v for k, v in sd.items() if k in names}

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer's state in the one-process (index-keyed) format, full, on rank 0.
        Collective under FSDP2."""
        if self.strategy != "fsdp2":
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        by_name = get_optimizer_state_dict(model, optimizer, options=opts)
        if not self.main:  # gathered on rank 0 only
            return {}
        return _to_index_format(by_name, _param_names(model, optimizer))

    def load_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load a full (one-process format) checkpoint's weights and optimizer state."""
        if self.strategy != "fsdp2":
            missing = model.load_state_dict(state["model"], strict=False)
            assert not missing.unexpected_keys, (
                f"checkpoint has unknown weights: {missing.unexpected_keys[:5]}"
            )
            optimizer.load_state_dict(state["optimizer"])
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(model, state["model"], options=opts)
        by_name = _to_name_format(state["optimizer"], _param_names(model, optimizer))
        set_optimizer_state_dict(model, optimizer, by_name, options=opts)
        self.refresh(model)

    def rng_states(self) -> list[dict[str, Any]]:
        """Every rank's random state (rank order); collective."""
        mine = {"python": random.getstate(), "torch": torch.get_rng_state()}
        return self.gather_stats(mine)

    def close(self) -> None:
        if self._owned and self.group:
            # every rank is past its last collective before any tears the group down: a rank
            # leaving early closes sockets a peer's gloo threads still use (SIGABRT there)
            self.scorer = None  # the DDP/FSDP2 wrapper (its reducer threads) goes first
            gc.collect()
            if self.world > 1:
                dist.barrier()
            dist.destroy_process_group()


class Scorer(nn.Module):
    """The policy's token log-probabilities as one module's forward, so DDP and FSDP2 see the
    trunk and the output layer (called separately by :func:`token_logprobs`) as one pass;
    ``precision``: autocast to it (bf16) where FSDP2 does not cast."""

    def __init__(self, model: nn.Module, precision: torch.dtype | None = None) -> None:
        super().__init__()
        self.model = model
        self.precision = precision

    def forward(
        self, input_ids, attention_mask, score_mask, *, temperature=1.0, entropy_grad=False
    ):
        from turnrl.train.step import token_logprobs

        ctx = (
            torch.autocast(input_ids.device.type, dtype=self.precision)
            if self.precision is not None
            else nullcontext()
        )
        with ctx:
            return token_logprobs(
                self.model,
                input_ids,
                attention_mask,
                score_mask,
                temperature=temperature,
                entropy_grad=entropy_grad,
            )


class ShardError(ValueError):
    """FSDP2 found nothing to shard in the model (a setting the model cannot take)."""


def shard(scorer: Scorer, model: nn.Module, precision: torch.dtype | None) -> nn.Module:
    """FSDP2: each transformer block its own shard group, the rest (embeddings, final norm,
    output layer, tied or not) in the root's; optimizer state follows the parameter shards."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    blocks = set()
    for m in model.modules():
        blocks |= set(getattr(m, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in blocks]
    if not layers:
        raise ShardError(
            f"trainer.strategy=fsdp2: {type(model).__name__} has no transformer blocks to shard; "
            "use trainer.strategy=ddp"
        )
    mp = MixedPrecisionPolicy(
        param_dtype=precision, reduce_dtype=torch.float32 if precision is not None else None
    )
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    # the root's weights stay gathered between forward and backward: the output layer is
    # recomputed chunk by chunk in the backward pass
    return fully_shard(scorer, mp_policy=mp, reshard_after_forward=False)


def _param_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for g in optimizer.param_groups for p in g["params"]]


def _to_index_format(by_name: dict, names: list[str]) -> dict:
    index = {n: i for i, n in enumerate(names)}
    groups = []
    for g in by_name["param_groups"]:
        groups.append({**g, "params": [index[n] for n in g["params"]]})
    return {"state": {index[n]: s for n, s in by_name["state"].items()}, "param_groups": groups}


def _to_name_format(by_index: dict, names: list[str]) -> dict:
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in by_index["param_groups"]]
    return {"state": {names[i]: s for i, s in by_index["state"].items()}, "param_groups": groups}


def init_dist(strategy: str, precision: torch.dtype | None = None, cuda: bool = False) -> Dist:
    """This process's :class:`Dist` for ``strategy`` (none, ddp or fsdp2, as resolved for the
    processes torchrun started): the process group torchrun describes (gloo on CPU, NCCL on
    CUDA), a one-process group for FSDP2 without torchrun, or none."""
    world = launched_world()
    d = Dist(strategy=strategy, precision=precision)
    if world == 1 and strategy != "fsdp2":
        return d
    d.rank, d.world = int(os.environ.get("RANK", "0")), world
    d.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(d.local_rank)
    if not dist.is_initialized():
        # Ranks wait on rank 0's held-out evaluation and on the slowest rank's rollouts: allow
        # an hour (NCCL's default, 10 minutes, would kill a run during a long evaluation).
        backend, timeout = ("nccl" if cuda else "gloo"), timedelta(hours=1)
        if "MASTER_ADDR" in os.environ:  # torchrun's rendezvous
            dist.init_process_group(backend, timeout=timeout)
        else:  # one process without torchrun (FSDP2 on one device): a private group
            url = f"tcp://127.0.0.1:{_free_port()}"
            dist.init_process_group(backend, init_method=url, rank=0, world_size=1, timeout=timeout)
        d._owned = True
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
