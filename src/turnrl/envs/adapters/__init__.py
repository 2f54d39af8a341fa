"""Env families over other libraries' environments: TextArena, reasoning-gym, verifiers, OpenEnv.

Each adapter is an env family chosen by ``env.name`` (``textarena``, ``reasoning_gym``,
``verifiers``, ``openenv``) with its options under ``env.options``, and each needs its library,
installed as a turnrl extra (``pip install 'turnrl[textarena]'``). The library is imported when
the family is built, during the run's preflight, so a missing one stops the run in one line
before anything is written.

What each maps (the user guide, ``docs/ecosystem.md``, has the full table): the library's
actions or tools become tools in the model's chat template; its observations become
observation text; its reward and ending become the episode's grade and ending (a library's
``done`` is a termination, its own step limit a truncation); opponents play inside the env;
tasks are the library's seeds or dataset rows, split into train and held-out by a stable hash.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {
    "textarena": "textarena",
    "reasoning_gym": "reasoning-gym",
    "verifiers": "verifiers",
    "openenv": "openenv",
}


def require(module: str, env: str) -> ModuleType:
    """Import ``module`` for the adapter ``env``, or raise ValueError in one line naming the
    extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValueError(
            f"env.name={env} needs the {module!r} package ({e.name or module} is missing): "
            f"pip install 'turnrl[{EXTRAS[env]}]'"
        ) from None
