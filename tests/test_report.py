"""The written diagnosis: sections, and numbers that match `analyze --json` for the same trace."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess

import pytest
from builder import TraceBuilder
from conftest import CPU_ONLY, DATA, DLRM_8RANK, NSYS_BEFORE, RESNET_NW0, analyzed

import traceagent
from traceagent import analyze
from traceagent.cli import main
from traceagent.format import duration, flop_rate, percent, rate
from traceagent.report.html import render_html
from traceagent.report.markdown import render_markdown
from traceagent.text import md_literal, md_prose

SHARED = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json.gz", ".sqlite")) and "dlrm" not in str(p))
SHARED.append(DLRM_8RANK)
SECTIONS = ["## Verdict", "## What would sharpen this diagnosis", "## Where device time went", "## Idle time",
            "## Data movement", "## Communication", "## Hot kernels", "## Launch and steps"]


def test_our_code_spans_stay_code_and_the_rest_shows_as_written():
    assert md_prose("Run `py-spy record -o a_b.svg` on set_x") == "Run `py-spy record -o a_b.svg` on set\\_x"
    # an odd backtick (a trace string holding one): no span can be told apart, all of it escaped
    assert md_prose("at `evil` ![i](http://e/x.png)` here") == md_literal("at `evil` ![i](http://e/x.png)` here")
    # a span's content renders nothing, whatever it holds
    assert md_prose("a `[x](http://e)` b") == "a `[x](http://e)` b"


def test_the_reports_next_step_shows_its_command_as_code():
    md = render_markdown(analyzed(DATA / "hta" / "alexnet_critical_path.json.gz"))
    step = next(line for line in md.splitlines() if line.startswith("**Next step.**"))
    assert "`py-spy record -o host.svg -- python train.py`" in step and "\\`" not in step


def test_duration_and_percent_formats():
    assert [duration(x) for x in (0.5, 812.04, 12_345.6, 1_234_567.0)] == ["0.5 µs", "812.0 µs", "12.35 ms", "1.235 s"]
    assert percent(28.64) == "28.6%"
    # a few bytes' copy is slow, never "0.0 GB/s"
    assert [rate(x) for x in (148.94, 3.7, 0.0205, 0.000812, None)] == ["148.9 GB/s", "3.7 GB/s", "20.5 MB/s",
                                                                        "812.0 kB/s", "-"]
    assert [flop_rate(x) for x in (153.66, 0.0088, 0.000012, None)] == ["153.7 TFLOP/s", "8.8 GFLOP/s",
                                                                        "12.0 MFLOP/s", "-"]


@pytest.mark.parametrize("path", SHARED, ids=lambda p: str(p.relative_to(DATA)))
def test_markdown_report_matches_analyze_json(path, capsys):
    assert main(["analyze", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["report", str(path)]) == 0
    report = capsys.readouterr().out

    v = data["verdict"]
    # verdict prose shows literally in Markdown (it quotes trace strings), its own code spans as code (md_prose)
    assert f"**{md_prose(v['headline'])}**" in report and md_prose(v["next_step"]) in report
    if v["limiter"] is None:
        assert "## Idle time" not in report
        return
    positions = [report.index(s) for s in SECTIONS]
    assert positions == sorted(positions), "sections in order, verdict first"
    for rank in data["ranks"][:8]:
        for device, b in rank["breakdown"]["devices"].items():  # one row per GPU, over its own span
            row = next(line for line in report.splitlines() if line.startswith(f"| {rank['rank']} | {device} | "))
            for value in (duration(b["span_us"]), duration(b["busy_us"]), percent(b["idle_pct"]),
                          duration(b["compute_us"])):
                assert value in row
        idle = rank["idle"]
        for cause, us in idle["by_cause_us"].items():
            assert f"| {cause} | {duration(us)} |" in report
        for k in rank["hot_kernels"][:10]:
            total, share = re.escape(duration(k["total_us"])), re.escape(percent(k["share_of_busy_pct"]))
            assert re.search(rf"\| {k['count']} \| {total} \| {share} \|", report)
        for kind, c in rank["memcpy"]["by_kind"].items():
            assert f"| {kind} | {c['count']} |" in report


def test_the_communication_section_has_each_kind_of_collective_with_its_exposed_share():
    analysis = analyzed(DLRM_8RANK)
    report = render_markdown(analysis)
    kinds = analysis.focus.findings.comm.kinds
    assert {k.kind for k in kinds} == {"all_reduce", "all_to_all"}  # NCCL's SendRecv kernels under nccl:all_to_all
    for k in kinds:
        assert (f"| {k.kind} | {k.kernels} | {duration(k.time_us)} | {duration(k.exposed_us)} | "
                f"{percent(k.exposed_pct)} |") in report


def test_report_on_a_cpu_only_trace():
    text = render_markdown(analyzed(CPU_ONLY))
    assert "No device activity" in text and "## Hot kernels" not in text


def test_thousands_of_kernel_names_stay_readable(tmp_path):
    b = TraceBuilder()
    long_tail = "<" + ", ".join(f"at::native::detail::Arg{i}<float, 4>" for i in range(12)) + ">(float*, int)"
    for i in range(3000):
        b.kernel(f"void my_namespace::kernel_{i}{long_tail}", start=i * 10, dur=5 + i % 7)
    report = render_markdown(analyze(traceagent.load(b.write(tmp_path / "many.json"))))
    table = report[report.index("## Hot kernels"):report.index("<details>")]
    rows = [line for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == 10
    assert all(len(line) < 200 for line in rows), "short names in the table"
    details = report[report.index("<details>"):report.index("</details>")]
    assert "my_namespace::kernel_" in details and "Arg11<float, 4>" in details, "full names available"


def test_html_report_is_self_contained_with_charts(tmp_path):
    text = render_html(analyzed(DLRM_8RANK))
    charts = re.findall(r'<svg[^>]*aria-label="([^"]*)"', text)
    assert text.count("<svg") == len(charts)  # every chart is labelled
    # DLRM was recorded with shapes: its matmuls' throughput is charted too (it has no memory events)
    assert charts == ["device timeline", "time breakdown", "hot kernels", "achieved throughput", "ranks compared"]
    assert not re.search(r"<(script|link|img)\b", text)
    assert not re.search(r"(src|href)=\"https?://", text)
    assert text.count("<rect") > 50
    assert "Ranks side by side" in text


def test_report_writes_files_by_extension(tmp_path, capsys):
    md, page = tmp_path / "d.md", tmp_path / "d.html"
    assert main(["report", str(RESNET_NW0), "-o", str(md)]) == 0
    assert main(["report", str(RESNET_NW0), "-o", str(page)]) == 0
    assert md.read_text().startswith("# traceagent diagnosis")
    assert page.read_text().startswith("<!doctype html>")
    assert main(["report", str(RESNET_NW0), "-o", str(tmp_path / "missing" / "x.md")]) == 2
    assert "cannot write the report" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(html_text: str, folder, size: str = "1100,900"):
    """The page as headless Chromium draws it (an RGB PIL image)."""
    from PIL import Image

    page, shot = folder / "page.html", folder / "shot.png"
    page.write_text(html_text)
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--no-first-run", f"--user-data-dir={folder / 'profile'}",
                    f"--window-size={size}", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    return Image.open(shot).convert("RGB")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_charts_render_in_headless_chromium(tmp_path):
    image = screenshot(render_html(analyzed(RESNET_NW0)), tmp_path)
    colors = image.getcolors(maxcolors=1 << 20)
    # the timeline's blue bars and the dataloader gaps' red must be on the page
    blue = sum(n for n, (r, g, b) in colors if b > 150 and r < 120)
    red = sum(n for n, (r, g, b) in colors if r > 200 and g < 120 and b < 80)
    assert blue > 500 and red > 200, (blue, red)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_timeline_of_the_nsight_pair_draws_both_gpus(tmp_path):
    page = render_html(analyzed(NSYS_BEFORE))
    figure = next(f for f in page.split("<figure>") if 'aria-label="device timeline"' in f).split("</figure>")[0]
    streams = re.findall(r">GPU (\d+) stream \d+<", figure)
    assert set(streams) == {"0", "1"}
    image = screenshot(f'<!doctype html><body style="margin:0"><figure>{figure}</figure></body>', tmp_path)
    # rows of pixels with the compute blue (any opacity: bluer than it is red) right of the labels
    width, height = image.size
    pixels = image.load()
    blue_rows = [y for y in range(height)
                 if sum(1 for x in range(120, width, 4) if (p := pixels[x, y])[2] > p[0] + 40) > 20]
    bands = 1 + sum(1 for a, b in itertools.pairwise(blue_rows) if b > a + 1) if blue_rows else 0
    assert bands == len(streams), (bands, streams)  # one band per stream row drawn, on both GPUs


def test_a_second_loss_sits_in_the_verdict_not_under_what_would_sharpen_it():
    result = analyzed(DLRM_8RANK)
    md = render_markdown(result)
    verdict, _, rest = md.partition("## What would sharpen this diagnosis")
    sharpen = rest.split("\n## ")[0]
    assert result.verdict.other_losses  # the straggler's own losses: rank 7 is mostly idle, exposed comm 14.4%
    for loss in map(md_prose, result.verdict.other_losses):
        assert loss in verdict and loss not in sharpen


def test_the_html_reports_fold_of_kernel_names_is_a_real_details_element_and_a_trace_cannot_forge_one(tmp_path):
    from builder import TraceBuilder

    from traceagent.report.html import render_html

    b = TraceBuilder()
    forged = "<details><summary>Full kernel names</summary>"  # a kernel named like the fold
    b.kernel(forged, 0, 100)
    b.kernel("</details>", 200, 100)
    page = render_html(traceagent.analyze(b.write(tmp_path / "t.json")),
                       summary="<details><summary>Full kernel names</summary>\n\n</details>")
    assert page.count("<details><summary>Full kernel names</summary>") == 1 and page.count("</details>") == 1
    assert "&lt;details&gt;&lt;summary&gt;Full kernel names" in page  # the trace's and the summary's, as text
    opened, closed = page.index("<details>"), page.index("</details>")
    assert "<li><code>&lt;details&gt;" in page[opened:closed]  # the full names are inside the real fold
