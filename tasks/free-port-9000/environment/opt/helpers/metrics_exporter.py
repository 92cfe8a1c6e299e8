"""Exports host metrics over HTTP."""
import argparse
from http.server import BaseHTTPRequestHandler, HTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
port = parser.parse_args().port


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"up 1\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


HTTPServer(("0.0.0.0", port), Handler).serve_forever()
