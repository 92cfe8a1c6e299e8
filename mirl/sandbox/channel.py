"""Host side of the command runner's control socket, shared by the bwrap and local backends.

The runner (`mirl.sandbox.init_script`) takes marshalled requests, with file descriptors passed
alongside (`run`, `kill`, `release`), and answers with one line of words per event (`ready PID`,
`started ID PID`, `exit ID CODE`, `killed ID`). Replies land in an inbox so a caller can wait for
the one it needs while others (a timed-out command's late exit) wait their turn.
"""

from __future__ import annotations

import logging
import marshal
import socket
import time
from collections.abc import Callable

from mirl.sandbox.base import SandboxError

log = logging.getLogger(__name__)

REPLY_FIELDS = {"ready": ("pid",), "started": ("id", "pid"), "exit": ("id", "code"), "killed": ("id",)}


class Channel:
    def __init__(self, sock: socket.socket, who: str):
        self.sock, self.who = sock, who
        self.inbox: list[dict] = []

    def send(self, msg: dict, fds: list[int] = ()) -> None:
        data = marshal.dumps(msg)
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except OSError as e:
            raise SandboxError(f"{self.who} is gone ({e}); start a new session") from e

    def pump(self, timeout: float) -> bool:
        """Read control messages into the inbox; False when the runner is gone."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except (TimeoutError, BlockingIOError):
            return True
        except OSError:
            return False
        if not data:
            return False
        words = data.decode("ascii", "replace").split()
        try:
            self.inbox.append({"op": words[0], **{k: int(v) for k, v in zip(REPLY_FIELDS.get(words[0], ()), words[1:])}})
        except (IndexError, ValueError):
            log.warning("ignoring a malformed message from %s: %r", self.who, data[:80])
        return True

    def take(self, pred: Callable[[dict], bool]) -> dict | None:
        for i, m in enumerate(self.inbox):
            if pred(m):
                return self.inbox.pop(i)
        return None

    def wait_for(self, pred: Callable[[dict], bool], timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        while True:
            m = self.take(pred)
            if m is not None:
                return m
            left = end - time.monotonic()
            if left <= 0 or not self.pump(left):
                return self.take(pred)
