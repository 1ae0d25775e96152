"""traceagent: find what limits a GPU program from its profiler trace."""

from .errors import TraceError
from .trace.load import load
from .trace.model import Job, Trace

__all__ = ["Job", "Trace", "TraceError", "load"]
__version__ = "0.1.0"
