"""An OpenAI-compatible chat server on 127.0.0.1 that fails on purpose, for the reliability tests.

Every request gets a number (0, 1, ...) in arrival order and a unique response id. A plan maps a
request's number to a fault; any other request is answered by `reply(body)` (by default the
role-aware replies of `tests.fakes.openai_server`). Faults:

    ("status", 429 | 500 | 503)   an HTTP error with an OpenAI-style body
    ("echo", status)              the same, quoting the request's Authorization header in the message
    ("hang", seconds)             answer nothing for that long, then close
    ("cut",)                      send half of a valid response body, then close the connection
    ("text", str)                 a 200 whose content is the given text (non-JSON, truncated JSON)
    ("edit", fn)                  a 200 whose content is fn(the reply that was due)

Each 200 is logged (to `served`, and as one JSON line to `log` when given: id, tokens), so a test
can count what it was billed for independently of the ledger.

    python -m tests.reliability.fault_server --port-file PATH --log PATH [--delay S]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.fakes.openai_server import role_reply

Plan = Callable[[int, dict], "tuple | None"]


class FaultServer:
    def __init__(self, plan: Plan | dict[int, tuple] | None = None, reply: Callable[[dict], str] = role_reply,
                 log: Path | None = None, delay_s: float = 0.0):
        self.plan = plan if callable(plan) else (lambda i, body, table=dict(plan or {}): table.get(i))
        self.reply, self.log, self.delay_s = reply, log, delay_s
        self.lock = threading.Lock()
        self.count = 0
        self.served: list[dict[str, Any]] = []  # one entry per 200 sent: id, prompt and completion tokens
        self.faults: list[tuple[int, str]] = []  # (request number, fault name) of every fault injected
        self.keys: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> FaultServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- one request ------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("content-length", 0))) or b"{}")
        with self.lock:
            i = self.count
            self.count += 1
            self.keys.append(h.headers.get("authorization", ""))
        if self.delay_s:
            time.sleep(self.delay_s)
        fault = self.plan(i, body)
        if fault is not None:
            with self.lock:
                self.faults.append((i, fault[0]))
        if fault and fault[0] in ("status", "echo"):
            code = {429: "rate_limit_exceeded"}.get(fault[1], "server_error")
            said = f"injected {fault[1]}"
            if fault[0] == "echo":  # as some providers do: the key sent, quoted back in the error
                said += f" for the key {h.headers.get('authorization', '')!r}"
            self._send(h, fault[1], {"error": {"message": said, "type": "test", "code": code}})
            return
        if fault and fault[0] == "hang":
            time.sleep(fault[1])
            h.close_connection = True
            return
        text = self.reply(body)
        if fault and fault[0] == "text":
            text = fault[1]
        elif fault and fault[0] == "edit":
            text = fault[1](text)
        n = int(body.get("n") or 1)
        rid = f"chatcmpl-{i}"
        usage = {"prompt_tokens": sum(len(str(m.get("content", "")).split()) for m in body.get("messages", [])),
                 "completion_tokens": len(text.split()) * n}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        payload = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
                   "choices": [{"index": k, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                               for k in range(n)], "usage": usage}
        if fault and fault[0] == "cut":
            data = json.dumps(payload).encode()
            h.send_response(200)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        entry = {"id": rid, "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]}
        with self.lock:
            self.served.append(entry)
            if self.log is not None:
                with open(self.log, "a") as f:
                    f.write(json.dumps(entry) + "\n")
        self._send(h, 200, payload)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def served_log(path: Path) -> list[dict[str, Any]]:
    """The 200s a server process logged (whole lines only)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    srv = FaultServer(log=Path(args.log), delay_s=args.delay).start()
    Path(args.port_file + ".tmp").write_text(srv.url)
    Path(args.port_file + ".tmp").rename(args.port_file)
    while True:
        time.sleep(3600)
