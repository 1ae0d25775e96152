"""What fixing each finding would give back: an upper bound over the trace and per step, with
its reasoning (DESIGN.md, "saving estimate"). `diff` later compares it with what happened.

- an idle gap removed saves at most its length;
- communication or copies hidden behind compute save at most their exposed part;
- a kernel made k× faster saves at most (1 − 1/k) of its time (k = 2 here), and only of its time
  on the critical path (critical_path.py): a kernel other work hides saves nothing.

Where a finding has a change the what-if simulator can make (`change`: data loading, syncs,
launches, a kernel), the saving it states is the replay's prediction (whatif.py); the bound stays
beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..core.view import pct
from ..core.vocabulary import GAP_CAUSES, GAP_ROOT, ROOT_CAUSES
from ..detectors.comm import CommResult
from ..detectors.idle import IdleResult
from ..detectors.kernels import KernelsResult
from ..detectors.memcpy import MemcpyResult
from ..detectors.steps import StepsResult
from ..detectors.stragglers import RankComparison
from ..detectors.time_by_class import TimeByClassResult, memory_bound_dominates, memory_kernels_us
from .critical_path import CriticalPathResult

KERNEL_SPEEDUP = 2.0  # the k of "a kernel made k× faster"


def kernel_change(name: str) -> str:
    """The what-if change that makes the kernel named `name` KERNEL_SPEEDUP× faster."""
    return f"kernel:^{re.escape(name)}$=x{KERNEL_SPEEDUP:g}"


@dataclass(frozen=True)
class Saving:
    finding: str  # what would be fixed, in words
    root_cause: str  # a vocabulary.ROOT_CAUSES name
    upper_bound_us: float  # over the whole trace (this rank)
    pct: float  # of the rank's span, or where gpus > 1 of its GPUs' device time (their spans added up)
    per_step_us: float | None  # per step, when the trace has steps
    step_pct: float | None  # of the mean step time (where gpus > 1, of that time on each GPU: device time in a step)
    reasoning: str
    change: str | None = None  # the what-if change that fixes it (`traceagent whatif --change`), if the simulator has one
    simulated_pct: float | None = None  # what the replay with that change saves, of the mean step (else of the span)
    gpus: int = 1  # how many GPUs' spans pct is over: 1, the rank's span (wall time); more, their device time
    sentence: str = field(init=False, default="")  # the saving in words (_sentence): what reports and answers quote

    def __post_init__(self) -> None:
        object.__setattr__(self, "sentence", self._sentence())

    @property
    def bound_pct(self) -> float:
        """The bound as a share: of the mean step where the trace has steps, else of the span."""
        return self.step_pct if self.step_pct is not None else self.pct

    @property
    def expected_pct(self) -> float:
        """The best figure for what fixing it saves: the replay's prediction where there is one, else the bound."""
        return self.simulated_pct if self.simulated_pct is not None else self.bound_pct

    def fixes_the_same(self, other: Saving) -> bool:
        """Whether fixing it is fixing the other (one root cause; each hot kernel is a fix of its own)."""
        return self.root_cause == other.root_cause and (self.root_cause != "hot_kernel" or self.change == other.change)

    @property
    def bound(self) -> str:
        if self.step_pct is not None:
            return f"{self.step_pct:.1f}% of step time" + (f" on each of {self.gpus} GPUs" if self.gpus > 1 else "")
        return f"{self.pct:.1f}% of device time ({self.gpus} GPUs)" if self.gpus > 1 else f"{self.pct:.1f}% of the span"

    @property
    def replayed_as(self) -> str:
        """The change replayed, as people read it: a kernel's by its finding (its change is an escaped
        regex of the full templated name), any other as the `whatif --change` it is."""
        return self.finding if self.root_cause == "hot_kernel" else f"`{self.change}`"

    def _sentence(self) -> str:
        """'Fixing idle time waiting for data loading would save 26.8% of step time (simulated…)', or
        where nothing was simulated '… would save up to 27.2% of step time (an upper bound…)'."""
        if self.simulated_pct is not None:
            whole = "step time" if self.step_pct is not None else "the span"
            how = "with that change" if self.root_cause == "hot_kernel" else f"with {self.replayed_as}"
            why = self.reasoning.removeprefix("an upper bound: ")
            # the change reaches past this finding (launches: every gap they cause)
            if self.simulated_pct > self.bound_pct + 0.05:
                return (f"Fixing {self.finding} would save {self.simulated_pct:.1f}% of {whole} (simulated {how} on the "
                        f"trace's dependency graph, a change that also shortens other findings; this one alone costs "
                        f"{self.bound}).")
            return (f"Fixing {self.finding} would save {max(self.simulated_pct, 0.0):.1f}% of {whole} (simulated {how} "
                    f"on the trace's dependency graph; the upper bound is {self.bound}: {why}).")
        return f"Fixing {self.finding} would save up to {self.bound} ({self.reasoning})."


