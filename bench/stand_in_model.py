"""A stand-in for a model endpoint, for seeding agent runs where there is no model: an
OpenAI-compatible chat-completions server on 127.0.0.1 that answers every request with one short
summary of what it was asked, and reports usage the way a model does (about four characters a
token, the prompt's and the answer's), so agent turns carry tokens and, with a price, cost.

The bot process talks to it over real HTTP with the `openai` client, as it would to a real model.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROUTE = "/v1/chat/completions"


def tokens_of(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def reply_to(body: dict[str, Any]) -> dict[str, Any]:
    """The completion for one request: a summary of its last message, and its usage."""
    messages = body.get("messages") or [{}]
    asked = str(messages[-1].get("content") or "").strip().splitlines() or [""]
    message = {"role": "assistant", "content": f"Summary: {asked[0][:120]} (all fine)."}
    prompt, completion = tokens_of(messages), tokens_of(message)
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "stand-in"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        found = self.path.rstrip("/") == ROUTE
        reply = reply_to(body) if found else {"error": {"message": f"no route {self.path}"}}
        data = json.dumps(reply).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:  # a request a step: not worth a line each
        pass


class StandInModel:
    """`with StandInModel() as model:` serves on a free loopback port until the block ends."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StandInModel:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
