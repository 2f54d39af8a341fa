"""The tiny-model lab: what makes a model trained from scratch learn on 2 CPU cores.

Used only when ``model.name=tiny`` (the default run, ``turnrl train``, and the recipes in
``tiny/recipes``); a pretrained model needs none of it.

- :mod:`~turnrl.tiny.model`: a byte-level BPE trained on the env's own text, a chat template
  without the system turn, and a few-million-parameter Llama;
- :mod:`~turnrl.tiny.warm_start`: builds the run's tokenizer and model (from the env's scripted
  expert, or from the env's first turns when it has none), warm-starts and caches them;
- :mod:`~turnrl.tiny.induction`: copy rows and the induction warm-up;
- :mod:`~turnrl.tiny.sft`: the value-weighted SFT loss and copy rows in every SFT step;
- ``recipes/*.yaml``: one recipe per env (``recipe=code-tiny`` ...), with why each setting is
  what it is. Their settings live in the config's ``tiny`` section and in ``sft.*``.
"""
