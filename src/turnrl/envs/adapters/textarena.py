"""TextArena games as a turnrl env family: ``env.name=textarena env.options.id=Wordle-v0``.

A TextArena game takes one free-text action per turn (``"[5]"``, ``"[A C]"``) and sends each
player messages. The mapping:

- the action: one tool, ``move(action)``, whose text goes to the game's ``step`` unchanged;
- observations: the messages the game sent the agent's player since its last move (its own
  action echo left out, another player's action prefixed with its role, e.g. ``[Player 1]``);
  the first one (the game's prompt) is the task statement;
- opponents: every other player moves inside the env, between the agent's moves, by
  ``env.options.opponent``: ``random`` (a uniform choice among the bracketed moves its latest
  observation lists, as board games list "Available Moves") or ``pkg.module:name``, a callable
  (or a class built with no arguments, e.g. a TextArena ``Agent``) mapping the opponent's
  observation (its whole history, as TextArena's ``LLMObservationWrapper`` writes it) to an
  action;
- the ending: the game's ``done`` is a termination; its reward for the agent's player (1 for a
  win, -1 for a loss, 0 for a draw in two-player games; a game's own score in single-player
  ones) is the episode's reward, and success is a reward of at least 1 (a win);
- tasks: game seeds, each either train or held-out by a stable hash of (id, seed).

TextArena games draw from the module-level functions of Python's ``random`` (seeded by their
``reset``). The adapter makes those functions per-thread: on a thread running a game call they
draw from that episode's own generator, elsewhere from the usual shared one, unchanged. So
concurrent episodes never share a stream, a replay of a task is exact, and no lock is held
across a game call. A call runs on a worker thread with ``step_timeout_s``: a game that hangs ends its episode with TIMEOUT, and one that raises
or sends a message that is not text ends it with ENV_ERROR, never the run.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
from collections.abc import Callable
from typing import Any

from turnrl.envs.adapters import require
from turnrl.envs.base import ToolEnv, ToolOutput, hash_split, run_blocking
from turnrl.envs.scripted import IdleAgent
from turnrl.types import RewardResult, Task, ToolCall

INSTRUCTIONS = (
    "You are playing the TextArena game {id}. Make one move per turn by calling the move tool "
    "with your action written exactly as the game's rules ask (moves are usually in square "
    "brackets, such as [5])."
)
PLAYER_ACTION = "PLAYER_ACTION"
GAME_ID = -1
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")
_local = threading.local()
_installed = threading.Lock()


def _thread_random() -> None:
    """Route ``random.<fn>`` to the calling thread's ``_local.rng`` where one is set (once per
    process; without one a call goes to the shared generator as before). Rejected: one lock
    around every game call with the shared state swapped in, since a hung game then holds the
    lock and stalls every other episode."""
    with _installed:
        if getattr(random, "_turnrl_thread_local", False):
            return
        shared = random._inst  # type: ignore[attr-defined]
        for name in random.__all__:
            fn = getattr(random, name)
            if getattr(fn, "__self__", None) is not shared:
                continue  # classes and constants

            def routed(*args: Any, _name: str = name, _fn: Any = fn, **kwargs: Any) -> Any:
                rng = getattr(_local, "rng", None)
                return _fn(*args, **kwargs) if rng is None else getattr(rng, _name)(*args, **kwargs)

            setattr(random, name, routed)
        random._turnrl_thread_local = True  # type: ignore[attr-defined]


def _with_rng(rng: random.Random, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with ``random.<fn>`` drawing from ``rng`` on this thread."""
    _local.rng = rng
    try:
        return fn(*args, **kwargs)
    finally:
        _local.rng = None


