"""Communication: collective kernels' time, how much of it compute does not hide, and across
ranks, who waits and who is slow."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..trace.model import Trace
from . import intervals as iv
from .breakdown import Breakdown
from .view import device_views, pct, us


@dataclass(frozen=True)
class CommResult:
    """Collectives on one rank (all its devices). exposed: not overlapped by any compute kernel."""

    kernels: int
    comm_us: float
    share_pct: float  # comm over span
    exposed_us: float
    exposed_pct: float  # exposed over comm time: how much of communication is not hidden
    exposed_share_pct: float  # exposed over span: what hiding it would save at most
    top: list[dict]  # the collectives taking the most time

    def to_dict(self) -> dict:
        return asdict(self)


def detect_comm(trace: Trace, top: int = 5) -> CommResult:
    span = comm = exposed = 0
    for view in device_views(trace):
        span += view.span_ns
        comm += iv.length(view.comm)
        exposed += iv.length(view.exposed_comm)
    kernels = trace.gpu[trace.gpu["is_comm"]]
    by_name = (kernels.assign(dur=kernels["end"] - kernels["start"]).groupby("name", observed=True)["dur"]
               .agg(["size", "sum"]).sort_values("sum", ascending=False).head(top))
    return CommResult(
        kernels=len(kernels), comm_us=us(comm), share_pct=pct(comm, span), exposed_us=us(exposed),
        exposed_pct=pct(exposed, comm), exposed_share_pct=pct(exposed, span),
        top=[{"name": n, "count": int(r["size"]), "total_us": us(r["sum"])} for n, r in by_name.iterrows()],
    )


@dataclass(frozen=True)
class RankComparison:
    """Collectives end together on every rank, so the rank that reaches them first waits longest
    inside them: the most communication time marks the waiter, the most compute the straggler."""

    ranks: list[dict]  # rank, comm_us, exposed_us, compute_us, busy_us, span_us
    waits_most: int | None
    slowest: int | None
    comm_spread_pct: float  # (max - min) comm time over max

    def to_dict(self) -> dict:
        return asdict(self)


def compare_ranks(ranks: list[tuple[int | None, Breakdown]]) -> RankComparison | None:
    """Per-rank communication and compute side by side, from each rank's breakdown (all its
    devices); None for a single rank."""
    if len(ranks) < 2:
        return None
    rows = [{"rank": rank, "comm_us": b.comm_us, "exposed_us": b.exposed_comm_us, "compute_us": b.compute_us,
             "busy_us": b.busy_us, "span_us": b.span_us} for rank, b in ranks]
    with_comm = [r for r in rows if r["comm_us"] > 0]
    if not with_comm:
        return RankComparison(rows, None, None, 0.0)
    most = max(with_comm, key=lambda r: r["comm_us"])
    least = min(with_comm, key=lambda r: r["comm_us"])
    slowest = max(rows, key=lambda r: r["compute_us"])
    return RankComparison(rows, most["rank"], slowest["rank"], pct(most["comm_us"] - least["comm_us"], most["comm_us"]))
