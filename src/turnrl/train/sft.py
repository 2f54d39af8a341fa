"""Supervised warm start on scripted demonstrations.

Demonstrations are rendered with the same renderer and observation deltas as rollouts, so the
model learns exactly the token sequences it will later produce and read.

A long SFT shows its progress with an ETA and saves it (weights, optimizer, schedule, its place
in the epoch and its random state) to a checkpoint every minute or so and when Ctrl-C stops
it, so a resume continues it exactly where it stopped: the same steps on the same batches.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from turnrl.algo.losses import sequence_logprobs
from turnrl.chat import ChatRenderer, check_template
from turnrl.envs.registry import Family
from turnrl.envs.scripted import ScriptedEpisode, run_scripted
from turnrl.policy.hf import (
    pack_rows,
    packed_logits,
    pad_right,
    shared_prefix_length,
    shared_prefix_logits,
)
from turnrl.train.checkpoint import load_checkpoint, save_checkpoint
from turnrl.train.metrics import PhaseProgress, clock
from turnrl.train.step import token_logprobs
from turnrl.types import Task

if TYPE_CHECKING:
    from turnrl.run.config import TrainConfig

CHECKPOINT_EVERY_S = 60.0  # a long phase saves its progress this often (or less: SaveClock)


@dataclass
class Demo:
    token_ids: list[int]
    loss_mask: list[int]  # 1 on action tokens


class ExtraTerms(Protocol):
    """Extra SFT loss terms (the tiny lab adds a value weight and copy rows; see
    :mod:`turnrl.tiny.sft`)."""

    def demo_term(self, idx: list[int], logprobs: torch.Tensor) -> torch.Tensor | None:
        """Added to the demonstration loss (and reported with it); ``logprobs`` is [B, T]."""
        ...

    def step_term(self, model: torch.nn.Module, rng: random.Random) -> torch.Tensor | None:
        """Added to the step's loss only (not reported)."""
        ...


class SaveClock:
    """When a long phase saves its progress: every ``CHECKPOINT_EVERY_S`` seconds, or less
    often when a save is slow (a real model's weights and optimizer), so saving stays under a
    tenth of the phase's time."""

    def __init__(self) -> None:
        self.last, self.cost = time.monotonic(), 0.0

    def due(self) -> bool:
        return time.monotonic() - self.last >= max(CHECKPOINT_EVERY_S, 10 * self.cost)

    def after_step(
        self, stopping: Callable[[], bool], save: Callable[[], None] | None, where: str
    ) -> None:
        """Save when due or when a Ctrl-C asked to stop (``save`` None: nothing to save), then
        on a stop raise KeyboardInterrupt noting ``where`` the phase stopped."""
        if save is not None and (stopping() or self.due()):
            started = time.monotonic()
            save()
            self.last = time.monotonic()
            self.cost = self.last - started
        if stopping():
            e = KeyboardInterrupt()
            kept = "its checkpoint is saved" if save is not None else "no checkpoint is kept"
            e.add_note(f"{where}; {kept}")
            raise e


