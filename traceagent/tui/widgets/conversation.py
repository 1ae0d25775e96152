"""The conversation: questions, streamed Markdown answers, tool calls as collapsible blocks,
and errors as messages (never a crash). It owns the worker that streams a session's answer: each
event the session emits becomes a typed message, handled here with @on (as Elia's chat does)."""

from __future__ import annotations

import asyncio
import json
from typing import ClassVar

from textual import on, work
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.message import Message
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.collapsible import CollapsibleTitle
from textual.widgets.markdown import MarkdownStream

from ...agent.events import Answer, Cancelled, Event, Failure, Notice, Token, ToolCall, ToolResult
from ...agent.session import Session
from ...format import shorten


class UserMessage(Static):
    """What the user asked (shown as typed: no markup)."""

    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False)

    DEFAULT_CSS = """
    UserMessage { margin: 1 1 0 1; padding: 0 1; background: $boost; color: $text; text-style: bold; }
    """


class ErrorMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False)

    DEFAULT_CSS = """
    ErrorMessage { margin: 0 1; padding: 0 1; color: $error; border-left: thick $error; }
    """


class NoteMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False)

    DEFAULT_CSS = """
    NoteMessage { margin: 0 1; padding: 0 1; color: $text-muted; }
    """


class ProgressNote(NoteMessage):
    DEFAULT_CSS = """
    ProgressNote { margin: 0 1; padding: 0 1; color: $text-muted; text-style: italic; }
    """


class ToolBlock(Collapsible):
    """A tool call: its arguments, and a one-line result summary once it returns."""

    DEFAULT_CSS = """
    ToolBlock { margin: 0 1; padding: 0; border: none; background: $surface; }
    ToolBlock.failed CollapsibleTitle { color: $error; }
    ToolBlock Static { color: $text-muted; }
    """

    def __init__(self, call_id: str, name: str, args: dict) -> None:
        arguments = ", ".join(f"{k}={v!r}" for k, v in args.items())
        self.call_id = call_id
        self.arguments = f"arguments: {json.dumps(args) if args else '(none)'}"
        self.details = Static(self.arguments, markup=False)
        # the model chose the name and arguments: shown as text, never read as markup
        super().__init__(self.details, title=escape(f"tool: {name}({shorten(arguments, 60)})"), collapsed=True)

    def show_result(self, summary: str, ok: bool) -> None:
        self.details.update(f"{self.arguments}\nresult: {summary}")
        self.title = f"{self.title}  {'✓' if ok else '✗'}"
        self.set_class(not ok, "failed")
        # a result that comes right after its call can reach the title before the title has
        # mounted, and its first drawing would be the last: draw it again once the screen has
        self.call_after_refresh(lambda: self.query_one(CollapsibleTitle).refresh(layout=True))


class AnswerBlock(Markdown):
    """An answer as it streams; unverified numbers, an incomplete answer's reason and warnings are
    shown under it when it ends."""

    DEFAULT_CSS = """
    AnswerBlock { margin: 0 1; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__("", open_links=False)  # an answer may quote a trace string shaped as a link
        self.text = ""
        self._stream: MarkdownStream | None = None

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        """A link is shown, not opened: answers quote trace strings, and a trace may name a kernel
        '[docs](http://…)'."""
        self.notify(f"Not opened (answers can quote trace strings): {event.href}", markup=False)

    async def add(self, text: str) -> None:
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        self.text += text
        await self._stream.write(text)

    async def finish(self, unverified: list[str] | None = None, note: str | None = None,
                     warnings: list[str] | None = None, text: str | None = None) -> None:
        """`text`: the answer as it ended, where it differs from what streamed (a repetition cut)."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if text is not None and text != self.text:
            self.text = text
            await self.update(text)
        extra = ""
        if unverified:
            extra += "\n\n> **Unverified numbers** (in no tool result): " + ", ".join(f"`{u}`" for u in unverified)
        if note:
            extra += f"\n\n> _{note}_"
        for warning in warnings or []:
            extra += f"\n\n> **Warning:** {warning}"
        if extra:
            self.text += extra
            await self.update(self.text)


