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
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace
from datetime import datetime

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ..detect.core.vocabulary import GAP_ROOT, LIMITERS, ROOT_CAUSES
from ..text import bounded, visible
from .claims import ClaimCheck, blamed_causes, mentions_cause, stated_conclusion
from .events import Answer, Cancelled, Event, Failure, Notice, Token, ToolCall, ToolResult
from .llm import LLMConfig, redact_secrets
from .looping import repetition_start, settled
from .numbers import CAUSE_MENTION, Sources, stated_numbers, unverified
from .offline import OfflineAnalyst
from .prompts import system_prompt
from .structured import (
    FINAL_ANSWER,
    FinalAnswer,
    StructuredCheck,
    draft_claims,
    final_answer_tool,
    parse_final,
    written_final,
)
from .textcalls import could_be_call, written_calls
from .tools import AnalysisContext, ToolInputError, build_tools, model_json, openai_schema

__all__ = ["Answer", "Cancelled", "Event", "Failure", "Notice", "Session", "Token", "ToolCall", "ToolResult"]

CHARS_PER_TOKEN = 3  # a cautious average for English and JSON: history is trimmed by characters
NUDGE = ("You answered without calling any tool, so nothing in that answer comes from this trace. Call the tools "
         "that answer the question (verdict and idle_gaps are a good start) and answer only from their results. "
         'If you cannot call tools, reply with only the call as JSON: {"name": "verdict", "arguments": {}}')
DRAFT = "draft_answer"  # the name the draft's result goes under: the model reads it as a tool result
DRAFT_CHARS = 4000  # the longest draft the model reads
IGNORED_DRAFT = "the model's answer makes no claim the checks can read (no figure, no cause, no conclusion)"
DRAFT_ASK = ("My question was: {question}\nAnswer it first, in one or two sentences, with the figures of the draft answer "
             "above (the draft_answer result) that answer it; then explain briefly, in five sentences at most in all: "
             "do not copy the whole draft. Keep every number as the draft "
             "gives it. Then call final_answer.")
NAMED = re.compile(r"[^A-Za-z\s]")  # a trace string that names something: `aten::mm`, `dgrad_engine`, `train.py(44)`
PROGRESS_EVERY_S = 1.0  # how often a reply that streams tool calls says how many so far
MAX_CALLS_PER_ROUND = 8  # a small model may send dozens of calls in one reply (51 identical, seen)
# what a server's chat template leaves in the text when it does not support tool calls
TOOL_MARKUP = re.compile(r"</?tool_(?:call|response)>|<\|im_start\|>|\[TOOL_CALLS\]|<function=|<\|python_tag\|>")
DIAGNOSIS = re.compile(r"\b(?:" + "|".join(re.escape(w.label) for w in [*LIMITERS.values(), *ROOT_CAUSES.values()])
                       + r"|bottleneck|bound|idle|limit(?:ed|s)?)\b", re.IGNORECASE)


# -- the session --------------------------------------------------------------------------------