@contextmanager
def finish_step_on_ctrl_c() -> Iterator[Callable[[], bool]]:
    """Within it, a first Ctrl-C only raises a flag: the training loop finishes its step, saves
    a checkpoint and raises KeyboardInterrupt itself, so the checkpoint holds whole steps (an
    interrupt inside ``optimizer.step`` would leave weights half-updated). A second Ctrl-C
    interrupts at once. Outside the main thread no handler can be set: Ctrl-C acts as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    asked: list[bool] = []

    def handler(signum: int, frame: object) -> None:
        if asked:
            raise KeyboardInterrupt
        asked.append(True)
        try:  # os.write, not print: a handler may run in the middle of a print
            os.write(2, b"Ctrl-C: stopping at the end of this step (again: stop at once)\n")
        except OSError:
            pass

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(asked)
    finally:
        signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)


async def _play(
    family: Family,
    tasks: list[Task],
    noise: float,
    seed: int,
    max_turns: int,
    done: Callable[[int], None] | None,
) -> list[ScriptedEpisode]:
    gate = asyncio.Semaphore(16)
    finished = [0]

    async def one(i: int, task: Task) -> ScriptedEpisode:
        async with gate:
            agent = family.expert(task, seed=seed + i, noise=noise)
            ep = await run_scripted(
                family.make_env(), task, agent, max_turns=max_turns, grade=False
            )
        finished[0] += 1
        if done is not None:
            done(finished[0])
        return ep

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))


def play_demonstrations(
    family: Family,
    tasks: list[Task],
    noise: float,
    seed: int,
    max_turns: int,
    done: Callable[[int], None] | None = None,
) -> list[ScriptedEpisode]:
    """One scripted episode per task (in the tasks' order); ``done(n)`` after each finishes."""
    return asyncio.run(_play(family, tasks, noise, seed, max_turns, done))


def episode_messages(ep: ScriptedEpisode, renderer: ChatRenderer) -> list[dict]:
    """The conversation as the agent loop would record it (the final observation is dropped
    when the episode terminated: nothing is generated after it)."""
    msgs = [
        {"role": "system", "content": ep.instructions},
        {"role": "user", "content": ep.first_message},
    ]
    for k, call in enumerate(ep.calls):
        msgs.append({"role": "assistant", "content": renderer.parser.format([call])})
        last = k == len(ep.calls) - 1
        if not (last and ep.terminated):
            msgs.append({"role": "tool", "content": ep.observations[k]})
    return msgs


def render_demo(
    ep: ScriptedEpisode,
    renderer: ChatRenderer,
    tools: list[dict],
    max_obs_tokens: int,
    max_tokens: int,
) -> Demo | None:
    """The episode as the agent loop would have tokenized it, or None when it is longer than
    ``max_tokens``."""
    from turnrl.chat import tool_message
    from turnrl.rollout.agent_loop import clip_observation

    ids = renderer.prompt_ids(episode_messages(ep, renderer)[:2], tools)
    mask = [0] * len(ids)
    for k, call in enumerate(ep.calls):
        action = renderer.encode(renderer.parser.format([call]))
        ids += action + [renderer.turn_end_id]
        mask += [1] * (len(action) + 1)
        if k == len(ep.calls) - 1 and ep.terminated:
            break
        obs = clip_observation(ep.observations[k], renderer, max_obs_tokens)
        delta = renderer.observation_ids([tool_message(obs, call, k * 10)])
        ids += delta
        mask += [0] * len(delta)
    if len(ids) > max_tokens:
        return None
    return Demo(ids, mask)


def batch_logits(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """The plain forward's logits by the cheaper of two exact shortcuts: run the prefix every
    demo shares once (a real model's system prompt and tool list, hundreds of tokens) or pack
    the demos end to end to skip their padding (the tiny model drops the system turn, so its
    demos share a few tokens, and their lengths vary: 39 % of a user-env batch is padding)."""
    B, T = ids.shape
    p = shared_prefix_length(ids, attn)
    lengths = attn.sum(1).tolist()
    packed_cost = T * len(pack_rows(lengths, T))
    if p + B * (T - p) <= packed_cost:
        return shared_prefix_logits(model, ids, attn)
    return packed_logits(model, ids, attn)


def demo_logprobs(
    model: torch.nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    mask: torch.Tensor,
    every_position: bool = False,
) -> torch.Tensor:
    """log p(x_t | x_<t) [B, T] (position t scores token t): on the action tokens ``mask``
    selects, the output layer run only there (a real model's vocabulary is most of a short
    forward's cost); ``every_position`` computes all of them from full logits (the tiny lab's
    extra terms read positions outside the mask)."""
    if every_position:
        return sequence_logprobs(batch_logits(model, ids, attn), ids)  # [B, T]
    return token_logprobs(model, ids, attn, mask)[0]  # [B, T], 0 off the mask


def autocast_to(device: torch.device, precision: torch.dtype | None):
    """``torch.autocast`` to ``precision`` on ``device``'s kind, or nothing for None."""
    if precision is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=precision)


def sft_train(
    model: torch.nn.Module,
    demos: list[Demo],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    pad_id: int,
    seed: int,
    extra: ExtraTerms | None = None,
    log: Callable[[str], None] | None = None,
    checkpoint: Path | None = None,
    precision: torch.dtype | None = None,
) -> list[float]:
    """Next-token cross-entropy on action tokens (plus ``extra``'s terms); one-cycle lr
    schedule, AdamW without weight decay. Returns the demonstration loss per optimizer step.
    ``precision``: forward and backward under ``torch.autocast`` to it (bf16), the weights,
    gradients and optimizer state staying float32, as the RL step does.

        loss = sum_t m_t l_t / sum_t m_t      l_t = -log p(x_t | x_<t), m the action mask

    ``log`` gets progress lines. With ``checkpoint``, training continues from that file when it
    exists and saves to it every minute or so, when Ctrl-C stops it (then KeyboardInterrupt)
    and at the end (marked done, without optimizer state: a later call only loads the weights).
    """
    rng = random.Random(seed)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0
    )
    per_epoch = (len(demos) + batch_size - 1) // batch_size
    total = epochs * per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(total, 1), pct_start=0.1
    )
    say = log if log is not None else (lambda line: None)
    first_epoch, first_batch, order, losses = 0, 0, None, []
    if checkpoint is not None and checkpoint.exists():
        state = load_checkpoint(checkpoint, model, None)
        x = state["extra"]
        if (x["total"], x["demos"]) != (total, len(demos)):
            raise ValueError(
                f"SFT checkpoint {checkpoint} is for {x['total']} steps over {x['demos']} "
                f"demonstrations, this SFT is {total} steps over {len(demos)}: the sft settings "
                "changed; delete the file to start SFT over"
            )
        losses = x["losses"]
        if x["done"]:
            say(f"  sft: done already ({checkpoint})")
            return losses
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(x["scheduler"])
        rng.setstate(x["rng"])
        first_epoch, first_batch, order = x["epoch"], x["batch"], x["order"]
        say(f"  sft: continuing from its checkpoint at step {len(losses)}/{total}")

    def save(epoch: int, batch: int, done: bool) -> None:
        assert checkpoint is not None
        if done:
            opt.state.clear()  # nothing will step again: keep the file to the weights
        save_checkpoint(
            checkpoint,
            step=len(losses),
            version=0,
            model=model,
            optimizer=opt,
            extra={
                "total": total,
                "demos": len(demos),
                "epoch": epoch,
                "batch": batch,  # the next batch of ``order`` to train on
                "order": order,
                "rng": rng.getstate(),
                "scheduler": sched.state_dict(),
                "losses": losses,
                "done": done,
            },
        )

    device = next(model.parameters()).device
    model.train()
    progress = PhaseProgress("sft step", total, say)
    clock = SaveClock()
    with finish_step_on_ctrl_c() as stopping:
        for epoch in range(first_epoch, epochs):
            if order is None:
                order = list(range(len(demos)))
                rng.shuffle(order)
            # Plain random batches, their padding skipped by packing (batch_logits). Sorting by
            # length instead makes batches of one kind of episode (gave up, slipped and
            # repaired, ...) that pull every decision one way per step: a model trained from
            # scratch then learned no copying at all in 400 steps.
            batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
            for b in range(first_batch, len(batches)):
                idx = batches[b]
                ids, attn = pad_right([demos[i].token_ids for i in idx], pad_id, device)
                mask, _ = pad_right([demos[i].loss_mask for i in idx], 0, device)
                with autocast_to(device, precision):
                    lp = demo_logprobs(model, ids, attn, mask, every_position=extra is not None)
                m = mask.float()  # [B, T] action tokens
                loss = -(lp * m).sum() / m.sum().clamp(min=1)
                term = extra.demo_term(idx, lp) if extra is not None else None
                if term is not None:
                    loss = loss + term
                demo_loss = loss.item()
                term = extra.step_term(model, rng) if extra is not None else None
                if term is not None:
                    loss = loss + term
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                losses.append(demo_loss)
                progress.update(len(losses), f"(epoch {epoch + 1}/{epochs})  loss {demo_loss:.3f}")
                clock.after_step(
                    stopping,
                    partial(save, epoch, b + 1, done=False) if checkpoint is not None else None,
                    f"SFT stopped after step {len(losses)} of {total}",
                )
            order, first_batch = None, 0
    if checkpoint is not None:
        save(epochs, 0, done=True)
    return losses


