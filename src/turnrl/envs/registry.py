"""Where a config's ``env.name`` leads: a shipped env, an installed package's env, or your own.

``env.name`` is one of

- a shipped name (``SHIPPED`` below: reading it tells you every env turnrl ships and where);
- a name an installed package registers in the entry-point group ``turnrl.envs``
  (``[project.entry-points."turnrl.envs"] calc = "my_pkg.calc:CalcEnv"``);
- an import path ``my_pkg.my_env:MyEnv``, importable from the working directory.

The target is a :class:`~turnrl.envs.base.ToolEnv` subclass (the smallest thing a user
writes, see :class:`EnvClassFamily`) or a :class:`Family`: a class built with ``env.options``,
or a ready object. Imports are lazy so that using one env does not import the others.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from turnrl.envs.base import ToolEnv
from turnrl.envs.scripted import IdleAgent, RandomToolAgent, ScriptedAgent
from turnrl.types import Task

ENTRY_POINT_GROUP = "turnrl.envs"

SHIPPED: dict[str, tuple[str, str]] = {
    "code": (
        "turnrl.envs.code:CodeFamily",
        "fix a bug in a small Python repo; hidden tests grade the submitted diff",
    ),
    "code-weak": (
        "turnrl.envs.code.weak:WeakTestsCodeFamily",
        "the code env with weak training tests that catch a known share of bugs (drift)",
    ),
    "tools": (
        "turnrl.envs.tools:ToolsFamily",
        "stateful function calling over SQLite APIs; graded by the final database state",
    ),
    "user": (
        "turnrl.envs.user:UserFamily",
        "customer service with a simulated user and a written policy (tau-bench style)",
    ),
    "web": (
        "turnrl.envs.web:WebFamily",
        "multi-hop questions over an offline encyclopedia served on loopback",
    ),
    "computer": (
        "turnrl.envs.computer:ComputerFamily",
        "a simulated desktop seen as an accessibility tree (and screenshots)",
    ),
    "locker": (
        "turnrl.envs.locker:LockerFamily",
        "open a locker whose code only a subagent can read; learns to delegate (subagents)",
    ),
    "guess": (
        "turnrl.envs.guess:GuessFamily",
        "find a hidden number by bisection; the smallest multi-turn task (tests, demos)",
    ),
    # other libraries' envs (turnrl.envs.adapters), each needing its extra
    "textarena": (
        "turnrl.envs.adapters.textarena:TextArenaFamily",
        "a TextArena game by id (env.options.id=Wordle-v0); extra: textarena",
    ),
    "reasoning_gym": (
        "turnrl.envs.adapters.reasoning_gym:ReasoningGymFamily",
        "a reasoning-gym dataset (env.options.dataset=chain_sum); extra: reasoning-gym",
    ),
    "verifiers": (
        "turnrl.envs.adapters.verifiers:VerifiersFamily",
        "a verifiers environment module (env.options.env_id=my_env); extra: verifiers",
    ),
    "openenv": (
        "turnrl.envs.adapters.openenv:OpenEnvFamily",
        "an OpenEnv server, started here (env.options.server=pkg.app:app) or at base_url; "
        "extra: openenv",
    ),
}


class Family(Protocol):
    """Tasks and fresh envs for one kind of problem.

    Optional members, used where present: ``expert(task, seed=0, noise=0.0) -> ScriptedAgent``
    (SFT demonstrations, ``turnrl doctor``), ``baseline(task)`` (an agent that does nothing:
    it must score ~0) and ``random_agent(task, seed=0)``.
    """

    name: str

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]: ...
    def make_env(self) -> ToolEnv: ...
    def close(self) -> None: ...


def installed_envs() -> dict[str, str]:
    """Envs that installed packages register: entry-point name -> ``module:attr``."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def resolve_env_name(name: str) -> str:
    """The name a run records: a shipped name as it is, an entry point as the import path it
    points to (so a run keeps its env even if the entry point is re-bound), an import path
    checked now. Raises ValueError with one line."""
    if name in SHIPPED:
        return name
    if ":" not in name:
        installed = installed_envs()
        if name in installed:
            return installed[name]
        known = ", ".join([*SHIPPED, *installed])
        raise ValueError(
            f"unknown env {name!r}; available: {known}; or an import path pkg.module:Class"
        )
    load_target(name)
    return name


