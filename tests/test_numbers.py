"""The number check (agent/numbers.py): a stated number is matched only against tool values of
the same quantity, after unit conversion, to the precision it shows; identifiers are not claims.
Measured on the labelled corpus (tests/data/number_corpus.json, tools/number_corpus.py), and
pinned on the cases found by hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from traceagent.agent.numbers import Sources, unverified

ROOT = Path(__file__).resolve().parents[1]


def corpus_tool():
    spec = importlib.util.spec_from_file_location("number_corpus", ROOT / "tools" / "number_corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_corpus_false_positives_and_negatives_are_at_most_5_percent():
    tool = corpus_tool()
    corpus = json.loads(tool.CORPUS.read_text(encoding="utf-8"))
    labels = {a["label"] for a in corpus["answers"]}
    assert len(corpus["answers"]) >= 200 and len(corpus["traces"]) >= 3
    assert labels == {"correct", "invented", "identifier", "derived"}
    score = tool.score(corpus)
    print(score.line())
    assert score.fp_rate <= 5.0, score.misses
    assert score.fn_rate <= 5.0, score.misses


@pytest.fixture
def sources() -> Sources:
    """A hand-written tool result: what the checks below may match."""
    s = Sources()
    s.add_result(json.dumps({
        "idle_us": 392919.0, "idle_pct": 39.43, "by_cause_us": {"dataloader": 285214.0},
        "by_cause_pct": {"dataloader": 28.62}, "memset_count": 312, "mean_us": 62.299, "gbps": 10.06,
        "bytes": 115607040, "rank": 0, "devices": [0], "steps": [{"step": 5}, {"step": 6}],
        "top": [{"name": "void fused_kernel_777<float, 4096>(runs 100% busy in 731 ms)", "dur_us": 62339.0}],
        "top_gaps": [{"dur_us": 62339.0, "cause": "dataloader"}],
        "headline": "GPU idle 39.4% of the time, mostly waiting for data loading (28.6% of the span)",
    }))
    return s


@pytest.mark.parametrize("answer", [
    "Idle is 39.4% (392.9 ms, 0.39 s); data loading takes 285 ms, 28.6% of the span.",
    "The longest gap is 62,339 µs (62.34 ms); copies run at 10.1 GB/s and moved 115.6 MB (110.3 MiB).",
    "Roughly 39% idle, about 290 ms waiting, more than 30% idle, `28.6%` in code.",
    "The GPU sits idle 3.93e5 µs; 312 memsets.",
])
def test_correct_numbers_pass(sources, answer):
    assert unverified(answer, sources) == []


@pytest.mark.parametrize("answer, flagged", [
    ("Memsets cost 312 ms.", ["312 ms"]),  # a count is not a time
    ("The gap is 62339 ms.", ["62339 ms"]),  # 1000× off
    ("The kernel takes 62% of busy time.", ["62%"]),  # a mean in µs is not a share
    ("Idle is `47.2%`.", ["47.2%"]),  # a code span that is a quantity is checked
    ("About 63% is idle.", ["63%"]),  # "about" rounds to the digits shown, no further
    ("It is 100% busy and ran 731 ms.", ["100%", "731 ms"]),  # numbers only inside a kernel name
    ("Rank 3 and step 42 are slow.", ["Rank 3", "step 42"]),  # not in the trace
    ("Idle 12.5 ms, then 12.5 ms again.", ["12.5 ms"]),  # listed once
])
def test_invented_numbers_are_flagged(sources, answer, flagged):
    assert unverified(answer, sources) == flagged


@pytest.mark.parametrize("answer", [
    "On an A100 80GB with Llama-2-13B at batch size 256, NCCL 2.18, run `ncu --launch-count 20`.",
    "Shapes 4096x4096 and [32, 3, 224, 224]; a 1080p video on a 2080Ti; the 7B model in bf16 on sm_90.",
    "Profiled 2024-03-05 with PyTorch 2.1.0; see train.py:42 and line 17; --launch-count 20.",
    "1. Add workers.\n2. Pin memory.\nStep 1: re-profile.",
    "Rank 0, GPU 0 and step 6 (ProfilerStep#5); set `num_workers=4` and num_workers to 8.",
    "```python\nloader = DataLoader(ds, batch_size=512, num_workers=16)\n```",
    "If it ran 2× faster, it would help.",
])
def test_identifiers_are_not_claims(sources, answer):
    assert unverified(answer, sources) == []


def test_our_prose_verifies_but_trace_strings_do_not():
    s = Sources()
    s.add_result(json.dumps({"name": "kernel_55_ms", "headline": "idle 41.3% of device time in `kernel_55_ms`"}))
    assert unverified("Idle 41.3% of device time.", s) == []
    assert unverified("It runs 55 ms.", s) == ["55 ms"]
    s.add_prose("- rank 0: GPU 0 span 1.50 s, busy 12.5%")  # the system prompt's figures
    assert unverified("The span is 1.50 s and busy 12.5%.", s) == []


def test_a_tables_header_gives_its_column_a_unit(sources):
    table = ("| cause | idle (ms) | share (%) | gaps |\n|---|---:|---:|---:|\n"
             "| dataloader | 285.21 | 28.62 | 5 |\n| magic | 17.5 | 3.3 | 7 |")
    assert unverified(table, sources) == ["17.5 ms", "3.3 %"]  # 285.21 ms and 28.62% are the tool's


def test_a_label_ends_its_line(sources):
    # "…of a 47 ms step" closing a list, then "1 step (step 6)" opening the next paragraph: no step 1 is named
    assert "step 1" not in unverified("- step 6: idle, of a step\n\n1 step (step 6) in all.", sources)
    assert unverified("Step 42 is slow.", sources) == ["Step 42"]
