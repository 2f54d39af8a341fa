"""Model set-up: a pretrained model (+ LoRA, + optional SFT warm start) or the tiny model.

The tiny model (``model.name=tiny``) is built and warm-started by :mod:`turnrl.tiny`; every
other name is loaded by :mod:`turnrl.policy.models`. A pretrained model's SFT keeps its
demonstrations and checkpoint in ``run_dir/sft``: ``--resume`` after a Ctrl-C continues it, and
once done it is loaded, not trained again.
"""

from __future__ import annotations

import os
import pickle
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from turnrl import files
from turnrl.chat import ChatRenderer, check_template
from turnrl.envs.registry import Family
from turnrl.envs.scripted import ScriptedEpisode
from turnrl.policy.models import load_model, load_tokenizer
from turnrl.train.config import TrainConfig
from turnrl.train.export import tokenizer_source
from turnrl.train.failures import usable_demonstrations
from turnrl.train.metrics import PhaseProgress, clock
from turnrl.train.sft import Demo, ExtraTerms, play_demonstrations, render_demo, sft_train
from turnrl.types import Task


def cache_root() -> Path:
    return Path(os.environ.get("TURNRL_CACHE", Path.home() / ".cache" / "turnrl"))


def build_model(
    cfg: TrainConfig,
    family: Family,
    train_tasks: list[Task],
    run_dir: Path,
    log: Callable[[str], None] = print,
) -> tuple[torch.nn.Module, Any]:
    """The starting policy and its tokenizer. On resume too it is the starting policy (the
    KL reference is copied from it); the checkpoint then restores what training changed."""
    with resume_hint(run_dir):
        if cfg.model.name == "tiny":
            from turnrl.tiny.warm_start import build_tiny

            return build_tiny(cfg, family, train_tasks, run_dir, log)
        return _pretrained(cfg, family, train_tasks, run_dir, log)


@contextmanager
def resume_hint(run_dir: Path) -> Iterator[None]:
    """Ctrl-C during set-up (demonstrations, warm-up, SFT) says how to go on."""
    try:
        yield
    except KeyboardInterrupt as e:
        e.add_note(f"continue with: turnrl train --resume {run_dir}")
        raise


def _pretrained(
    cfg: TrainConfig,
    family: Family,
    train_tasks: list[Task],
    run_dir: Path,
    log: Callable[[str], None],
) -> tuple[torch.nn.Module, Any]:
    m = cfg.model
    tok = load_tokenizer(tokenizer_source(run_dir, m.name), m.trust_remote_code)
    model = load_model(m.name, m.dtype, m.device, m.trust_remote_code)
    if cfg.model.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=cfg.model.lora_rank,
                lora_alpha=cfg.model.lora_alpha,
                target_modules=cfg.model.lora_targets,
                lora_dropout=0.0,
                task_type="CAUSAL_LM",
            ),
        )
    if cfg.sft.enabled and cfg.sft.episodes > 0:
        work = run_dir / "sft"
        episodes = demonstrations(cfg, family, train_tasks, log, saved=work / "episodes.pkl")
        train_demos(cfg, episodes, model, tok, log, checkpoint=work / "sft.pt")
    return model, tok


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
        family,
        tasks,
        cfg.sft.noise,
        cfg.seed,
        cfg.rollout.max_turns,
        done=progress.update,
        timeout_s=cfg.rollout.episode_timeout_s,
    )
    say(f"warm start: {n} episodes played in {clock(time.monotonic() - t0)}")
    episodes, left_out = usable_demonstrations(episodes, family.name, cfg.rollout.env_failure_share)
    if left_out is not None:
        say(left_out)
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
    """Write-then-rename (:func:`turnrl.files.write_atomic`), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, data)


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
) -> None:
    """SFT on ``episodes`` with the ``sft.*`` settings; ``extra`` builds added loss terms
    from the rendered demonstrations (the tiny lab's). ``checkpoint``: see ``sft_train``."""
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
    )
    final = f" (final loss {losses[-1]:.3f})" if losses else ""
    log(f"warm start: SFT done in {clock(time.monotonic() - t0)}{final}")
