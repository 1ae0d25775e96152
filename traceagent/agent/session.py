"""One conversation about a trace: the model calls the detector tools, the answer streams, and
every number in it is checked against what the conversation's tools returned.

`Session.ask` is an async iterator of events (see events.py) that the TUI renders and `traceagent
ask` prints. Failures of the model server are events too: the conversation survives them. History
keeps each turn's tool calls and results (trimmed, oldest first, to the model's context), so a
later answer may quote an earlier turn's figures.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncGenerator
from datetime import datetime

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ..detect.vocabulary import LIMITERS, ROOT_CAUSES
from ..text import visible
from .events import Answer, Cancelled, Event, Failure, Token, ToolCall, ToolResult
from .llm import LLMConfig
from .numbers import Sources, stated_numbers, unverified
from .offline import OfflineAnalyst
from .prompts import system_prompt
from .tools import AnalysisContext, ToolInputError, build_tools

__all__ = ["Answer", "Cancelled", "Event", "Failure", "Session", "Token", "ToolCall", "ToolResult"]

CHARS_PER_TOKEN = 3  # a cautious average for English and JSON: history is trimmed by characters
# what a server's chat template leaves in the text when it does not support tool calls
TOOL_MARKUP = re.compile(r"</?tool_(?:call|response)>|<\|im_start\|>|\[TOOL_CALLS\]|<function=|<\|python_tag\|>")
DIAGNOSIS = re.compile(r"\b(?:" + "|".join(re.escape(w.label) for w in [*LIMITERS.values(), *ROOT_CAUSES.values()])
                       + r"|bottleneck|bound|idle|limit(?:ed|s)?)\b", re.IGNORECASE)


# -- the session --------------------------------------------------------------------------------

class Session:
    """A conversation with history. With `model=None` the offline analyst answers instead."""

    def __init__(self, ctx: AnalysisContext, model=None, config: LLMConfig | None = None, max_tool_rounds: int = 6):
        self.ctx = ctx
        self.config = config
        self.max_tool_rounds = max_tool_rounds
        self.tools = {t.name: t for t in build_tools(ctx)}
        # tool_choice: some servers (llama-cpp-python) offer the model no tools without it
        self.model = model.bind_tools(list(self.tools.values()), tool_choice="auto") if model is not None else None
        self.system = system_prompt(ctx)
        self.turns: list[list[BaseMessage]] = []  # each: question, tool calls and results, answer
        self.transcript: list[tuple[str, str]] = []  # (role, markdown)
        self._partial: list[str] = []  # the answer so far, for the transcript if it is stopped
        self._cancel = asyncio.Event()
        self._tool_results = 0
        ctx.sources = self._sources()

    @property
    def offline(self) -> bool:
        return self.model is None

    @property
    def history(self) -> list[BaseMessage]:
        """Every message of the finished turns, in order."""
        return [m for turn in self.turns for m in turn]

    def describe_model(self) -> str:
        if self.offline:
            return "offline analyst: no LLM configured"
        return self.config.describe() if self.config else "LLM"

    def cancel(self) -> None:
        """Stop the running answer at the next chunk."""
        self._cancel.set()

    def reset(self) -> None:
        """A new conversation about the same trace."""
        self.turns.clear()
        self.transcript.clear()
        self._tool_results = 0
        self.ctx.sources = self._sources()

    def _sources(self) -> Sources:
        """What answers are checked against before any tool runs: the system prompt's figures, the
        trace's ranks, GPUs, steps and streams, and the trace strings our prose quotes."""
        sources = Sources()
        for analysis in filter(None, (self.ctx.analysis, self.ctx.other)):
            for r in analysis.ranks:
                sources.add_identifiers("rank", [r.rank] if r.rank is not None else [])
                sources.add_identifiers("device", r.devices)
                sources.add_identifiers("step", r.step_numbers)
                sources.add_identifiers("stream", r.streams)
                quoted: list[tuple[str | None, ...]] = [(k.name, k.short_name, k.op) for k in r.findings.kernels.top]
                quoted += [(s.call, s.op, s.python) for s in r.findings.idle.sync_sites]
                sources.trace_strings.update(q for group in quoted for q in group if q and len(q) >= 3)
        sources.add_prose(self.system)
        return sources

    async def ask(self, question: str) -> AsyncGenerator[Event, None]:
        self._cancel.clear()
        self.transcript.append(("user", question))
        self._partial = []
        events = OfflineAnalyst(self.ctx).answer(question) if self.offline else self._ask_model(question)
        ended = False
        try:
            async for event in events:
                self._record(event)
                ended = ended or isinstance(event, (Answer, Cancelled))
                yield event
        finally:  # stopped from outside (Escape cancels the TUI's worker mid-stream): keep what was said
            if not ended and self._partial:
                self._record(Cancelled())

    def _context(self, budget_chars: int) -> list[BaseMessage]:
        """The newest turns that fit the budget, whole; an older turn that does not fit keeps only
        its question and answer; older ones are left out."""
        kept: list[BaseMessage] = []
        for turn in reversed(self.turns):
            size = sum(len(str(m.content)) + len(json.dumps(getattr(m, "tool_calls", []))) for m in turn)
            if size > budget_chars:
                turn = [turn[0], turn[-1]]
                size = len(str(turn[0].content)) + len(str(turn[-1].content))
                if size > budget_chars:
                    break
            kept[:0] = turn
            budget_chars -= size
        return kept

    async def _ask_model(self, question: str) -> AsyncGenerator[Event, None]:
        config = self.config or LLMConfig()
        turn: list[BaseMessage] = [HumanMessage(question)]
        budget = (config.context_tokens - config.max_tokens) * CHARS_PER_TOKEN - len(self.system) - len(question)
        history = self._context(max(budget, 0))
        deadline = time.monotonic() + config.deadline_s
        model = self.model
        assert model is not None  # ask() comes here only with a model
        for _ in range(self.max_tool_rounds):
            reply = StreamedReply()
            try:
                async for chunk in model.astream([SystemMessage(self.system + self._focus_note()), *history, *turn]):
                    if self._cancel.is_set():
                        yield Cancelled()
                        return
                    if text := reply.add(chunk):
                        yield Token(visible(text, keep_lines=True))  # a model can emit escapes too
                    if time.monotonic() > deadline:
                        break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server's failures are events, not crashes
                yield self._failure(exc)
                return
            if time.monotonic() > deadline:
                yield self._answer(reply.text, f"the answer took longer than the {config.deadline_s:g} s deadline "
                                               "(TRACEAGENT_DEADLINE) and was stopped")
                return
            if not reply.chunks:
                yield Failure("server", f"the model server ({server_name(self.config)}) closed the stream without sending "
                                        "anything")
                return
            calls, malformed = reply.tool_calls()
            if not calls and not malformed:
                answer = self._answer(reply.text, reply.incomplete(config))
                self.turns.append([*turn, AIMessage(answer.text)])
                yield answer
                return
            turn.append(AIMessage(content=reply.text, tool_calls=calls + [
                {"name": m["name"] or "unknown", "args": {}, "id": m["id"]} for m in malformed]))
            for bad in malformed:
                yield Failure("malformed_tool_call",
                              f"the model sent a tool call that could not be parsed ({bad['name'] or 'unnamed'})")
                turn.append(ToolMessage(json.dumps({"error": "arguments were not valid JSON; call the tool again"}),
                                        tool_call_id=bad["id"]))
            for call in calls:
                yield ToolCall(call["id"], call["name"], dict(call["args"]))
                result = await self._run_tool(call)
                if not result.ok:
                    kind = "unknown_tool" if call["name"] not in self.tools else "bad_arguments"
                    yield Failure(kind, f"tool {call['name']!r}: {json.loads(result.content)['error']}")
                else:
                    self.ctx.sources.add_result(result.content)
                    self._tool_results += 1
                yield result
                turn.append(ToolMessage(result.content, tool_call_id=call["id"]))
        yield Failure("tool_rounds", f"stopped after {self.max_tool_rounds} rounds of tool calls without an answer")

    def _answer(self, raw: str, incomplete: str | None) -> Answer:
        """The turn's answer: its numbers checked, and warnings about how it was produced."""
        text = visible(raw, keep_lines=True)
        if not incomplete and not text.strip():
            incomplete = "the model sent an empty answer"
        warnings = []
        if markup := TOOL_MARKUP.search(text):
            warnings.append(f"the answer contains tool-call markup ({markup.group(0)}): the server's chat template "
                            "may not support tool calls (see the README's notes on local servers)")
        if not self._tool_results and (DIAGNOSIS.search(text) or stated_numbers(text)):
            warnings.append("the model answered without calling any tool: nothing in this answer comes from the trace")
        return Answer(text, unverified(text, self.ctx.sources), incomplete, warnings)

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

    def _focus_note(self) -> str:
        """What the user is looking at (the chat app's side panel), which the tools default to."""
        if self.ctx.focus is None:
            return ""
        rank, device = self.ctx.focus
        gpu = f", GPU {device}" if device is not None else ""
        return (f"\n\nThe user is looking at rank {rank}{gpu}: the tools default to it, so answer about it unless "
                "the question names another rank or GPU.")

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
            if event.incomplete:
                text += f"\n\n_(incomplete: {event.incomplete})_"
            if event.unverified:
                text += "\n\n_Unverified numbers (not in any tool result): " + ", ".join(event.unverified) + "_"
            text += "".join(f"\n\n_Warning: {w}_" for w in event.warnings)
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
        out = [f"# traceagent conversation: `{self.ctx.analysis.path}`", "",
               f"{datetime.now():%Y-%m-%d %H:%M} · {self.describe_model()}", ""]
        titles = {"user": "## You", "assistant": "## traceagent"}
        for role, text in self.transcript:
            if role == "tool":
                out.append(f"> tool: {text}")
            elif role == "error":
                out.append(f"> **{text}**")
            else:
                out += ["", titles[role], "", text]
        return "\n".join(out) + "\n"


