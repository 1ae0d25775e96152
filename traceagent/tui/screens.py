"""The help screen: keys and the questions the offline analyst answers."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from ..agent.offline import CANNED_QUESTIONS

HELP = """\
# traceagent

Ask about the loaded trace. Every number in an answer comes from a detector; numbers a model
says that no tool returned are marked **unverified**.

| key | action |
|---|---|
| Enter | ask the question |
| Up / Down | earlier questions |
| Escape | stop the running answer |
| Ctrl+N | new conversation |
| Ctrl+S | save the conversation as Markdown |
| Ctrl+R | write the diagnosis report (Markdown) |
| Ctrl+B | show or hide the side panel |
| F5 | record a `traceagent profile` run again and compare the new run with it |
| Ctrl+P | command palette: these actions and the questions below |
| F1 | this help |
| Ctrl+Q | quit |

Questions the offline analyst answers without a model:

{questions}

To talk it through with an LLM, set `OPENAI_API_KEY` (or `OPENAI_BASE_URL` for a local
OpenAI-compatible server) before starting traceagent.

Press Escape to close this help.
"""


class HelpScreen(ModalScreen):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 84; height: 80%; border: round $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,f1,q", "app.pop_screen", "Close help")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP.format(questions="\n".join(f"- {q}" for q in CANNED_QUESTIONS)))
