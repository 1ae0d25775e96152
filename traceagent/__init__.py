"""traceagent: find what limits a GPU program from its profiler trace."""

from .api import analyze, load
from .detect.analysis import Analysis, AnalysisParams, RankAnalysis
from .detect.detectors.idle import IdleParams
from .detect.verdict.diagnose import Verdict, VerdictParams
from .errors import TraceError
from .trace.model import Job, Trace

__all__ = ["Analysis", "AnalysisParams", "IdleParams", "Job", "RankAnalysis", "Trace", "TraceError", "Verdict",
           "VerdictParams", "analyze", "load"]
__version__ = "0.1.0"
