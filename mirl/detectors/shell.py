"""A small shell-aware command classifier: which parts of a command read, test, run or write.

Detectors need to know whether anything between two identical commands could have changed their
outcome, and whether an agent looked at its work before submitting. A full shell parser is not
needed for that: splitting on `&&`, `||`, `;`, `|`, `&` and newlines (outside quotes, heredoc
bodies removed) and looking at each simple command's program name, sub-command and redirections
gets the common agent commands right. Anything unrecognised counts as `exec` (it may change
state), so uncertainty makes detectors flag less, not more.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import string
from dataclasses import dataclass, field
from functools import lru_cache

# --- kinds, strongest first: a segment's kind decides what it can do to the environment

WRITE, EXEC, TEST, READ, NEUTRAL = "write", "exec", "test", "read", "neutral"
CHANGES_STATE = {WRITE, EXEC}

READ_PROGRAMS = frozenset(
    """ls ll dir cat head tail less more grep egrep fgrep rg ag ack file stat wc diff cmp comm pwd which
    whereis type printenv ps pgrep pidof ss netstat lsof df du free uptime tree hexdump xxd od strings
    uniq cut tr nl jq yq readlink realpath basename dirname id whoami groups uname hostname date md5sum
    sha1sum sha256sum sha512sum cksum b2sum base64 column fold rev tac paste join expand unexpand top
    journalctl dmesg getent locale nproc lscpu lsblk history man apropos whatis info zcat zless zgrep
    xzcat bzcat lsattr getfacl namei env look fmt pr numfmt seq tput arch ldd nm objdump readelf
    size iconv python-config pkg-config dig nslookup host ping""".split()
)
NEUTRAL_PROGRAMS = frozenset(
    "cd echo printf true false : sleep export set unset clear exit wait read alias unalias local shift "
    "pushd popd return trap ulimit umask hash shopt declare typeset let eval_noop break continue".split()
)
TEST_PROGRAMS = frozenset(
    "pytest py.test tox nox bats shellcheck flake8 mypy pylint pyright ctest test [ [[".split()
)
WRITE_PROGRAMS = frozenset(
    """rm rmdir mv cp mkdir touch chmod chown chgrp ln truncate dd install patch shred unlink mkfifo mknod
    kill pkill killall systemctl service crontab mount umount useradd userdel usermod groupadd passwd
    chpasswd tar unzip gunzip gzip bzip2 bunzip2 xz unxz zip 7z unrar rsync scp ed ex vi vim nano emacs
    make cmake gcc g++ cc clang clang++ rustc javac go cargo npm yarn pnpm npx conda mamba apt apt-get
    dpkg yum dnf apk brew snap update-alternatives ldconfig sysctl iptables docker podman
    git pip pip3 uv poetry pipx wget""".split()
)
# program -> sub-commands (first non-option argument) that only read
READ_SUBCOMMANDS = {
    "git": {"status", "diff", "log", "show", "ls-files", "rev-parse", "blame", "grep", "describe", "shortlog",
            "ls-tree", "cat-file", "reflog", "whatchanged", "remote", "branch", "tag", "config", "--version", "help"},
    "pip": {"list", "show", "freeze", "check", "--version", "-V", "help", "search", "index", "inspect", "debug"},
    "pip3": {"list", "show", "freeze", "check", "--version", "-V", "help", "search", "index", "inspect"},
    "apt": {"search", "show", "list", "policy", "depends", "rdepends", "--version"},
    "apt-cache": {"search", "show", "policy", "depends", "rdepends", "madison", "pkgnames"},
    "dpkg": {"-l", "-L", "-s", "-S", "--list", "--listfiles", "--status", "--search", "--version", "--print-architecture"},
    "systemctl": {"status", "is-active", "is-enabled", "list-units", "show", "cat"},
    "service": {"--status-all"},
    "docker": {"ps", "images", "inspect", "logs", "version", "info"},
    "podman": {"ps", "images", "inspect", "logs", "version", "info"},
    "npm": {"ls", "list", "view", "--version", "-v", "outdated"},
    "conda": {"list", "info", "--version"},
    "crontab": {"-l"},
    "cargo": {"--version", "tree", "metadata"},
    "go": {"version", "env", "list", "vet", "doc"},
    "make": {"-n", "--dry-run", "-q", "--question"},
    "tar": {"-t", "-tf", "-tvf", "-tzf", "-tzvf", "-tjf", "-tJf", "tf", "tvf", "tzf", "--list"},
    "unzip": {"-l", "-v", "-t", "-Z", "-lv"},
    "gzip": {"-l", "-t", "--list", "--test"},
}
TEST_SUBCOMMANDS = {
    "make": {"test", "check", "tests", "lint"},
    "npm": {"test", "t"},
    "yarn": {"test"},
    "pnpm": {"test"},
    "cargo": {"test", "check", "clippy"},
    "go": {"test"},
    "mvn": {"test", "verify"},
    "gradle": {"test", "check"},
    "ruff": {"check"},
}
INTERPRETERS = frozenset("python python3 python2 node nodejs ruby perl php bash sh zsh dash ksh Rscript deno bun java lua".split())
# programs that run another command given as their arguments
WRAPPERS = frozenset("sudo nohup time timeout nice ionice stdbuf xargs setsid env command exec builtin doas chronic unbuffer watch".split())
SAFE_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"}
REDIRECTS = {">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<<", "<>", "<&"}
SEPARATORS = {"&&", "||", ";", "|", "|&", "&", "\n", ";;", "(", ")", "{", "}", "`"}
SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
SHELL_KEYWORDS = frozenset("if then else elif fi for while until do done case esac in function select ! time".split())

HEREDOC_OP = re.compile(r"(?<![<\w])<<(-?)\s*(?:'([^']+)'|\"([^\"]+)\"|\\?([A-Za-z_][\w.-]*))")


@dataclass(frozen=True)
class Segment:
    """One simple command: its program (wrappers such as sudo/timeout removed) and arguments."""

    program: str
    args: tuple[str, ...]
    kind: str
    writes: tuple[str, ...] = ()  # files written through redirections (`>`, `>>`, tee)
    background: bool = False  # ended with `&`, or started through nohup/setsid
    piped_to: str = ""  # program of the next segment when this one's output goes into a pipe
    words: tuple[str, ...] = ()  # the segment as written, wrappers included


@dataclass(frozen=True)
class Command:
    """A classified command line."""

    text: str
    segments: tuple[Segment, ...] = field(default_factory=tuple)

    @property
    def changes_state(self) -> bool:
        """True when some part may change files, processes or packages (unknown programs included)."""
        return any(s.kind in CHANGES_STATE for s in self.segments)

    @property
    def read_only(self) -> bool:
        return bool(self.segments) and not self.changes_state

    @property
    def checks_after_change(self) -> bool:
        """True when a part after the last file-writing part reads, tests or runs something."""
        last_write = max((i for i, s in enumerate(self.segments) if s.kind == WRITE), default=-1)
        return any(s.kind in {READ, TEST, EXEC} for s in self.segments[last_write + 1 :] if not is_submit_segment(s))

    @property
    def checks(self) -> bool:
        return any(s.kind in {READ, TEST, EXEC} and not is_submit_segment(s) for s in self.segments)

    @property
    def starts_background(self) -> bool:
        return any(s.background for s in self.segments)

    @property
    def programs(self) -> list[str]:
        return [s.program for s in self.segments]


def is_submit_segment(seg: Segment) -> bool:
    return seg.program in {"echo", "printf"} and any(m in a for a in seg.args for m in SUBMIT_MARKERS)


def is_submit(command: str | None) -> bool:
    """The mini-swe-agent convention: the agent submits by echoing the marker line."""
    return bool(command) and any(m in command for m in SUBMIT_MARKERS)


def normalize(command: str | None) -> str:
    """The command with runs of whitespace collapsed, for 'same command' comparisons."""
    return " ".join((command or "").split())


def strip_heredocs(text: str) -> tuple[str, list[str]]:
    """Remove heredoc bodies (they are data, not commands); returns the text and the bodies."""
    lines, out, bodies = text.split("\n"), [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in HEREDOC_OP.finditer(line):
            if in_quotes(line, m.start()):
                continue
            strip_tabs, delim = m.group(1) == "-", m.group(2) or m.group(3) or m.group(4)
            body = []
            while i < len(lines):
                candidate = lines[i].lstrip("\t") if strip_tabs else lines[i]
                i += 1
                if candidate.strip() == delim:
                    break
                body.append(lines[i - 1])
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


def in_quotes(line: str, pos: int) -> bool:
    single = double = False
    for ch in line[:pos]:
        if ch == "'" and not double:
            single = not single
        elif ch == '"' and not single:
            double = not double
    return single or double


def strip_comments(text: str) -> str:
    """Drop `# ...` comments: a `#` starting a word outside quotes, up to the end of the line."""
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"' and i + 1 < len(text):
                out.append(text[i : i + 2])
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def tokenize(text: str) -> list[str]:
    """Shell words and operators; newlines kept as separators, comments dropped."""
    text = strip_comments(text)
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace = " \t\r"
    lex.commenters = ""
    lex.wordchars += "$%+,@^:{}[]!#"
    try:
        raw = list(lex)
    except ValueError:  # unbalanced quotes: fall back to a plain split, still useful
        raw = re.findall(r"&&|\|\||[;|&\n()<>]|[^\s;|&()<>]+", text.replace("\\\n", " "))
    return raw


@lru_cache(maxsize=4096)
def classify(command: str | None) -> Command:
    """Split a command line into classified segments."""
    if not command or not command.strip():
        return Command(text=command or "")
    text, _ = strip_heredocs(command)
    return Command(text=command, segments=tuple(_segments(tokenize(text))))


def _segments(tokens: list[str]) -> list[Segment]:
    groups: list[tuple[list[str], str]] = []
    current: list[str] = []
    for tok in tokens:
        if tok in SEPARATORS or tok in {"$", "$("}:
            if current:
                groups.append((current, tok))
                current = []
            elif tok == "&" and groups:  # `cmd &` after a closing paren
                groups[-1] = (groups[-1][0], "&")
            continue
        current.append(tok)
    if current:
        groups.append((current, ""))
    segments = []
    for idx, (words, sep) in enumerate(groups):
        seg = _segment(words, background=(sep == "&"))
        if seg is None:
            continue
        if sep in {"|", "|&"} and idx + 1 < len(groups):
            nxt = _segment(groups[idx + 1][0], background=False)
            seg = Segment(**{**seg.__dict__, "piped_to": nxt.program if nxt else ""})
        segments.append(seg)
    return segments


def _segment(words: list[str], *, background: bool) -> Segment | None:
    args, writes = [], []
    i = 0
    while i < len(words):
        w = words[i]
        if w in REDIRECTS:
            target = words[i + 1] if i + 1 < len(words) else ""
            if args and args[-1].isdigit() and len(args[-1]) == 1:
                args.pop()  # the fd number of `2>`
            if w in {">", ">>", ">|", "&>", "&>>", ">&"} and target and not target.isdigit() and target not in SAFE_TARGETS and target != "-":
                writes.append(target)
            i += 2
            continue
        args.append(w)
        i += 1
    original = tuple(args)
    if args and args[0] in {"for", "select", "case"}:
        return None  # a loop header or case subject: its words are data, not a command
    while args and (args[0] in SHELL_KEYWORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", args[0])):
        args.pop(0)  # keywords (if/then/do) and VAR=value prefixes
    background = background or bool(args and args[0] in {"nohup", "setsid", "daemon"})
    args = _unwrap(args)
    if not args:
        if writes:  # `> file` alone truncates the file
            return Segment(program="", args=(), kind=WRITE, writes=tuple(writes), words=original)
        return None
    program = posixpath.basename(args[0])
    rest = tuple(args[1:])
    if program == "tee":
        writes += [a for a in rest if not a.startswith("-") and a not in SAFE_TARGETS]
    kind = _kind(program, rest)
    if writes and kind != WRITE:
        kind = WRITE
    return Segment(program=program, args=rest, kind=kind, writes=tuple(writes), background=background, words=original)


def _unwrap(args: list[str]) -> list[str]:
    """Drop wrappers (sudo, timeout 10, nohup, env X=1, xargs -n1) to reach the real program."""
    while args and posixpath.basename(args[0]) in WRAPPERS:
        name, args = posixpath.basename(args[0]), args[1:]
        if name == "timeout":
            while args and args[0].startswith("-"):
                args = args[1:] if "=" in args[0] or args[0] in {"--foreground", "--preserve-status", "-v", "--verbose"} else args[2:]
            args = args[1:]  # the duration
        elif name == "watch":
            while args and args[0].startswith("-"):
                args = args[2:] if args[0] in {"-n", "--interval", "-d"} and len(args) > 1 and not args[1].startswith("-") else args[1:]
        else:
            while args and (args[0].startswith("-") or (name == "env" and "=" in args[0])):
                flag = args[0]
                args = args[1:]
                if name in {"sudo", "xargs", "nice", "ionice", "stdbuf"} and flag in {"-u", "-g", "-n", "-I", "-d", "-P", "-L", "-c", "-s"} and args:
                    args = args[1:]
    return args


def _first_operand(args: tuple[str, ...]) -> str:
    for a in args:
        if not a.startswith("-") or a in {"-l", "-L", "-s", "-S", "-n", "-q", "-t", "-v", "-V"}:
            return a
    return ""


# per program, the short options that take a value: the rest of a cluster after one is that value
IN_PLACE_VALUES = {"sed": "efl", "perl": "eEMmIxCFld0", "yq": string.ascii_letters}  # yq: -i only on its own
CURL_VALUES = "XHuAebcwmxrEKCYyzUQ"  # curl's short options that take a value (-XPOST, -Hx: the rest is it)


def _short_cluster(arg: str, letters: str, takes_value: str = "") -> bool:
    """A cluster of short options (`-sLO`) holding one of `letters`; a letter in `takes_value` ends
    the cluster (the rest is its value: `-XGET`, `-es/i/j/`)."""
    if not arg.startswith("-") or arg.startswith("--") or len(arg) < 3:
        return False
    for c in arg[1:]:
        if c in letters:
            return True
        if c in takes_value or not c.isalpha():
            return False
    return False


def _in_place(arg: str, takes_value: str) -> bool:
    """sed/perl/yq's in-place option, alone or in a cluster: -i, -i.bak, -Ei, -ri, -pi, --in-place."""
    return (arg.startswith("--in-place") or arg.startswith("--inplace") or arg.startswith("-i")
            or _short_cluster(arg, "i", takes_value))


