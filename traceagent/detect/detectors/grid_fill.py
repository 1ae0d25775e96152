"""Kernels whose grid cannot fill the GPU: launched with fewer blocks than the GPU has SMs, they
leave the other SMs idle while they run, a loss that busy time hides (the device counts as busy).

Kineto records each kernel's launch as "blocks per SM" (grid blocks over the GPU's SM count; an
Nsight export gives the grid and the SM count) and an estimated achieved occupancy, weighted by
time here (model.GPU_COLUMNS). Under one block per SM, at most that fraction of the SMs has work.
Collectives are left out: they run on a block per channel by design. The share of kernel time
under one block per SM, and the kernels that lead it, say how much of the "busy" GPU is mostly
empty. One bincount over the kernels' names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...format import counted, duration, percent, shorten
from ...text import code, md_prose, md_table
from ...trace.model import Trace, rows_where
from ..core.bounds import Count
from ..core.view import pct, us
from .base import Detector
from .kernels import distinct_labels

#: the SM time left empty (of kernel time) from which the sentence says what to do
ADVISED_PCT = 5.0


@dataclass(frozen=True)
class GridFillParams:
    """top: how many under-filled kernels to name, most time first."""

    top: Count = 5


@dataclass(frozen=True)
class UnderfilledKernel:
    name: str  # a readable name (kernels.distinct_labels)
    time_us: float  # its launches under one block per SM, durations added up
    share_pct: float  # of GridFillResult.kernel_time_us
    launches: int
    blocks_per_sm: float  # the median over those launches: about the share of SMs with work
    kernel: str = ""  # its full name, as the trace writes it (the hot kernels' `name`)


@dataclass(frozen=True)
class GridFillResult:
    """Per rank, every GPU of it, over the kernels whose launch the trace records, collectives left out."""

    kernel_time_us: float  # those kernels' durations added up: the shares' denominator
    underfilled_us: float  # in launches with fewer blocks than SMs
    underfilled_pct: float
    sm_idle_pct: float  # of kernel_time_us: the SM time those launches leave empty (time × (1 − blocks per SM))
    top: list[UnderfilledKernel]  # most time first
    # Kineto's estimated achieved occupancy (% of the SM's warps), weighted by kernel time, over the kernels
    # that record one; None where none does
    occupancy_pct: float | None = None


def detect_grid_fill(trace: Trace, params: GridFillParams = GridFillParams()) -> GridFillResult | None:
    """None where the trace records no kernel's launch configuration."""
    gpu = trace.gpu
    # collectives run on a few blocks by design (one per channel): the links, not the SMs, bound them
    kernels = rows_where(gpu[["name", "start", "end", "blocks_per_sm", "occupancy"]],
                         ((gpu["kind"] == "kernel") & ~gpu["is_comm"] & gpu["blocks_per_sm"].gt(0)).to_numpy())
    if kernels.empty:
        return None
    dur = (kernels["end"].to_numpy(np.int64) - kernels["start"].to_numpy(np.int64)).clip(0)
    fill = kernels["blocks_per_sm"].to_numpy(np.float64)
    under = fill < 1.0
    total = int(dur.sum())
    if not total:
        return None
    names = kernels["name"].array
    codes = names.codes.astype(np.int64) + 1  # -1 (no name) counts apart, at 0
    by_name = np.bincount(codes[under], weights=dur[under], minlength=len(names.categories) + 1)
    top = []
    chosen = [int(n) for n in np.argsort(-by_name, kind="stable")[:params.top] if by_name[n] > 0]
    full = [str(names.categories[n - 1]) if n else "(unnamed)" for n in chosen]
    for n, name, label in zip(chosen, full, distinct_labels(full)):  # a few kernels, not events
        mine = under & (codes == n)
        top.append(UnderfilledKernel(label, us(by_name[n]), pct(by_name[n], total), int(mine.sum()),
                                     round(float(np.median(fill[mine])), 3), name))
    empty = float((dur[under] * (1.0 - fill[under])).sum())
    occupancy = kernels["occupancy"].to_numpy(np.float64)
    rated = (occupancy > 0) & (dur > 0)  # Kineto writes 0 where it could not estimate
    occupancy_pct = round(float(np.average(occupancy[rated], weights=dur[rated])), 1) if rated.any() else None
    return GridFillResult(us(total), us(int(dur[under].sum())), pct(dur[under].sum(), total), pct(empty, total), top,
                          occupancy_pct)


def grid_fill_sentence(result: GridFillResult) -> str:
    """'12.5% of kernel time (every GPU of the rank) runs with fewer blocks than the GPU has SMs,
    leaving 9.4% of the SMs' time empty; led by `gemv` (0.25 blocks per SM, 40 launches, 5.0%).'"""
    occupancy = (f" Kineto's estimated achieved occupancy, weighted by kernel time: {percent(result.occupancy_pct)} of "
                 "the SMs' warps (Nsight Compute measures it: `traceagent profile --ncu KERNEL`)."
                 if result.occupancy_pct is not None else "")
    return _fill_sentence(result) + occupancy


