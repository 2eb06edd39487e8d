"""What the tests' scripted HTTP servers (an OpenAI-compatible API, a judge, a code sandbox) share."""

from __future__ import annotations

import json


def send_json(handler, body, status: int = 200) -> None:
    """Answer the request `handler` (a BaseHTTPRequestHandler) holds with `body` as JSON."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
