"""Peak bandwidth of the links collectives cross, per GPU and per direction: the figure that
nccl-tests' bus bandwidth is measured against. Each row names its source. Which link a group
uses is an assumption (the trace records GPU names, not the topology), and is always said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """The link a process group's collectives are assumed to cross."""

    kind: str  # "NVLink 4", "PCIe Gen4 x16", "Infinity Fabric (xGMI)", "network: 8 × 400 Gb/s NICs per node, 50 GB/s per GPU"
    peak_gbps: float  # GB/s (10^9 bytes/s), per GPU, per direction: what busbw is compared with
    source: str
    assumption: str  # why this link: the GPU's name, the group's layout, what was assumed


@dataclass(frozen=True)
class _Row:
    family: str
    scale_up: str  # the GPU-to-GPU link inside a node
    scale_up_gbps: float  # per GPU, per direction
    source: str
    nic_gbps: float  # the NIC a GPU of this family usually has in its reference system (Gb/s)
    nic_source: str


# the device-name pattern; the most specific first. NVLink figures are the datasheets' totals
# (both directions added) halved; PCIe x16 per direction after encoding (PCI-SIG: 8/16/32 GT/s
# with 128b/130b encoding ≈ 0.985 GB/s per lane per GT/s / 8).
_PCIE3, _PCIE4, _PCIE5 = 15.75, 31.5, 63.0
_ROWS: list[tuple[str, _Row]] = [
    (r"V100.*PCIE", _Row("V100 PCIe", "PCIe Gen3 x16", _PCIE3, "PCI-SIG PCIe 3.0: 8 GT/s × 16 lanes, 128b/130b",
                         100, "DGX-1: InfiniBand EDR (100 Gb/s)")),
    (r"V100", _Row("V100 SXM2", "NVLink 2", 150.0, "NVIDIA V100 datasheet: NVLink 300 GB/s (both directions)",
                   100, "DGX-1: InfiniBand EDR (100 Gb/s)")),
    (r"A100.*PCIE", _Row("A100 PCIe", "PCIe Gen4 x16", _PCIE4, "PCI-SIG PCIe 4.0: 16 GT/s × 16 lanes, 128b/130b",
                         200, "DGX A100: InfiniBand HDR (200 Gb/s) per GPU")),
    (r"A100", _Row("A100 SXM", "NVLink 3", 300.0, "NVIDIA A100 datasheet: NVLink 600 GB/s (both directions)",
                   200, "DGX A100: InfiniBand HDR (200 Gb/s) per GPU")),
    (r"H100.*PCIE", _Row("H100 PCIe", "PCIe Gen5 x16", _PCIE5, "PCI-SIG PCIe 5.0: 32 GT/s × 16 lanes, 128b/130b",
                         400, "DGX H100: ConnectX-7 NDR (400 Gb/s) per GPU")),
    (r"H100|H800|H200|GH200", _Row("H100/H200 SXM", "NVLink 4", 450.0,
                                   "NVIDIA H100/H200 datasheets: NVLink 900 GB/s (both directions)",
                                   400, "DGX H100/H200: ConnectX-7 NDR (400 Gb/s) per GPU")),
    (r"B200|B100|GB200", _Row("B200", "NVLink 5", 900.0, "NVIDIA HGX B200 specifications: NVLink 1.8 TB/s per GPU "
                              "(both directions)", 400, "DGX B200: ConnectX-7 (400 Gb/s) per GPU")),
    (r"MI300X|MI325X", _Row("MI300X", "Infinity Fabric (xGMI)", 448.0,
                            "AMD Instinct MI300X datasheet: 7 links × 128 GB/s (both directions) = 896 GB/s",
                            400, "AMD Instinct MI300X platform: 400 Gb/s NIC per GPU")),
    (r"MI250", _Row("MI250/MI250X", "Infinity Fabric (xGMI)", 200.0,
                    "AMD Instinct MI250X datasheet: 8 links × 100 GB/s (both directions), half to the peer GCD",
                    200, "HPE Cray EX: Slingshot 200 Gb/s")),
    (r"\bT4\b|RTX\s*20|QUADRO|TITAN V", _Row("PCIe Gen3 GPU", "PCIe Gen3 x16", _PCIE3,
                                            "PCI-SIG PCIe 3.0: 8 GT/s × 16 lanes, 128b/130b", 100, "assumed 100 Gb/s")),
    (r"RTX\s*50", _Row("PCIe Gen5 GPU", "PCIe Gen5 x16", _PCIE5, "PCI-SIG PCIe 5.0: 32 GT/s × 16 lanes, 128b/130b",
                       100, "assumed 100 Gb/s")),
]
_DEFAULT = _Row("unknown GPU", "PCIe Gen4 x16", _PCIE4, "PCI-SIG PCIe 4.0: 16 GT/s × 16 lanes, 128b/130b "
                "(assumed: the GPU is not in the table)", 100, "assumed 100 Gb/s")
