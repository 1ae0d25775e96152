"""The question input, with history on up/down like a shell."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input


class PromptInput(Input):
    """Enter submits; up and down walk through earlier questions (nothing typed is lost)."""

    DEFAULT_CSS = """
    PromptInput { dock: bottom; margin: 0 1; }
    """
    BINDINGS = [
        Binding("up", "history(-1)", "Previous question", show=False),
        Binding("down", "history(1)", "Next question", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(placeholder="Ask about this trace: why is my GPU idle?  (F1 for help)", **kwargs)
        self.history: list[str] = []
        self._position = 0
        self._draft = ""

    def remember(self, question: str) -> None:
        if question and (not self.history or self.history[-1] != question):
            self.history.append(question)
        self._position = len(self.history)
        self._draft = ""

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        if self._position == len(self.history):
            self._draft = self.value  # keep what is being typed
        self._position = max(0, min(len(self.history), self._position + step))
        self.value = self.history[self._position] if self._position < len(self.history) else self._draft
        self.cursor_position = len(self.value)
