"""The prompts: templates from prompts/ (shipped in the wheel), filled with numbers and fixed
vocabulary only; no string from the trace goes into a prompt."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template

from ..detect.core.vocabulary import as_prompt
from ..sentences import device_lines
from .tools import AnalysisContext


def prompt_template(name: str) -> str:
    """A prompt from the installed package, or from the source tree's prompts/ in development."""
    packaged = resources.files("traceagent") / "prompts" / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / "prompts" / name).read_text(encoding="utf-8")


def trace_summary(ctx: AnalysisContext) -> str:
    """The trace in numbers and fixed vocabulary only: no string from the trace goes into the
    system prompt (trace text reaches the model only inside tool results)."""
    a = ctx.analysis
    lines = [f"- format: {a.format}; ranks loaded: {len(a.ranks)}"]
    for r in a.ranks[:8]:
        v = r.verdict
        lines += [f"- {line}" for line in device_lines(r)]
        lines.append(f"  rank {r.rank}: limiter {v.limiter}, root cause {v.root_cause}, "
                     f"steps {r.findings.steps.count if r.findings.steps else 0}, "
                     f"python frames {'yes' if r.findings.has_python_frames else 'no'}")
    lines.append(f"- the verdict is about rank {a.verdict.rank}; tools default to it")
    if len(a.ranks) > 8:
        lines.append(f"- and {len(a.ranks) - 8} more ranks")
    if ctx.other is not None:
        lines.append("- a second trace is loaded for comparison: call compare_traces (before/after a change), or "
                     "scaling when it is the same job at another number of GPUs")
    return "\n".join(lines)


DRAFT_RULES = """- Each question arrives with the detectors' draft answer (the `draft_answer` result) and the tool
  results it was written from. The draft's figures, cause and conclusion are right: explain them
  in your own words and relate them to the question, keeping its numbers as they are. Call tools
  only for what the draft does not cover."""


def system_prompt(ctx: AnalysisContext, draft: bool = True) -> str:
    return Template(prompt_template("system.md")).safe_substitute(
        summary=trace_summary(ctx), vocabulary=as_prompt(), draft=DRAFT_RULES if draft else "")


def report_request() -> str:
    """What the model is asked for the report's summary paragraph."""
    return prompt_template("report.md").strip()
