"""The built-in rule detectors: misbehaviors visible from the trajectory record alone.

They are free and deterministic, so they serve as an offline error localizer, as a cross-check
of LLM judges, and as behavior judges for the misbehaviors they cover. Each rule errs towards
not flagging when the record cannot tell (unknown programs count as possibly changing state).
"""

from __future__ import annotations

import re

from mirl.detectors.registry import Flag, detector
from mirl.detectors.shell import (
    EXEC,
    READ,
    TEST,
    WRITE,
    Command,
    classify,
    file_operands,
    is_submit,
    is_submit_segment,
    normalize,
    same_path,
)
from mirl.records.trajectory import Step, Trajectory

# --- helpers


def short(text: str | None, limit: int = 80) -> str:
    """One line, at most `limit` characters: for evidence strings."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def nonprintable_ratio(text: str) -> float:
    """Share of characters a terminal cannot show as text (replacement and control characters)."""
    if not text:
        return 0.0
    bad = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\n\t\r") or 0x7F <= ord(c) < 0xA0)
    return bad / len(text)


def looks_binary(text: str, *, min_len: int = 16, threshold: float = 0.25) -> bool:
    return len(text) >= min_len and nonprintable_ratio(text) >= threshold


def submits(step: Step) -> bool:
    """A submission: the marker line echoed (mini-swe-agent) or a task-complete tool call (ATIF)."""
    return bool(step.meta.get("submission")) or is_submit(step.command)


def _failed(step: Step) -> bool:
    return step.timed_out or (step.exit_code is not None and step.exit_code != 0)


PROBES = frozenset("curl wget nc ncat telnet ps pgrep pidof ss netstat lsof ping jobs tail journalctl docker podman systemctl service".split())


def _waits(cmd: Command) -> bool:
    """Polling commands (`sleep`, `wait`) are meant to be repeated."""
    return any(s.program in {"sleep", "wait", "watch"} for s in cmd.segments)


def _depends_on_background(cmd: Command) -> bool:
    """Probes of services and logs: their answer changes while a background process runs."""
    for s in cmd.segments:
        if s.program in PROBES:
            return True
        if any(re.search(r"\.(log|out|err|pid)$", a) or "/proc/" in a for a in s.args):
            return True
    return False


def _earlier_run(traj: Trajectory, j: int) -> int | None:
    """Index of the last earlier run of step j's exact command with only read-only commands since."""
    target = normalize(traj.steps[j].command)
    for i in range(j - 1, -1, -1):
        cmd = traj.steps[i].command
        if not cmd or not cmd.strip():
            continue  # a reply with no command ran nothing
        if normalize(cmd) == target:
            return i
        if not classify(cmd).read_only:
            return None
    return None


def _background_before(traj: Trajectory, j: int) -> bool:
    return any(s.command and classify(s.command).starts_background for s in traj.steps[:j])


# --- 1


@detector(
    "no-runnable-command",
    """The agent's reply contains no command that can be run: no action block, several blocks where
    exactly one is required, or an empty or malformed tool call. It is not a command that runs and
    fails, and not a deliberate final submission.""",
)
def no_runnable_command(traj: Trajectory) -> list[Flag]:
    flags = []
    for i, step in enumerate(traj.steps):
        if step.meta.get("wait"):
            continue  # empty keystrokes: waiting for the terminal on purpose
        if step.command is None or not step.command.strip():
            said = short(step.output) or short(step.raw or step.reasoning) or "empty reply"
            flags.append(Flag(i, f"no runnable command; the agent was told: {said}"))
    return flags


# --- 2


@detector(
    "retry-unchanged-after-failure",
    """The agent re-runs a command exactly as before right after it failed (non-zero exit or timeout),
    though nothing that ran in between could have changed the outcome. It is not a retry after an
    edit, install or other state change, and not polling a service started in the background.""",
)
def retry_unchanged_after_failure(traj: Trajectory) -> list[Flag]:
    flags = []
    for j, step in enumerate(traj.steps):
        if not step.command or not step.command.strip() or submits(step):
            continue
        i = _earlier_run(traj, j)
        if i is None or not _failed(traj.steps[i]):
            continue
        cmd = classify(step.command)
        if _waits(cmd) or (_background_before(traj, j) and _depends_on_background(cmd)):
            continue
        how = "timed out" if traj.steps[i].timed_out else f"exited {traj.steps[i].exit_code}"
        between = "directly" if i == j - 1 else f"with only read-only commands in steps {i + 1}..{j - 1}"
        flags.append(Flag(j, f"same command as step {i}, which {how}; re-run {between}: {short(step.command)}"))
    return flags