_NIC_SOURCE = "InfiniBand/Ethernet line rate (Gb/s ÷ 8)"


#: the GPU's link to the host (what HtoD and DtoH copies cross), by the same device-name patterns
_HOST: list[tuple[str, str, float, str]] = [
    (r"GH200|GB200", "NVLink-C2C", 450.0, "NVIDIA GH200 datasheet: NVLink-C2C 900 GB/s (both directions)"),
    (r"V100|T4\b|RTX\s*20|TITAN V|QUADRO", "PCIe Gen3 x16", _PCIE3, "PCI-SIG PCIe 3.0: 8 GT/s × 16 lanes, 128b/130b"),
    # cards built with eight lanes, whatever the slot
    (r"RTX\s*50[56]0", "PCIe Gen5 x8", _PCIE5 / 2, "NVIDIA GeForce RTX 5060 / 5060 Ti specifications: PCIe 5.0 x8 "
                                                  "(32 GT/s × 8 lanes, 128b/130b)"),
    (r"RTX\s*40[56]0|RTX\s*3050", "PCIe Gen4 x8", _PCIE4 / 2, "NVIDIA GeForce RTX 4060 / 4060 Ti / 3050 "
                                                             "specifications: PCIe 4.0 x8 (16 GT/s × 8 lanes, 128b/130b)"),
    (r"H100|H200|H800|B200|B100|MI300|MI325|RTX\s*50", "PCIe Gen5 x16", _PCIE5,
     "PCI-SIG PCIe 5.0: 32 GT/s × 16 lanes, 128b/130b"),
    (r"A100|A10\b|A40|L4\b|L40|RTX\s*(?:30|40)|RTX A\d|MI2\d0", "PCIe Gen4 x16", _PCIE4,
     "PCI-SIG PCIe 4.0: 16 GT/s × 16 lanes, 128b/130b"),
]


#: links collectives can cross, by name, as one GPU's peak per direction (GB/s) and its source: the
#: table's scale-up links (the first row of a name gives its figure), and the usual NICs per GPU
NAMED_LINKS: dict[str, tuple[float, str]] = {}
for _, _named in _ROWS:
    NAMED_LINKS.setdefault(_named.scale_up, (_named.scale_up_gbps, _named.source))
NAMED_LINKS |= {f"InfiniBand {name} (one {gbits} Gb/s NIC per GPU)": (gbits / 8, _NIC_SOURCE)
                for name, gbits in (("EDR", 100), ("HDR", 200), ("NDR", 400), ("XDR", 800))}


