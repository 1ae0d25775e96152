"""Which rank and GPU the chat app shows: the choices, and the one shown until the user chooses
(the timeline, the side panel and the header all ask here)."""

from __future__ import annotations

from ..detect.analysis import Analysis


def scope_options(analysis: Analysis) -> list[tuple[str, tuple[int | None, int]]]:
    """(label, (rank, GPU)) for every GPU of every rank."""
    return [(f"rank {r.rank} · GPU {device}", (r.rank, device))
            for r in analysis.ranks for device in r.breakdown.devices]


def default_scope(analysis: Analysis) -> tuple[int | None, int] | None:
    """What the timeline and the panel show until the user chooses: the verdict's rank's first GPU."""
    scopes = [value for _, value in scope_options(analysis)]
    return next((value for value in scopes if value[0] == analysis.focus.rank), scopes[0] if scopes else None)
