"""How fast the viewer's page loads for a 200-step run, in headless Chromium.

Fabricates a run directory shaped like a 200-step code-env run (the metrics a real step writes,
32 episodes per step in ``episodes.jsonl``, one recorded group of 8 trajectories of ~600 tokens
per step written by the real ``RecordWriter``), or uses ``--run DIR``. Then, for the served
viewer (``turnrl view``) and the exported page (``--export``), loads each page ``--repeats``
times in a fresh tab and prints the median time from navigation start until the page has
rendered (the viewer sets ``window.turnrlReadyMs`` when its charts or tokens are drawn), and
the same for a baseline page that only loads Plotly and draws one chart (the floor any
Plotly page pays), with the ratio to it: on a busy machine the ratio says more than seconds.

    python benchmarks/viewer_load.py [--run DIR] [--steps 200] [--repeats 5]

Needs Debian's chromium (``/usr/bin/chromium``) and the ``playwright`` package (dev extra).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from turnrl.types import TerminationReason, ToolCall, Trajectory, Turn
from turnrl.view.export import STATIC, export_html
from turnrl.view.records import RecordWriter, read_step, record_steps
from turnrl.view.server import make_server

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
ENDINGS = ["done", "done", "done", "max_turns", "context_limit", "parse_errors"]


def fake_trajectory(rng: random.Random, task: str, group: str, turns: int = 6) -> Trajectory:
    ids, mask, lps, vers, ts = list(range(60)), [0] * 60, [0.0] * 60, [-1] * 60, []
    for k in range(turns):
        a0 = len(ids)
        n_act = rng.randrange(12, 40)
        ids += [rng.randrange(2048) for _ in range(n_act)]
        mask += [1] * n_act
        act_lp = [-rng.random() * 2 for _ in range(n_act)]
        lps += act_lp
        vers += [3] * n_act
        o0 = len(ids)
        n_obs = rng.randrange(20, 80)
        ids += [rng.randrange(2048) for _ in range(n_obs)]
        mask += [0] * n_obs
        lps += [0.0] * n_obs
        vers += [-1] * n_obs
        call = ToolCall("run_tests", {}) if k % 2 else ToolCall("read_file", {"path": "a.py"})
        ts.append(Turn(a0, o0, o0, len(ids), act_lp, 3, 0.0, f"state-{k}", [call]))
    reward = float(rng.random() < 0.4)
    return Trajectory(
        task_id=task,
        group_id=group,
        prompt_len=60,
        token_ids=ids,
        loss_mask=mask,
        behavior_logprobs=lps,
        policy_versions=vers,
        turns=ts,
        reward=reward,
        termination=TerminationReason(rng.choice(ENDINGS)),
        flags=["test_edit"] if rng.random() < 0.02 else [],
        metrics={"success": reward, "proxy_success": reward, "turns": float(turns)},
    )


def fabricate(run_dir: Path, steps: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"name: fabricated\nsteps: {steps}\n")
    tasks = [f"code-{m}-{k}" for m in ("bank", "lru", "roman", "stack", "dates") for k in range(8)]
    tiers = {t: 1 + i % 3 for i, t in enumerate(tasks)}
    writer = RecordWriter(
        run_dir, record_groups=1, records_mb=64, token_text=lambda i: f"t{i} ", tiers=tiers
    )
    with (run_dir / "metrics.jsonl").open("w") as f:
        for step in range(1, steps + 1):
            trajs = []
            for g in range(4):
                task = rng.choice(tasks)
                trajs += [fake_trajectory(rng, task, f"s{step}-{task}-{g}") for _ in range(8)]
            adv = torch.randn(len(trajs), max(len(t.token_ids) for t in trajs))
            writer.write(step, trajs, {"advantages": adv, "trainer_logprobs": adv, "ratios": adv})
            p = min(0.9, step / steps)
            row = {"step": step, "reward/mean": p, "success/true": p, "success/proxy": p + 0.05}
            for key in ("hack_rate", "truncation_rate", "loss", "kl", "entropy", "adv/abs_mean"):
                row[key] = rng.random()
            for key in ("episode/turns_mean", "episode/tokens_mean", "train/clipfrac"):
                row[key] = rng.random() * 10
            for key in ("train/grad_norm", "train/approx_kl", "time/rollout_s", "time/train_s"):
                row[key] = rng.random()
            for end in set(ENDINGS):
                row[f"termination/{end}"] = rng.random() / 4
            f.write(json.dumps(row) + "\n")
            if step % 20 == 0:
                f.write(json.dumps({"step": step, "eval/success": p, "eval/turns": 4.0}) + "\n")
    return run_dir


BASELINE = """<!doctype html><meta charset="utf-8"><div id="p" style="height:300px"></div>
<script src="{plotly}"></script>
<script>
const x = Array.from({{length: 200}}, (_, i) => i + 1);
Plotly.newPlot("p", [{{x, y: x.map(Math.sqrt)}}]);
window.turnrlReadyMs = performance.now();
</script>"""


def load_once(browser, url: str) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_function("window.turnrlReadyMs !== undefined", timeout=60_000)
    seconds = page.evaluate("window.turnrlReadyMs") / 1000
    page.close()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="an existing run directory (default: fabricate)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = args.run or fabricate(Path(tmp) / "fabricated", args.steps)
        made = time.perf_counter() - t0
        export = export_html([run], Path(tmp) / "export.html")
        size = sum(p.stat().st_size for p in (run / "trajectories").glob("*.gz"))
        print(f"run: {run} ({f'fabricated in {made:.1f}s' if not args.run else 'given'})")
        print(
            f"records on disk: {size / 2**20:.1f} MiB; export: {export.stat().st_size / 2**20:.1f} MiB"
        )
        server = make_server([run])
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        step = record_steps(run)[-1]
        i = read_step(run, step)[0]["i"]
        baseline = Path(tmp) / "baseline.html"
        baseline.write_text(BASELINE.format(plotly=(STATIC / "plotly-basic.min.js").as_uri()))
        pages = [
            ("baseline: Plotly, 1 chart", baseline.as_uri()),
            ("served: curves", base + "#curves"),
            ("served: breakdown", base + "#breakdown"),
            ("served: trajectory", base + f"#traj=0/{step}/{i}"),
            ("export: curves", export.as_uri() + "#curves"),
            ("export: trajectory", export.as_uri() + f"#traj=0/{step}/{i}"),
        ]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            load_once(browser, base)  # warm-up: the browser's first page pays its own start-up
            times: dict[str, list[float]] = {name: [] for name, _ in pages}
            for _ in range(args.repeats):  # round robin: a busy spell slows every page alike
                for name, url in pages:
                    times[name].append(load_once(browser, url))
            floor = statistics.median(times[pages[0][0]])
            for name, ts in times.items():
                med = statistics.median(ts)
                print(
                    f"{name:<26} median {med:.2f}s  (min {min(ts):.2f}s, max {max(ts):.2f}s, "
                    f"{len(ts)} loads)  {med / floor:.1f}x baseline  "
                    f"{'under' if med < 2 else 'OVER'} the 2 s target"
                )
            browser.close()
        server.shutdown()


if __name__ == "__main__":
    main()
