"""The code env family: bug fixing in small Python repos, graded by hidden tests.

``CodeFamily`` is what the registry and trainer use; ``CodeEnv`` is one episode, ``CodeExpert``
the scripted demonstrator, ``grader.grade_workspace`` the grader, ``differential`` its check
against the gold solution (with ``harness.py`` running inside the sandbox) and ``exploits`` the
hack detectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnrl.envs.code.env import CodeEnv, CodeFamily
    from turnrl.envs.code.expert import CodeExpert

__all__ = ["CodeEnv", "CodeExpert", "CodeFamily"]


def __getattr__(name: str) -> Any:
    # Lazy: task generation imports turnrl.envs.code.mutations/tasks, which must not pull in
    # the sandbox and the env.
    if name in ("CodeEnv", "CodeFamily"):
        from turnrl.envs.code import env

        return getattr(env, name)
    if name == "CodeExpert":
        from turnrl.envs.code.expert import CodeExpert

        return CodeExpert
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
