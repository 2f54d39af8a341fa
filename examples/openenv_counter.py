"""A small OpenEnv environment server written against OpenEnv's server API (``openenv_core``):
move a counter to a target by adding steps of -3..3. Reward 1 when it lands on the target
(the episode ends), else 0; each episode starts from 0 (the target is 5, or drawn from the
reset's seed where the server passes one on).

Serve it as OpenEnv serves any env (``uvicorn openenv_counter:app --port 8000``), or let
turnrl start it on loopback: ``turnrl train env.name=openenv
env.options.server=openenv_counter:app env.options.action=openenv_counter:CounterAction``
(run in ``examples/``).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from openenv_core.env_server import Action, Environment, Observation, State, create_fastapi_app


@dataclass(kw_only=True)
class CounterAction(Action):
    """Add ``step`` (from -3 to 3) to the counter."""

    step: int


@dataclass(kw_only=True)
class CounterObservation(Observation):
    value: int
    target: int
    message: str


class CounterEnvironment(Environment):
    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.value = self.target = 0

    def reset(self, seed: int | None = None) -> CounterObservation:
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        # OpenEnv's 0.1 server calls reset() without the seed its request carries: target 5
        self.value = 0
        self.target = 5 if seed is None else random.Random(seed).choice([-7, -5, -4, 4, 5, 7])
        return CounterObservation(
            value=0, target=self.target, message=f"Reach {self.target} from 0 in steps of -3..3."
        )

    def step(self, action: CounterAction) -> CounterObservation:  # type: ignore[override]
        self._state.step_count += 1
        if not -3 <= action.step <= 3:
            message = f"step {action.step} is outside -3..3; the counter stays at {self.value}"
        else:
            self.value += action.step
            message = f"the counter is {self.value}"
        done = self.value == self.target
        return CounterObservation(
            value=self.value,
            target=self.target,
            message=message,
            done=done,
            reward=1.0 if done else 0.0,
        )

    @property
    def state(self) -> State:
        return self._state


app = create_fastapi_app(CounterEnvironment(), CounterAction, CounterObservation)