def named_link(name: str) -> tuple[str, float, str] | None:
    """A link of NAMED_LINKS by a loose name ("nvlink5", "PCIe Gen5", "infiniband ndr"): its full
    name, peak and source; None when no link or several links match."""
    def loose(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    wanted = loose(name)
    found = [k for k in NAMED_LINKS if loose(k) == wanted] or [k for k in NAMED_LINKS if loose(k).startswith(wanted)]
    return (found[0], *NAMED_LINKS[found[0]]) if wanted and len(found) == 1 else None


def host_link(device_name: str) -> Link:
    """The link between a GPU and its host, from the GPU's generation (x16 assumed, but for cards
    built with eight lanes: a GPU in a narrower slot, or behind a switch shared with a NIC, gets less)."""
    upper = (device_name or "").upper()
    found = next(((k, g, src) for pattern, k, g, src in _HOST if re.search(pattern, upper)), None)
    kind, gbps, source = found or ("PCIe Gen4 x16", _PCIE4, "PCI-SIG PCIe 4.0: 16 GT/s × 16 lanes, 128b/130b")
    why = "by the GPU's generation" if found else "assumed (the GPU is not in the table)"
    slot = {"x16": "; a full x16 slot assumed", "x8": "; the card's own eight lanes"}.get(kind.rpartition(" ")[2], "")
    return Link(kind, gbps, source, f"{device_name or 'an unnamed GPU'}; host link {why}{slot}")


def _row(device_name: str) -> _Row:
    upper = device_name.upper()
    return next((row for pattern, row in _ROWS if re.search(pattern, upper)), _DEFAULT)


def shares_node(ranks: list[int], gpus_per_node: int) -> bool:
    """Whether a group's ranks share a node, numbering nodes as torchrun does (rank // GPUs per node)."""
    return len({r // gpus_per_node for r in ranks}) <= 1


def link_for(device_name: str, ranks: list[int] | None, group_size: int, gpus_per_node: int = 8,
             nic_gbps: float | None = None, nics_per_node: int | None = None) -> Link:
    """The link a group's collectives cross, as one GPU's peak (what a rank's bus bandwidth is
    compared with): the GPU's own scale-up link when its ranks share a node; else its share of
    the node's NICs (nccl-tests' inter-node busbw per GPU is bounded by them: with one NIC per
    GPU, one NIC's line rate). `nics_per_node` (default: one per GPU) and `nic_gbps` (default:
    the GPU family's usual NIC) are separate, and both are said. A group without its ranks listed
    is assumed to fit in a node if it can."""
    row = _row(device_name)
    gpu = device_name or "an unnamed GPU"
    if ranks:
        within = shares_node(ranks, gpus_per_node)
        nodes = len({r // gpus_per_node for r in ranks})
        layout = f"ranks {_span(ranks)} {'in one node' if within else f'across {nodes} nodes'}"
    else:
        within = group_size <= gpus_per_node
        layout = f"{group_size} ranks (not listed), taken to be {'in one node' if within else 'across nodes'}"
    per_node = f"{gpus_per_node} GPUs per node assumed"
    if within:
        return Link(row.scale_up, row.scale_up_gbps, row.source, f"{gpu}; {layout}; {per_node}")
    gbps = nic_gbps or row.nic_gbps
    nics = nics_per_node or gpus_per_node
    share = nics * gbps / 8 / gpus_per_node  # GB/s of the node's NICs for each of its GPUs
    nic = f"{gbps:g} Gb/s each ({'given' if nic_gbps else row.nic_source})"
    count = f"{nics} NICs per node ({'given' if nics_per_node else 'one per GPU assumed'})"
    return Link(f"network: {nics} × {gbps:g} Gb/s NICs per node, {share:g} GB/s per GPU", share, _NIC_SOURCE,
                f"{gpu}; {layout}; {per_node}; {count} of {nic}: each GPU's share is {share:g} GB/s")


def _span(ranks: list[int]) -> str:
    """'0-7', '0, 2, 4', or the first few of many."""
    ordered = sorted(set(ranks))
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"{ordered[0]}-{ordered[-1]}"
    shown = ", ".join(map(str, ordered[:6]))
    return shown + (f", … ({len(ordered)} ranks)" if len(ordered) > 6 else "")
