"""The conversation: questions, streamed Markdown answers, tool calls as collapsible blocks,
and errors as messages (never a crash)."""

from __future__ import annotations

import json

from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.markdown import MarkdownStream

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


class AnswerBlock(Markdown):
    """An answer as it streams; unverified numbers, an incomplete answer's reason and warnings are
    shown under it when it ends."""

    DEFAULT_CSS = """
    AnswerBlock { margin: 0 1; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__("")
        self.text = ""
        self._stream: MarkdownStream | None = None

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

    _progress: ProgressNote | None = None  # the progress line, while one shows

    async def add_user(self, text: str) -> None:
        await self.mount(UserMessage(text))
        self.scroll_end(animate=False)

    async def add_answer(self) -> AnswerBlock:
        block = AnswerBlock()
        await self.mount(block)
        self.scroll_end(animate=False)
        return block

    async def add_tool(self, call_id: str, name: str, args: dict) -> ToolBlock:
        block = ToolBlock(call_id, name, args)
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
