"""The side panel: the trace in a few lines, the verdict, and the findings list (selecting a
finding asks about it)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Markdown, OptionList, Static
from textual.widgets.option_list import Option

from ...detect.analysis import Analysis
from ...format import device_lines, duration, percent, shorten


class SidePanel(VerticalScroll):
    DEFAULT_CSS = """
    SidePanel { width: 46; border-left: solid $primary-darken-2; padding: 0 1; }
    SidePanel > .title { text-style: bold; color: $accent; margin-top: 1; }
    SidePanel #summary { height: auto; }
    SidePanel #verdict { height: auto; margin: 0; padding: 0; }
    SidePanel OptionList { height: auto; max-height: 14; border: none; padding: 0; }
    """

    class FindingSelected(Message):
        def __init__(self, question: str) -> None:
            super().__init__()
            self.question = question

    questions: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static("Trace", classes="title")
        yield Static("Loading…", id="summary", markup=False)
        yield Static("Verdict", classes="title")
        yield Markdown("", id="verdict")
        yield Static("Findings (Enter asks)", classes="title")
        yield OptionList(id="findings")

    async def show(self, analysis: Analysis) -> None:
        data = analysis.to_dict()
        t = data["trace"]
        lines = [f"{t['format']}, {t['ranks']} rank(s)", ", ".join(t["devices"]) or "no devices"]
        for r in data["ranks"]:
            lines += device_lines(r)
        self.query_one("#summary", Static).update("\n".join(lines))
        v = data["verdict"]
        verdict = f"**{v['headline']}**\n\n{v['next_step']}" if v["limiter"] else f"**{v['headline']}**"
        await self.query_one("#verdict", Markdown).update(verdict)
        findings = self.query_one("#findings", OptionList)
        found = _findings(data)
        self.questions = [question for _, question in found]
        findings.clear_options()
        findings.add_options([Option(label) for label, _ in found])

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.FindingSelected(self.questions[event.option_index]))


def _findings(data: dict) -> list[tuple[str, str]]:
    """(label, the question it asks) for what the detectors found on the first rank."""
    if not data["verdict"]["limiter"]:
        return []
    r = data["ranks"][0]
    found = []
    idle = r["idle"]
    for cause, pct in sorted(idle["by_cause_pct"].items(), key=lambda kv: -kv[1])[:3]:
        found.append((f"idle {percent(pct)}: {cause}", f"Tell me about the idle time from {cause}."))
    if r["memcpy"]["count"]:
        m = r["memcpy"]
        found.append((f"copies {percent(m['share_pct'])}, {m['pageable_count']} pageable",
                      "How much time goes to memcpy?"))
    if r["comm"]["kernels"]:
        found.append((f"communication exposed {percent(r['comm']['exposed_of_comm_pct'])}", "Is communication overlapped?"))
    for k in r["hot_kernels"][:3]:
        found.append((f"kernel {shorten(k['short_name'], 24)} {percent(k['share_of_busy_pct'])}",
                      "What are the hot kernels?"))
    if r["steps"]["count"]:
        found.append((f"{r['steps']['count']} steps, mean {duration(r['steps']['mean_us'])}", "What about the steps?"))
    return found
