"""Serve a JSON item catalog over HTTP: GET /health, GET /items, GET /items/<id>."""
import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_handler(items):
    by_id = {str(item["id"]): item for item in items}

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200, {"status": "ok", "items": len(items)})
            elif self.path == "/items":
                self._send(200, items)
            elif self.path.startswith("/items/") and self.path[7:] in by_id:
                self._send(200, by_id[self.path[7:]])
            else:
                self._send(404, {"error": "not found"})

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    parser.add_argument("--items", required=True, help="path of the JSON file with the item list")
    parser.add_argument("--host", default="0.0.0.0", help="address to bind (default: all)")
    args = parser.parse_args()
    path = Path(args.items)
    if not path.is_file():
        sys.exit(f"catalog: items file not found: {path}")
    items = json.loads(path.read_text())
    server = ThreadingHTTPServer((args.host, args.port), make_handler(items))
    print(f"catalog: serving {len(items)} items on port {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
