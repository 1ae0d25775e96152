"""Communication on one rank: collective kernels' time and how much of it compute does not hide
(across ranks, who waits for whom: stragglers.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...format import percent
from ...trace.model import Trace
from ..core import intervals as iv
from ..core.view import device_time_ns, on_device, pct, us, views_of
from .base import Detector, Key
from .streams import SharedStream, shared_streams


class Collective(TypedDict):
    name: str
    count: int
    total_us: float


@dataclass(frozen=True)
class CommResult:
    """Collectives on one rank (all its devices). exposed: not overlapped by any compute kernel.
    Percentages without a qualifier are over device time (the devices' spans added up)."""

    kernels: int
    comm_us: float
    share_pct: float  # comm over device time
    exposed_us: float
    exposed_pct: float  # exposed over device time: what hiding it would save at most
    exposed_of_comm_pct: float  # exposed over comm time: how much of communication is not hidden
    top: list[Collective]  # the collectives taking the most time
    # streams where collectives take turns with compute kernels: no overlap is possible there
    shared_streams: list[SharedStream] = field(default_factory=list)


def detect_comm(trace: Trace, top: int = 5, device: int | None = None) -> CommResult:
    """Collectives on every device of the rank, or on one."""
    views = views_of(trace, device)
    span = device_time_ns(views)
    comm = exposed = 0
    for view in views:
        comm += iv.length(view.comm)
        exposed += iv.length(view.exposed_comm)
    kernels = on_device(trace.gpu, device)
    kernels = kernels[kernels["is_comm"]]
    by_name = (kernels.assign(dur=kernels["end"] - kernels["start"]).groupby("name", observed=True)["dur"]
               .agg(["size", "sum"]).sort_values("sum", ascending=False).head(top))
    return CommResult(
        kernels=len(kernels), comm_us=us(comm), share_pct=pct(comm, span), exposed_us=us(exposed),
        exposed_pct=pct(exposed, span), exposed_of_comm_pct=pct(exposed, comm),
        top=[Collective(name=str(n), count=int(r["size"]), total_us=us(r["sum"])) for n, r in by_name.iterrows()],
        shared_streams=[s for s in shared_streams(trace) if device is None or s.device == device],
    )


def comm_findings(result: CommResult, on: str) -> list[tuple[str, str]]:
    return [(f"communication exposed {percent(result.exposed_of_comm_pct)}",
             f"Is communication overlapped{on}?")] if result.kernels else []


DETECTOR = Detector("comm", "Communication", "Collective kernels, their time and the part no compute overlaps.", None,
                    CommResult, lambda i, p: detect_comm(i.trace), keys=(Key("comm", CommResult),), place=13, tool=False,
                    findings=comm_findings)
