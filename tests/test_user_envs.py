"""Users' own envs and tasks: import paths, entry points, tasks files, the example env trained,
evaluated and resumed through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.envs.registry import EnvClassFamily, make_family, resolve_env_name
from turnrl.envs.task_files import TaskFileError, read_tasks
from turnrl.run.config import ConfigError, load_config
from turnrl.run.preflight import checked_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = "examples.calculator:CalculatorEnv"
TASKS = ROOT / "examples" / "calculator_tasks.jsonl"
runner = CliRunner()

# a run small enough for a test: the tiny model, no SFT (the example has no expert)
SMALL = [
    "sft.enabled=false",
    "model.name=tiny",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "tiny.layers=2",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=3",
    "rollout.max_new_tokens=24",
    "rollout.max_context_tokens=512",
    "env.eval_tasks=4",
    "optim.minibatch_size=8",
    "optim.micro_batch_size=8",
    "threads=1",
]


def _cli(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TURNRL_CACHE": str(cache)}
    env.pop("COLUMNS", None)
    return subprocess.run(
        # as the `turnrl` script runs: the working directory is not on sys.path by itself
        [
            sys.executable,
            "-c",
            "import sys; sys.path.remove(''); from turnrl.cli import main; main()",
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_example_env_trains_evals_and_resumes_by_import_path(tmp_path, monkeypatch):
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    train = [
        "train",
        "--quiet",
        "model.name=tiny",
        f"env.name={EXAMPLE}",
        "env.tasks=examples/calculator_tasks.jsonl",
    ]
    done = _cli([*train, *SMALL, "name=calc", "steps=3", f"runs_dir={runs}"], ROOT, cache)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no scripted expert" in done.stdout  # the tiny tokenizer came from the env's own text
    run_dir = runs / "calc"
    saved = load_config(run_dir / "config.yaml")
    assert saved.env.name == EXAMPLE and saved.env.tasks == str(TASKS)  # absolute: any cwd
    assert [m["step"] for m in _metrics(run_dir) if "reward/mean" in m] == [1, 2, 3]

    # eval and resume read the run's config: the same env and tasks file
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TURNRL_CACHE", str(cache))
    out = runner.invoke(app, ["eval", str(run_dir), "--out", str(tmp_path / "eval.json")])
    assert out.exit_code == 0, out.output
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["env"] == EXAMPLE and result["tasks"] == 4  # env.eval_tasks, as in the run
    out = runner.invoke(app, ["train", "--quiet", "--resume", str(run_dir), "steps=4"])
    assert out.exit_code == 0, out.output
    assert f"resumed {run_dir} at step 3" in out.output
    assert [m["step"] for m in _metrics(run_dir) if "reward/mean" in m] == [1, 2, 3, 4]

    # the run recorded where its env's module was found (env.path): eval and resume work from
    # any directory
    assert saved.env.path == str(ROOT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    away = _cli(["eval", str(run_dir), "--tasks", "2", "--no-baselines"], elsewhere, cache)
    assert away.returncode == 0, away.stdout + away.stderr
    assert "examples.calculator:CalculatorEnv" in away.stdout
    away = _cli(["train", "--quiet", "--resume", str(run_dir), "steps=5"], elsewhere, cache)
    assert away.returncode == 0, away.stdout + away.stderr
    assert [m["step"] for m in _metrics(run_dir) if "reward/mean" in m] == [1, 2, 3, 4, 5]

    # where the env's module cannot be imported at all, eval and resume stop with one clear line
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace(f"path: {ROOT}", f"path: {elsewhere}"))
    before = sorted(p.name for p in run_dir.iterdir())
    for args in (["eval", str(run_dir)], ["train", "--resume", str(run_dir), "steps=6"]):
        gone = _cli(args, elsewhere, cache)
        assert gone.returncode == 2, gone.stdout + gone.stderr
        assert "env.name: cannot import 'examples.calculator'" in " ".join(gone.stderr.split())
        assert "Traceback" not in gone.stdout + gone.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_python_dash_m_turnrl():
    done = subprocess.run(
        [sys.executable, "-m", "turnrl", "envs"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "guess" in done.stdout, done.stderr


def test_env_forms_an_import_path_may_name(tmp_path):
    # a bare ToolEnv subclass (with its own tasks classmethod)
    family = make_family(EXAMPLE)
    assert isinstance(family, EnvClassFamily) and family.name == "calculator"
    tasks = family.tasks("train", 3, seed=0)
    assert [t.id for t in tasks] == [f"calculator-train-0-{i}" for i in range(3)]
    assert tasks[0].payload.keys() == {"question", "answer"} and tasks[0].split == "train"
    assert not hasattr(family, "expert")  # optional: none here
    # a family class, built with env.options
    guess = make_family("turnrl.envs.guess:GuessFamily", {"low": 1, "high": 8})
    assert guess.high == 8
    with pytest.raises(ValueError, match="env.options"):
        make_family("turnrl.envs.guess:GuessFamily", {"colour": "red"})
    # a ready family object takes no options
    assert make_family("tests.test_user_envs:READY") is READY
    with pytest.raises(ValueError, match="ready family object"):
        make_family("tests.test_user_envs:READY", {"low": 2})


def _ready():
    from turnrl.envs.guess import GuessFamily

    return GuessFamily(low=1, high=4)


READY = _ready()


def test_config_errors_for_user_envs(tmp_path):
    cases = {
        "env.name=not.a.module:Env": "env.name: cannot import 'not.a.module'",
        "env.name=examples.calculator:Nope": "has no attribute 'Nope'",
        "env.name=nonsense": "env.name: unknown env 'nonsense'; available: code,",
        # a bare env without tasks and no env.tasks
        "env.name=turnrl.envs.guess:GuessEnv": "env.tasks: turnrl.envs.guess:GuessEnv supplies no tasks",
    }
    for override, says in cases.items():
        with pytest.raises(ConfigError) as e:
            checked_config(None, [override, "sft.enabled=false"])
        assert says in str(e.value) and len(str(e.value).splitlines()) == 1, str(e.value)
    # SFT needs demonstrations, so an env without an expert must say so before any work
    with pytest.raises(
        ConfigError, match="sft.enabled: env examples.calculator:CalculatorEnv has no expert"
    ):
        checked_config(None, ["model.name=tiny", f"env.name={EXAMPLE}", "sft.enabled=true"])
    out = runner.invoke(
        app,
        [
            "train",
            "model.name=tiny",
            f"env.name={EXAMPLE}",
            "sft.enabled=true",
            f"runs_dir={tmp_path}",
        ],
    )
    assert out.exit_code == 2 and "sft.enabled" in out.output
    assert not any(tmp_path.iterdir())


def test_entry_point_envs_are_listed_and_recorded_as_import_paths(tmp_path, monkeypatch):
    dist = tmp_path / "calc_envs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: calc-envs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[turnrl.envs]\ncalc = {EXAMPLE}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = runner.invoke(app, ["envs"])
    assert out.exit_code == 0
    assert "calc" in out.output and EXAMPLE in out.output and "code-tiny" in out.output
    assert resolve_env_name("calc") == EXAMPLE
    cfg = checked_config(None, ["model.name=tiny", "env.name=calc", "sft.enabled=false"])
    assert cfg.env.name == EXAMPLE  # what the run records: the target, not the alias


def test_shipped_env_with_a_tasks_file(tmp_path):
    rows = [{"secret": s, "low": 1, "high": 8} for s in range(1, 9)]
    f = tmp_path / "guess.jsonl"
    f.write_text(
        "\n".join(
            json.dumps({"payload": r, "split": "test" if i < 2 else "train"})
            for i, r in enumerate(rows)
        )
    )
    cfg = load_config(None, ["model.name=tiny", "env.name=guess", f"env.tasks={f}"])
    family = make_family(cfg.env.name, cfg.env.options, cfg.env.tasks)
    assert [t.payload["secret"] for t in family.tasks("test")] == [1, 2]
    assert len(family.tasks("train", 3)) == 3 and family.tasks("train")[0].env == "guess"
    assert hasattr(family, "expert") and hasattr(family, "baseline")  # the family's own


# --- tasks files ---------------------------------------------------------------------------


def test_tasks_file_rows_fields_and_stable_split(tmp_path):
    tasks = read_tasks(str(TASKS), "calculator")
    assert len(tasks) == 40 and {t.split for t in tasks} == {"train", "test"}
    assert tasks[0].id == "calc-0" and tasks[0].split == "test"  # the Task form
    assert tasks[1].id == "calculator_tasks-2" and set(tasks[1].payload) == {"question", "answer"}
    # a bare payload's split is a hash of the payload: reordering the file moves nothing
    lines = TASKS.read_text().splitlines()
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("\n".join(reversed(lines)) + "\n")
    again = read_tasks(str(shuffled), "calculator")

    def splits(ts):
        return sorted((json.dumps(t.payload, sort_keys=True), t.split) for t in ts)

    assert splits(again) == splits(tasks)


def test_bad_rows_are_all_reported_by_line_and_nothing_starts(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(
        "\n".join(
            [
                '{"question": "1 * 2 + 3", "answer": 5}',
                '{"question": "oops", ',
                "[1, 2]",
                "",
                '{"payload": [1]}',
                '{"payload": {"question": "q"}, "answr": 3}',
                '{"question": "q", "answer": 1, "split": "dev"}',
                '{"id": "a", "question": "q", "answer": 1}',
                '{"id": "a", "question": "r", "answer": 2}',
                '{"split": "test"}',
            ]
        )
        + "\n"
    )
    with pytest.raises(TaskFileError) as e:
        read_tasks(str(f), "calculator")
    lines = str(e.value).splitlines()
    assert [ln.split(": ", 1)[0] for ln in lines] == [
        f"bad.jsonl:{n}" for n in (2, 3, 5, 6, 7, 9, 10)
    ]
    text = str(e.value)
    for says in (
        "not valid JSON",
        "must be a JSON object, got list",
        "'payload' must be an object",
        "unknown field(s) answr beside 'payload'",
        "'split' must be 'train' or 'test', got 'dev'",
        "duplicate id 'a' (first at bad.jsonl:8)",
        "no payload",
    ):
        assert says in text, text
    out = runner.invoke(
        app,
        [
            "train",
            "model.name=tiny",
            f"env.name={EXAMPLE}",
            f"env.tasks={f}",
            "sft.enabled=false",
            f"runs_dir={tmp_path / 'runs'}",
        ],
    )
    assert out.exit_code == 2
    assert out.output.count("env.tasks: bad.jsonl:") == 7, out.output
    assert not (tmp_path / "runs").exists()


def test_tasks_source_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="env.tasks: .*missing.jsonl: no such file"):
        checked_config(
            None,
            ["model.name=tiny", f"env.name={EXAMPLE}", f"env.tasks={tmp_path / 'missing.jsonl'}"],
        )
    only_train = tmp_path / "train_only.jsonl"
    only_train.write_text('{"split": "train", "payload": {"question": "q", "answer": 1}}\n')
    with pytest.raises(ConfigError, match="no 'test' rows"):
        checked_config(
            None,
            [
                "model.name=tiny",
                f"env.name={EXAMPLE}",
                f"env.tasks={only_train}",
                "sft.enabled=false",
            ],
        )
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(ConfigError, match="needs the 'datasets' package"):
        checked_config(
            None, ["model.name=tiny", f"env.name={EXAMPLE}", "env.tasks=someone/calc-dataset"]
        )


def test_datasets_rows_and_splits(monkeypatch):
    # The loader's use of `datasets`: splits named train/test become task splits, a row's own
    # split column wins, other splits are left out. (A stand-in module: the package itself is
    # optional and not installed here.)
    import types

    fake = types.ModuleType("datasets")
    data = {
        "train": [
            {"question": "1 * 2 + 3", "answer": 5},
            {"question": "2 * 2 + 1", "answer": 5, "split": "test"},
        ],
        "test": [{"question": "3 * 3 + 1", "answer": 10}],
        "validation": [{"question": "4 * 4 + 1", "answer": 17}],
    }
    fake.load_dataset = lambda name: data if name == "someone/calc" else 1 / 0
    fake.load_from_disk = lambda path: 1 / 0
    monkeypatch.setitem(sys.modules, "datasets", fake)
    tasks = read_tasks("someone/calc", "calculator")
    assert [(t.payload["answer"], t.split) for t in tasks] == [
        (5, "train"),
        (5, "test"),
        (10, "test"),
    ]
    with pytest.raises(TaskFileError, match="cannot load dataset"):
        read_tasks("someone/other", "calculator")