def load_target(path: str) -> Any:
    """The object behind ``module:attr`` (``attr`` may be dotted). The working directory is
    importable, as with ``python -m``, so ``env.name=my_env:MyEnv`` works beside ``my_env.py``.
    Raises ValueError with one line naming what failed."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path of the form pkg.module:Class")
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # an error inside the user's module is also "cannot import"
        raise ValueError(f"cannot import {module_name!r} ({type(e).__name__}: {e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def env_target(name: str) -> Any:
    """What ``name`` (already resolved) points to: a ToolEnv class, a family class or object."""
    return load_target(SHIPPED[name][0] if name in SHIPPED else name)


def supplies_tasks(name: str) -> bool:
    """Whether env ``name`` (resolved) brings its own tasks; without, ``env.tasks`` must."""
    if name in SHIPPED:  # all do; no import needed to say so
        return True
    target = env_target(name)
    return not _is_env_class(target) or hasattr(target, "tasks")


def has_expert(name: str) -> bool:
    """Whether env ``name`` (resolved) has a scripted expert (SFT needs one)."""
    return name in SHIPPED or hasattr(env_target(name), "expert")


def env_fingerprint(name: str, tasks: str | None = None) -> str:
    """A digest of what an env's data comes from beyond its config: the source file of a user
    env and the bytes of a tasks file (shipped envs change with turnrl's version); "" when
    neither. Caches built from an env's episodes (the tiny warm start) key on it, so an edit
    invalidates them."""
    digest, read = hashlib.sha1(), False
    if name not in SHIPPED:
        target = env_target(name)
        cls = target if isinstance(target, type) else type(target)
        try:
            digest.update(Path(inspect.getfile(cls)).read_bytes())
            read = True
        except (TypeError, OSError):  # defined where no file is (a REPL): nothing to read
            pass
    if tasks is not None and Path(tasks).is_file():
        digest.update(Path(tasks).read_bytes())
        read = True
    return digest.hexdigest()[:12] if read else ""


def make_family(
    name: str, options: dict[str, Any] | None = None, tasks: str | None = None
) -> Family:
    """Build the family of ``env.name``; with ``tasks`` (``env.tasks``) its tasks come from that
    file or dataset. A bad option raises ValueError/TypeError naming it."""
    options = options or {}
    target = env_target(resolve_env_name(name))
    try:
        if _is_env_class(target):
            family: Family = EnvClassFamily(target, options)
        elif isinstance(target, type):
            family = target(**options)
        else:
            if options:
                raise ValueError(
                    f"env.options: {name} is a ready family object and takes no options"
                )
            family = target
    except TypeError as e:
        raise ValueError(f"env.options: {e}") from None
    if tasks is not None:
        from turnrl.envs.task_files import FileTasks, read_tasks

        family = FileTasks(family, read_tasks(tasks, family.name))
    return family


def _is_env_class(target: Any) -> bool:
    return isinstance(target, type) and issubclass(target, ToolEnv)


class EnvClassFamily:
    """The family of a bare :class:`ToolEnv` subclass: the smallest env a user writes.

    The class itself must define ``tools``, ``reset``, the tool methods and ``grade``. Each
    episode gets a fresh ``cls(**env.options)``. Tasks come from ``env.tasks`` (a file), or
    from an optional classmethod ``tasks(split, n, seed) -> list[Task | dict]`` (a dict is a
    payload). An optional ``expert(task, seed=0, noise=0.0) -> ScriptedAgent`` enables SFT
    and the doctor's expert check; ``baseline`` and ``random_agent`` default to an agent that
    does nothing and one that calls tools at random from their schemas.
    """

    def __init__(self, cls: type[ToolEnv], options: dict[str, Any]) -> None:
        self.cls, self.options = cls, dict(options)
        self.name = cls.name if cls.name != ToolEnv.name else cls.__name__
        if hasattr(cls, "expert"):
            self.expert = cls.expert  # type: ignore[attr-defined]
        if hasattr(cls, "subagent_expert"):  # answers delegated calls in SFT demonstrations
            self.subagent_expert = cls.subagent_expert  # type: ignore[attr-defined]
        self.make_env()  # a bad option fails now, naming it, not inside the first episode

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        if not hasattr(self.cls, "tasks"):
            raise ValueError(
                f"env.tasks: {self.cls.__name__} supplies no tasks; set env.tasks=FILE.jsonl "
                "or give it a classmethod tasks(split, n, seed)"
            )
        rows = list(self.cls.tasks(split, n, seed))[:n]  # type: ignore[attr-defined]
        return [
            row
            if isinstance(row, Task)
            else Task(f"{self.name}-{split}-{seed}-{i}", self.name, row, split)
            for i, row in enumerate(rows)
        ]

    def make_env(self) -> ToolEnv:
        return self.cls(**self.options)

    def baseline(self, task: Task) -> ScriptedAgent:
        if hasattr(self.cls, "baseline"):
            return self.cls.baseline(task)  # type: ignore[attr-defined]
        return IdleAgent()

    def random_agent(self, task: Task, seed: int = 0) -> ScriptedAgent:
        if hasattr(self.cls, "random_agent"):
            return self.cls.random_agent(task, seed)  # type: ignore[attr-defined]
        return RandomToolAgent(self.make_env().tool_schemas(), seed)

    def close(self) -> None:
        return None
