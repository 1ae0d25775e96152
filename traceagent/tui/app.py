"""The chat app: compose the screen, bind keys, and run the slow work (loading, detectors, the
model) in workers so the UI stays responsive."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from ..agent.offline import CANNED_QUESTIONS
from ..agent.session import Session
from ..agent.tools import AnalysisContext
from ..detect.analysis import Analysis
from ..detect.compare.diff import diff
from ..errors import TraceError
from ..outputs import write_atomically
from ..request import AnalyzeRequest
from .loader import load_in_child
from .scope import default_scope, scope_options
from .screens import HelpScreen
from .widgets.conversation import Conversation
from .widgets.prompt import PromptInput
from .widgets.side_panel import SidePanel
from .widgets.timeline import Timeline


class TraceAgentApp(App):
    """`traceagent chat`: talk about a trace with an LLM (or the offline analyst)."""

    TITLE = "traceagent"
    CSS_PATH = Path(__file__).parent / "app.tcss"
    #: the rank and GPU the user chose in the side panel (or the palette); None: the verdict's rank.
    #: The one scope: the timeline and the side panel are bound to it, and the session reads it
    scope: reactive[tuple[int, int] | None] = reactive(None, init=False)

    BINDINGS = [
        Binding("escape", "cancel", "Stop answer"),
        Binding("ctrl+n", "new_conversation", "New"),
        Binding("ctrl+s", "save_transcript", "Save"),
        Binding("ctrl+r", "write_report", "Report"),
        Binding("ctrl+b", "toggle_panel", "Panel"),
        Binding("f5", "reprofile", "Re-profile"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "quit", "Quit"),
    ]

    def __init__(self, request: AnalyzeRequest | str, compare: AnalyzeRequest | str | None = None, model=None,
                 config=None, save_dir: str | Path = ".") -> None:
        """`request`: the analysis to open (a path: with every default); `compare`: a second one (a
        path: with the first's options, request.of_other)."""
        super().__init__()
        self.request = request if isinstance(request, AnalyzeRequest) else AnalyzeRequest(request)
        self.compare_request = (compare if isinstance(compare, AnalyzeRequest) or compare is None
                                else self.request.of_other(compare))
        self.path = str(self.request.source)
        self.compare = str(self.compare_request.source) if self.compare_request is not None else None
        self.model, self.config = model, config
        self.save_dir = Path(save_dir)
        self.session: Session | None = None
        self.analysis: Analysis | None = None
        self.waiting: list[str] = []  # questions asked before the trace finished loading
        self._model_title = "offline analyst: no LLM configured" if model is None else (
            config.describe() if config else "LLM")
        self.sub_title = self._model_title
        if self.compare:  # the header says both traces are loaded
            self.title = f"traceagent · {Path(self.path).name} vs {Path(self.compare).name}"

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="main"):
                yield Timeline(id="timeline").data_bind(TraceAgentApp.scope)
                yield Conversation(id="conversation")
                yield PromptInput(id="prompt")
            yield SidePanel(id="panel").data_bind(TraceAgentApp.scope)
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one(PromptInput).focus()
        await self.query_one(Conversation).add_note(f"Loading {Path(self.path).name} …")
        self.load_trace()

    # -- loading ------------------------------------------------------------------------------

    @work(exclusive=True, group="load")
    async def load_trace(self) -> None:
        conversation = self.query_one(Conversation)
        try:
            analysis, other = await asyncio.to_thread(self._load_and_analyze)
        except TraceError as exc:
            await conversation.add_error(f"Cannot load the trace: {exc}")
            self.query_one("#summary", Static).update("Not loaded.")
            return
        self.analysis = analysis
        self.session = Session(AnalysisContext(analysis, other, focus=self.scope), self.model, self.config)
        comparison = await asyncio.to_thread(diff, analysis, other) if other is not None else None
        await self.query_one(SidePanel).show(analysis, other, comparison)
        self.query_one(Timeline).show(analysis)
        self._say_shown(self.scope or default_scope(analysis))
        await conversation.add_note(f"Loaded: {analysis.verdict.headline}. Ask a question, or F1 for help.")
        for question in self.waiting:
            self.ask(question)
        self.waiting.clear()

    def _load_and_analyze(self):
        """In a worker thread that waits on a child process (see tui/loader.py): the UI's
        interpreter never parses."""
        return load_in_child(self.request, self.compare_request)

    # -- asking ---------------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        question = event.value.strip()
        if not question:
            return
        prompt = self.query_one(PromptInput)
        prompt.remember(question)
        prompt.value = ""
        self.ask(question, echo=True)

    def on_side_panel_finding_selected(self, message: SidePanel.FindingSelected) -> None:
        self.ask(message.question, echo=True)

    def on_side_panel_scope_selected(self, message: SidePanel.ScopeSelected) -> None:
        self.scope = (message.rank, message.device)

    async def watch_scope(self, scope: tuple[int, int] | None) -> None:
        """The rank and GPU the user chose: the tools' default from now on, for the model and the
        offline analyst alike (a question that names another still gets that one)."""
        if self.session is not None:
            self.session.ctx.focus = scope
        if scope is not None:
            self._say_shown(scope)
            await self.query_one(Conversation).add_note(f"Questions are now about rank {scope[0]}, GPU {scope[1]} "
                                                        "unless they name another.")

    def _say_shown(self, scope: tuple[int | None, int] | None) -> None:
        """The header names the rank and GPU the timeline and findings show."""
        self.sub_title = self._model_title + (f" · showing rank {scope[0]}, GPU {scope[1]}" if scope else "")

    def _pick_scope(self, rank: int, device: int) -> None:
        """From the command palette: the same as choosing it in the side panel's select."""
        self.scope = (rank, device)

    def ask(self, question: str, echo: bool = False) -> None:
        """Ask the session; the conversation streams the answer. A question asked while the trace
        loads waits in self.waiting, and is asked once it has loaded."""
        conversation = self.query_one(Conversation)
        if self.session is not None:
            conversation.ask(self.session, question, echo)
            return
        self.waiting.append(question)
        conversation.show_waiting(question if echo else None)

    # -- actions --------------------------------------------------------------------------------

    def action_cancel(self) -> None:
        if self.session is not None:
            self.session.cancel()
        self.query_one(Conversation).stop()

    async def action_new_conversation(self) -> None:
        self.action_cancel()
        if self.session is not None:
            self.session.reset()
        conversation = self.query_one(Conversation)
        await conversation.remove_children()
        await conversation.add_note("New conversation.")

    def action_save_transcript(self) -> None:
        if self.session is None:
            self.notify("Nothing to save yet.", severity="warning")
            return
        path = self._write(f"traceagent-transcript-{datetime.now():%Y%m%d-%H%M%S}.md", self.session.transcript_markdown())
        if path:
            self.notify(f"Saved the conversation to {path}", markup=False)

    def action_write_report(self) -> None:
        if self.analysis is None:
            self.notify("The trace is still loading.", severity="warning")
            return
        from ..report.markdown import render_markdown

        path = self._write(f"traceagent-report-{datetime.now():%Y%m%d-%H%M%S}.md", render_markdown(self.analysis))
        if path:
            self.notify(f"Wrote the diagnosis to {path}", markup=False)

    def _write(self, name: str, text: str) -> Path | None:
        path = self.save_dir / name
        try:
            write_atomically(path, text)
        except OSError as exc:
            self.notify(f"Cannot write {path}: {exc.strerror}", severity="error", markup=False)
            return None
        return path

    def action_reprofile(self) -> None:
        """Record the run this trace came from again (`traceagent profile`), then show the new run
        beside it, compared."""
        from ..profile.runs import run_of

        run = run_of(self.path)
        if run is None:
            self.notify("Re-profiling needs a run recorded by `traceagent profile` (open its traces folder): this trace "
                        "is not one.", severity="warning", markup=False)
            return
        if any("***" in arg for arg in run[1].command):
            self.notify(f"Run {run[1].id}'s command had a secret-looking value, kept masked: record it again yourself "
                        "with traceagent profile.", severity="warning", markup=False)
            return
        self.reprofile(*run)

    @work(exclusive=True, group="profile")
    async def reprofile(self, folder: Path, record) -> None:
        from ..profile.record import ProfileError, again, record_run

        conversation = self.query_one(Conversation)
        await conversation.add_note(f"Re-profiling {record.script} as run {record.id} was recorded …")
        options = again(record, folder.parent, label=f"again: {record.label or record.script}", quiet=True)
        try:
            recorded = await asyncio.to_thread(record_run, options)
        except (ProfileError, ValueError) as exc:
            await conversation.add_error(f"Cannot re-profile: {exc}")
            return
        new = recorded.record
        if not new.traces:
            await conversation.add_error(f"Run {new.id} has no trace ({new.status}): {'; '.join(new.notes)}")
            return
        self.compare_request = self.request.of_other(str(recorded.folder / "traces"))
        self.compare = str(self.compare_request.source)
        self.title = f"traceagent · {record.id} vs {new.id}"
        await conversation.add_note(f"Recorded run {new.id}: {new.comparison or new.headline}. Loading it beside this "
                                    "one …")
        self.load_trace()

    def action_toggle_panel(self) -> None:
        panel = self.query_one(SidePanel)
        panel.display = not panel.display

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("New conversation", "Start over about the same trace", self.action_new_conversation)
        yield SystemCommand("Save transcript", "Save the conversation as Markdown", self.action_save_transcript)
        yield SystemCommand("Write report", "Write the diagnosis report as Markdown", self.action_write_report)
        yield SystemCommand("Toggle side panel", "Show or hide the trace summary", self.action_toggle_panel)
        yield SystemCommand("Re-profile", "Record this run's command again and compare the new run with it",
                            self.action_reprofile)
        yield SystemCommand("Help", "Keys and questions", self.action_help)
        if self.analysis is not None:
            for label, (rank, device) in scope_options(self.analysis)[:64]:
                yield SystemCommand(f"Show {label}", "Timeline and findings for this rank and GPU",
                                    lambda r=rank, d=device: self._pick_scope(r, d))
        for question in CANNED_QUESTIONS:
            yield SystemCommand(f"Ask: {question}", "Ask this question about the trace",
                                lambda q=question: self._ask_from_palette(q))

    def _ask_from_palette(self, question: str) -> None:
        if self.session is None:
            self.waiting.append(question)
        else:
            self.ask(question, echo=True)
