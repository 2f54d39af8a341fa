"""``UserFamily``: the simulated-user retail env family (tasks, envs, experts, baselines)."""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from turnrl.envs.scripted import DoNothingAgent
from turnrl.envs.tools.expert import PlanAgent
from turnrl.envs.user.env import UserEnv, UserFactory, scripted_user
from turnrl.envs.user.expert import expert_plan
from turnrl.envs.user.simulator import ModelUser, UserSimulator
from turnrl.envs.user.tasks import generate
from turnrl.policy.openai import endpoint_chat
from turnrl.types import Task, ToolCall

Tier = Literal["easy", "hard"]


class UserOptions(pydantic.BaseModel):
    """Env options from config; unknown keys and bad values raise (ValidationError is a
    ValueError naming each bad field)."""

    model_config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    tiers: tuple[Tier, ...] = ("easy", "hard")
    user: Literal["scripted", "model"] = "scripted"
    # for user="model": an endpoint mapping {base_url, model, ...} (policy.openai.EndpointConfig)
    # or any object with async chat(messages) -> str
    user_backend: Any = None
    user_max_turns: int = pydantic.Field(12, gt=0)  # ModelUser leaves after this many replies
    details_per_turn: int = pydantic.Field(1, gt=0)  # ScriptedUser: details revealed per reply
    # "vocabulary": test customers, streets and products training never shows; "order": the
    # training ones, in conversations about orders training never shows (for a tiny model)
    held_out: Literal["vocabulary", "order"] = "vocabulary"
    train_size: int = pydantic.Field(600, gt=0)
    test_size: int = pydantic.Field(120, gt=0)

    @pydantic.field_validator("user_backend", mode="before")
    @classmethod
    def _endpoint(cls, v: Any) -> Any:
        return endpoint_chat(v, "user_backend")

    @pydantic.model_validator(mode="after")
    def _backend_given(self) -> UserOptions:
        if self.user == "model" and not callable(getattr(self.user_backend, "chat", None)):
            raise ValueError(
                "user_backend: user='model' needs an endpoint {base_url, model} "
                "or an object with async chat(messages)"
            )
        return self


class UserFamily:
    name = "user"

    def __init__(self, **options: object) -> None:
        self.options = UserOptions(**options)

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        o = self.options
        if n is None:
            n = o.train_size if split == "train" else o.test_size
        return generate(split, n, seed, tuple(o.tiers), o.held_out)

    def _user_factory(self) -> UserFactory:
        o = self.options
        if o.user == "scripted":
            return scripted_user(o.details_per_turn)

        def make(payload: dict[str, Any], goal_reached: Any) -> UserSimulator:
            return ModelUser(o.user_backend, payload["user"], payload["persona"], o.user_max_turns)

        return make

    def make_env(self) -> UserEnv:
        return UserEnv(self._user_factory())

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> PlanAgent:
        return PlanAgent(
            expert_plan(task.payload), ToolCall("end_conversation", {}), noise, f"{task.id}:{seed}"
        )

    def baseline(self, task: Task) -> DoNothingAgent:
        return DoNothingAgent("end_conversation")

    def close(self) -> None:
        return None