class Conversation(VerticalScroll):
    DEFAULT_CSS = """
    Conversation { height: 1fr; scrollbar-size-vertical: 1; }
    """

    class Streamed(Message, bubble=False):
        """A session event, as the streaming worker posts it: one subclass per kind of event
        (handled here: the conversation draws them)."""

        def __init__(self, event: Event | None = None) -> None:
            super().__init__()
            self.event = event

    class TokenStreamed(Streamed):
        """A piece of the answer."""

        event: Token

    class ToolCalled(Streamed):
        """The model (or the offline analyst) called a tool."""

        event: ToolCall

    class ToolReturned(Streamed):
        """A tool's result."""

        event: ToolResult

    class Noticed(Streamed):
        """What the session did that the user should know, or a progress line."""

        event: Notice

    class Failed(Streamed):
        """Something went wrong: shown as an error line, the conversation goes on."""

        event: Failure

    class Answered(Streamed):
        """The turn's final answer."""

        event: Answer

    class Stopped(Streamed):
        """The answer was stopped (Escape)."""

    #: the message each kind of session event becomes
    MESSAGES: ClassVar[dict[type, type[Streamed]]] = {
        Token: TokenStreamed, ToolCall: ToolCalled, ToolResult: ToolReturned, Notice: Noticed, Failure: Failed,
        Answer: Answered, Cancelled: Stopped}

    def __init__(self, *children, **kwargs) -> None:
        super().__init__(*children, **kwargs)
        self._progress: ProgressNote | None = None  # the progress line, while one shows
        self._answer: AnswerBlock | None = None  # the answer streaming now
        self._tools: dict[str, ToolBlock] = {}  # this turn's tool calls by id

    @work(exclusive=True, group="chat")
    async def ask(self, session: Session, question: str, echo: bool = False) -> None:
        """Stream the session's answer to a question; each event is posted as its message."""
        if echo:
            await self.add_user(question)
        self._answer, self._tools = None, {}
        events = session.ask(question)
        try:
            async for event in events:
                self.post_message(self.MESSAGES[type(event)](event))
                if isinstance(event, Cancelled):
                    return
        except asyncio.CancelledError:
            await events.aclose()  # the session keeps what was said, marked stopped, before a save can run
            self.post_message(self.Stopped())
            raise

    def stop(self) -> None:
        """Stop the answer that is streaming (its worker is cancelled)."""
        self.workers.cancel_group(self, "chat")

    @on(Noticed)
    async def _noticed(self, message: Noticed) -> None:
        if message.event.progress:
            await self.show_progress(message.event.message)
            return
        await self.clear_progress()
        if message.event.replaced_because and self._answer is not None:  # what streamed is not the answer: say so
            await self._answer.finish(note=f"Replaced: {message.event.replaced_because}")
            self._answer = None
        await self.add_note(message.event.message)

    @on(TokenStreamed)
    async def _token(self, message: TokenStreamed) -> None:
        await self.clear_progress()
        if self._answer is None:
            self._answer = await self.add_answer()
        await self._answer.add(message.event.text)
        self.scroll_end(animate=False)

    @on(ToolCalled)
    async def _tool_called(self, message: ToolCalled) -> None:
        await self.clear_progress()
        call = message.event
        self._tools[call.id] = block = ToolBlock(call.id, call.name, call.args)  # known before it mounts
        await self.mount(block)
        self.scroll_end(animate=False)

    @on(ToolReturned)
    async def _tool_returned(self, message: ToolReturned) -> None:
        await self.clear_progress()
        if (block := self._tools.get(message.event.id)) is not None:
            block.show_result(message.event.summary, message.event.ok)

    @on(Failed)
    async def _failed(self, message: Failed) -> None:
        await self.clear_progress()
        await self.add_error(message.event.message)

    @on(Answered)
    async def _answered(self, message: Answered) -> None:
        answer = message.event
        await self.clear_progress()
        if self._answer is None:
            self._answer = await self.add_answer()
            await self._answer.add(answer.text)
        await self._answer.finish(answer.unverified, warnings=answer.warnings, text=answer.text,
                                  note=f"Incomplete: {answer.incomplete}" if answer.incomplete else None)

    @on(Stopped)
    async def _stopped(self, message: Stopped) -> None:
        await self.clear_progress()  # "waiting for the model…" is over
        if self._answer is not None:
            await self._answer.finish(note="stopped (Escape)")
            self._answer = None
        else:
            await self.add_note("Stopped.")

    def show_waiting(self, question: str | None) -> None:
        """A question (when it is shown) that waits for the trace to load, and a line saying so."""
        waiting = [UserMessage(question)] if question is not None else []
        self.mount(*waiting, NoteMessage("The trace is still loading; this question is next."))
        self.scroll_end(animate=False)

    async def add_user(self, text: str) -> None:
        await self.mount(UserMessage(text))
        self.scroll_end(animate=False)

    async def add_answer(self) -> AnswerBlock:
        block = AnswerBlock()
        await self.mount(block)
        self.scroll_end(animate=False)
        return block

    async def add_error(self, text: str) -> None:
        await self.mount(ErrorMessage(text))
        self.scroll_end(animate=False)

    async def add_note(self, text: str) -> None:
        await self.mount(NoteMessage(text))
        self.scroll_end(animate=False)

    async def show_progress(self, text: str) -> None:
        """One line that says what the model is doing while nothing else shows (a long wait for a
        local server, a reply that streams dozens of tool calls); the next progress replaces it."""
        if self._progress is not None and self._progress.is_attached:
            self._progress.update(text)
        else:
            self._progress = ProgressNote(text)
            await self.mount(self._progress)
        self.scroll_end(animate=False)

    async def clear_progress(self) -> None:
        """Called for every event of an answer, tokens included: no DOM query unless a line shows."""
        if self._progress is not None:
            line, self._progress = self._progress, None
            await line.remove()
