"""Multi-hop questions generated from the link graph.

A question is a start entity, a chain of 1 to 3 relations (each a function, so the chain
names exactly one entity) and what to ask about the entity it ends on: one of its attributes
or its name. "What is the population of the capital of the country of Velmora?" is
``Velmora -located_in-> country -capital-> city``, then ``population``.

Held-out split: by start entity. A stable hash of the start title puts ``test_fraction`` of the
entities in the test split; a test question never starts from an entity any train question
starts from (the pages on the way may be shared: it is one web site).
"""

from __future__ import annotations

import itertools
import random
import zlib
from dataclasses import dataclass

from turnrl.envs.web.corpus import ATTRIBUTES, SCHEMA, Entity

# relation -> noun phrase for "relation of X"
_PHRASE = {
    ("person", "born_in"): "the birthplace of {}",
    ("person", "studied_at"): "the university attended by {}",
    ("company", "founded_by"): "the founder of {}",
    ("company", "led_by"): "the CEO of {}",
    ("company", "headquartered_in"): "the headquarters city of {}",
    ("city", "located_in"): "the country of {}",
    ("city", "on_river"): "the river of {}",
    ("river", "flows_through"): "the country of {}",
    ("country", "capital"): "the capital of {}",
    ("university", "located_in"): "the city of {}",
}
_QUESTION = {
    "name": "What is {}?",
    "continent": "On which continent is {}?",
    "currency": "What is the currency of {}?",
    "population": "What is the population of {}?",
    "founded": "In what year was {} founded?",
    "length_km": "How long, in km, is {}?",
    "students": "How many students does {} have?",
    "industry": "What industry is {} in?",
    "employees": "How many employees does {} have?",
    "birth_year": "In what year was {} born?",
    "occupation": "What is the occupation of {}?",
}


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    start: str
    relations: tuple[str, ...]
    entities: tuple[str, ...]  # start, then each entity the chain reaches
    asked: str  # an attribute name, or "name"

    @property
    def hops(self) -> int:
        return len(self.relations)

    @property
    def pages_needed(self) -> tuple[str, ...]:
        """Pages an agent must read: the answer to a "name" question is a link text on the
        page before the last entity."""
        return self.entities[:-1] if self.asked == "name" else self.entities


def split_of(title: str, test_fraction: float) -> str:
    return "test" if zlib.crc32(title.encode()) % 1000 < test_fraction * 1000 else "train"


def chains(corpus: dict[str, Entity], start: str, hops: int) -> list[tuple[str, ...]]:
    """All relation chains of exactly ``hops`` steps that exist from ``start``."""
    out: list[tuple[str, ...]] = [()]
    for _ in range(hops):
        grown = []
        for chain in out:
            e = corpus[_walk(corpus, start, chain)[-1]]
            grown += [chain + (rel,) for rel in SCHEMA[e.kind] if rel in e.links]
        out = grown
    return out


def _walk(corpus: dict[str, Entity], start: str, chain: tuple[str, ...]) -> list[str]:
    path = [start]
    for rel in chain:
        path.append(corpus[path[-1]].links[rel])
    return path


def make_question(corpus: dict[str, Entity], start: str, chain: tuple[str, ...], asked: str):
    entities = _walk(corpus, start, chain)
    phrase = start
    for title, rel in zip(entities, chain):
        phrase = _PHRASE[(corpus[title].kind, rel)].format(phrase)
    final = corpus[entities[-1]]
    answer = final.title if asked == "name" else final.attributes[asked]
    return Question(_QUESTION[asked].format(phrase), answer, start, chain, tuple(entities), asked)


def generate(
    corpus: dict[str, Entity],
    split: str,
    min_hops: int,
    max_hops: int,
    test_fraction: float,
    seed: int,
) -> list[Question]:
    """Every question of the split, shuffled by ``seed`` within each hop count and interleaved
    (1, 2, 3, 1, 2, 3, ...) so any prefix mixes hop counts evenly."""
    rng = random.Random(f"web-questions-{seed}")
    starts = [t for t in corpus if split_of(t, test_fraction) == split]
    by_hops = []
    for hops in range(min_hops, max_hops + 1):
        pool = []
        for start in starts:
            for chain in chains(corpus, start, hops):
                path = _walk(corpus, start, chain)
                if len(set(path)) < len(path):
                    continue  # a cycle (country -> capital -> country) answers with the question
                final = corpus[path[-1]]
                for asked in ("name", *ATTRIBUTES[final.kind]):
                    pool.append(make_question(corpus, start, chain, asked))
        rng.shuffle(pool)
        by_hops.append(pool)
    mixed = itertools.chain.from_iterable(itertools.zip_longest(*by_hops))
    return [q for q in mixed if q is not None]


# numeric attribute -> what "the most" of it is called in a comparison question
SUPERLATIVES = {
    "population": "the largest population",
    "length_km": "the greatest length in km",
    "students": "the most students",
    "employees": "the most employees",
    "founded": "the latest founding year",
    "birth_year": "the latest birth year",
}


@dataclass(frozen=True)
class Comparison:
    """A long-horizon question: one number compared across ``entities`` (all of one kind), so
    the agent must read every page and remember each value until it answers."""

    text: str
    answer: str  # the title of the entity with the largest value (a unique maximum)
    entities: tuple[str, ...]
    asked: str  # the numeric attribute


def generate_comparisons(
    corpus: dict[str, Entity], split: str, n: int, test_fraction: float, seed: int
) -> list[Comparison]:
    """Comparison questions over ``n`` entities of one kind: every entity of the split is the
    first of one question, the others drawn from its kind at random (the train/test split is by
    first entity, as for chains). Only questions with a unique largest value are kept."""
    rng = random.Random(f"web-compare-{seed}")
    out = []
    for first in sorted(t for t in corpus if split_of(t, test_fraction) == split):
        kind = corpus[first].kind
        numeric = [a for a in ATTRIBUTES[kind] if a in SUPERLATIVES]
        peers = sorted(t for t, e in corpus.items() if e.kind == kind and t != first)
        if not numeric or len(peers) < n - 1:
            continue
        asked = rng.choice(numeric)
        entities = (first, *rng.sample(peers, n - 1))
        values = [int(corpus[t].attributes[asked]) for t in entities]
        if values.count(max(values)) > 1:
            continue
        names = ", ".join(entities[:-1]) + f" and {entities[-1]}"
        text = f"Which of {names} has {SUPERLATIVES[asked]}?"
        out.append(Comparison(text, entities[values.index(max(values))], entities, asked))
    rng.shuffle(out)
    return out
