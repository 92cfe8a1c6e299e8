#!/usr/bin/env bash
# On the GPU machine, after `source benchmarks/gpu/unpack.sh .carry`: the rate stage end to end (e2e_bench.py,
# 264 continuations twice in one process, SmolLM2 on the `local` sandbox, 64 in flight) for several versions of
# the kit's `mirl/` side by side, in turns, each run a fresh process on a fresh copy of the docs' bundled run.
#   bash benchmarks/gpu/e2e_compare.sh ROUNDS NAME=TGZ ...    (TGZ: `git archive REV mirl | gzip`, made here;
#                                                             NAME=. is this tree as it is)
#   E2E_ARGS="..."       more e2e_bench.py arguments for every version (e.g. "--rate-set misbehavior_rate.verify=false")
#   E2E_ARGS_NAME="..."  more e2e_bench.py arguments for that version (e.g. E2E_ARGS_bf16="--dtype bfloat16";
#                        the same TGZ may appear under several names; characters of NAME other than letters,
#                        digits and _ read as _; split on spaces, quotes not honoured)
#   E2E_SPY="NAME ..."   those versions' first round also under `py-spy record --gil --threads` (py-spy from
#                        wheels4), written to $OUT/spy_NAME.txt
# $OUT/e2e_NAME_ROUND.json per run, then one line per run and pass: continuations/s, decode steps, rows a step,
# ms a step, prefill seconds and passes, the rate.
set -u
rounds=$1; shift
W=${E2E_WORK:-$HOME/e2e}
OUT=$(mkdir -p "${OUT:-.}" && cd "${OUT:-.}" && pwd)  # absolute: the runs cd into each kit's tree
prep() { rm -rf "$W" && mkdir -p "$W" && tar xJf docs/small_scale/data/runs.tar.xz -C "$W" && rm -rf "$W/runs/small/misbehavior_rate"; }
for spec in "$@"; do
  name=${spec%%=*}; tgz=${spec#*=}
  [ "$tgz" = "." ] && continue
  rm -rf "/tmp/kit-$name" && mkdir -p "/tmp/kit-$name" && cp -a benchmarks params tasks docs "/tmp/kit-$name/" \
    && tar xzf "$tgz" -C "/tmp/kit-$name"
done
for ((r = 1; r <= rounds; r++)); do
  for spec in "$@"; do
    name=${spec%%=*}; tgz=${spec#*=}
    root=$PWD; [ "$tgz" = "." ] || root=/tmp/kit-$name
    spy=()
    if [ "$r" = 1 ] && [[ " ${E2E_SPY:-} " == *" $name "* ]]; then
      spy=("${CARRY_HOME:-$HOME/carry}/site/bin/py-spy" record --gil --threads --nonblocking --format raw -r 50
           -o "$OUT/spy_$name.txt" --)
    fi
    extra_var=E2E_ARGS_${name//[^A-Za-z0-9_]/_}
    read -r -a extra <<< "${E2E_ARGS:-} ${!extra_var:-}"
    prep
    (cd "$root" && timeout -k 10 240 "${spy[@]}" python3 benchmarks/gpu/e2e_bench.py --work "$W" --train-steps 0 \
      --rate-repeats 2 "${extra[@]}" > "$OUT/e2e_${name}_$r.log" 2>&1)
    echo "$name round $r: rc=$?"
    mv "$root/e2e.json" "$OUT/e2e_${name}_$r.json" 2>/dev/null || mv "$OUT/e2e.json" "$OUT/e2e_${name}_$r.json" 2>/dev/null
  done
done
for spec in "$@"; do for ((r = 1; r <= rounds; r++)); do
  f=$OUT/e2e_${spec%%=*}_$r.json; [ -f "$f" ] || continue
  python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("misbehavior_rate", "misbehavior_rate_2"):
    m = d.get(k) or {}
    e = m.get("engine") or {}
    s = max(1, e.get("steps", 1))
    print(sys.argv[1].rsplit("/", 1)[-1], k, m.get("continuations_per_s"), e.get("steps"),
          round(e.get("row_steps", 0) / s, 1), round(1e3 * e.get("decode_s", 0) / s, 2), e.get("prefill_s"),
          e.get("prefill_passes"), m.get("rate"))
PY
done; done
