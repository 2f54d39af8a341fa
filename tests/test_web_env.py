"""The browsing env: loopback server lifecycle, search, reading, grading, experts, baselines."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading

import pytest

from turnrl.envs.scripted import run_scripted
from turnrl.envs.web import WebFamily, exact_match, normalize_answer, token_f1
from turnrl.envs.web.grading import parse_verdict
from turnrl.envs.web.server import Site, WikiServer
from turnrl.types import Task, ToolCall


@pytest.fixture(scope="module")
def family():
    fam = WebFamily()
    yield fam
    fam.close()


def _get(base_url: str, path: str) -> tuple[int, str]:
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def _server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "turnrl-web-server"]


async def _episode(fam: WebFamily, task: Task, calls: list[ToolCall]):
    env = fam.make_env()
    await env.reset(task)
    steps = [await env.step(c) for c in calls]
    return env, steps


# --- the server --------------------------------------------------------------------------


def test_server_starts_serves_and_stops_cleanly(family):
    before = len(_server_threads())
    fam = WebFamily(n_entities=40)
    assert not fam.server.running, "the server starts lazily, on the first env"
    fam.make_env()
    base = fam.base_url
    port = int(base.rsplit(":", 1)[1])
    other = WikiServer(family.site)
    other_base = other.start()  # port 0: a second server never collides with the first
    assert other_base != base
    other.stop()
    title = next(iter(fam.corpus))
    status, page = _get(base, fam.corpus[title].path)
    assert status == 200 and title in page
    assert _get(base, "/wiki/No_Such_Page")[0] == 404
    status, results = _get(base, "/search?q=" + title.replace(" ", "+"))
    assert status == 200 and fam.corpus[title].path in results
    assert len(_server_threads()) == before + 1
    fam.close()
    assert len(_server_threads()) == before, "the server thread was not joined"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    fam.close()  # idempotent


# --- search ------------------------------------------------------------------------------


def test_search_ranks_the_named_page_first_for_every_entity(family):
    site: Site = family.site
    wrong = [
        (title, site.index.search(title, 1)[0].title)
        for title in family.corpus
        if site.index.search(title, 1)[0].title != title
    ]
    assert not wrong, f"{len(wrong)} titles not ranked first, e.g. {wrong[:3]}"


def test_search_with_the_whole_question_finds_the_start_page(family):
    tasks = family.tasks("train", 150)
    top1 = [family.site.index.search(t.payload["question"], 1)[0].title for t in tasks]
    hits = sum(title == t.payload["start"] for title, t in zip(top1, tasks))
    assert hits / len(tasks) >= 0.95


def test_search_tool_over_http_shows_numbered_results_with_snippets(family):
    task = family.tasks("train", 1)[0]
    start = task.payload["start"]
    _, (step,) = asyncio.run(_episode(family, task, [ToolCall("search", {"query": start})]))
    lines = step.observation.splitlines()
    assert lines[0].startswith("/search?q=")
    assert lines[2].startswith(f"[1] {start} "), step.observation
    assert len(lines[2]) > len(start) + 10, "a result carries a snippet"


# --- reading -----------------------------------------------------------------------------


def test_open_refuses_every_url_off_the_loopback_site(family):
    task = family.tasks("train", 1)[0]
    port = family.base_url.rsplit(":", 1)[1]
    outside = [
        "http://example.com/",
        "https://example.com/wiki/X",
        f"https://127.0.0.1:{port}/wiki/X",
        f"http://localhost:{port}/wiki/X",
        "//evil.example/x",
        "example.com",
        "www.example.org/page",
        "file:///etc/passwd",
        "ftp://127.0.0.1/",
    ]
    calls = [ToolCall("open", {"url": u}) for u in outside]
    env, steps = asyncio.run(_episode(family, task, calls))
    for url, step in zip(outside, steps):
        assert step.observation.startswith("Error:") and "outside" in step.observation, url
        assert step.info["error"] == "tool_error" and not step.terminated
    assert env.doc is None, "nothing was fetched"
    path = task.payload["pages"][0][1]
    _, (ok,) = asyncio.run(
        _episode(family, task, [ToolCall("open", {"url": family.base_url + path})])
    )
    assert ok.observation.startswith(path), "the site's own absolute URL is accepted"
    _, (bare,) = asyncio.run(
        _episode(family, task, [ToolCall("open", {"url": task.payload["start"]})])
    )
    assert bare.observation.startswith(path), "a bare title opens its page"


def test_pages_paginate_and_links_stay_numbered_across_pages(family):
    fam = WebFamily(page_size=100)
    try:
        city = next(e for e in fam.corpus.values() if e.kind == "city")
        task = fam.tasks("train", 1)[0]
        calls = [
            ToolCall("open", {"url": city.path}),
            ToolCall("open", {"url": city.path, "page": 2}),
            ToolCall("open", {"url": city.path, "page": 99}),
            ToolCall("find", {"text": "Population"}),
            ToolCall("find", {"text": "zzzz"}),
            ToolCall("follow", {"link_number": 1}),
        ]
        env, (p1, p2, bad, found, missing, followed) = asyncio.run(_episode(fam, task, calls))
        n_pages = int(p1.observation.splitlines()[0].split("/")[-1].rstrip(")"))
        assert n_pages >= 2 and all(len(s.observation) < 160 for s in (p1, p2))
        assert "(page 2/" in p2.observation and p1.observation != p2.observation
        assert bad.observation.startswith("Error:") and f"pages 1-{n_pages}" in bad.observation
        assert f"Population: {city.attributes['population']}" in found.observation
        assert "No line" in missing.observation
        country = fam.corpus[city.links["located_in"]]
        assert followed.observation.startswith(country.path), "link [1] is the country"
    finally:
        fam.close()


def test_follow_and_find_without_a_page_are_observations(family):
    task = family.tasks("train", 1)[0]
    calls = [
        ToolCall("follow", {"link_number": 1}),
        ToolCall("find", {"text": "x"}),
        ToolCall("open", {"url": "/wiki/Nowhere"}),
        ToolCall("browse", {}),
    ]
    _, steps = asyncio.run(_episode(family, task, calls))
    assert all(s.observation.startswith("Error:") for s in steps)
    assert "no page is open" in steps[0].observation and "no page at" in steps[2].observation


# --- tasks -------------------------------------------------------------------------------


def test_tasks_are_deterministic_split_by_start_entity_and_hop_bounded():
    fam = WebFamily(min_hops=1, max_hops=2)
    train, test = fam.tasks("train"), fam.tasks("test")
    assert [t.to_json() for t in fam.tasks("train", 50)] == [t.to_json() for t in train[:50]]
    assert fam.tasks("train", 20, seed=1) != train[:20]
    assert {t.payload["start"] for t in train}.isdisjoint({t.payload["start"] for t in test})
    assert {t.id for t in train}.isdisjoint({t.id for t in test})
    assert len({t.id for t in train}) == len(train)
    assert all(Task.from_json(t.to_json()) == t for t in train[:20])
    assert {t.payload["hops"] for t in train[:10]} == {1, 2}, "a prefix mixes hop counts"
    assert 0.1 < len(test) / (len(train) + len(test)) < 0.3
    for t in train[:200]:  # the answer is never given away by the question
        assert t.payload["start"] in t.payload["question"]
        assert t.payload["answer"] not in t.payload["question"]
    easy = WebFamily(max_hops=1).tasks("train", 5)
    assert all(t.payload["hops"] == 1 and len(t.payload["question"]) < 90 for t in easy)


def test_options_are_validated_by_name():
    with pytest.raises(ValueError, match="max_hop"):
        WebFamily(max_hop=2)
    with pytest.raises(ValueError, match="min_hops"):
        WebFamily(min_hops=3, max_hops=1)
    with pytest.raises(ValueError, match="metric"):
        WebFamily(metric="bleu")
    with pytest.raises(ValueError, match="judge"):
        WebFamily(judge=object())
    with pytest.raises(ValueError, match="split"):
        WebFamily(n_entities=40).tasks("dev")


# --- grading -----------------------------------------------------------------------------


def test_answer_normalisation_exact_match_and_f1():
    assert normalize_answer("  The Velmora  River!! ") == "velmora river"
    assert normalize_answer("An apple, a day") == "apple day"
    assert exact_match("the velmora river.", "Velmora River") == 1.0
    assert exact_match("Velmora", "Velmora River") == 0.0
    assert exact_match(" 1633300", "1633300") == 1.0  # the expert writes the space it read
    assert token_f1("Velmora", "Velmora River") == pytest.approx(2 / 3)  # p=1, r=1/2
    assert token_f1("Velmora Lake River", "the Velmora River") == pytest.approx(0.8)
    assert token_f1("", "Velmora") == 0.0 and token_f1("the", "a") == 1.0
    assert token_f1("Ortis", "Velmora") == 0.0


def _graded(fam: WebFamily, task: Task, text: str):
    async def go():
        env = fam.make_env()
        await env.reset(task)
        step = await env.step(ToolCall("answer", {"text": text}))
        assert step.terminated
        return await env.grade()

    return asyncio.run(go())


def test_reward_metric_exact_or_f1_with_documented_threshold(family):
    task = next(t for t in family.tasks("train") if len(t.payload["answer"].split()) == 2)
    gold = task.payload["answer"]
    first = gold.split()[0]
    exact = _graded(family, task, gold.upper() + ".")
    assert exact.reward == 1.0 and exact.success and exact.components["f1"] == 1.0
    partial = _graded(family, task, first)
    assert partial.reward == 0.0 and not partial.success
    assert partial.components["f1"] == pytest.approx(2 / 3)
    f1_family = WebFamily(metric="f1", f1_success=0.6)
    try:
        partial_f1 = _graded(f1_family, task, first)
        assert partial_f1.reward == pytest.approx(2 / 3) and partial_f1.success
    finally:
        f1_family.close()


class _Judge:
    def __init__(self, reply: str | Exception) -> None:
        self.reply, self.calls = reply, 0

    async def chat(self, messages: list[dict[str, str]]) -> str:
        self.calls += 1
        assert "Reference answer" in messages[-1]["content"]
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


@pytest.mark.parametrize(
    "reply, reward, skipped",
    [
        ("CORRECT", 1.0, False),
        ("Verdict: incorrect.", 0.0, False),
        (RuntimeError("backend down"), 0.0, True),
        ("I cannot tell; CORRECT or INCORRECT?", 0.0, True),
        ("maybe", 0.0, True),
    ],
)
def test_judge_verdicts_and_skips_are_recorded(family, reply, reward, skipped):
    judge = _Judge(reply)
    fam = WebFamily(n_entities=40, judge=judge)
    try:
        task = fam.tasks("train", 1)[0]
        result = _graded(fam, task, "something else")
        assert judge.calls == 1 and result.reward == reward
        assert result.flags == []  # a skipped judge is not an exploit: hack_rate ignores it
        assert result.components.get("judge_skipped", 0.0) == float(skipped)
        assert result.info["judge"]["status"] == ("skipped" if skipped else "ok")
        if skipped:
            assert result.info["judge"]["reason"]
        exact = _graded(fam, task, task.payload["answer"])
        assert exact.reward == 1.0 and judge.calls == 1, "an exact match needs no judge"
    finally:
        fam.close()


def test_parse_verdict():
    assert parse_verdict("CORRECT") is True
    assert parse_verdict("The answer is incorrect") is False
    assert parse_verdict("correctly incorrect") is False
    assert parse_verdict("CORRECT... no, INCORRECT") is None
    assert parse_verdict("") is None


# --- scripted agents ---------------------------------------------------------------------


def _run_all(fam: WebFamily, tasks: list[Task], make_agent) -> list:
    async def go():
        return await asyncio.gather(
            *(run_scripted(fam.make_env(), t, make_agent(t)) for t in tasks)
        )

    return asyncio.run(go())


def test_expert_solves_generated_tasks_concurrently(family):
    tasks = family.tasks("train", 24) + family.tasks("test", 12)
    episodes = _run_all(family, tasks, family.expert)
    assert [e.result.success for e in episodes] == [True] * len(tasks)
    assert {t.payload["hops"] for t in tasks} == {1, 2, 3}
    for e in episodes:  # the expert answers only what it has read: the line find showed
        find, answer = e.calls[-2:]
        assert find == ToolCall("find", {"text": e.task.payload["label"] + ":"})
        assert e.observations[-2].count("\np") == 1, "the answer's line alone"
        assert answer == ToolCall("answer", {"text": e.task.payload["answer"]})
        assert e.task.payload["answer"] in e.observations[-2].splitlines()[-1]


def test_expert_writes_copied_values_with_the_read_space_only_when_asked():
    """copy_spaces (set by the tiny recipe): " 1633300" as read after "Population:"."""
    fam = WebFamily(max_hops=1, copy_spaces=True)
    try:
        tasks = fam.tasks("train", 6)
        episodes = _run_all(fam, tasks, fam.expert)
    finally:
        fam.close()
    assert all(e.result.success for e in episodes)
    for e in episodes:
        assert e.calls[0] == ToolCall("search", {"query": " " + e.task.payload["pages"][0][0]})
        assert e.calls[-1] == ToolCall("answer", {"text": " " + e.task.payload["answer"]})


def test_expert_works_when_the_needed_link_is_on_a_later_page():
    fam = WebFamily(page_size=120, max_hops=2)
    try:
        tasks = fam.tasks("train", 20)
        episodes = _run_all(fam, tasks, fam.expert)
        assert all(e.result.success for e in episodes)
        assert any(c.arguments.get("page", 1) > 1 for e in episodes for c in e.calls)
    finally:
        fam.close()


def test_noisy_expert_makes_mistakes_but_mostly_recovers(family):
    tasks = family.tasks("train", 30)
    episodes = _run_all(family, tasks, lambda t: family.expert(t, seed=1, noise=0.3))
    clean = _run_all(family, tasks, family.expert)
    assert sum(len(e.calls) for e in episodes) > sum(len(e.calls) for e in clean)
    assert sum(e.result.success for e in episodes) / len(tasks) >= 0.6


def test_baselines_score_near_zero(family):
    tasks = family.tasks("test", 60)
    nothing = _run_all(family, tasks, family.baseline)
    assert all(len(e.calls) == 1 and e.terminated for e in nothing)
    assert sum(e.result.reward for e in nothing) / len(tasks) <= 0.05
    rand = _run_all(family, tasks, lambda t: family.random_agent(t, seed=0))
    mean = sum(e.result.reward for e in rand) / len(tasks)
    print(f"random-agent mean reward on {len(tasks)} web test tasks: {mean:.3f}")
    assert mean <= 0.1