class Session:
    """A conversation with history. With `model=None` the offline analyst answers instead."""

    def __init__(self, ctx: AnalysisContext, model=None, config: LLMConfig | None = None, max_tool_rounds: int = 6,
                 max_calls_per_round: int = MAX_CALLS_PER_ROUND):
        self.ctx = ctx
        self.config = config
        self.max_tool_rounds = max_tool_rounds
        self.max_calls_per_round = max_calls_per_round
        self.tools = {t.name: t for t in [*build_tools(ctx), final_answer_tool()]}
        schemas = [openai_schema(t) for t in self.tools.values()]
        # tool_choice: some servers (llama-cpp-python) offer the model no tools without it
        self.model = model.bind_tools(schemas, tool_choice="auto") if model is not None else None
        self.draft = config.draft if config is not None else True
        # a marked answer gives way to the detectors' draft (False: it stays, marked: a report's summary)
        self.replace_marked = True
        self.system = system_prompt(ctx, draft=self.draft)
        self.claims = ClaimCheck(ctx)
        self.structured = StructuredCheck(ctx, self.claims)
        # what every request carries besides the conversation: the system prompt and the tools' schemas
        self.fixed_chars = len(self.system) + sum(len(json.dumps(schema)) for schema in schemas)
        self.turns: list[list[BaseMessage]] = []  # each: question, tool calls and results, answer
        self.transcript: list[tuple[str, str]] = []  # (role, markdown)
        self._partial: list[str] = []  # the answer so far, for the transcript if it is stopped
        self._cancel = asyncio.Event()
        self._tool_results = 0
        self._turn_results = 0
        self._draft_result = ""
        self._draft_root: str | None = None  # the draft's root cause
        self._draft_has_facts = False  # the draft states a cause or a figure
        self.rounds = 0  # the model requests of the last answer
        self.silent_past_deadline = False  # the last answer's server sent nothing before the deadline
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
        self.ctx.sources.add_asked(question)  # identifiers the user named are theirs to be quoted
        self._partial = []
        events = OfflineAnalyst(self.ctx).answer(question) if self.offline else self._ask_model(question)
        ended = False
        try:
            async for event in events:
                self._record(event)
                ended = ended or isinstance(event, (Answer, Cancelled))
                yield event
            ended = True  # the turn ran its course (a server failure ends it too)
        finally:  # stopped from outside (Escape cancels the TUI's worker): keep what was said, and that it
            if not ended:  # stopped, during its tool calls too
                self._record(Cancelled())

    def _context(self, budget_chars: int) -> list[BaseMessage]:
        """The newest turns that fit the budget, whole; an older turn that does not fit keeps only
        its question and answer; older ones are left out."""
        kept: list[BaseMessage] = []
        for turn in reversed(self.turns):
            size = sum(message_chars(m) for m in turn)
            if size > budget_chars:
                turn = [turn[0], turn[-1]]
                size = message_chars(turn[0]) + message_chars(turn[-1])
                if size > budget_chars:
                    break
            kept[:0] = turn
            budget_chars -= size
        return kept

    async def _ask_model(self, question: str) -> AsyncGenerator[Event, None]:
        config = self.config or LLMConfig()
        turn: list[BaseMessage] = [HumanMessage(question)]
        late = f"the answer took longer than the {config.deadline_s:g} s deadline (TRACEAGENT_DEADLINE)"
        ran: dict[str, str] = {}  # this turn's calls (name and arguments) → the id that ran it
        self._turn_results = 0
        model = self.model
        assert model is not None  # ask() comes here only with a model
        self.rounds = 0
        self.silent_past_deadline = False
        nudged = False
        if self.draft:
            async for event in self._draft(question, turn, ran):
                yield event
        deadline = time.monotonic() + config.deadline_s  # the model's time: the draft is the detectors'
        for round_number in range(1, self.max_tool_rounds + 1):
            self.rounds = round_number
            # nothing from the trace yet: a text answer now would be the model's own, so it is held
            # back whole, and the model is asked once more to use the tools
            ungrounded = self._tool_results == 0
            messages, trimmed = self._fit(turn, config)
            if messages is None:
                async for event in self._from_detectors(question, trimmed):
                    yield event
                return
            if trimmed:
                yield Notice(trimmed)
            reply = StreamedReply()
            visible_part = ShownText(self.config)
            held = True  # text that may be a tool call written as text is shown only once it is not
            stream = model.astream(messages)
            started = shown = time.monotonic()
            try:
                async for chunk in paced(stream, deadline, PROGRESS_EVERY_S):
                    if self._cancel.is_set():
                        yield Cancelled()
                        return
                    text = reply.add(chunk) if chunk is not None else ""
                    if text and reply.looped():
                        break  # the rest would be the same again, to the token limit
                    if (chunk is None or reply.calls) and time.monotonic() - shown >= PROGRESS_EVERY_S:
                        shown = time.monotonic()  # a long wait or a long stream of calls shows, not a blank screen
                        yield Notice(reply.progress(time.monotonic() - started), progress=True)
                    if held and not ungrounded and not could_be_call(reply.text, self.tools):
                        held = False
                        if piece := visible_part.upto(reply.settled_text):
                            yield Token(piece)
                    elif not held and text and (piece := visible_part.upto(reply.settled_text)):
                        yield Token(piece)
            except TimeoutError:
                self.silent_past_deadline = not reply.text.strip() and not reply.calls
                if reply.text.strip() and not reply.calls and not ungrounded:
                    if piece := visible_part.upto(reply.text, final=True):
                        yield Token(piece)
                    yield self._answer(reply.text, late + " and was stopped")
                else:
                    async for event in self._from_detectors(question, late):
                        yield event
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server's failures are events, not crashes
                yield self._failure(exc)
                return
            finally:
                await stream.aclose()
            if reply.cut_at is not None:
                yield Notice("the model began repeating itself: its answer ends where the repetition began")
            if not reply.chunks:
                yield Failure("server", f"the model server ({server_name(self.config)}) closed the stream without sending "
                                        "anything")
                return
            calls, malformed = reply.tool_calls()
            final = self._final(calls, malformed, reply.text)
            if final is not None and not ungrounded:
                answer, why = self._checked(final.text, None, final)
                if why:  # checked before it shows: it arrived whole
                    async for event in self._from_detectors(question, why):
                        yield event
                    return
                if piece := visible_part.upto(final.text, final=True):
                    yield Token(piece)
                self.turns.append([*turn, AIMessage(answer.text)])
                yield answer
                return
            if final is not None:  # a final answer before any tool ran: held back, as a text answer would be
                calls, malformed, reply.parts = [], [], [final.text]
            written = not calls and not malformed and written_calls(reply.text, self.tools)
            if written:
                calls = [{"name": c.name, "args": c.args, "id": f"text_{round_number}_{i}", "type": "tool_call"}
                         for i, c in enumerate(written)]
                n = len(calls)
                yield Notice(f"the model wrote {n} tool call{'s' * (n > 1)} as text instead of sending "
                             f"{'them' if n > 1 else 'it'} as a call: ran {'them' if n > 1 else 'it'} as calls")
            elif not calls and not malformed:
                if ungrounded and reply.text.strip():
                    if nudged:
                        async for event in self._from_detectors(question, "the model answered twice without calling "
                                                                          "any tool"):
                            yield event
                        return
                    nudged = True
                    yield Notice("the model answered without calling any tool: asked it once more to answer from the "
                                 "tools")
                    turn += [AIMessage(reply.text), HumanMessage(NUDGE)]
                    continue
                if piece := visible_part.upto(reply.text, final=True):
                    yield Token(piece)
                answer, why = self._checked(reply.text, reply.incomplete(config))
                if why:
                    async for event in self._from_detectors(question, why):
                        yield event
                    return
                self.turns.append([*turn, AIMessage(answer.text)])
                yield answer
                return
            calls, repeated, notice = bound_calls(calls, ran, self.max_calls_per_round)
            if notice:
                yield Notice(notice)
            turn.append(AIMessage(content="" if written else reply.text, tool_calls=calls + repeated + [
                {"name": m["name"] or "unknown", "args": {}, "id": m["id"]} for m in malformed]))
            async for event in self._run_calls(calls, repeated, malformed, ran, turn, deadline):
                yield event
            if time.monotonic() > deadline:
                async for event in self._from_detectors(question, late):
                    yield event
                return
        async for event in self._from_detectors(
                question, f"the model was still calling tools after {self.max_tool_rounds} rounds"):
            yield event

    async def _run_calls(self, calls: list[dict], repeated: list[dict], malformed: list[dict], ran: dict[str, str],
                         turn: list[BaseMessage], deadline: float) -> AsyncGenerator[Event, None]:
        """One round's calls, each answered in `turn`: malformed ones with an error, repeats with a
        pointer to the earlier result, the rest run (until the deadline)."""
        for bad in malformed:
            yield Failure("malformed_tool_call",
                          f"the model sent a tool call that could not be parsed ({bad['name'] or 'unnamed'})")
            turn.append(ToolMessage(json.dumps({"error": "arguments were not valid JSON; call the tool again"}),
                                    tool_call_id=bad["id"]))
        for call in repeated:  # asked again in a later round: the model already has the result
            turn.append(ToolMessage(json.dumps({"note": f"the same call ran before as {ran[call_key(call)]}: "
                                                        "its result is above; answer from it"}),
                                    tool_call_id=call["id"]))
        for call in calls:
            yield ToolCall(call["id"], call["name"], dict(call["args"]))
            try:  # a detector past the deadline is left to finish in its thread, unawaited
                result = await asyncio.wait_for(self._run_tool(call), max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                return
            if not result.ok:
                kind = "unknown_tool" if call["name"] not in self.tools else "bad_arguments"
                yield Failure(kind, f"tool {call['name']!r}: {json.loads(result.content)['error']}")
            else:
                self.ctx.sources.add_result(result.content)
                self._tool_results += 1
                self._turn_results += 1
            yield result
            turn.append(ToolMessage(result.content, tool_call_id=call["id"]))

    async def _from_detectors(self, question: str, why: str) -> AsyncGenerator[Event, None]:
        """When a limit stops the model: the offline analyst answers from the detectors, and says
        why the model's answer is not there."""
        yield Notice(f"{why}: answering from the detectors instead (offline analyst)", replaced_because=why)
        async for event in OfflineAnalyst(self.ctx).answer(question, note=f"_The model did not answer: {why}. "
                                                                           "This answer is the offline analyst's, "
                                                                           "from the detectors._"):
            if isinstance(event, Answer):
                event = replace(event, warnings=[*event.warnings, f"{why}; the offline analyst answered instead"])
                self.turns.append([HumanMessage(question), AIMessage(event.text)])
            yield event

    def _fit(self, turn: list[BaseMessage], config: LLMConfig) -> tuple[list[BaseMessage] | None, str]:
        """The request for this round within the model's context: earlier turns as they fit, then
        this turn's largest tool results cut down; (None, why) when even that does not fit."""
        budget = (config.context_tokens - config.max_tokens) * CHARS_PER_TOKEN - self.fixed_chars
        system = SystemMessage(self.system + self._focus_note())
        size = sum(message_chars(m) for m in turn)
        if size <= budget:
            return [system, *self._context(budget - size), *turn], ""
        results = sorted((m for m in turn if isinstance(m, ToolMessage)), key=message_chars, reverse=True)
        for limit in (4000, 1500, 500):
            for message in results:
                if message_chars(message) > limit:
                    message.content = compact_result(str(message.content), limit)
            size = sum(message_chars(m) for m in turn)
            if size <= budget:
                return ([system, *turn],
                        f"tool results cut to {limit} characters each to fit the model's context "
                        f"({config.context_tokens} tokens, TRACEAGENT_CONTEXT_TOKENS)")
        return None, (f"the question and its tool results do not fit the model's context ({config.context_tokens} "
                      "tokens, TRACEAGENT_CONTEXT_TOKENS)")

    def _checked(self, text: str, incomplete: str | None,
                 final: FinalAnswer | None = None) -> tuple[Answer, str | None]:
        """The turn's answer, checked, and why the detectors' draft answers instead (None: it stands):
        a whole answer that claims nothing the checks can read (_ignores_draft), or one they marked
        (_drafted_instead)."""
        answer = self._answer(text, incomplete, final)
        if not incomplete and self._ignores_draft(text, final):
            return answer, IGNORED_DRAFT
        return answer, self._drafted_instead(answer)

    def _drafted_instead(self, answer: Answer) -> str | None:
        """Why the detectors' draft answers instead of the model's answer, or None: with a draft at
        hand, an answer the checks marked (a number no tool gave, a wrong cause or conclusion, a
        claim off by value) or one cut off at the token limit is not what the user gets; the
        marks become the reason (a model without a draft keeps its marked answer, as before)."""
        if not self.draft or not self._draft_result or not self.replace_marked:
            return None
        marks = [*(f"{u} is in no tool result" for u in answer.unverified), *answer.warnings]
        if answer.incomplete and answer.text.strip():
            marks.append(answer.incomplete)
        if not marks:
            return None
        return bounded("the model's answer was marked: " + "; ".join(marks), 1000)

    def _ignores_draft(self, text: str, final: FinalAnswer | None = None) -> bool:
        """Whether an answer drafted for makes no claim the checks could read: no figure, no cause,
        no conclusion (a model too small to use what it was given). Then the detectors answer; an
        answer that claims something wrong is marked, and gives way to the draft for that (_drafted_instead)."""
        root = self._draft_root
        if not self.draft or not self._draft_has_facts:
            return False
        if final is not None and (final.root_cause or final.quantities or final.helped is not None):
            return False  # its claims are checked by value
        if not text.strip() or TOOL_MARKUP.search(text):
            return False  # an empty answer is incomplete, markup gets its own warning: both are said as they are
        named = blamed_causes(text) or CAUSE_MENTION.search(text) or (root and mentions_cause(text, root))
        # a kernel, an op, a line: a name with more than letters ("step" and "idle" are tool values too)
        quoted = any(len(s) >= 4 and NAMED.search(s) and s in text for s in self.ctx.sources.trace_strings)
        return not (named or quoted or stated_numbers(text, self.ctx.sources) or any(stated_conclusion(text)))

    def _final(self, calls: list[dict], malformed: list[dict], text: str) -> FinalAnswer | None:
        """The model's final answer with its claims, from a final_answer call (written as text too,
        as JSON, by a server without tool calls), or None."""
        for call in calls:
            if call["name"] == FINAL_ANSWER and (final := parse_final(call["args"])) and final.text.strip():
                return final
        if not calls and not malformed:
            if (final := written_final(text)) and final.text.strip():
                return final
            for written in written_calls(text, self.tools):
                if written.name == FINAL_ANSWER and (final := parse_final(written.args)) and final.text.strip():
                    return final
        return None

    async def _draft(self, question: str, turn: list[BaseMessage], ran: dict[str, str]) -> AsyncGenerator[Event, None]:
        """The detectors' draft answer and the tool results it was written from, added to the turn
        as calls already made: the model starts from the right figures and explains them. The
        draft's text quotes trace strings, so it reaches the model inside a tool result, bounded."""
        calls: list[dict] = []
        results: list[ToolMessage] = []
        text = ""
        async for event in OfflineAnalyst(self.ctx).answer(question, note=""):
            if isinstance(event, ToolCall):
                call_id = event.id.replace("offline", "draft")
                calls.append({"name": event.name, "args": event.args, "id": call_id, "type": "tool_call"})
                yield replace(event, id=call_id)
            elif isinstance(event, ToolResult):
                call_id = event.id.replace("offline", "draft")
                results.append(ToolMessage(event.content, tool_call_id=call_id))
                self._tool_results += event.ok
                self._turn_results += event.ok
                yield replace(event, id=call_id)
            elif isinstance(event, Answer):
                text = event.text.strip()
        root = next((json.loads(str(m.content)).get("root_cause") for c, m in zip(calls, results)
                     if c["name"] == "verdict"), self.ctx.analysis.verdict.root_cause)
        draft: dict = {"draft": bounded(text, DRAFT_CHARS), "root_cause": root,
                       "quantities": draft_claims(text, self.structured, self.ctx.sources)}
        if self.claims.comparison is not None:
            draft["helped"] = self.claims.comparison.helped
        calls.append({"name": DRAFT, "args": {}, "id": "draft-answer", "type": "tool_call"})
        # the causes the draft's answer itself names first (a gap's own cause) may be named back
        lead = text.split("\n\n", 1)[0]
        self.claims.about = {GAP_ROOT.get(m.lastgroup or "", "") for m in CAUSE_MENTION.finditer(lead)} - {""}
        self._draft_result = model_json(draft)
        self._draft_root, self._draft_has_facts = root, bool(root or draft["quantities"])
        results.append(ToolMessage(self._draft_result, tool_call_id="draft-answer"))
        # last, where a small model looks: the question again, and what to do with the draft
        turn += [AIMessage(content="", tool_calls=calls), *results, HumanMessage(DRAFT_ASK.format(question=question))]
        ran.update({call_key(c): c["id"] for c in calls})  # the model asking again is pointed at these

    def _answer(self, raw: str, incomplete: str | None, final: FinalAnswer | None = None) -> Answer:
        """The turn's answer: its numbers checked (and its structured claims, when it has them), and
        warnings about how it was produced."""
        text = ShownText(self.config).upto(raw, final=True)
        if not incomplete and not text.strip():
            incomplete = "the model sent an empty answer"
        warnings = []
        if markup := TOOL_MARKUP.search(text):
            warnings.append(f"the answer contains tool-call markup ({markup.group(0)}): the server's chat template "
                            "may not support tool calls (see the README's notes on local servers)")
        if not self._tool_results:
            warnings.append("the model answered without calling any tool: nothing in this answer comes from the trace")
        elif not self._turn_results and (DIAGNOSIS.search(text) or stated_numbers(text)):
            warnings.append("the model called no tool for this question: only earlier answers' tool results back it")
        warnings += self.claims.warnings(text)
        if final is not None:
            warnings += self.structured.warnings(final, self.ctx.sources)
        warnings = list(dict.fromkeys(warnings))  # the prose and the structure can say the same
        return Answer(text, unverified(text, self.ctx.sources), incomplete, warnings)

    async def _run_tool(self, call: dict) -> ToolResult:
        if call["name"] == DRAFT and self._draft_result:  # the draft again: the model read it as a call
            return ToolResult(call["id"], call["name"], self._draft_result, ok=True)
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
        elif isinstance(event, Notice) and not event.progress:
            self.transcript.append(("note", event.message))
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
            elif role == "note":
                out.append(f"> _{text}_")
            else:
                out += ["", titles[role], "", text]
        return "\n".join(out) + "\n"


class ShownText:
    """What of a model's streamed text may be shown so far: escapes made visible and the server's
    secrets redacted (LLMConfig.redact: a server can echo the request's credentials), with a tail
    held back until the text ends, so that a secret split across chunks never shows in part."""

    def __init__(self, config: LLMConfig | None) -> None:
        self._redact = config.redact if config else redact_secrets
        self._hold = config.longest_secret if config else 0
        self._sent = 0

    def upto(self, text: str, final: bool = False) -> str:
        """The part of `text` (all the reply so far) not yet shown; all of the rest when `final`."""
        safe = visible(self._redact(text), keep_lines=True)
        end = len(safe) if final else max(self._sent, len(safe) - self._hold)
        piece, self._sent = safe[self._sent:end], max(self._sent, end)
        return piece


class StreamedReply:
    """One model reply assembled from its stream: text, tool calls (joined by index, so a server
    that repeats the function name in every chunk does not produce `idle_gapsidle_gaps`) and the
    finish reason."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, dict] = {}
        self.finish: str | None = None
        self.chunks = 0
        self.cut_at: int | None = None  # where the text began repeating itself, once it has
        self._checked = 0

    @property
    def settled_text(self) -> str:
        """The text that may show: not what may yet be a repetition's start (looping.settled)."""
        text = self.text
        return text[:settled(text)]

    def looped(self) -> bool:
        """Whether the text has begun repeating itself (looping.py); if so it ends before that,
        and the reply counts as finished. Checked every few dozen characters, not every token."""
        text = self.text
        if self.calls or len(text) - self._checked < 24:
            return False
        self._checked = len(text)
        if (cut := repetition_start(text)) is None:
            return False
        self.parts, self.finish, self.cut_at = [text[:cut].rstrip()], "stop", cut
        return True

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

    def progress(self, seconds: float) -> str:
        """What the reply is doing, for a progress line."""
        if self.calls:
            return f"the model is writing tool calls ({len(self.calls)} so far, {seconds:.0f} s)"
        if not self.chunks:
            return f"waiting for the model's first words ({seconds:.0f} s; a local server reads the prompt first)"
        return f"the model is writing ({seconds:.0f} s)"

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


def call_key(call: dict) -> str:
    """A call's name and arguments, canonical: two calls with the same key return the same result."""
    return call["name"] + json.dumps(call["args"], sort_keys=True)


def bound_calls(calls: list[dict], ran: dict[str, str], most: int) -> tuple[list[dict], list[dict], str]:
    """(calls to run, calls that ran in an earlier round, a notice): identical calls in one reply
    run once, and at most `most` run per round. `ran` (key → id of the call that ran) is updated."""
    run: list[dict] = []
    again: list[dict] = []
    seen: set[str] = set()
    duplicates = over = 0
    for call in calls:
        key = call_key(call)
        if key in seen:
            duplicates += 1
        elif key in ran:
            again.append(call)
            seen.add(key)
        elif len(run) >= most:
            over += 1
            seen.add(key)
        else:
            run.append(call)
            ran[key] = call["id"]
            seen.add(key)
    said = []
    if duplicates:
        said.append(f"{duplicates} identical to another were dropped")
    if over:
        said.append(f"{over} over the limit of {most} per reply were not run")
    notice = f"the model sent {len(calls)} tool calls in one reply: " + "; ".join(said) if said else ""
    return run, again, notice


def message_chars(message: BaseMessage) -> int:
    """A message's size as a request carries it: its text and its tool calls."""
    return len(str(message.content)) + len(json.dumps(getattr(message, "tool_calls", []) or []))


def compact_result(content: str, limit: int) -> str:
    """A tool result cut to about `limit` characters, still JSON: its top-level numbers and short
    strings kept, lists shortened to their first items, and a note that it was cut."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        return json.dumps({"trimmed": content[:limit]})
    if not isinstance(data, dict):
        data = {"items": data}
    kept: dict = {"trimmed": "cut to fit the model's context: call the tool again with a narrower question (top=3)"}
    for key, value in data.items():
        for short in (value, value[:3] if isinstance(value, list) else None, None):
            if short is not None and len(json.dumps(kept | {key: short})) <= limit:
                kept[key] = short
                break
    return json.dumps(kept)


async def paced(stream: AsyncIterator, deadline: float, every: float) -> AsyncIterator:
    """The stream's chunks, with None after each `every` seconds without one (for a progress
    line), until `deadline` (time.monotonic()): then TimeoutError, however the server keeps the
    connection alive (keep-alive comments reset httpx's timeout, never this one)."""
    while True:
        pending = asyncio.ensure_future(anext(stream))
        try:
            while not pending.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                done, _ = await asyncio.wait({pending}, timeout=min(left, every))
                if not done:
                    yield None
        finally:
            if not pending.done():  # stopped early: the read ends before the stream is closed
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
        try:
            chunk = pending.result()
        except StopAsyncIteration:
            return
        yield chunk