def _kind(program: str, args: tuple[str, ...]) -> str:
    if program in {"echo", "printf"} or program in NEUTRAL_PROGRAMS:
        return NEUTRAL
    if program in IN_PLACE_VALUES and any(_in_place(a, IN_PLACE_VALUES[program]) for a in args):
        return WRITE  # -i, -i.bak, -Ei, -ri, -pi -e, --in-place
    if program in {"awk", "gawk"} and "inplace" in args:
        return WRITE
    if program == "sort" and any(a == "-o" or a.startswith("--output") for a in args):
        return WRITE
    if program == "find":
        return WRITE if any(a in {"-delete", "-exec", "-execdir", "-ok", "-fprint", "-fprintf", "-fls"} for a in args) else READ
    if program == "curl":
        writing = {"-o", "-O", "--output", "--remote-name", "-T", "--upload-file", "-d", "--data", "--data-raw",
                   "--data-binary", "-F", "--form", "--json"}
        if any(a in writing or a.startswith("--data") or _short_cluster(a, "oOTdF", takes_value=CURL_VALUES) for a in args):
            return WRITE  # also in a cluster: -sLO, -fsSLo f
        if any(a in {"-X", "--request"} and nxt.upper() not in {"GET", "HEAD"} for a, nxt in zip(args, args[1:])):
            return WRITE
        if any(a.startswith("-X") and len(a) > 2 and a[2:].upper() not in {"GET", "HEAD"} for a in args):
            return WRITE  # -XPOST
        return READ
    if program == "wget" and ("--spider" in args or ("-O" in args and "-" in args) or "-O-" in args):
        return READ
    if program in {"sed", "awk", "gawk", "sort"}:
        return READ
    first = _first_operand(args)
    if program in TEST_SUBCOMMANDS and first in TEST_SUBCOMMANDS[program]:
        return TEST
    if program in READ_SUBCOMMANDS and first in READ_SUBCOMMANDS[program]:
        if program == "git" and first in {"branch", "tag", "remote", "config"} and len([a for a in args if not a.startswith("-")]) > 1 and "-v" not in args and "--get" not in args and "--list" not in args and "-l" not in args:
            return WRITE  # `git branch new`, `git config user.name x`
        return READ
    if program in {"python", "python3", "python2"}:
        if "--version" in args or "-V" in args:
            return READ
        mods = [b for a, b in zip(args, args[1:]) if a == "-m"]
        if mods and mods[0] in {"pytest", "unittest", "py_compile", "compileall", "doctest", "mypy", "flake8", "pylint", "tabnanny", "ruff"}:
            return TEST
        if mods and mods[0] in {"pip"}:
            rest = args[args.index("-m") + 2 :]
            return READ if _first_operand(rest) in READ_SUBCOMMANDS["pip"] else WRITE
        return EXEC
    if program in {"bash", "sh", "zsh", "dash"}:
        if "-n" in args:
            return TEST
        if "-c" in args:
            idx = args.index("-c")
            inner = classify(args[idx + 1]) if idx + 1 < len(args) else Command("")
            kinds = [s.kind for s in inner.segments]
            for k in (WRITE, EXEC, TEST, READ):
                if k in kinds:
                    return k
            return NEUTRAL
        script = _first_operand(args)
        if "test" in script.lower():
            return TEST
        return EXEC
    if program in {"node", "nodejs"} and ("--check" in args or "-c" in args or "--version" in args):
        return TEST if "--version" not in args else READ
    if program in TEST_PROGRAMS:
        return TEST
    if program in READ_PROGRAMS:
        return READ
    if program in WRITE_PROGRAMS:
        return WRITE
    if re.fullmatch(r"(run[-_])?tests?([-_].*)?\.(sh|py)|run[-_]tests?", program):
        return TEST
    return EXEC


def file_operands(seg: Segment) -> list[str]:
    """Arguments that look like file paths (not options, not numbers after -n/-c)."""
    out, skip = [], False
    for a in seg.args:
        if skip:
            skip = False
            continue
        if a in {"-n", "-c", "--lines", "--bytes", "-s"}:
            skip = True
            continue
        if a.startswith("-") or a.startswith("+") or re.fullmatch(r"\d+", a):
            continue
        out.append(a)
    return out


def same_path(a: str, b: str) -> bool:
    """True when two spellings name the same file as far as the text can tell (./x == x, /app/x ~ x)."""
    a, b = posixpath.normpath(a.strip("'\"")), posixpath.normpath(b.strip("'\""))
    if a == b:
        return True
    if a.startswith("/") != b.startswith("/"):
        absolute, relative = (a, b) if a.startswith("/") else (b, a)
        return not relative.startswith("..") and absolute.endswith("/" + relative)
    return False