def _fill_sentence(result: GridFillResult) -> str:
    if not result.top:
        return (f"Every kernel launch the trace records ({duration(result.kernel_time_us)} of kernel time, every GPU "
                "of the rank) has at least one block per SM: the grids can fill the GPU.")
    led = "; ".join(f"{code(shorten(k.name, 60))} ({k.blocks_per_sm:g} blocks per SM, "
                    f"{counted(k.launches, 'launch', 'launches')}, {percent(k.share_pct)})" for k in result.top[:3])
    said = (f"{percent(result.underfilled_pct)} of kernel time (every GPU of the rank) runs with fewer blocks than the "
            f"GPU has SMs, so part of the GPU sits idle while the device counts as busy: "
            f"{percent(result.sm_idle_pct)} of the SMs' time in all. Led by {led}.")
    if result.sm_idle_pct >= ADVISED_PCT:
        said += (" Give each launch more blocks: a larger batch or more tokens per step, fused or grouped kernels "
                 "(one launch for several small matmuls), split-K or stream-K GEMMs for small matrices, or CUDA graphs "
                 "and streams to run small kernels side by side.")
    return said


def grid_fill_section(result: GridFillResult, params: GridFillParams) -> list[str]:
    rows = [[code(shorten(k.name, 60)), f"{k.blocks_per_sm:g}", str(k.launches), percent(k.share_pct)]
            for k in result.top]
    table = [md_table(["kernel", "blocks per SM", "launches", "share of kernel time"], rows)] if rows else []
    return [md_prose(grid_fill_sentence(result)), "", *table]


def grid_fill_findings(result: GridFillResult, on: str) -> list[tuple[str, str]]:
    """The side panel's line where some kernel time runs on a part of the GPU."""
    return [(f"grids under the SM count {percent(result.underfilled_pct)}", f"Do my kernels fill the GPU{on}?")] \
        if result.top else []


def grid_fill_lead(result: GridFillResult, question: str) -> str | None:
    """The achieved occupancy where the question asks it (or that the trace records none), else None."""
    if not re.search(r"\boccupancy\b", question, re.I):
        return None
    if result.occupancy_pct is None:  # an Nsight Systems export, or a Kineto trace without the estimate
        return ("**This trace records no achieved occupancy** (PyTorch's profiler estimates it for each kernel; an "
                "Nsight Systems export has none): Nsight Compute measures it, `traceagent profile --ncu KERNEL`. What "
                "the trace does say is how the grids fill the SMs:")
    return (f"**Achieved occupancy: {percent(result.occupancy_pct)}** of the SMs' warps (Kineto's estimate, weighted by "
            "kernel time).")


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("grid_fill", "Grids that cannot fill the GPU",
                    "Kernel time in launches with fewer blocks than the GPU has SMs (Kineto's 'blocks per SM' under "
                    "1): its share of kernel time, the SM time it leaves empty, and the kernels leading it with their "
                    "blocks per SM and launches; Kineto's estimated achieved occupancy weighted by kernel time.",
                    GridFillParams(), GridFillResult, lambda i, p: detect_grid_fill(i.trace, p),
                    lambda r, p: grid_fill_sentence(r), since="2.9",
                    needs=("the trace records no kernel's launch configuration (blocks per SM)",
                           "profile with torch.profiler (Kineto records each kernel's grid and blocks per SM)"),
                    asks=r"\boccupancy\b|\bblocks? per sm\b|\bgrid (?:size|dim\w*)s?\b|\bgrids?\b.{0,20}\b(?:too )?(?:small|"
                         r"large|big|full|fill\w*)\b|\b(?:fill|fills|filling)(?: all)? (?:the |my )?(?:gpu|sms|streaming "
                         r"multiprocessors)\b.{0,20}$|"
                         # "does it use all the SMs?", "is the whole GPU used?"; not "does it use the GPU?" (whether at all)
                         r"\b(?:use|uses|using) (?:all (?:of )?(?:the |my )?(?:gpu|sms|streaming multiprocessors)|"
                         r"(?:the |my )?(?:sms|streaming multiprocessors)|the (?:whole|full|entire) gpu)\b.{0,20}$|"
                         r"\b(?:under-?fill\w*|under-?occup\w*)\b|\bsm (?:utili[sz]ation|occupancy|usage|efficiency)\b|"
                         r"\bhow many sms\b|\bidle sms\b",
                    lead=grid_fill_lead, section=grid_fill_section, findings=grid_fill_findings, place=67)