# -- the warm start of a run: the env's scripted expert as demonstrations ----------------------


def cache_root() -> Path:
    return Path(os.environ.get("TURNRL_CACHE", Path.home() / ".cache" / "turnrl"))


def demonstrations(
    cfg: TrainConfig,
    family: Family,
    train_tasks: list[Task],
    log: Callable[[str], None] | None = None,
    saved: Path | None = None,
) -> list[ScriptedEpisode]:
    """``sft.episodes`` episodes of the env's scripted expert (mistakes at rate ``sft.noise``)
    on training tasks drawn with the run's seed. With ``saved``: read from that file when it
    exists, else written there once played, so a resumed SFT trains on the very same rows."""
    if not callable(getattr(family, "expert", None)):
        raise ValueError(f"sft.enabled: env {family.name!r} has no scripted expert to imitate")
    if saved is not None and saved.exists():
        return pickle.loads(saved.read_bytes())
    say = log if log is not None else (lambda line: None)
    n = cfg.sft.episodes
    say(f"warm start: playing {n} episodes of the env's scripted expert (noise {cfg.sft.noise})")
    rng = random.Random(cfg.seed)
    tasks = [rng.choice(train_tasks) for _ in range(n)]
    t0, progress = time.monotonic(), PhaseProgress("episode", n, say)
    episodes = play_demonstrations(
        family, tasks, cfg.sft.noise, cfg.seed, cfg.rollout.max_turns, done=progress.update
    )
    say(f"warm start: {n} episodes played in {clock(time.monotonic() - t0)}")
    # with a subagent, the sub-episodes its scripted expert played teach that side too
    episodes = episodes + getattr(family, "sub_demonstrations", list)()
    if saved is not None:
        try:
            data = pickle.dumps(episodes)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            say(f"warm start: episodes not saved ({e}); a resume plays them again")
        else:
            write_atomic(saved, data)
    return episodes