def load_game(game_id: str, kwargs: dict[str, Any]) -> Any:
    """The unwrapped TextArena game ``game_id`` (its observation and action wrappers are left
    off: the adapter reads the raw messages). Raises ValueError naming an unknown id."""
    ta = require("textarena", "textarena")
    _thread_random()
    from textarena.envs.registration import ENV_REGISTRY

    if game_id not in ENV_REGISTRY:
        close = [k for k in ENV_REGISTRY if k.lower().startswith(game_id.lower()[:6])][:5]
        hint = f"; similar: {', '.join(close)}" if close else ""
        raise ValueError(f"env.options.id: {game_id!r} is not a TextArena game id{hint}")
    try:
        game = ta.make(game_id, **kwargs)
    except TypeError as e:
        raise ValueError(f"env.options.kwargs: {game_id}: {e}") from None
    except LookupError as e:  # nltk's corpora (Wordle, Hangman) are not in the package
        found = re.search(r"nltk\.download\('([\w.]+)'\)", str(e))
        need = f"python -m nltk.downloader {found.group(1)}" if found else "its NLTK data"
        raise ValueError(
            f"env.options.id: {game_id} needs data not installed here: {need}"
        ) from None
    except Exception as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
        raise ValueError(
            f"env.options.id: {game_id} fails to build: {type(e).__name__}: {first}"
        ) from None
    while isinstance(game, ta.Wrapper):
        game = game.env
    return game


class RandomMoveOpponent:
    """Picks uniformly among the bracketed moves (``'[4]'``) in the latest message of its
    observation that lists any; seeded per episode, so a task replays exactly."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, observation: str) -> str:
        for block in reversed(observation.split("\n[")):
            moves = sorted(set(_BRACKETED.findall(block)))
            if moves:
                return self.rng.choice(moves)
        return "[0]"


def load_opponent(spec: str, seed: int) -> Callable[[str], str]:
    if spec == "random":
        return RandomMoveOpponent(seed)
    from turnrl.envs.registry import load_target

    target = load_target(spec)
    opponent = target() if isinstance(target, type) else target
    if not callable(opponent):
        raise ValueError(f"env.options.opponent: {spec} is not callable")
    return opponent


class TextArenaEnv(ToolEnv):
    """One TextArena game episode; the agent is player ``player``."""

    name = "textarena"
    tools = ("move",)

    def __init__(
        self,
        game_id: str,
        kwargs: dict[str, Any],
        num_players: int,
        player: int,
        opponent: str,
        step_timeout_s: float,
    ) -> None:
        self.game_id, self.kwargs = game_id, kwargs
        self.num_players, self.player, self.opponent_spec = num_players, player, opponent
        self.tool_timeout_s = step_timeout_s  # per call: a hung game ends as TIMEOUT
        self.game: Any = None
        self.rng = random.Random(0)
        self.opponent: Callable[[str], str] | None = None
        self.opponent_history: dict[int, str] = {}
        self.done = False
        self.outcome: tuple[dict[int, float], dict[int, dict]] | None = None

    async def reset(self, task: Task) -> str:
        seed = int(task.payload["seed"])
        game_id = task.payload.get("id", self.game_id)
        self.instructions = INSTRUCTIONS.format(id=game_id)
        self.game = load_game(game_id, self.kwargs)
        self.opponent = load_opponent(self.opponent_spec, seed) if self.num_players > 1 else None
        self.opponent_history = {}
        self.done, self.outcome = False, None
        self.rng = random.Random(seed)  # a game that does not seed itself still replays
        return await asyncio.wait_for(
            run_blocking(_with_rng, {"rng": self.rng, "fn": self._reset, "seed": seed}),
            self.tool_timeout_s,
        )

    def _reset(self, seed: int) -> str:
        self.game.reset(num_players=self.num_players, seed=seed)
        self._play_opponents()
        return self._observation()

    def move(self, action: str) -> ToolOutput:
        """Make your move: the action text exactly as the game's rules ask, e.g. "[5]"."""
        _with_rng(self.rng, self._step, action)
        text = self._observation()
        if self.done:
            rewards, info = self.game.close()
            self.outcome = (dict(rewards or {}), dict(info or {}))
            reason = self.outcome[1].get(self.player, {}).get("reason")
            text = f"{text}\n\nGame over. {reason}" if reason else f"{text}\n\nGame over."
        return ToolOutput(text.strip(), done=self.done)

    def _step(self, action: str) -> None:
        self.done, _ = self.game.step(action)
        self._play_opponents()

    def _play_opponents(self) -> None:
        """Let every other player move until it is the agent's turn or the game ends."""
        state = self.game.state
        while not self.done and state.current_player_id != self.player:
            pid = state.current_player_id
            self.opponent_history[pid] = self.opponent_history.get(pid, "") + _history(
                self.game, pid, state.get_current_player_observation()
            )
            action = self.opponent(self.opponent_history[pid])  # type: ignore[misc]
            self.done, _ = self.game.step(str(action))

    def _observation(self) -> str:
        """The messages sent to the agent's player since its last move."""
        state = self.game.state
        messages = state.observations.get(self.player, [])
        state.observations[self.player] = []
        lines = []
        for sender, text, kind in messages:
            if not isinstance(text, str):  # TextArena's messages are text by its contract
                raise TypeError(f"{self.game_id} sent a {type(text).__name__} message, not text")
            if sender == self.player and kind.name == PLAYER_ACTION:
                continue  # its own action is already in the context
            if sender == GAME_ID:
                lines.append(str(text))
            else:
                lines.append(f"[{_role(self.game, sender)}] {text}")
        return "\n".join(lines)

    async def grade(self) -> RewardResult:
        if self.outcome is None:  # cut before the game ended: no outcome exists
            return RewardResult(0.0, False, components={"finished": 0.0})
        rewards, info = self.outcome
        reward = float(rewards.get(self.player, 0.0))
        mine = info.get(self.player, {})
        return RewardResult(
            reward=reward,
            success=reward >= 1.0,
            components={
                "finished": 1.0,
                "game_reward": reward,
                "invalid_move": float(bool(mine.get("invalid_move"))),
                "turns": float(mine.get("turn_count", 0)),
            },
            info={"reason": str(mine.get("reason", ""))},
        )


