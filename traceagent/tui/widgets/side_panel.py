"""The side panel: the trace in a few lines (every rank's GPUs), the verdict, which rank and GPU
the timeline and findings show (a select), and the findings list (selecting one asks about it)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Markdown, OptionList, Select, Static
from textual.widgets.option_list import Option

from ...detect.analysis import Analysis, RankAnalysis
from ...detect.compare.diff import DiffResult
from ...detect.registry import DETECTORS
from ...detect.verdict.diagnose import Verdict
from ...sentences import device_lines
from ...text import md_prose
from ..scope import default_scope, scope_options


class SidePanel(VerticalScroll):
    DEFAULT_CSS = """
    SidePanel { width: 46; border-left: solid $primary-darken-2; padding: 0 1; }
    SidePanel > .title { text-style: bold; color: $accent; margin-top: 1; }
    SidePanel #summary { height: auto; }
    SidePanel #verdict { height: auto; margin: 0; padding: 0; }
    SidePanel OptionList { height: auto; max-height: 14; border: none; padding: 0; }
    SidePanel #summary-scroll { height: auto; max-height: 10; }
    SidePanel Select { margin: 0; }
    """

    class FindingSelected(Message):
        def __init__(self, question: str) -> None:
            super().__init__()
            self.question = question

    class ScopeSelected(Message):
        """The rank and GPU the user chose in the select."""

        def __init__(self, rank: int, device: int) -> None:
            super().__init__()
            self.rank, self.device = rank, device

    questions: list[str] = []
    #: the rank and GPU shown (bound to the app's scope); None: the verdict's rank
    scope: reactive[tuple[int, int] | None] = reactive(None, init=False)

    def compose(self) -> ComposeResult:
        yield Static("Trace", classes="title")
        with VerticalScroll(id="summary-scroll"):
            yield Static("Loading…", id="summary", markup=False)
        yield Static("Compared with", classes="title comparison")
        yield Static("", id="comparison", classes="comparison", markup=False)
        yield Static("Verdict", classes="title")
        yield Markdown("", id="verdict")
        yield Static("Showing", classes="title")
        yield Select([], id="scope", allow_blank=True, prompt="rank · GPU")
        yield Static("Findings (Enter asks)", classes="title")
        yield OptionList(id="findings")

    def on_mount(self) -> None:
        self.query(".comparison").set(display=False)  # shown when a second trace is loaded

    async def show(self, analysis: Analysis, other: Analysis | None = None, comparison: DiffResult | None = None) -> None:
        if other is not None and comparison is not None:
            self.query_one("#comparison", Static).update(f"{other.path}\n{comparison.headline}")
            self.query(".comparison").set(display=True)
        self.analysis = analysis
        lines = [f"{analysis.format}, {len(analysis.ranks)} rank(s)", ", ".join(analysis.devices) or "no devices"]
        for r in analysis.ranks:
            lines += device_lines(r)
        self.query_one("#summary", Static).update("\n".join(lines))
        v = analysis.verdict
        # trace strings in the verdict show as written: no link or markup comes out of a kernel's name
        verdict = f"**{md_prose(v.headline)}**" + (f"\n\n{md_prose(v.next_step)}" if v.limiter else "")
        await self.query_one("#verdict", Markdown).update(verdict)
        self.query_one("#scope", Select).set_options([(Text(label), value) for label, value in scope_options(analysis)])
        self.watch_scope(self.scope)

    def watch_scope(self, scope: tuple[int, int] | None) -> None:
        """Show a scope's rank and its findings; the select says which (set here, it is not the user's choice)."""
        if not hasattr(self, "analysis"):
            return
        shown = scope or default_scope(self.analysis)
        if shown is not None:
            with self.prevent(Select.Changed):
                self.query_one("#scope", Select).value = shown
        self.show_findings(shown[0] if shown is not None else self.analysis.focus.rank)

    def show_findings(self, rank: int | None) -> None:
        """The findings of one rank (the verdict's at first)."""
        findings = self.query_one("#findings", OptionList)
        found = _findings(self.analysis.rank(rank), self.analysis.verdict, len(self.analysis.ranks) > 1)
        self.questions = [question for _, question in found]
        findings.clear_options()
        findings.add_options([Option(Text(label)) for label, _ in found])  # Text: trace names are never markup

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if not isinstance(event.value, tuple) or not hasattr(self, "analysis"):  # Select.BLANK: nothing chosen
            return
        rank, device = event.value
        self.post_message(self.ScopeSelected(rank, device))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.FindingSelected(self.questions[event.option_index]))


def _findings(r: RankAnalysis, verdict: Verdict, several_ranks: bool) -> list[tuple[str, str]]:
    """(label, the question it asks) for what the detectors found on one rank: each detector's
    side-panel findings (detectors/base.py: `findings`), in their order."""
    if not verdict.limiter:
        return []
    on = f" on rank {r.rank}" if several_ranks else ""
    return [found for d in DETECTORS for found in d.panel(r.results.get(d.name), on)]