def write_atomic(path: Path, data: bytes) -> None:
    """Write-then-rename: a kill leaves the old file or none, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def render_demos(
    cfg: TrainConfig, episodes: list[ScriptedEpisode], renderer: ChatRenderer
) -> list[tuple[ScriptedEpisode, Demo]]:
    """Each episode with its token-exact demonstration; those over the context budget are
    dropped."""
    out = []
    for ep in episodes:
        demo = render_demo(
            ep, renderer, ep.tools, cfg.rollout.max_obs_tokens, cfg.rollout.max_context_tokens
        )
        if demo is not None:
            out.append((ep, demo))
    return out


def train_demos(
    cfg: TrainConfig,
    episodes: list[ScriptedEpisode],
    model: torch.nn.Module,
    tok: Any,
    log: Callable[[str], None],
    extra: Callable[[ChatRenderer, list[tuple[ScriptedEpisode, Demo]]], ExtraTerms] | None = None,
    checkpoint: Path | None = None,
    precision: torch.dtype | None = None,
) -> None:
    """SFT on ``episodes`` with the ``sft.*`` settings; ``extra`` builds added loss terms
    from the rendered demonstrations (the tiny lab's). ``checkpoint``, ``precision``: see
    ``sft_train``."""
    t0 = time.monotonic()
    renderer = check_template(tok, cfg.model.tool_format, source=cfg.model.name)
    pairs = render_demos(cfg, episodes, renderer)
    demos = [d for _, d in pairs]
    s = cfg.sft
    batches = (len(demos) + s.batch_size - 1) // s.batch_size
    log(
        f"warm start: SFT on {len(demos)} demonstrations "
        f"({sum(len(d.token_ids) for d in demos)} tokens): {s.epochs} epochs of {batches} "
        f"batches of {s.batch_size} = {s.epochs * batches} steps"
    )
    losses = sft_train(
        model,
        demos,
        epochs=s.epochs,
        lr=s.lr,
        batch_size=s.batch_size,
        pad_id=tok.pad_token_id,
        seed=cfg.seed,
        extra=extra(renderer, pairs) if extra is not None else None,
        log=log,
        checkpoint=checkpoint,
        precision=precision,
    )
    final = f" (final loss {losses[-1]:.3f})" if losses else ""
    log(f"warm start: SFT done in {clock(time.monotonic() - t0)}{final}")
