"""The orders service (v2): GET /whoami, GET /health."""
import argparse
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        routes = {"/whoami": b"orders-v2\n", "/health": b"ok\n"}
        body = routes.get(self.path)
        self.send_response(200 if body else 404)
        body = body or b"not found\n"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    args = parser.parse_args()
    try:
        server = ThreadingHTTPServer(("0.0.0.0", args.port), Handler)
    except OSError as e:
        sys.exit(f"orders: cannot listen on port {args.port}: {e.strerror}")
    print(f"orders: listening on port {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
