"""A scripted OpenAI-compatible chat server on 127.0.0.1, for tests that cross a process boundary.

Papermill runs notebooks in a separate kernel, so scripted models registered in the test process
are invisible there; this server lets the notebook's real litellm HTTP path receive injected
replies instead. Replies are chosen per request by a function of the request body.

    python -m tests.fakes.openai_server --port-file PATH   # serves until killed
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakes.annotator import SYSTEM_MARK, annotator_reply

Reply = Callable[[dict], str]


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


class _Handler(BaseHTTPRequestHandler):
    reply: Reply = staticmethod(role_reply)
    seen_keys: list[str] = []

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.seen_keys.append(self.headers.get("authorization", ""))
        n = int(body.get("n") or 1)
        text = self.reply(body)
        words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        payload = {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        for i in range(n)],
            "usage": {"prompt_tokens": words, "completion_tokens": len(text.split()) * n,
                      "total_tokens": words + len(text.split()) * n},
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(port: int = 0, reply: Reply = role_reply) -> tuple[ThreadingHTTPServer, str]:
    """Start in a daemon thread; returns (server, base_url ending in /v1)."""
    handler = type("Handler", (_Handler,), {"reply": staticmethod(reply), "seen_keys": []})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    srv, url = serve()
    Path(args.port_file).write_text(url)
    while True:
        time.sleep(3600)
