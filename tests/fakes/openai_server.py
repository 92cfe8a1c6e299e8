"""A scripted OpenAI-compatible chat server on 127.0.0.1, for tests that cross a process boundary.

Papermill runs notebooks in a separate kernel, so scripted models registered in the test process
are invisible there; this server lets the notebook's real litellm HTTP path receive injected
replies instead. Replies are chosen per request by a function of the request body: text, text with
the token usage to report (`Usage`, cached input tokens included), or an HTTP error (`Fail`).

    python -m tests.fakes.openai_server --port-file PATH   # serves until killed
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakes.annotator import SYSTEM_MARK, annotator_reply

Reply = Callable[[dict], "str | Fail | tuple[str, Usage]"]


def role_reply(body: dict) -> str:
    """Answer as the role the system prompt asks for: localizer JSON, teacher or policy step."""
    system = next((m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system"), "")
    last = body.get("messages", [{}])[-1].get("content", "")
    if SYSTEM_MARK in system:
        return annotator_reply(last)
    if "review the work of an agent" in system:
        verdict = "bad" if "rm -rf" in last.split("Proposed next step")[-1] else "good"
        return ('Short check.\n{"command_seen": "runs a shell command", "reason": "judged by the test server", '
                f'"verdict": "{verdict}"}}')
    if "expert engineer continuing" in system:
        return "THOUGHT: look before acting.\n```bash\nls -la\n```"
    steps = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    if steps == 0:
        return "THOUGHT: start over.\n```bash\nrm -rf ./*\n```"
    if steps == 1:
        return "THOUGHT: check.\n```bash\npwd\n```"
    return "THOUGHT: done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


@dataclass
class Fail:
    """A reply that is an HTTP error: `status` with an OpenAI-style error body."""

    status: int
    message: str = "injected failure"


@dataclass
class Usage:
    """Token counts to report instead of the word counts (`cached` goes to prompt_tokens_details)."""

    prompt: int
    completion: int
    cached: int | None = None


def scripted(replies: list[str | Fail | tuple[str, Usage]]) -> Reply:
    """A reply function answering requests in order from a list (the last entry repeats)."""
    lock, count = threading.Lock(), [0]

    def reply(body: dict):
        with lock:
            i = min(count[0], len(replies) - 1)
            count[0] += 1
        return replies[i]

    return reply


class _Handler(BaseHTTPRequestHandler):
    reply: Reply = staticmethod(role_reply)
    seen_keys: list[str] = []
    requests: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.seen_keys.append(self.headers.get("authorization", ""))
        self.requests.append(body)
        n = int(body.get("n") or 1)
        answer = self.reply(body)
        if isinstance(answer, Fail):
            kind = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}.get(answer.status)
            self._send(answer.status, {"error": {"message": answer.message, "type": "test_error", "code": kind}})
            return
        text, usage = answer if isinstance(answer, tuple) else (answer, None)
        words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        counts = {"prompt_tokens": words, "completion_tokens": len(text.split()) * n}
        if usage is not None:
            counts = {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion}
            if usage.cached is not None:
                counts["prompt_tokens_details"] = {"cached_tokens": usage.cached}
        counts["total_tokens"] = counts["prompt_tokens"] + counts["completion_tokens"]
        self._send(200, {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        for i in range(n)],
            "usage": counts,
        })


def serve(port: int = 0, reply: Reply = role_reply) -> tuple[ThreadingHTTPServer, str]:
    """Start in a daemon thread; returns (server, base_url ending in /v1).

    `server.RequestHandlerClass.requests` holds every request body received, in order."""
    handler = type("Handler", (_Handler,), {"reply": staticmethod(reply), "seen_keys": [], "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def refused_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    srv, url = serve()
    Path(args.port_file).write_text(url)
    while True:
        time.sleep(3600)
