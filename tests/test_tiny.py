"""The tiny-model lab (turnrl.tiny): its tokenizer for envs with and without a scripted expert,
and the tiny section of the config."""

from __future__ import annotations

import pytest

from turnrl.envs.guess import GuessFamily
from turnrl.run.config import load_config
from turnrl.tiny.warm_start import build_tiny

SMALL = [
    "model.name=tiny",
    "env.name=guess",
    "tiny.vocab_size=300",
    "tiny.hidden_size=32",
    "tiny.layers=1",
]


class NoExpert:
    """An env family as a user might write it: tasks and envs, no scripted expert."""

    name = "noexpert"

    def __init__(self) -> None:
        self.inner = GuessFamily(low=1, high=8)

    def tasks(self, split, n=None, seed=0):
        return self.inner.tasks(split, n, seed)

    def make_env(self):
        return self.inner.make_env()

    def close(self) -> None:
        self.inner.close()


def test_tokenizer_from_first_turns_when_the_env_has_no_expert(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))
    cfg = load_config(None, SMALL + ["sft.episodes=8"])
    family = NoExpert()
    logs: list[str] = []
    model, tok = build_tiny(cfg, family, family.tasks("train", 8), tmp_path / "run", logs.append)
    assert any("no scripted expert" in line for line in logs), logs
    env = family.make_env()
    tool = env.tool_schemas()[0]["function"]["name"]
    assert len(tok.tokenize(tool)) == 1  # the tools' names are single tokens, as with demos
    assert model.config.vocab_size == len(tok)
    assert (tmp_path / "run" / "warm_start" / "config.json").exists()
    # asking for SFT on an env with nothing to imitate is an error that names the setting
    with pytest.raises(ValueError, match="sft.enabled: env 'noexpert' has no scripted expert"):
        build_tiny(
            load_config(None, SMALL + ["sft.enabled=true", "seed=1"]),
            family,
            family.tasks("train", 8),
            tmp_path / "run2",
            logs.append,
        )


def test_tiny_recipes_resolve_to_the_tiny_model_with_sft():
    from turnrl.run.config import recipe_names

    tiny = [name for name in recipe_names() if name.endswith("-tiny")]
    assert len(tiny) >= 8
    for name in tiny:
        cfg = load_config(None, [f"recipe={name}"])
        assert cfg.model.name == "tiny" and cfg.tiny is not None, name
        assert cfg.sft.enabled and cfg.optim.lr == 3e-4, name
