"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests with no network.

Each POST to /v1/chat/completions answers the next message of the script and keeps the request,
so a test can count model calls and read what the model was sent.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """One tool call of a scripted answer; `arguments` as JSON text, or a value to encode."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def answer(content: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    """A scripted assistant message: text, tool calls, or both."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def slow(message: dict[str, Any], seconds: float) -> dict[str, Any]:
    """A scripted answer the server sends only after `seconds` (a client may time out first)."""
    return {**message, "_delay": seconds}


def http_error(status: int, message: str, retry_after: float | None = None) -> dict[str, Any]:
    """A scripted refusal instead of an answer: the status, the error body, Retry-After."""
    return {"_status": status, "_message": message, "_retry_after": retry_after}


def _estimated_tokens(value: Any) -> int:
    """About four characters a token, as models' own tokenizers roughly count English."""
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


class ScriptedModel:
    """`count_tokens`: report usage estimated from each request and answer (the prompt grows
    with the conversation, as a real model's does) instead of a fixed 10 in, 5 out."""

    def __init__(self, script: list[dict[str, Any]], count_tokens: bool = False) -> None:
        self.script = list(script)
        self.count_tokens = count_tokens
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            n = len(self.requests)
            if n > len(self.script):
                return 500, {"error": {"message": f"script has no answer for request {n}"}}
            message = self.script[n - 1]
        if "_delay" in message:  # outside the lock: a retry meanwhile is answered at once
            time.sleep(message["_delay"])
            message = {k: v for k, v in message.items() if k != "_delay"}
        if "_status" in message:
            return message["_status"], {
                "error": {"message": message["_message"], "type": "scripted", "code": None}
            }
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return 200, {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(body, message),
        }

    def _usage(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, int]:
        prompt, completion = 10, 5
        if self.count_tokens:
            prompt = _estimated_tokens(body.get("messages"))
            completion = _estimated_tokens(message)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _retry_after(self, n: int) -> float | None:
        step = self.script[n - 1] if 0 < n <= len(self.script) else {}
        return step.get("_retry_after")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    status, reply = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    status, reply = model._next(body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                retry_after = model._retry_after(len(model.requests))
                if retry_after is not None:
                    self.send_header("Retry-After", str(retry_after))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:  # quiet test output
                pass

        return Handler