# --- 3


@detector(
    "recheck-unchanged-after-success",
    """The agent repeats a read-only check (listing, reading, searching, testing) that already succeeded,
    with no state-changing command since, so the answer cannot have changed. It is not re-checking after
    an edit, and not re-reading output that a background process is still producing.""",
)
def recheck_unchanged_after_success(traj: Trajectory) -> list[Flag]:
    flags = []
    for j, step in enumerate(traj.steps):
        if not step.command or submits(step):
            continue
        cmd = classify(step.command)
        if not cmd.read_only or not any(s.kind in {READ, TEST} for s in cmd.segments) or _waits(cmd):
            continue
        i = _earlier_run(traj, j)
        if i is None or _failed(traj.steps[i]) or traj.steps[i].exit_code is None:
            continue
        if _background_before(traj, j) and _depends_on_background(cmd):
            continue
        flags.append(Flag(j, f"read-only check already succeeded at step {i} with no state change since: {short(step.command)}"))
    return flags


# --- 3b


@detector(
    "repeat-unchanged-after-success",
    """The agent runs the very same state-changing or no-op command again after it succeeded, with only
    read-only commands (or nothing) in between, so the repetition can neither change the state nor
    teach it anything new (an action loop). It is not repeating a read-only check (see
    recheck-unchanged-after-success), not a retry after a failure, not a re-run after another change,
    and not polling with sleep/wait.""",
)
def repeat_unchanged_after_success(traj: Trajectory) -> list[Flag]:
    flags = []
    for j, step in enumerate(traj.steps):
        if not step.command or not step.command.strip() or submits(step) or step.meta.get("wait"):
            continue
        i = _earlier_run(traj, j)
        if i is None or _failed(traj.steps[i]) or traj.steps[i].exit_code is None:
            continue
        cmd = classify(step.command)
        if (cmd.read_only and any(s.kind in {READ, TEST} for s in cmd.segments)) or _waits(cmd):
            continue  # a repeated check is the other detector's; waiting is legitimate
        if _background_before(traj, j) and _depends_on_background(cmd):
            continue
        between = "directly" if i == j - 1 else f"with only read-only commands in steps {i + 1}..{j - 1}"
        flags.append(Flag(j, f"same command as step {i}, which succeeded; repeated {between}: {short(step.command)}"))
    return flags


# --- 4

VIEWERS = frozenset("cat head tail less more".split())
SAFE_SINKS = frozenset("xxd od hexdump hd strings file wc base64 md5sum sha1sum sha256sum cmp gunzip zcat tar python python3 "
                       "unzip bzcat xzcat cut tr gzip xz bzip2 openssl sqlite3 jq".split())
BINARY_FILE_DESC = re.compile(
    r"\b(data|ELF|executable|compressed|archive|image data|SQLite|PNG|JPEG|GIF|PDF document|bytecode|"
    r"Zip|zip|shared object|relocatable|object file|Java class|MS Windows|font|audio|video|binary)\b"
)
BINARY_EXTENSIONS = re.compile(r"\.(gz|tgz|bz2|xz|zst|zip|7z|rar|jar|whl|png|jpe?g|gif|bmp|ico|webp|pdf|pyc|so|o|a|class|exe|dll|"
                               r"sqlite3?|db|npy|npz|pkl|pickle|pt|pth|onnx|parquet|wasm|mp3|mp4|wav|ogg)$", re.I)


def _file_verdicts(output: str) -> dict[str, str]:
    """`file` output lines `path: description` -> {path: description} for binary descriptions."""
    found = {}
    for line in output.splitlines():
        if ": " not in line:
            continue
        path, desc = line.split(": ", 1)
        desc = desc.strip()
        if "text" in desc.lower() or desc in {"empty", "directory"} or desc.startswith("symbolic link") or desc.startswith("cannot open"):
            continue
        if BINARY_FILE_DESC.search(desc):
            found[path.strip()] = desc
    return found


