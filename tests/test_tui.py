"""The chat app, driven with Textual's Pilot: questions, tool blocks, streaming, Escape, findings,
transcripts, help, errors; and snapshots of the main screen at 120x40."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
from functools import cache
from pathlib import Path

import pytest
from conftest import CPU_ONLY, RESNET_NW0, RESNET_NW4, analyzed
from fakes import ScriptedChatModel, tool_call
from langchain_core.messages import AIMessage

from traceagent.request import AnalyzeRequest
from traceagent.tui.app import TraceAgentApp
from traceagent.tui.screens import HelpScreen
from traceagent.tui.widgets.conversation import AnswerBlock, Conversation, ErrorMessage, NoteMessage, ToolBlock, UserMessage
from traceagent.tui.widgets.prompt import PromptInput
from traceagent.tui.widgets.side_panel import SidePanel

SIZE = (120, 40)
# one worker runs them all: the module fixtures (a cluster, loaded apps) start once
pytestmark = pytest.mark.xdist_group("tui")


@cache
def _loaded(path: str, compare: str | None):
    """What the loader's child would send: the session's analyses (test_tui's loading tests run the child)."""
    return analyzed(Path(path)), analyzed(Path(compare)) if compare else None


class InProcessApp(TraceAgentApp):
    """Reads one load per session in this process instead of starting the loader's child process:
    the tests below about loading (a bad trace, keys while loading) run the real child."""

    def _load_and_analyze(self):
        return _loaded(self.path, self.compare)


def dataloader_pct() -> float:
    """The ResNet50 nw0 trace's data-loading idle share, as the idle detector reports it."""
    return analyzed(RESNET_NW0).ranks[0].findings.idle.cause_pct("dataloader")


async def loaded(app: TraceAgentApp, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


async def type_in(pilot, question: str) -> None:
    """Put a question in the prompt and submit it, as Enter does (its binding's action): key by
    key takes 60 ms a key under Pilot, and a pressed key waits for a streaming answer to pause
    (test_ui_answers_keys_while_the_trace_loads types keys and presses Enter)."""
    await pilot.click("#prompt")
    prompt = pilot.app.query_one(PromptInput)
    prompt.value = question
    prompt.cursor_position = len(question)
    await prompt.action_submit()


async def ask(pilot, app: TraceAgentApp, question: str) -> None:
    await type_in(pilot, question)
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def scripted(*responses, delay_s: float = 0.0) -> ScriptedChatModel:
    return ScriptedChatModel(received=[], responses=list(responses), delay_s=delay_s)


def test_question_gets_tool_blocks_and_a_streamed_answer(tmp_path):
    said = f"The GPU waits on data loading: {dataloader_pct():.1f}% of the span."
    model = scripted(tool_call("idle_gaps", {"cause": "dataloader"}), AIMessage(content=f"{said} Also 99 ms of mystery."),
                     AIMessage(content="Because the", response_metadata={"finish_reason": "length"}))

    async def run():
        app = InProcessApp(str(RESNET_NW0), model=model, save_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await ask(pilot, app, "Why is my GPU idle?")
            users = [str(u.content) for u in app.query(UserMessage)]
            tools = list(app.query(ToolBlock))
            await ask(pilot, app, "And why is that?")
            return users, tools, [b.text for b in app.query(AnswerBlock)]

    users, tools, blocks = asyncio.run(run())
    assert users == ["Why is my GPU idle?"]
    # the detectors' draft (its verdict and idle_gaps calls), then the model's own call
    assert [n for t in tools for n in ("verdict", "idle_gaps") if n in str(t.title)][:3] == ["verdict", "idle_gaps",
                                                                                               "idle_gaps"]
    assert all("✓" in str(t.title) for t in tools)
    # what streamed stays, closed as replaced with its mark; the detectors' answer follows in its own block
    streamed, detectors, cut = blocks[0], blocks[1], blocks[2]
    assert streamed.startswith(said) and "Replaced: the model's answer was marked: 99 ms is in no tool result" in streamed
    assert "The model did not answer" in detectors and "waiting for data loading" in detectors
    assert cut.startswith("Because the") and "the model reached its limit" in cut  # not shown as finished


def test_a_link_in_an_answer_is_shown_not_opened(tmp_path):
    # a model (or the offline analyst) quoting a kernel named "[docs](http://e/x)" makes a link
    model = scripted(AIMessage(content="See [docs](http://e/x) for the kernel."))

    async def run():
        app = InProcessApp(str(RESNET_NW0), model=model, save_dir=tmp_path)
        opened: list[str] = []
        app.open_url = lambda url, **_: opened.append(url)  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await ask(pilot, app, "What are the hot kernels?")
            block = app.query(AnswerBlock).last()
            block.post_message(AnswerBlock.LinkClicked(block, "http://e/x"))
            await pilot.pause()
            return opened, [str(n.message) for n in app._notifications]

    opened, notes = asyncio.run(run())
    assert opened == [] and any("http://e/x" in n for n in notes)


def test_escape_stops_the_answer(tmp_path):
    model = scripted(tool_call("verdict"), AIMessage(content=" ".join(f"word{i}" for i in range(400))), delay_s=0.02)

    async def run():
        app = InProcessApp(str(RESNET_NW0), model=model, save_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await type_in(pilot, "tell me everything")
            for _ in range(200):  # until the answer streams (after the detectors' draft and the tool call)
                if app.query(AnswerBlock) and "word3" in app.query_one(AnswerBlock).text:
                    break
                await pilot.pause(0.05)
            await pilot.press("escape")
            await app.workers.wait_for_complete()
            await pilot.pause()
            text = app.query_one(AnswerBlock).text
            await pilot.press("ctrl+s")
            await pilot.pause()
            return text

    text = asyncio.run(run())
    assert "stopped (Escape)" in text
    assert "word399" not in text
    saved = next(tmp_path.glob("traceagent-transcript-*.md")).read_text()
    assert "word0 word1" in saved and "_(stopped: the answer was cut off here)_" in saved  # what was said, marked


def test_a_kernel_finding_asks_about_that_kernel_and_compare_shows_both_traces():
    top = analyzed(RESNET_NW0).focus.findings.kernels.top[0]

    async def run():
        app = InProcessApp(str(RESNET_NW0), compare=str(RESNET_NW4))  # offline analyst
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            findings = app.query_one("#findings")
            labels = [str(o.prompt) for o in findings.options]
            findings.focus()
            findings.highlighted = next(i for i, label in enumerate(labels) if label.startswith("kernel"))
            await pilot.press("enter")
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            comparison = app.query_one("#comparison")
            return ([str(u.content) for u in app.query(UserMessage)], app.query_one(AnswerBlock).text, app.title,
                    comparison.display, str(comparison.render()))

    users, text, title, shown, comparison = asyncio.run(run())
    assert users == [f"Why is `{top.short_name}` hot?"]  # short: as it is
    assert f"ran {top.count} times" in text and top.short_name in text
    assert title == f"traceagent · {RESNET_NW0.name} vs {RESNET_NW4.name}"
    assert shown and str(RESNET_NW4) in comparison and "(gone)" in comparison  # the comparison's headline


def test_save_transcript_and_read_it_back(tmp_path):
    async def run():
        app = InProcessApp(str(RESNET_NW0), save_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await ask(pilot, app, "What are the hot kernels?")
            await pilot.press("ctrl+s")
            await pilot.press("ctrl+r")
            await pilot.pause()

    asyncio.run(run())
    transcript = next(tmp_path.glob("traceagent-transcript-*.md")).read_text()
    assert "## You" in transcript and "What are the hot kernels?" in transcript
    assert "dgrad_engine" in transcript and "> tool: `hot_kernels({})`" in transcript
    report = next(tmp_path.glob("traceagent-report-*.md")).read_text()
    assert report.startswith("# traceagent diagnosis")


def test_help_history_panel_and_new_conversation():
    async def run():
        app = InProcessApp(str(RESNET_NW0))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await pilot.press("f1")
            await pilot.pause()
            help_open = isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            await pilot.pause()
            await ask(pilot, app, "summarize")
            await pilot.press("up")
            recalled = app.query_one(PromptInput).value
            await pilot.press("ctrl+b")
            panel_hidden = not app.query_one(SidePanel).display
            await pilot.press("ctrl+n")
            await pilot.pause()
            cleared = len(app.query(UserMessage)) == 0 and app.session.history == []
            return help_open, recalled, panel_hidden, cleared

    help_open, recalled, panel_hidden, cleared = asyncio.run(run())
    assert help_open and recalled == "summarize" and panel_hidden and cleared


def test_model_errors_are_messages_and_nothing_typed_is_lost():
    class Broken(ScriptedChatModel):
        def _stream(self, *args, **kwargs):
            raise ConnectionError("the server went away")
            yield  # pragma: no cover

    async def run():
        app = InProcessApp(str(RESNET_NW0), model=Broken(received=[], responses=[AIMessage(content="-")]))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await ask(pilot, app, "why so slow?")
            errors = [str(e.content) for e in app.query(ErrorMessage)]
            await pilot.press("up")
            return errors, app.query_one(PromptInput).value, app.is_running

    errors, recalled, running = asyncio.run(run())
    assert errors and "ConnectionError" in errors[0] and running
    assert recalled == "why so slow?"


def test_a_bad_trace_is_a_message_not_a_crash(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")

    async def run():
        app = TraceAgentApp(str(bad))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            return [str(e.content) for e in app.query(ErrorMessage)], app.is_running

    errors, running = asyncio.run(run())
    assert running and errors == [f"Cannot load the trace: {bad}: not a trace file. Expected PyTorch Profiler "
                                  "JSON (.json/.json.gz) or an Nsight Systems .sqlite export."]


class GatedApp(TraceAgentApp):
    """Loading blocks (in its worker thread) until the test opens the gate."""

    gate = threading.Event()

    def _load_and_analyze(self):
        self.gate.wait(timeout=30)
        return super()._load_and_analyze()


def test_ui_answers_keys_while_the_trace_loads_and_queues_the_question():
    async def run():
        app = GatedApp(AnalyzeRequest(str(RESNET_NW0), use_cache=False))
        GatedApp.gate.clear()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(*"summ")
            typed = app.query_one(PromptInput).value  # keys handled while loading
            await pilot.press(*"arize", "enter")
            queued = app.session is None and app.waiting == ["summarize"]
            GatedApp.gate.set()
            await loaded(app, pilot)
            await app.workers.wait_for_complete()
            await pilot.pause()
            return typed, queued, len(app.query(AnswerBlock))

    typed, queued, answers = asyncio.run(run())
    assert typed == "summ" and queued and answers == 1


# -- snapshots (pytest-textual-snapshot): the main screen on the bundled ResNet50 trace ------------

async def _answered(pilot, question: str) -> None:
    app = pilot.app
    app.query_one(PromptInput).cursor_blink = False  # a blinking cursor makes snapshots flaky
    await app.workers.wait_for_complete()
    await pilot.pause()
    await type_in(pilot, question)
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
    # the streamed answer renders in the background: under load it can still be growing (and the
    # view scrolling after it) here, so wait until the conversation stays scrolled to its end
    conversation = app.query_one(Conversation)
    # (stable for 0.8 s: on a loaded machine the final render of an answer can come half a second after
    # the last token's)
    settled, seen = 0, None
    for _ in range(100):
        now = (conversation.virtual_size.height, conversation.max_scroll_y)
        at_end = conversation.scroll_y >= conversation.max_scroll_y
        settled = settled + 1 if at_end and now == seen else 0
        if settled == 8:
            break
        seen = now
        await pilot.pause(0.1)


def test_snapshot_offline(snap_compare):
    app = InProcessApp(str(RESNET_NW0))
    assert snap_compare(app, terminal_size=SIZE, run_before=lambda pilot: _answered(pilot, "why is my GPU idle?"))


def test_snapshot_with_a_model(snap_compare):
    idle_pct = analyzed(RESNET_NW0).verdict.evidence["idle_pct"]
    model = scripted(tool_call("verdict"), AIMessage(content=f"**Data loading** stalls the GPU: idle {idle_pct:.1f}% of "
                                                             f"the time, {dataloader_pct():.1f}% of the span waiting for "
                                                             "batches."))
    app = InProcessApp(str(RESNET_NW0), model=model)
    assert snap_compare(app, terminal_size=SIZE, run_before=lambda pilot: _answered(pilot, "Why is my GPU idle?"))


def test_every_rank_is_listed_and_the_view_switches_between_them():
    from conftest import DLRM_8RANK
    from textual.widgets import OptionList, Select, Static

    from traceagent.detect.core.view import device_views
    from traceagent.tui.widgets.timeline import Timeline

    analysis = analyzed(DLRM_8RANK)

    async def run():
        app = InProcessApp(str(DLRM_8RANK))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            summary = str(app.query_one("#summary", Static).render())
            select = app.query_one("#scope", Select)
            first = (select.value, app.query_one(Timeline).data[0].span)
            select.value = (3, 3)  # as choosing "rank 3 · GPU 3" in the select does
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            findings = [str(o.prompt) for o in app.query_one("#findings", OptionList).options]
            return summary, first, app.query_one(Timeline).data[0].span, findings, app.sub_title

    summary, (chosen, first_span), span, findings, title = asyncio.run(run())
    assert all(f"rank {r}, GPU {r}: span" in summary for r in range(8))  # DLRM: rank r uses GPU r
    focus = analysis.focus
    assert chosen == (focus.rank, focus.devices[0])  # it opens on the verdict's rank
    assert first_span == device_views(focus.trace)[0].span
    rank3 = analysis.rank(3)
    assert span == device_views(rank3.trace)[0].span != first_span  # the strip now draws rank 3's GPU
    idle3 = rank3.findings.idle
    top = max(idle3.by_cause_pct, key=idle3.by_cause_pct.get)
    assert findings[0] == f"idle {idle3.by_cause_pct[top]:.1f}%: {top}" and "showing rank 3, GPU 3" in title


def test_a_finding_on_a_huge_kernel_name_asks_with_the_name_capped(tmp_path):
    # a 3,111-character name (a Triton or templated kernel without brackets to strip): the
    # question sent as the user's words carries its first 60 characters, quoted as code
    from builder import TraceBuilder

    from traceagent import analyze
    from traceagent.text import QUESTION_NAME_CHARS
    from traceagent.tui.widgets.side_panel import _findings

    name = "triton_fused_" + "x" * 3098 + "`"
    b = TraceBuilder()
    b.kernel(name, 0, 500)
    b.kernel("small", 600, 10)
    analysis = analyze(b.write(tmp_path / "t.json"))
    questions = [q for label, q in _findings(analysis.ranks[0], analysis.verdict, False) if label.startswith("kernel")]
    assert questions[0] == f"Why is `{name[:QUESTION_NAME_CHARS - 1]}…` hot?"


def test_the_rank_and_gpu_chosen_in_the_panel_are_what_questions_are_about():
    # the panel opens on the verdict's rank without narrowing questions; choosing rank 3 · GPU 3
    # makes it the tools' default: the offline analyst's idle answer is then rank 3's own figures
    from conftest import DLRM_8RANK
    from textual.widgets import Select

    analysis = analyzed(DLRM_8RANK)
    idle3 = analysis.rank(3).findings.idle.devices[3]

    async def run():
        app = InProcessApp(str(DLRM_8RANK))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            before = app.session.ctx.focus
            app.query_one("#scope", Select).value = (3, 3)
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            await ask(pilot, app, "Why is my GPU idle?")
            notes = [str(n.content) for n in app.query(NoteMessage)]
            return before, app.session.ctx.focus, app.query(AnswerBlock).last().text, notes

    before, after, text, notes = asyncio.run(run())
    assert before is None and after == (3, 3)
    assert any("now about rank 3, GPU 3" in n for n in notes)
    assert f"Rank 3, GPU 3: The GPU is idle **{idle3.idle_pct:.1f}%**" in text  # its own figures, not rank 7's


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="could not import 'torch'")
def test_f5_records_the_run_again_and_shows_the_new_run_beside_it(tmp_path):
    from traceagent.profile import runs
    from traceagent.profile.record import conclude

    train = tmp_path / "train.py"
    train.write_text("import torch\nm = torch.nn.Linear(8, 2)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                     "for _ in range(4):\n    m(torch.randn(4, 8)).sum().backward()\n    opt.step()\n")
    # the first run as `traceagent profile` keeps it (a real CPU trace stands in for its recording)
    folder = runs.create(tmp_path / "runs", None, str(train))
    (folder / "traces" / "trace.pt.trace.json.gz").symlink_to(CPU_ONLY)
    record = runs.RunRecord(id=folder.name, label=None, command=[sys.executable, str(train)], script=str(train),
                            started="2026-12-05T10:00:00.000+00:00", seconds=1.0, status="ok", exit_code=0,
                            environment=runs.environment({}, {}, {}), traces=["trace.pt.trace.json.gz"], skip=1, steps=1)
    first = conclude(folder, record, tmp_path / "runs")

    async def run():
        app = InProcessApp(str(first.folder / "traces"))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await pilot.press("f5")
            while app.workers:  # the recording, then the new load
                await app.workers.wait_for_complete()
                await pilot.pause()
            return app.title, app.compare, [str(n.content) for n in app.query(NoteMessage)]

    title, compare, notes = asyncio.run(run())
    (_, before), (folder, again) = runs.all_runs(tmp_path / "runs")
    assert (again.label, again.steps, again.skip, again.baseline) == (f"again: {before.script}", 1, 1, before.id)
    assert compare == str(folder / "traces") and title == f"traceagent · {before.id} vs {again.id}"
    assert any(n.startswith(f"Recorded run {again.id}: ") for n in notes)


def test_the_conversation_draws_the_typed_messages_its_worker_posts():
    # what a session's events become: a tool call and its result, a streamed answer and its end
    from textual.app import App

    from traceagent.agent.events import Answer, Token, ToolCall, ToolResult

    class Chat(App):
        def compose(self):
            yield Conversation()

    async def run():
        app = Chat()
        async with app.run_test(size=SIZE) as pilot:
            conversation = app.query_one(Conversation)
            for message in [Conversation.ToolCalled(ToolCall("1", "verdict", {})),
                            Conversation.ToolReturned(ToolResult("1", "verdict", '{"limiter": "idle"}', True)),
                            Conversation.TokenStreamed(Token("Idle ")), Conversation.TokenStreamed(Token("39.4%.")),
                            Conversation.Answered(Answer("Idle 39.4%.", unverified=["39.4%"]))]:
                conversation.post_message(message)
            await pilot.pause()
            return str(app.query_one(ToolBlock).title), [b.text for b in app.query(AnswerBlock)]

    title, answers = asyncio.run(run())
    assert title == "tool: verdict()  ✓"
    assert len(answers) == 1 and answers[0].startswith("Idle 39.4%.") and "Unverified numbers" in answers[0]


def test_one_scope_moves_the_timeline_the_panel_and_the_questions_together():
    # the palette's path: the app's scope is set, and everything bound to it follows
    from conftest import DLRM_8RANK
    from textual.widgets import Select

    from traceagent.detect.core.view import device_views
    from traceagent.tui.widgets.timeline import Timeline

    async def run():
        app = InProcessApp(str(DLRM_8RANK))
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            app._pick_scope(5, 5)
            await pilot.pause()
            return (app.query_one(Timeline).data[0].span, app.query_one("#scope", Select).value,
                    app.session.ctx.focus, app.sub_title)

    span, selected, focus, title = asyncio.run(run())
    assert span == device_views(analyzed(DLRM_8RANK).rank(5).trace)[0].span
    assert selected == focus == (5, 5) and title.endswith("showing rank 5, GPU 5")
