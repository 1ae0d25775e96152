"""One conversation about a trace: the model calls the detector tools, the answer streams, and
every number in it is checked against that turn's tool results.

`Session.ask` is an async iterator of events (see below) that the TUI renders and `traceagent ask`
prints. Failures of the model server are events too: the conversation survives them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ..text import visible
from .events import Answer, Cancelled, Event, Failure, Token, ToolCall, ToolResult
from .llm import LLMConfig
from .numbers import unverified
from .offline import OfflineAnalyst
from .prompts import system_prompt
from .tools import AnalysisContext, ToolInputError, build_tools

__all__ = ["Answer", "Cancelled", "Event", "Failure", "Session", "Token", "ToolCall", "ToolResult"]


# -- the session --------------------------------------------------------------------------------

class Session:
    """A conversation with history. With `model=None` the offline analyst answers instead."""

    def __init__(self, ctx: AnalysisContext, model=None, config: LLMConfig | None = None, max_tool_rounds: int = 6):
        self.ctx = ctx
        self.config = config
        self.max_tool_rounds = max_tool_rounds
        self.tools = {t.name: t for t in build_tools(ctx)}
        self.model = model.bind_tools(list(self.tools.values())) if model is not None else None
        self.history: list[BaseMessage] = []
        self.transcript: list[tuple[str, str]] = []  # (role, markdown)
        self._partial: list[str] = []  # the answer so far, for the transcript if it is stopped
        self._cancel = asyncio.Event()

    @property
    def offline(self) -> bool:
        return self.model is None

    def describe_model(self) -> str:
        if self.offline:
            return "offline analyst: no LLM configured"
        return self.config.describe() if self.config else "LLM"

    def cancel(self) -> None:
        """Stop the running answer at the next chunk."""
        self._cancel.set()

    def reset(self) -> None:
        """A new conversation about the same trace."""
        self.history.clear()
        self.transcript.clear()

    async def ask(self, question: str) -> AsyncIterator[Event]:
        self._cancel.clear()
        self.transcript.append(("user", question))
        self._partial = []
        events = OfflineAnalyst(self.ctx, self.tools).answer(question) if self.offline else self._ask_model(question)
        ended = False
        try:
            async for event in events:
                self._record(event)
                ended = ended or isinstance(event, (Answer, Cancelled))
                yield event
        finally:  # stopped from outside (Escape cancels the TUI's worker mid-stream): keep what was said
            if not ended and self._partial:
                self._record(Cancelled())

    async def _ask_model(self, question: str) -> AsyncIterator[Event]:
        messages = [SystemMessage(system_prompt(self.ctx)), *self.history, HumanMessage(question)]
        results: list[str] = []
        for _ in range(self.max_tool_rounds):
            full = None
            try:
                async for chunk in self.model.astream(messages):
                    if self._cancel.is_set():
                        yield Cancelled()
                        return
                    if isinstance(chunk.content, str) and chunk.content:
                        yield Token(visible(chunk.content, keep_lines=True))  # a model can emit escapes too
                    full = chunk if full is None else full + chunk
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server's failures are events, not crashes
                yield self._failure(exc)
                return
            if full is None:
                yield Failure("server", "the model returned an empty response")
                return
            calls, malformed = parse_tool_calls(full)
            ai = AIMessage(content=full.content, tool_calls=calls)
            if not calls and not malformed:
                text = visible(ai.content if isinstance(ai.content, str) else str(ai.content), keep_lines=True)
                self.history += [HumanMessage(question), AIMessage(text)]
                yield Answer(text, unverified(text, results))
                return
            messages.append(AIMessage(content=full.content, tool_calls=calls + [
                {"name": m["name"] or "unknown", "args": {}, "id": m["id"]} for m in malformed]))
            for bad in malformed:
                yield Failure("malformed_tool_call",
                              f"the model sent a tool call that could not be parsed ({bad['name'] or 'unnamed'})")
                messages.append(ToolMessage(json.dumps({"error": "arguments were not valid JSON; call the tool again"}),
                                            tool_call_id=bad["id"]))
            for call in ai.tool_calls:
                yield ToolCall(call["id"], call["name"], dict(call["args"]))
                result = await self._run_tool(call)
                if not result.ok:
                    kind = "unknown_tool" if call["name"] not in self.tools else "bad_arguments"
                    yield Failure(kind, f"tool {call['name']!r}: {json.loads(result.content)['error']}")
                else:
                    results.append(result.content)
                yield result
                messages.append(ToolMessage(result.content, tool_call_id=call["id"]))
        yield Failure("tool_rounds", f"stopped after {self.max_tool_rounds} rounds of tool calls without an answer")

    async def _run_tool(self, call: dict) -> ToolResult:
        tool = self.tools.get(call["name"])
        if tool is None:
            error = f"unknown tool; the tools are {', '.join(sorted(self.tools))}"
            return ToolResult(call["id"], call["name"], json.dumps({"error": error}), ok=False)
        try:
            content = await asyncio.to_thread(tool.invoke, call["args"])  # detectors off the event loop
            return ToolResult(call["id"], call["name"], content, ok=True)
        except ToolInputError as exc:
            return ToolResult(call["id"], call["name"], json.dumps({"error": str(exc)}), ok=False)
        except Exception as exc:  # pydantic validation and the like: the model can correct itself
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "validation error" in message:
                message = "; ".join(line.strip() for line in str(exc).splitlines()[1:3])
            return ToolResult(call["id"], call["name"], json.dumps({"error": f"bad arguments: {message}"}), ok=False)

    def _failure(self, exc: Exception) -> Failure:
        kind, message = describe_model_error(exc, self.config)
        return Failure(kind, self.config.redact(message) if self.config else message)

    def _record(self, event: Event) -> None:
        if isinstance(event, Token):
            self._partial.append(event.text)
        elif isinstance(event, ToolCall):
            self.transcript.append(("tool", f"`{event.name}({json.dumps(event.args)})`"))
        elif isinstance(event, Answer):
            text = event.text
            if event.unverified:
                text += "\n\n_Unverified numbers (not in any tool result): " + ", ".join(event.unverified) + "_"
            self.transcript.append(("assistant", text))
        elif isinstance(event, Failure):
            self.transcript.append(("error", event.message))
        elif isinstance(event, Cancelled):
            said = "".join(self._partial).strip()
            if said:
                self.transcript.append(("assistant", said + "\n\n_(stopped: the answer was cut off here)_"))
            else:
                self.transcript.append(("error", "stopped before any answer"))

    def transcript_markdown(self) -> str:
        """The conversation as Markdown (no keys, no secrets: only what was said and shown)."""
        out = [f"# traceagent conversation: `{self.ctx.analysis.job.path}`", "",
               f"{datetime.now():%Y-%m-%d %H:%M} · {self.describe_model()}", ""]
        titles = {"user": "## You", "assistant": "## traceagent", "tool": None, "error": None}
        for role, text in self.transcript:
            if role == "tool":
                out.append(f"> tool: {text}")
            elif role == "error":
                out.append(f"> **{text}**")
            else:
                out += ["", titles[role], "", text]
        return "\n".join(out) + "\n"


def parse_tool_calls(message) -> tuple[list[dict], list[dict]]:
    """(calls, malformed) from a streamed message. The raw argument text is parsed here because
    LangChain turns arguments it cannot parse into an empty dict, which would run the tool with
    defaults instead of telling the model its call was broken."""
    calls, malformed = [], []
    chunks = {c.get("index", i): c for i, c in enumerate(getattr(message, "tool_call_chunks", []) or [])}
    if not chunks:  # a complete (non-streamed) message
        return list(message.tool_calls), [dict(c) for c in getattr(message, "invalid_tool_calls", [])]
    for position, chunk in enumerate(chunks.values()):
        call_id = chunk.get("id") or f"call_{position}"
        try:
            args = json.loads(chunk.get("args") or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments are not an object")
        except ValueError:
            malformed.append({"name": chunk.get("name"), "id": call_id, "args": chunk.get("args")})
            continue
        calls.append({"name": chunk.get("name") or "", "args": args, "id": call_id, "type": "tool_call"})
    return calls, malformed


def describe_model_error(exc: Exception, config: LLMConfig | None) -> tuple[str, str]:
    """(kind, one clear line) for an error from the model server."""
    import openai

    where = (config.shown_url or "the OpenAI API") if config else "the model server"
    if isinstance(exc, openai.APITimeoutError):
        timeout = f" within {config.timeout_s:g} s" if config else ""
        return "timeout", f"the model server ({where}) did not answer{timeout}; raise TRACEAGENT_TIMEOUT or try again"
    if isinstance(exc, openai.APIConnectionError):
        return "connection", f"cannot reach the model server at {where}: is it running? (OPENAI_BASE_URL)"
    if isinstance(exc, openai.AuthenticationError):
        return "auth", f"the model server ({where}) rejected the API key (401): check OPENAI_API_KEY"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit", f"the model server ({where}) is rate limiting (429) and retries ran out; wait and ask again"
    if isinstance(exc, openai.NotFoundError):
        model = config.model if config else "the model"
        return "server", f"the model server ({where}) does not know {model} (404): set TRACEAGENT_MODEL"
    if isinstance(exc, openai.APIStatusError):
        return "server", f"the model server ({where}) answered with an error ({exc.status_code})"
    return "server", f"the model call failed: {type(exc).__name__}: {str(exc)[:200]}"
