"""Trajectory records, ``turnrl view`` (served and exported) in headless Chromium, the console
lines of a run, and W&B offline logging, on real short training runs of the guess env."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.types import TerminationReason, Trajectory, Turn
from turnrl.view.records import (
    EPISODES,
    RecordWriter,
    choose,
    read_step,
    record_steps,
    step_file,
    thin,
)

GUESS = [
    "recipe=guess-tiny",
    "steps=2",
    "threads=1",
    "env.eval_tasks=4",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "sft.episodes=120",
]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def traj(group: str, reward: float, flags: list[str] = (), n_act: int = 2) -> Trajectory:
    """prompt [0, 3), action [3, 3 + n_act), observation of 2 tokens."""
    a1 = 3 + n_act
    return Trajectory(
        task_id=group.split("/")[0],
        group_id=group,
        prompt_len=3,
        token_ids=list(range(a1 + 2)),
        loss_mask=[0, 0, 0] + [1] * n_act + [0, 0],
        behavior_logprobs=[0.0] * 3 + [-0.5] * n_act + [0.0, 0.0],
        policy_versions=[-1] * 3 + [0] * n_act + [-1, -1],
        turns=[Turn(3, a1, a1, a1 + 2, [-0.5] * n_act, 0, reward=0.25, anchor="s0")],
        reward=reward,
        termination=TerminationReason.DONE,
        flags=list(flags),
        metrics={"success": reward},
    )


# -- records: what is kept, how it is capped ---------------------------------------------------


def test_choose_prefers_groups_whose_rewards_differ_and_keeps_every_flagged_episode():
    trajs = [
        traj("a", 0.0),
        traj("a", 0.0),  # group a: no reward spread, no advantage
        traj("b", 1.0),
        traj("b", 0.0),  # group b: spread
        traj("c", 0.0, flags=["test_edit"]),
        traj("c", 0.0),
    ]
    assert choose(trajs, 1) == [2, 3, 4]  # group b, then the flagged episode of c
    assert choose(trajs, 2) == [0, 1, 2, 3, 4]  # then a, first in batch order among ties
    assert choose(trajs, 0) == [4]


def test_thin_deletes_older_steps_with_fewest_trailing_zero_bits_first(tmp_path):
    for step in range(1, 9):
        step_file(tmp_path, step).parent.mkdir(exist_ok=True)
        step_file(tmp_path, step).write_bytes(b"x" * 100)
    folder = tmp_path / "trajectories"
    removed = thin(folder, max_bytes=550)  # 800 bytes: 3 files must go
    # older half = steps 1-4; odd steps 1 and 3 go first, then (of 2, 4, 5, 6 and its new older
    # half 2, 4, 5) step 5, also odd; steps 2, 4 (spread) and the newest survive
    assert [int(p.name[5:13]) for p in removed] == [1, 3, 5]
    assert record_steps(tmp_path) == [2, 4, 6, 7, 8]
    thin(folder, max_bytes=1)
    assert record_steps(tmp_path) == [8]  # the newest step is never deleted


def test_record_writer_encodes_per_token_values_and_truncates_on_resume(tmp_path):
    trajs = [traj("t/g", 1.0), traj("t/g", 0.0)]
    adv = torch.tensor([[0, 0, 0, 1.0, 1.0, 0, 0], [0, 0, 0, -1.0, -1.0, 0, 0]])
    nan = float("nan")
    lp = torch.tensor([[nan, nan, nan, -0.4, -0.6, nan, nan]] * 2)
    w = RecordWriter(
        tmp_path, record_groups=1, records_mb=1, token_text=lambda i: f"<{i}>", tiers={"t": 2}
    )
    recs = w.write(1, trajs, {"advantages": adv, "trainer_logprobs": lp, "ratios": lp.exp()})
    assert recs == read_step(tmp_path, 1) and len(recs) == 2
    r = recs[0]
    assert r["text"][:4] == ["<0>", "<1>", "<2>", "<3>"] and r["mask"] == trajs[0].loss_mask
    assert r["advantages"] == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0] and r["advantage"] == 1.0
    assert r["trainer_logprobs"][:4] == [None, None, None, -0.4]  # NaN: not trained there
    assert r["ratios"][3] == round(float(torch.tensor(-0.4).exp()), 4)
    assert r["tier"] == 2 and r["turns"][0]["reward"] == 0.25 and r["turns"][0]["anchor"] == "'s0'"
    # no per-token values given: the arrays exist, full of nulls
    w.write(2, trajs)
    assert read_step(tmp_path, 2)[0]["advantages"] == [None] * 7
    assert len((tmp_path / EPISODES).read_text().splitlines()) == 4
    RecordWriter(tmp_path, record_groups=1, records_mb=1, token_text=str, truncate_from=1)
    assert record_steps(tmp_path) == [1]
    assert len((tmp_path / EPISODES).read_text().splitlines()) == 2


def test_record_groups_zero_keeps_only_flagged_and_records_mb_caps_the_folder(tmp_path):
    w = RecordWriter(tmp_path, record_groups=0, records_mb=0.001, token_text=str)
    for step in range(1, 6):
        w.write(step, [traj("a", 1.0), traj("a", 0.0), traj("b", 0.0, flags=["exit_call"])])
    assert [r["group"] for r in read_step(tmp_path, 5)] == ["b"]
    size = sum(p.stat().st_size for p in (tmp_path / "trajectories").iterdir())
    assert (
        size <= 0.001 * 2**20 and record_steps(tmp_path)[-1] == 5 and record_steps(tmp_path)[0] > 1
    )


# -- real runs ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Two real 2-step runs of the guess env: the first through the CLI with its output to a
    pipe (as into a log file), the second, in-process, with another learning rate, for
    overlays. Returns (first, second, the first's output)."""
    from turnrl.run.config import load_config
    from turnrl.run.recipe import train

    root = tmp_path_factory.mktemp("view-runs")
    cache = str(root / "cache")
    proc = subprocess.run(
        [sys.executable, "-m", "turnrl.cli", "train", *GUESS, "name=first", f"runs_dir={root}"],
        env={**os.environ, "TURNRL_CACHE": cache, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cfg = load_config(None, [*GUESS, "name=second", "optim.lr=0.003", f"runs_dir={root}"])
    old = os.environ.get("TURNRL_CACHE")
    os.environ["TURNRL_CACHE"] = cache  # the first run's warm start, as a user's cache
    try:
        train(cfg, quiet=True, log=lambda s: None)
    finally:
        if old is None:
            del os.environ["TURNRL_CACHE"]
        else:
            os.environ["TURNRL_CACHE"] = old
    return root / "first", root / "second", proc.stdout + proc.stderr


def test_run_output_has_run_dir_first_one_line_per_step_and_no_library_bars(runs):
    first, _, output = runs
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert lines[0] == f"run directory: {first}  (resume: turnrl train --resume {first})"
    progress = [ln.split()[1] for ln in lines if re.match(r"step \d+/\d+ ", ln)]
    assert progress == ["1/2", "2/2"]
    assert "Writing model shards" not in output and "\r" not in output and "it/s" not in output


def test_a_real_run_records_its_trained_tokens(runs):
    first, _, _ = runs
    assert record_steps(first) == [1, 2]
    episodes = [json.loads(ln) for ln in (first / EPISODES).read_text().splitlines()]
    assert len(episodes) == 2 * 8 and sum(e["rec"] for e in episodes) >= 4
    for step in (1, 2):
        recs = read_step(first, step)
        assert len({r["group"] for r in recs if not r["flags"]}) <= 1
        for r in recs:
            n = len(r["ids"])
            for key in ("text", "mask", "behavior_lp", "advantages", "trainer_logprobs", "ratios"):
                assert len(r[key]) == n, key
            acted = [k for k in range(n) if r["mask"][k]]
            assert acted and r["turns"] and r["end"] in {e.value for e in TerminationReason}
            assert all(r["advantages"][k] == 0 for k in range(n) if not r["mask"][k])
            assert all(r["trainer_logprobs"][k] is None for k in range(n) if not r["mask"][k])
            trained = [k for k in acted if r["trainer_logprobs"][k] is not None]
            if any(r["advantages"][k] for k in acted):
                assert trained  # a row with signal was trained on
            # one minibatch per step, synchronous: the trainer scores the sampler's own weights
            for k in trained:
                assert abs(r["trainer_logprobs"][k] - r["behavior_lp"][k]) < 2e-3
                assert abs(r["ratios"][k] - 1.0) < 2e-3


def test_view_cli_exports_reports_and_rejects_bad_paths(runs, tmp_path):
    first, second, _ = runs
    out = CliRunner().invoke(app, ["view", str(tmp_path / "nope")])
    assert out.exit_code == 2 and "does not exist" in " ".join(out.output.split())
    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(app, ["view", str(tmp_path / "empty"), "--export", "x.html"])
    assert out.exit_code == 2 and "has no metrics.jsonl" in " ".join(out.output.split())
    assert not (tmp_path / "x.html").exists()
    page = tmp_path / "both.html"
    out = CliRunner().invoke(app, ["view", str(first.parent), "--export", str(page)])
    assert out.exit_code == 0, out.output
    text = page.read_text()
    assert 'id="turnrl-runs"' in text and "Plotly" in text and "<script src" not in text
    runs_json = text.split('id="turnrl-runs">', 1)[1].split("</script>", 1)[0]
    assert [r["name"] for r in json.loads(runs_json)] == ["first", "second"]
    # the run's own report.html is this export, rebuilt by `turnrl report`
    assert 'id="turnrl-step-0-2"' in (first / "report.html").read_text()
    (first / "report.html").unlink()
    out = CliRunner().invoke(app, ["report", str(first)])
    assert out.exit_code == 0 and (first / "report.html").exists()


def test_turnrl_view_serves_the_page_and_its_data_on_loopback(runs):
    import urllib.request

    proc = subprocess.Popen(
        [sys.executable, "-m", "turnrl.cli", "view", str(runs[0]), str(runs[1]), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "static/plotly-basic.min.js" in page and "api/runs" in page
        data = json.loads(urllib.request.urlopen(url + "api/runs", timeout=10).read())
        assert [r["name"] for r in data] == ["first", "second"]
        assert data[0]["curves"]["reward/mean"]["x"] == [1, 2]
        step = json.loads(urllib.request.urlopen(url + "api/step?run=1&step=2", timeout=10).read())
        assert step and all(r["step"] == 2 for r in step)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- in the browser ----------------------------------------------------------------------------


@pytest.fixture
def browser(runs):
    """Headless Chromium for one test. Playwright's sync API keeps an asyncio loop running in
    this thread while it is open, where training (asyncio.run) cannot start: so the runs come
    first and the browser closes after each test."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh installs it as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (dev extra) missing")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(runs):
    from turnrl.view.server import make_server

    server = make_server([runs[0], runs[1]])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    return page, errors


def check_trajectory_page(page, errors):
    """Open the first listed trajectory; sampled vs environment tokens; the hover tip."""
    page.click("a[data-page='trajectories']")
    page.wait_for_selector("#traj-list tbody tr")
    page.click("#traj-list tbody tr >> nth=0")
    page.wait_for_selector("#traj .tokens .t.s")
    sampled, env = page.locator("#traj .tokens .t.s"), page.locator("#traj .tokens .t.e")
    assert sampled.count() > 0 and env.count() > 0

    def style(loc):
        return loc.evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]")

    assert style(sampled.first) != style(env.first)  # told apart at a glance
    assert page.locator("#traj .turn").count() >= 1 and "Ending:" in page.inner_text("#traj")
    sampled.first.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "behaviour logprob" in text and "trainer logprob" in text and "ratio" in text
    assert re.search(r"behaviour logprob +-?\d+\.\d{4}", text), text
    assert re.search(r"advantage +[+-]?\d+\.\d{4}", text), text
    assert re.search(r"^token \d+ of \d+ · id \d+", text), text
    env.first.hover()
    assert "environment" in tip.inner_text() and "advantage" not in tip.inner_text()
    assert not errors


def test_viewer_shows_tokens_hover_values_and_overlays_two_runs(browser, served, runs):
    page, errors = open_page(browser, served + "#curves")
    assert page.locator("#runs .chip").all_inner_texts() == ["first", "second"]
    reward = page.locator("#curve-grid .plot").first
    names = reward.evaluate("d => d.data.map(t => t.name)")
    assert names == ["first · reward/mean", "second · reward/mean"]  # two runs overlaid
    page.uncheck("#runs input[data-run='1']")
    names = page.locator("#curve-grid .plot").first.evaluate("d => d.data.map(t => t.name)")
    assert names == ["reward/mean"]
    page.check("#runs input[data-run='1']")
    # filters: reward, then a step range that matches nothing
    page.click("a[data-page='trajectories']")
    page.wait_for_selector("#traj-list tbody tr")
    all_rows = page.locator("#traj-list tbody tr").count()
    page.fill("#f-rew-min", "0.5")
    rewards = [
        float(x) for x in page.locator("#traj-list tbody tr td:nth-child(5)").all_inner_texts()
    ]
    assert all(r >= 0.5 for r in rewards) and len(rewards) < all_rows
    page.fill("#f-rew-min", "")
    page.fill("#f-step-min", "3")
    assert page.locator("#traj-list tbody tr").count() == 0
    page.fill("#f-step-min", "")
    check_trajectory_page(page, errors)
    # the group of that episode, side by side with its advantages
    page.click("#traj a[href^='#group=']")
    page.wait_for_selector("#group .member")
    members = page.locator("#group .member")
    assert members.count() >= 2 and "advantage" in members.first.inner_text()
    page.click("a[data-page='breakdown']")
    page.wait_for_selector("#plot-tier .main-svg")
    assert not errors
    page.close()


def test_exported_page_works_offline(browser, runs, tmp_path):
    from turnrl.view.export import export_html

    out = export_html([runs[0], runs[1]], tmp_path / "view.html")
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # self-contained
    assert page.locator("#curve-grid .plot").first.evaluate("d => d.data.length") == 2
    check_trajectory_page(page, errors)
    page.close()


# -- W&B -----------------------------------------------------------------------------------------


def test_wandb_offline_logs_metrics_and_trajectory_tables(tmp_path, monkeypatch, runs):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    from turnrl.run.config import load_config
    from turnrl.run.recipe import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("TURNRL_CACHE", str(runs[0].parent / "cache"))  # the fixture's warm start
    cfg = load_config(
        None, [*GUESS, "steps=1", "name=wb", f"runs_dir={tmp_path}", "logging.wandb=true"]
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    data = files[0].read_bytes()
    for key in (b"reward/mean", b"eval/success", b"trajectories", b"table-file"):
        assert key in data, key


def test_wandb_requested_but_missing_fails_before_work(tmp_path, monkeypatch):
    import turnrl.view.wandb_log as wandb_log
    from turnrl.run.config import load_config
    from turnrl.run.recipe import train

    monkeypatch.setattr(wandb_log.importlib.util, "find_spec", lambda name: None)
    cfg = load_config(None, [*GUESS, f"runs_dir={tmp_path}", "logging.wandb=true"])
    with pytest.raises(ValueError, match="logging.wandb=true needs the wandb package"):
        train(cfg, quiet=True, log=lambda s: None)
    assert not any(tmp_path.iterdir())
