"""The ``web`` env family: one encyclopedia, one loopback server, many concurrent episodes."""

from __future__ import annotations

import threading
import zlib
from typing import Any, Literal

import pydantic

from turnrl.envs.scripted import DoNothingAgent
from turnrl.envs.web.agents import WebCompareExpert, WebExpert, WebRandomAgent
from turnrl.envs.web.corpus import build_corpus, label, wiki_path
from turnrl.envs.web.env import WebEnv
from turnrl.envs.web.questions import Comparison, Question, generate, generate_comparisons
from turnrl.envs.web.server import Site, WikiServer
from turnrl.policy.openai import endpoint_chat
from turnrl.types import Task


class WebOptions(pydantic.BaseModel):
    """Options of the web family; unknown keys and bad values are all reported at once."""

    model_config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    n_entities: int = pydantic.Field(300, ge=20, le=5000)  # size of the encyclopedia
    corpus_seed: int = 0
    min_hops: int = pydantic.Field(1, ge=1, le=3)  # relations in a question's chain
    max_hops: int = pydantic.Field(3, ge=1, le=3)
    metric: Literal["exact", "f1"] = "exact"  # what the reward is
    f1_success: float = pydantic.Field(0.8, gt=0, le=1)  # success threshold when metric="f1"
    page_size: int = pydantic.Field(800, ge=100)  # characters per page of an opened document
    search_results: int = pydantic.Field(5, ge=1, le=20)
    test_fraction: float = pydantic.Field(0.2, gt=0, lt=1)  # start entities held out for test
    # an endpoint mapping {base_url, model, ...} (policy.openai.EndpointConfig) or any object
    # with `async def chat(messages) -> str`
    judge: Any = None
    timeout: float = pydantic.Field(5.0, gt=0)  # seconds per HTTP request
    # the expert writes a copied name or value with the space it was read with, so a model
    # that copies tokens (the tiny model) writes the tokens it read (see web.agents)
    copy_spaces: bool = False
    # long-horizon tier: 0 asks multi-hop questions; N >= 2 asks which of N pages has the
    # largest number ("Which of A, B, C and D has the largest population?"): N pages read and
    # N numbers remembered, an episode longer than a small context (docs/context.md)
    compare: int = pydantic.Field(0, ge=0, le=8)

    @pydantic.field_validator("judge", mode="before")
    @classmethod
    def _endpoint(cls, v: Any) -> Any:
        return endpoint_chat(v, "judge")

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> WebOptions:
        if self.min_hops > self.max_hops:
            raise ValueError(f"min_hops ({self.min_hops}) > max_hops ({self.max_hops})")
        if self.compare == 1:
            raise ValueError("compare: 0 (multi-hop questions) or 2-8 pages to compare, not 1")
        if self.judge is not None and not callable(getattr(self.judge, "chat", None)):
            raise ValueError("judge must have an async chat(messages) -> str method")
        return self


class WebFamily:
    """Builds the corpus at construction; starts the loopback server on the first ``make_env``
    (so building tasks or validating options binds no port) and stops it in ``close``."""

    name = "web"

    def __init__(self, **options: Any) -> None:
        self.options = WebOptions(**options)  # pydantic.ValidationError is a ValueError
        o = self.options
        self.corpus = build_corpus(o.n_entities, o.corpus_seed)
        self.site = Site(self.corpus, o.search_results)
        self.server = WikiServer(self.site)
        self._lock = threading.Lock()
        self._questions: dict[tuple[str, int], list[Question | Comparison]] = {}

    @property
    def base_url(self) -> str:
        with self._lock:
            return self.server.start()

    def tasks(self, split: str, n: int | None = None, seed: int = 0) -> list[Task]:
        """All questions of ``split`` (n=None) or the first n, in an order fixed by ``seed``
        that interleaves hop counts."""
        if split not in ("train", "test"):
            raise ValueError(f"web: split must be 'train' or 'test', not {split!r}")
        o = self.options
        key = (split, seed)
        if key not in self._questions and o.compare:
            self._questions[key] = generate_comparisons(
                self.corpus, split, o.compare, o.test_fraction, seed
            )
        if key not in self._questions:
            self._questions[key] = generate(
                self.corpus, split, o.min_hops, o.max_hops, o.test_fraction, seed
            )
        questions = self._questions[key][:n] if n is not None else self._questions[key]
        return [self._task(q, split) for q in questions]

    def _task(self, q: Question | Comparison, split: str) -> Task:
        if isinstance(q, Comparison):
            payload = {
                "question": q.text,
                "answer": q.answer,
                "asked": q.asked,
                "compare": list(q.entities),
                "pages": [[t, wiki_path(t)] for t in q.entities],
                "label": label(self.corpus[q.entities[0]], q.asked),
            }
            return Task(f"web-{split}-{zlib.crc32(q.text.encode()):08x}", self.name, payload, split)
        payload = {
            "question": q.text,
            "answer": q.answer,
            "hops": q.hops,
            "asked": q.asked,
            "start": q.start,
            "pages": [[t, wiki_path(t)] for t in q.pages_needed],
            "label": self._answer_label(q),
        }
        return Task(f"web-{split}-{zlib.crc32(q.text.encode()):08x}", self.name, payload, split)

    def _answer_label(self, q: Question) -> str:
        """The infobox label the answer follows on the last page needed ("Population")."""
        if q.asked == "name":
            return label(self.corpus[q.entities[-2]], q.relations[-1])
        return label(self.corpus[q.entities[-1]], q.asked)

    def make_env(self) -> WebEnv:
        o = self.options
        return WebEnv(self.base_url, o.page_size, o.metric, o.f1_success, o.judge, o.timeout)

    def expert(self, task: Task, seed: int = 0, noise: float = 0.0) -> WebExpert | WebCompareExpert:
        pages = [(t, p) for t, p in task.payload["pages"]]
        agent = WebCompareExpert if "compare" in task.payload else WebExpert
        return agent(
            pages,
            task.payload["answer"],
            task.payload["label"],
            seed=hash_seed(task, seed),
            noise=noise,
            lead=" " if self.options.copy_spaces else "",
        )

    def baseline(self, task: Task) -> DoNothingAgent:
        return DoNothingAgent("answer", {"text": ""})

    def random_agent(self, task: Task, seed: int = 0) -> WebRandomAgent:
        return WebRandomAgent(task.payload["question"], seed=hash_seed(task, seed))

    def close(self) -> None:
        with self._lock:
            self.server.stop()

    def __enter__(self) -> WebFamily:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hash_seed(task: Task, seed: int) -> int:
    """A per-task seed that does not depend on PYTHONHASHSEED."""
    return zlib.crc32(f"{task.id}-{seed}".encode())
