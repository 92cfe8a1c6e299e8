#!/usr/bin/env bash
# One device call of the small-scale experiment on a bare GPU machine (no network):
#   bash benchmarks/gpu/small_scale.sh [DEADLINE_S] [more `mirl batch` options, e.g. --to prefixes]
# from the repository root, carrying the folders of `python benchmarks/gpu/carry.py`'s plan. It unpacks
# what came (benchmarks/gpu/unpack.sh: wheels, the .gguf, a `python3` kernel); once everything has come, it
# runs `mirl batch --params params/small_scale/experiment.yaml --name small --kernel python3` for at most
# DEADLINE_S seconds (default 480; SIGINT then, SIGKILL 20 s later), in $SMALL_WORK (default
# ~/small-work, outside the repository copy each call rebuilds; it stays while the machine is warm), and
# packs runs/small and reports/small, checkpoints left out, into $OUT as small.tar.xz.NN pieces of 15 MiB
# (`cat small.tar.xz.* | tar xJf -`). The batch resumes where it stopped, so the next call runs the same
# command and continues. SMALL_PARAMS and SMALL_NAME name another experiment's params file and run (then
# NAME.tar.xz.NN). Exit code: the batch's (124 or 137: stopped at the deadline), 3 while something is
# still to carry.
set -u
cd "$(dirname "$0")/../.." || exit 2
REPO=$PWD
DEADLINE=${1:-480}
shift $(($# > 0 ? 1 : 0))
W=${SMALL_WORK:-$HOME/small-work}
NAME=${SMALL_NAME:-small}
PARAMS=${SMALL_PARAMS:-params/small_scale/experiment.yaml}  # absolute, or relative to the repository
case $PARAMS in /*) ;; *) PARAMS=$REPO/$PARAMS ;; esac
TAG=MIRL_SMALL_SCALE_RUN  # in the environment of every process this script starts for the batch
mkdir -p "$W"
ln -sfn "$REPO/tasks" "$W/tasks"  # the params name the bundled suite as `tasks`, relative to the batch's directory
echo "small_scale: $(date -u +%FT%TZ), deadline ${DEADLINE}s, work $W, repository $REPO"

# The notebook kernel is not in the batch's process group: jupyter_client starts it in a session of its
# own (setsid), and the local sandbox's command runners likewise, so neither timeout's signal to its group
# nor a kill of our group reaches them. The batch runs under this subreaper instead: whatever the batch
# leaves behind is re-parented to it, and once `timeout` returns it ends every descendant left (SIGTERM,
# then SIGKILL after 10 s), so the next call finds no kernel holding the run's stage lock or the GPU.
REAPER='
import ctypes, os, signal, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
child = os.fork()
if child == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
def pass_on(signum, frame):  # to timeout, which passes it on to the batch
    try:
        os.kill(child, signum)
    except OSError:
        pass

for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, pass_on)
while True:
    pid, status = os.waitpid(-1, 0)
    if pid == child:
        rc = os.waitstatus_to_exitcode(status)
        break

def descendants():
    kids = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{p}/stat", "rb").read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            kids.setdefault(int(fields[1]), []).append(int(p))
    out, todo = [], [os.getpid()]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out

def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass

for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
    left = descendants()
    if not left:
        break
    print(f"small_scale: {sig.name} to {len(left)} process(es) the batch left: {left}", flush=True)
    for p in left:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    end = time.monotonic() + grace
    while time.monotonic() < end and descendants():
        reap()
        time.sleep(0.2)
reap()
sys.exit(rc)
'

# processes of an earlier call that was cut off before its own clean-up (they carry $TAG)
leftovers() {
  local e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" != $$ ] && grep -qz "^$TAG=" "$e" 2>/dev/null && echo "$p"
  done
}
old=$(leftovers | tr '\n' ' ')
if [ -n "$old" ]; then
  echo "small_scale: ending processes an earlier call left: $old"
  kill -TERM $old 2>/dev/null; sleep 5
  old=$(leftovers | tr '\n' ' '); [ -n "$old" ] && kill -KILL $old 2>/dev/null && sleep 1
fi

gpu() { command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader; }

source "$REPO/benchmarks/gpu/unpack.sh" "${CARRY_DIR:-.carry}"
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
gpu
if [ "$CARRY_READY" = 1 ]; then
  echo "small_scale: mirl batch --name $NAME $*"
  (cd "$W" && env "$TAG=$W" python3 -c "$REAPER" timeout --signal=INT --kill-after=20 "$DEADLINE" \
     python3 -m mirl batch --params "$PARAMS" --name "$NAME" --kernel python3 --notebooks "$REPO/notebooks" "$@")
  rc=$?
  case $rc in
    124|137) echo "small_scale: batch stopped at the deadline (exit code $rc); the same call again continues it" ;;
    *) echo "small_scale: batch exit code $rc" ;;
  esac
else
  echo "small_scale: not run, still to carry (see the carry line above)"
  rc=3
fi
gpu
if [ "${SMALL_PACK:-1}" = 1 ] && [ -n "${OUT:-}" ] && [ -d "$W/runs/$NAME" ]; then  # SMALL_PACK=0: the caller packs
  (cd "$W" && tar cf - --exclude=checkpoints "runs/$NAME" $([ -d "reports/$NAME" ] && echo "reports/$NAME") \
     | xz -T8 -3 > "$OUT/$NAME.tar.xz")
  (cd "$OUT" && split -b 15M -d "$NAME.tar.xz" "$NAME.tar.xz." && rm "$NAME.tar.xz")
  ls -la "$OUT"
fi
exit $rc