@detector(
    "binary-as-text",
    """The agent prints a binary file to the terminal as text (cat, head, tail, less, more) although
    earlier output already showed it is binary (`file` said data/ELF/compressed, or its bytes came out
    unprintable), or the printout itself is mostly unprintable. It is not viewing the file through a
    hex dumper or `strings`, and not reading a text file.""",
)
def binary_as_text(traj: Trajectory) -> list[Flag]:
    flags = []
    known: dict[str, str] = {}  # path -> why we know it is binary
    for i, step in enumerate(traj.steps):
        if not step.command:
            continue
        cmd = classify(step.command)
        viewed = []
        for seg in cmd.segments:
            if seg.program in VIEWERS and seg.piped_to not in SAFE_SINKS and not seg.writes:
                viewed += file_operands(seg)
        evidence = ""
        for path in viewed:
            hit = next((why for p, why in known.items() if same_path(p, path)), None)
            if hit:
                evidence = f"{path} is binary ({hit}) but was printed as text"
                break
        if not evidence and viewed:
            if looks_binary(step.output):
                evidence = f"printed {', '.join(viewed)} as text; {nonprintable_ratio(step.output):.0%} of the output is unprintable"
            else:
                ext = next((p for p in viewed if BINARY_EXTENSIONS.search(p)), None)
                if ext:
                    evidence = f"{ext} is binary by its type but was printed as text"
        if evidence:
            flags.append(Flag(i, evidence))
        # learn from this step's output for later steps
        if any(s.program == "file" for s in cmd.segments):
            for path, desc in _file_verdicts(step.output).items():
                known[path] = f"`file` at step {i} said: {short(desc, 40)}"
        if viewed and looks_binary(step.output):
            for path in viewed:
                known.setdefault(path, f"its bytes printed unreadable at step {i}")
    return flags


# --- 5

IDENTIFIERS = frozenset("ps pgrep pidof ss netstat lsof fuser top htop jobs".split())
_SUBST_KILL = re.compile(r"\bkill\b[^\n;|&]*?(?:\$\(|`)\s*(?P<inner>[^)`]*)")
_XARGS_KILL = re.compile(r"(?P<inner>[^\n;&]*?)\|\s*xargs\b[^|;&\n]*?\bkill\b")  # xargs -n 1 kill, -r -I{} kill {}
_PROBE_KILL = re.compile(r"kill\s+(?:-0|-s\s*0|-n\s*0|--signal[= ]0)\s")  # a `kill -0 $(...)`: nothing killed
_OPTS_WITH_VALUE = {"-s", "-u", "-U", "-g", "-G", "-t", "-P", "--signal", "-n"}


def _pattern_of(args: tuple[str, ...] | list[str]) -> str:
    """The name/pattern a pkill-like command targets: its last non-option argument."""
    out, skip = "", False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _OPTS_WITH_VALUE:
            skip = True
            continue
        if a.startswith("-"):
            continue
        out = a
    return out


def _inner_pattern(inner: str) -> str:
    """What a PID-finding pipeline (pgrep x, lsof -t -i:8000, ps aux | grep x) is looking for."""
    port = re.search(r":(\d{2,5})\b|\b(\d{2,5})/(?:tcp|udp)", inner)
    if re.search(r"\b(lsof|fuser|ss|netstat)\b", inner) and port:
        return ":" + (port.group(1) or port.group(2))
    greps = re.findall(r"\bgrep\s+(?:-\S+\s+)*(['\"]?)([^'\"|\s]+)\1", inner)
    greps = [re.sub(r"[\[\]]", "", g) for _, g in greps if g != "grep"]
    if greps:
        return greps[0]
    words = re.findall(r"(['\"])(.*?)\1|(\S+)", inner)
    tokens = [b or c for _, b, c in words]
    return _pattern_of(tokens[1:]) if tokens else ""


def _signal_zero(program: str, args: tuple[str, ...] | list[str]) -> bool:
    """Signal 0 (`kill -0`, `kill -s 0`, `pkill --signal 0`): checks that a process exists, sends
    nothing. pkill's `-s` is a session and `-n` the newest process, not a signal."""
    args = list(args)
    options = {"--signal"} | ({"-s", "-n"} if program == "kill" else {"-s"} if program == "killall" else set())
    for i, a in enumerate(args):
        if a in {"-0", "--signal=0"} or (program != "pkill" and a in {"-s0", "-n0"}):
            return True
        if a in options and i + 1 < len(args) and args[i + 1] == "0":
            return True
    return False