def _role(game: Any, pid: int) -> str:
    return game.state.role_mapping.get(pid, f"Player {pid}")


def _history(game: Any, pid: int, messages: list) -> str:
    """Messages as TextArena's ``LLMObservationWrapper`` writes them (``[GAME] ...``)."""
    return "".join(
        f"\n[{'GAME' if sender == GAME_ID else _role(game, sender)}] {text}"
        for sender, text, _ in messages
    )


# -- scripted agents -------------------------------------------------------------------------


class BisectionAgent:
    """GuessTheNumber's expert: bisect the range the prompt states, narrowed by each "The target
    number is higher/lower." hint. With ``noise`` a guess is uniform in the untried numbers of
    the full range instead, with that probability."""

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        self.low = self.high = self.last = None
        self.tried: set[int] = set()
        self.range: tuple[int, int] | None = None
        self.noise, self.rng = noise, random.Random(seed)

    def act(self, observation: str) -> ToolCall:
        if self.range is None:
            found = re.search(r"between (\d+) and (\d+)", observation)
            if not found:
                raise ValueError("GuessTheNumber's prompt states no range")
            self.range = (int(found.group(1)), int(found.group(2)))
            self.low, self.high = self.range
        elif "is higher" in observation:
            self.low = max(self.low, self.last + 1)
        elif "is lower" in observation:
            self.high = min(self.high, self.last - 1)
        untried = [n for n in range(self.range[0], self.range[1] + 1) if n not in self.tried]
        if self.noise and self.rng.random() < self.noise and untried:
            self.last = self.rng.choice(untried)
        else:
            self.last = (self.low + self.high) // 2
        self.tried.add(self.last)
        return ToolCall("move", {"action": f"[{self.last}]"})


class HanoiAgent:
    """TowerOfHanoi's expert: reads the towers from the latest board and makes the move of the
    optimal solution from that position (so it also recovers from a noisy move). With
    ``noise`` a move is a random legal one instead, with that probability."""

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        self.noise, self.rng = noise, random.Random(seed)

    def act(self, observation: str) -> ToolCall:
        boards = re.findall(r"A: \[([\d, ]*)\]\nB: \[([\d, ]*)\]\nC: \[([\d, ]*)\]", observation)
        if not boards:
            raise ValueError("no TowerOfHanoi board in the observation")
        towers = {
            name: [int(d) for d in disks.split(",") if d.strip()]
            for name, disks in zip("ABC", boards[-1])
        }
        if self.noise and self.rng.random() < self.noise:
            legal = [
                (s, t)
                for s in "ABC"
                for t in "ABC"
                if s != t and towers[s] and (not towers[t] or towers[t][-1] > towers[s][-1])
            ]
            source, target = self.rng.choice(legal)
        else:
            source, target = _hanoi_move(towers)
        return ToolCall("move", {"action": f"[{source} {target}]"})