def _saving(finding: str, root: str, us_: float, whole_us: float, steps: StepsResult | None,
            reasoning: str, change: str | None = None, gpus: int = 1) -> Saving:
    per_step = round(us_ / steps.count, 3) if steps and steps.count else None
    # a step's time on each of the GPUs the µs are summed over: a share of device time, as pct is
    step_pct = pct(per_step, steps.step_time_us * gpus) if per_step is not None and steps and steps.step_time_us else None
    return Saving(finding, root, round(us_, 3), pct(us_, whole_us), per_step,
                  min(step_pct, 100.0) if step_pct is not None else None, reasoning, change or ROOT_CAUSES[root].change or None,
                  gpus=gpus)


def estimate_savings(idle: IdleResult, copies: MemcpyResult, comm: CommResult, kernels: KernelsResult,
                     steps: StepsResult | None, path: CriticalPathResult | None = None,
                     classes: TimeByClassResult | None = None) -> list[Saving]:
    """Every finding's saving, largest first: idle, copies and communication over the device time
    of the rank's GPUs (its span with one); time on the critical path over the span; kernels
    memory-bound by nature, where they take most of the device, over its device time."""
    whole, gpus = idle.device_time_us, max(1, len(idle.devices))
    out = []
    for cause, us_ in idle.by_cause_us.items():
        out.append(_saving(GAP_CAUSES[cause].finding, GAP_ROOT[cause], us_, whole, steps,
                           "an upper bound: removing a gap saves at most its length", gpus=gpus))
    if copies.exposed_us:
        root = "pageable_memcpy" if copies.pageable_bytes * 2 >= max(copies.bytes, 1) else "memcpy"
        out.append(_saving("exposed copies", root, copies.exposed_us, whole, steps,
                           "an upper bound: a copy hidden behind compute saves at most its exposed part", gpus=gpus))
    if comm.exposed_us:
        out.append(_saving("exposed communication", "communication", comm.exposed_us, whole, steps,
                           "an upper bound: communication hidden behind compute saves at most its exposed part",
                           gpus=gpus))
    if classes is not None and memory_bound_dominates(classes):
        out.append(_saving(f"memory-bound kernels made {KERNEL_SPEEDUP:g}× faster (fused)", "memory_bound_kernels",
                           memory_kernels_us(classes) * (1 - 1 / KERNEL_SPEEDUP), whole, steps,
                           f"an upper bound: kernels {KERNEL_SPEEDUP:g}× faster save at most "
                           f"{1 - 1 / KERNEL_SPEEDUP:.0%} of their time, if nothing else was hiding them", gpus=gpus))
    on_path = {k.name: k.on_path_us for k in path.kernels} if path else {}
    for k in kernels.top[:3]:
        if k.is_comm:
            continue
        change = kernel_change(k.name)
        if path is None:
            out.append(_saving(f"kernel {k.label} made {KERNEL_SPEEDUP:g}× faster", "hot_kernel",
                               k.total_us * (1 - 1 / KERNEL_SPEEDUP), whole, steps,
                               f"an upper bound: a {KERNEL_SPEEDUP:g}× faster kernel saves at most "
                               f"{1 - 1 / KERNEL_SPEEDUP:.0%} of its time, if nothing else was hiding it", change, gpus))
        elif k.name in on_path:  # time on the path is wall time: a share of the rank's span, not of its GPUs' summed time
            out.append(_saving(f"kernel {k.label} made {KERNEL_SPEEDUP:g}× faster", "hot_kernel",
                               on_path[k.name] * (1 - 1 / KERNEL_SPEEDUP), idle.span_us, steps,
                               f"an upper bound: it is on the critical path for {on_path[k.name]:g} µs of its "
                               f"{k.total_us:g} µs, and a {KERNEL_SPEEDUP:g}× faster kernel saves at most "
                               f"{1 - 1 / KERNEL_SPEEDUP:.0%} of that", change))
    return sorted(out, key=lambda s: -s.upper_bound_us)


