"""Test doubles for the model: a scripted LangChain chat model, and a scripted OpenAI-compatible
HTTP server on 127.0.0.1 that the real `openai` client talks to. Neither touches the network."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk


class ScriptedChatModel(FakeMessagesListChatModel):
    """Answers with the scripted messages in order, streaming text word by word; records what it
    was sent. `bind_tools` returns itself so the session can use it like a real model."""

    received: list[list[BaseMessage]] = []
    delay_s: float = 0.0

    def bind_tools(self, tools, **kwargs):
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.received.append(list(messages))
        return self.responses[min(self.i, len(self.responses) - 1)]

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[ChatGenerationChunk]:
        response = self._next(messages)
        self.i += 1
        if response.tool_calls or response.invalid_tool_calls:
            chunks = [{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                      for i, c in enumerate(response.tool_calls)]
            chunks += [{"name": c.get("name"), "args": c.get("args"), "id": c.get("id"), "index": len(chunks) + i}
                       for i, c in enumerate(response.invalid_tool_calls)]
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=chunks))
            yield _finish("tool_calls")
            return
        for word in str(response.content).split(" "):
            time.sleep(self.delay_s)
            yield ChatGenerationChunk(message=AIMessageChunk(content=word + " "))
        yield _finish(response.response_metadata.get("finish_reason", "stop"))


def _finish(reason: str | None) -> ChatGenerationChunk:
    """The last chunk of a reply, as langchain-openai makes it: the finish reason, no content."""
    return ChatGenerationChunk(message=AIMessageChunk(content="", response_metadata={"finish_reason": reason}))


def tool_call(name: str, args: dict | None = None, call_id: str = "call_1") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args or {}, "id": call_id}])


# -- the scripted OpenAI-compatible server ------------------------------------------------------

class Reply(dict):
    """One scripted reply: text, tool calls, an HTTP error, or a delay before answering."""

    @classmethod
    def text(cls, content: str, finish: str | None = "stop", drip_s: float = 0.0) -> Reply:
        """Text streamed word by word (`drip_s` between words), ending with `finish` (None: the
        stream ends without a finish reason)."""
        return cls(kind="text", content=content, finish=finish, drip_s=drip_s)

    @classmethod
    def tool(cls, name: str, arguments: str | dict, call_id: str = "call_1", repeat_name: bool = False) -> Reply:
        """A tool call whose arguments arrive in two pieces; `repeat_name`: the function name comes
        again with every piece, as some servers send it."""
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(kind="tool", name=name, arguments=args, call_id=call_id, repeat_name=repeat_name)

    @classmethod
    def tools(cls, calls: list[tuple[str, dict]], drip_s: float = 0.0) -> Reply:
        """Several tool calls in one reply, each in its own chunk (`drip_s` between them)."""
        return cls(kind="tools", calls=[(name, json.dumps(args)) for name, args in calls], drip_s=drip_s)

    @classmethod
    def keepalive(cls, seconds: float, then: Reply | None = None) -> Reply:
        """SSE comments only (what llama-server sends while it reads a long prompt) for `seconds`,
        then `then`'s chunks, or the end of the stream."""
        return cls(kind="keepalive", seconds=seconds, then=then)

    @classmethod
    def error(cls, status: int, message: str = "error", headers: dict | None = None, body: str | None = None) -> Reply:
        """An HTTP error with an OpenAI-style JSON body, or with `body` as plain text."""
        return cls(kind="error", status=status, message=message, headers=headers or {}, body=body)

    @classmethod
    def raw(cls, stream: bytes) -> Reply:
        """A 200 event stream with exactly these bytes (malformed or empty streams)."""
        return cls(kind="raw", stream=stream)

    @classmethod
    def slow(cls, seconds: float, then: Reply) -> Reply:
        return cls(kind="slow", seconds=seconds, then=then)


class FakeOpenAIServer:
    """POST /v1/chat/completions answered from a script, streaming as Server-Sent Events."""

    def __init__(self, replies: list[Reply], served: str = "local-model-q4", require_key: str | None = None) -> None:
        """`served`: the model /v1/models names ("{authorization}" in it: the request's Authorization
        header, as a hostile server would echo it); `require_key`: /v1/models answers 401 without it."""
        self.replies = list(replies)
        self.served = served
        self.require_key = require_key
        self.requests: list[dict] = []
        self.model_requests: list[dict] = []  # the headers of each GET /v1/models
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # /v1/models, as local servers list what they serve
                server.model_requests.append(dict(self.headers))
                if server.require_key and self.headers.get("Authorization") != f"Bearer {server.require_key}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                served = server.served.replace("{authorization}", self.headers.get("Authorization", ""))
                payload = json.dumps({"object": "list", "data": [{"id": served, "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                try:
                    self._answer()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer

            def _answer(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                reply = server.replies.pop(0) if server.replies else Reply.text("(script exhausted)")
                if reply["kind"] == "slow":
                    time.sleep(reply["seconds"])
                    reply = reply["then"]
                if reply["kind"] == "error":
                    if reply["body"] is not None and "{request_headers}" in reply["body"]:  # a server that echoes them
                        reply = {**reply, "body": reply["body"].replace("{request_headers}", json.dumps(dict(self.headers)))}
                    payload = (reply["body"].encode() if reply["body"] is not None
                               else json.dumps({"error": {"message": reply["message"], "type": "error"}}).encode())
                    self.send_response(reply["status"])
                    for k, v in reply["headers"].items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "text/plain" if reply["body"] is not None else "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                if reply["kind"] == "raw":
                    self.wfile.write(reply["stream"])
                    return
                if reply["kind"] == "keepalive":
                    until = time.monotonic() + reply["seconds"]
                    while time.monotonic() < until:
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                        time.sleep(0.05)
                    if reply["then"] is None:
                        return
                    reply = reply["then"]
                for chunk in server._chunks(reply, body.get("model", "fake")):
                    if reply.get("drip_s"):
                        time.sleep(reply["drip_s"])
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # a short poll: shutdown() waits for the next one (0.5 s by default, in every test)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _chunks(self, reply: Reply, model: str) -> list[dict]:
        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        if reply["kind"] == "tools":
            return [chunk({"role": "assistant", "content": None, "tool_calls": [
                        {"index": i, "id": f"call_{i}", "type": "function",
                         "function": {"name": name, "arguments": args}}]}) for i, (name, args) in enumerate(reply["calls"])
                    ] + [chunk({}, "tool_calls")]
        if reply["kind"] == "tool":
            args = reply["arguments"]
            half = len(args) // 2  # arguments arrive in two pieces, as real servers send them
            again = {"name": reply["name"]} if reply["repeat_name"] else {}
            return [chunk({"role": "assistant", "content": None, "tool_calls": [
                        {"index": 0, "id": reply["call_id"], "type": "function",
                         "function": {"name": reply["name"], "arguments": args[:half]}}]}),
                    chunk({"tool_calls": [{"index": 0, "function": again | {"arguments": args[half:]}}]}),
                    chunk({}, "tool_calls")]
        words = reply["content"].split(" ") if reply["content"] else []
        return ([chunk({"role": "assistant", "content": ""})]
                + [chunk({"content": w + (" " if i < len(words) - 1 else "")}) for i, w in enumerate(words)]
                + ([chunk({}, reply["finish"])] if reply["finish"] else []))

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