def _hanoi_move(towers: dict[str, list[int]]) -> tuple[str, str]:
    """The first move of the shortest solution that gathers every disk on C."""
    where = {d: name for name, disks in towers.items() for d in disks}
    goal, disk = "C", max(where)
    move = None
    while disk >= 1:  # the largest disk not yet on its goal decides the next move
        if where[disk] != goal:
            source = where[disk]
            spare = ({"A", "B", "C"} - {source, goal}).pop()
            move, goal = (source, goal), spare  # smaller disks must first go to the spare
        disk -= 1
    if move is None:
        raise ValueError("the towers are already solved")
    return move


EXPERTS: dict[str, Callable[..., Any]] = {
    "GuessTheNumber": BisectionAgent,
    "TowerOfHanoi": HanoiAgent,
}


def game_name(game_id: str) -> str:
    """``GuessTheNumber-v0-hardcore`` -> ``GuessTheNumber``."""
    return game_id.split("-v")[0]


class TextArenaFamily:
    """Tasks are seeds of the game ``id``; ``kwargs`` go to the game's constructor (its own
    defaults, as registered for ``id``, fill the rest)."""

    name = "textarena"

    def __init__(
        self,
        id: str,
        kwargs: dict[str, Any] | None = None,
        num_players: int | None = None,
        player: int = 0,
        opponent: str = "random",
        step_timeout_s: float = 30.0,
    ) -> None:
        self.id, self.kwargs = id, dict(kwargs or {})
        game = load_game(id, self.kwargs)
        self.num_players = num_players or _fewest_players(game, id)
        if not 0 <= player < self.num_players:
            raise ValueError(
                f"env.options.player: {player} is not a player of {id} "
                f"(players 0..{self.num_players - 1})"
            )
        if step_timeout_s <= 0:
            raise ValueError(f"env.options.step_timeout_s: must be > 0, got {step_timeout_s}")
        self.player, self.opponent, self.step_timeout_s = player, opponent, step_timeout_s
        if self.num_players > 1:
            load_opponent(opponent, 0)  # a bad import path fails now, naming it
        expert = EXPERTS.get(game_name(id))
        if expert is not None and self.num_players == 1:  # enables SFT and the doctor's check
            self.expert = lambda task, seed=0, noise=0.0: expert(noise=noise, seed=seed)

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        n = n or 64
        out: list[Task] = []
        k = 0
        while len(out) < n:
            game_seed = seed * 1_000_003 + k
            if hash_split(f"{self.id}/{game_seed}") == split:
                payload = {"id": self.id, "seed": game_seed}
                out.append(Task(f"textarena-{self.id}-{game_seed}", self.name, payload, split))
            k += 1
        return out

    def make_env(self) -> TextArenaEnv:
        return TextArenaEnv(
            self.id, self.kwargs, self.num_players, self.player, self.opponent, self.step_timeout_s
        )

    def baseline(self, task: Task) -> IdleAgent:
        return IdleAgent()

    def close(self) -> None:
        return None


def _fewest_players(game: Any, game_id: str) -> int:
    """The smallest player count the game accepts (its state asserts the count it needs)."""
    other: Exception | None = None
    for n in range(1, 9):
        try:
            _with_rng(random.Random(0), game.reset, num_players=n, seed=0)
            return n
        except AssertionError:  # the states assert the count they need
            continue
        except Exception as e:  # a game may reject a count otherwise, or fail for all
            other = other or e
    why = f" (it raised {type(other).__name__}: {other})" if other else ""
    raise ValueError(f"env.options.num_players: {game_id} accepts none of 1..8{why}; set it")