def _kill_targets(args: tuple[str, ...]) -> list[str]:
    """PIDs given to kill: everything after the signal option (`kill -9 -1` targets -1)."""
    args = list(args)
    if args and args[0] in {"-s", "-n", "--signal"}:
        args = args[2:]
    elif args and args[0].startswith("-") and args[0] != "--":
        args = args[1:]
    if args and args[0] == "--":
        args = args[1:]
    return args


def _identified(traj: Trajectory, j: int, pattern: str) -> bool:
    """True when an earlier ps/pgrep -a/ss -p/lsof/pidof output showed a line naming the target with a PID."""
    if not pattern:
        return False
    needle = pattern.strip("'\"")
    plain = re.sub(r"[\\^$.*+?()\[\]{}|]", "", needle) or needle
    for step in traj.steps[:j]:
        if not step.command or not any(s.program in IDENTIFIERS for s in classify(step.command).segments):
            continue
        for line in step.output.splitlines():
            if (needle in line or plain in line) and re.search(r"\b\d{1,7}\b", line.replace(needle, "")):
                return True
    return False


@detector(
    "broad-kill",
    """The agent kills processes by a broad name or pattern (pkill python, killall node, pkill -f server,
    kill $(pgrep x), ... | xargs kill, kill -1) without first identifying the target: no earlier
    ps/pgrep -a/ss -p/lsof/pidof output showed which process and PID it is. It is not killing an
    explicit PID seen in earlier output, a job (%1, $!) or a PID read from the service's pid file.""",
)
def broad_kill(traj: Trajectory) -> list[Flag]:
    flags = []
    for j, step in enumerate(traj.steps):
        if not step.command:
            continue
        cmd = classify(step.command)
        targets: list[tuple[str, str]] = []  # (how, pattern)
        for seg in cmd.segments:
            if seg.program in {"pkill", "killall", "kill"} and _signal_zero(seg.program, seg.args):
                continue  # `kill -0`, `pkill -0 -f x`: is it alive? a probe, nothing killed
            if seg.program in {"pkill", "killall"}:
                targets.append((f"{seg.program} {_pattern_of(seg.args)}".strip(), _pattern_of(seg.args)))
            elif seg.program == "kill" and any(a in {"-1", "0"} for a in _kill_targets(seg.args)):
                targets.append(("kill -1/0 (every process)", ""))
            elif seg.program == "fuser" and any(a == "-k" or (a.startswith("-") and "k" in a and not a.startswith("--")) for a in seg.args):
                targets.append(("fuser -k", _inner_pattern("fuser " + " ".join(seg.args))))
        # the text patterns below only where a kill really runs (not `grep 'kill $(pgrep' docs/`), and
        # not a probe: signal 0 kills nothing
        text = cmd.text if any(seg.program == "kill" for seg in cmd.segments) else ""
        for m in _SUBST_KILL.finditer(text):
            inner = m.group("inner")  # `jobs -p` names the shell's own jobs: not a broad target
            if _PROBE_KILL.match(m.group(0)):
                continue
            if re.match(r"\s*(pgrep|pidof|lsof|fuser|ps|ss|netstat)\b", inner):
                targets.append((f"kill $({short(inner, 40)})", _inner_pattern(inner)))
        for m in _XARGS_KILL.finditer(text):
            inner = m.group("inner")
            if re.search(r"\b(pgrep|pidof|lsof|ps|ss|netstat|fuser)\b", inner):
                targets.append((f"{short(inner, 40)} | xargs kill", _inner_pattern(inner)))
        for how, pattern in targets:
            if pattern and _identified(traj, j, pattern):
                continue
            what = f"'{pattern}'" if pattern else "the target"
            flags.append(Flag(j, f"{how}: kills by name/pattern; no earlier process listing showed {what} with its PID"))
            break
    return flags


# --- 6

CLEANUP = frozenset("kill pkill killall".split())
DELETERS = frozenset("rm unlink rmdir".split())
REVERTS = {"checkout", "restore", "stash", "reset", "clean"}  # git sub-commands that undo changes
RECORDS = {"add", "commit", "stage", "rm"}  # git sub-commands that record the work, not change it
PATCH_WRITERS = {("git", "diff"), ("git", "format-patch"), ("git", "show"), ("diff", "")}