class StreamedReply:
    """One model reply assembled from its stream: text, tool calls (joined by index, so a server
    that repeats the function name in every chunk does not produce `idle_gapsidle_gaps`) and the
    finish reason."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, dict] = {}
        self.finish: str | None = None
        self.chunks = 0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, chunk) -> str:
        """Take one chunk; return its text."""
        self.chunks += 1
        self.finish = (getattr(chunk, "response_metadata", None) or {}).get("finish_reason") or self.finish
        for position, piece in enumerate(getattr(chunk, "tool_call_chunks", None) or []):
            index = piece.get("index") if piece.get("index") is not None else position
            call = self.calls.setdefault(index, {"name": "", "args": "", "id": None})
            name = piece.get("name") or ""
            if name and name != call["name"]:  # a repeated name is the same call, not more of its name
                call["name"] += name
            call["args"] += piece.get("args") or ""
            call["id"] = call["id"] or piece.get("id")
        text = chunk.content if isinstance(chunk.content, str) else ""
        if text:
            self.parts.append(text)
        return text

    def tool_calls(self) -> tuple[list[dict], list[dict]]:
        """(calls, malformed). Arguments are parsed here because LangChain turns arguments it
        cannot parse into an empty dict, which would run the tool with defaults instead of telling
        the model its call was broken."""
        calls, malformed = [], []
        for position, call in enumerate(self.calls.values()):
            call_id = call["id"] or f"call_{position}"
            try:
                args = json.loads(call["args"] or "{}")
                if not isinstance(args, dict):
                    raise ValueError("arguments are not an object")
            except ValueError:
                malformed.append({"name": call["name"], "id": call_id, "args": call["args"]})
                continue
            calls.append({"name": call["name"], "args": args, "id": call_id, "type": "tool_call"})
        return calls, malformed

    def incomplete(self, config: LLMConfig) -> str | None:
        """Why a text reply is not a finished answer, or None."""
        if self.finish == "length":
            return (f"the model reached its limit of {config.max_tokens} tokens before it finished "
                    "(raise TRACEAGENT_MAX_TOKENS)")
        if self.finish == "content_filter":
            return "the server's content filter stopped the answer"
        if self.finish is None:
            return "the stream ended without a finish reason: the server cut the answer off"
        return None


def describe_model_error(exc: Exception, config: LLMConfig | None) -> tuple[str, str]:
    """(kind, one clear line) for an error from the model server."""
    import openai

    where = server_name(config)
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
        said = server_message(exc)
        return "server", f"the model server ({where}) answered with an error ({exc.status_code})" + \
            (f": {said}" if said else "")
    if isinstance(exc, (json.JSONDecodeError, openai.APIResponseValidationError)):
        return "server", f"the model server ({where}) sent a malformed stream (not JSON server-sent events)"
    if isinstance(exc, ValueError) and "No generation chunks" in str(exc):
        return "server", f"the model server ({where}) closed the stream without sending anything"
    return "server", f"the model call failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def server_name(config: LLMConfig | None) -> str:
    """The model server as messages name it: its address without credentials, or OpenAI's API."""
    return (config.shown_url or "the OpenAI API") if config else "the model server"


def server_message(exc) -> str:
    """The server's own explanation of an error, on one line: the JSON error's message, or the
    start of its body."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        body = body.get("message") or body.get("error") or body.get("detail") or json.dumps(body)
        if isinstance(body, dict):
            body = body.get("message") or json.dumps(body)
    if not body:
        response = getattr(exc, "response", None)
        try:
            body = response.text if response is not None else ""
        except Exception:  # a streamed response that was not read
            body = ""
    return " ".join(str(body).split())[:200]