def by_expected(savings: list[Saving]) -> list[Saving]:
    """The savings, the most expected first (the replay's prediction where there is one, else the bound): what
    to fix first. A finding bounded at 28% whose replay saves 0.1% comes after one replayed at 6%."""
    return sorted(savings, key=lambda s: -s.expected_pct)


def saving_for(savings: list[Saving], root_cause: str, kernel: str | None = None) -> Saving | None:
    """The verdict's saving: every finding of its root cause together (e.g. idle from launch
    overhead and launch latency), or None. Hot kernels are each a fix of their own: with `kernel`
    (the one a compute verdict names), that kernel's saving alone."""
    mine = [s for s in savings if s.root_cause == root_cause]
    if kernel is not None and root_cause == "hot_kernel":
        return next((s for s in mine if s.change == kernel_change(kernel)), None)
    if not mine:
        return None
    if len(mine) == 1:
        return mine[0]
    first = mine[0]
    total = sum(s.upper_bound_us for s in mine)
    per_step = _sum_of_all([s.per_step_us for s in mine], 3)
    step_pct = _sum_of_all([s.step_pct for s in mine], 2)
    # one change fixing them all (launch overhead and launch latency: launch=graphs) was simulated once
    same = len({s.change for s in mine}) == 1
    return Saving(ROOT_CAUSES[root_cause].label, root_cause, round(total, 3),
                  round(sum(s.pct for s in mine), 2), per_step, min(step_pct, 100.0) if step_pct is not None else None,
                  first.reasoning, first.change if same else None, first.simulated_pct if same else None, first.gpus)


def _sum_of_all(values: list[float | None], digits: int) -> float | None:
    """The sum rounded as its parts are, or None if any is None (a per-step figure one part lacks is no figure)."""
    known = [v for v in values if v is not None]
    return round(sum(known), digits) if len(known) == len(values) else None


def straggler_saving(comparison: RankComparison, steps: StepsResult | None) -> Saving:
    """The straggler's cost: the other ranks' exposed waiting for it (all of it over the trace;
    per step, one other rank's share over the straggler's steps). Of their waiting, the part it
    caused (the rest waits for other late ranks, which fixing it leaves), at the share of their
    waiting that no compute hides."""
    rank = comparison.straggler
    others = [r for r in comparison.ranks if r.rank != rank]
    exposed, waited = sum(r.exposed_waiting_us for r in others), sum(r.waiting_us for r in others)
    caused = next((r.caused_waiting_us for r in comparison.ranks if r.rank == rank), 0.0)
    waiting = exposed * min(caused / waited, 1.0) if waited else 0.0
    per_step = round(waiting / (len(comparison.ranks) - 1) / steps.count, 3) if steps and steps.count else None
    step_pct = min(pct(per_step, steps.step_time_us), 100.0) if per_step is not None and steps and steps.step_time_us else None
    return Saving(f"rank {rank}'s lateness", "straggler", round(waiting, 3),
                  pct(waiting, sum(r.device_time_us for r in others)),
                  per_step, step_pct, "an upper bound: the other ranks' waiting for it, where no compute of theirs hides it")