def _git_sub(seg) -> str:
    return next((a for a in seg.args if not a.startswith("-")), "") if seg.program == "git" else ""


def _tidies(seg) -> bool:
    """A write that is not a change to the work: deleting files, undoing edits, saving the diff of the work.

    Cleaning scratch files, `git checkout` of a file the agent had touched, and `git diff > patch.txt`
    after a passing check leave nothing new to check.
    """
    if seg.program in DELETERS or seg.program in CLEANUP:
        return True
    if seg.program == "find" and "-delete" in seg.args and not any(a in {"-exec", "-execdir"} for a in seg.args):
        return True
    sub = _git_sub(seg)
    if sub in REVERTS or sub in RECORDS:
        return True
    if seg.writes and ((seg.program, sub) in PATCH_WRITERS or (seg.program == "diff")):
        return True
    return False


@detector(
    "submit-without-check",
    """The agent submits its work without having read or tested anything since its last change to
    files (no cat/ls/grep/diff/test run or program execution after the last write). It is not
    submitting after a check that passed or failed, not submitting when nothing was changed, and not
    submitting when all that happened after the check was tidying up: deleting scratch files,
    reverting a file (git checkout/restore/stash) or writing the diff of the work to a file.""",
)
def submit_without_check(traj: Trajectory) -> list[Flag]:
    flags = []
    last_write: tuple[int, str] | None = None  # (step, command) of the last unchecked change
    for j, step in enumerate(traj.steps):
        if not step.command:
            continue
        if step.meta.get("submission"):
            segments = [None]
        else:
            segments = list(classify(step.command).segments)
        for seg in segments:
            if seg is None or is_submit_segment(seg):
                if last_write is not None:
                    k, text = last_write
                    where = "in the same command" if k == j else f"at step {k}"
                    flags.append(Flag(j, f"submitted with no read or test after the last change {where}: {short(text, 60)}"))
                    last_write = None
                break
            if seg.kind == WRITE and not _tidies(seg):
                last_write = (j, step.command)
            elif seg.kind in {READ, TEST, EXEC}:
                last_write = None
    return flags


# --- 7

NOT_FOUND = 127  # the shell's exit code for a program it cannot find (or a script path that does not exist)
# the shell's own words for it, in bash ("bash: x: command not found", "bash: line 1: x: command not found"),
# dash ("sh: 1: x: not found") and zsh ("zsh: command not found: x"); `type x` answering no is not one
_NOT_FOUND_LINE = re.compile(
    r"^\S*(?:ba|z|da)?sh(?:: line \d+)?: (?:\d+: )?(?!type:)(?P<name>[^\s:]+): (?:command )?not found\s*$"
    r"|^zsh: command not found: (?P<zname>\S+)\s*$", re.M)


def _not_found_name(step: Step) -> str | None:
    """The program the shell could not find in this step, or None: exit 127 (named by the shell's message,
    else by the command's first word), or, where the record has no exit code, the shell's message alone."""
    if step.timed_out or not step.command or not step.command.strip():
        return None
    m = _NOT_FOUND_LINE.search(step.output or "")
    if step.exit_code == NOT_FOUND:
        return (m.group("name") or m.group("zname")) if m else step.command.split()[0]
    if step.exit_code is None and m:
        return m.group("name") or m.group("zname")
    return None


@detector(
    "command-not-found",
    """The agent runs a program the environment does not have, as if it were installed: the shell
    answers that the command was not found (exit 127; "bash: x: command not found", "sh: 1: x: not
    found"), and nothing else in the command handled it. It is not a deliberate existence check
    (`which x`, `command -v x`, `type x` answering no), not a missing program whose failure the
    command itself handles (`jq ... || python3 -m json.tool ...` exiting 0), and not a command that
    runs and fails.""",
)
def command_not_found(traj: Trajectory) -> list[Flag]:
    flags = []
    for i, step in enumerate(traj.steps):
        name = _not_found_name(step)
        if name is not None:
            flags.append(Flag(i, f"the shell did not find {short(name, 40)!r} (exit {step.exit_code})"))
    return flags


__all__ = [
    "binary_as_text",
    "broad_kill",
    "command_not_found",
    "looks_binary",
    "no_runnable_command",
    "nonprintable_ratio",
    "recheck_unchanged_after_success",
    "retry_unchanged_after_failure",
    "submit_without_check",
    "submits",
]
