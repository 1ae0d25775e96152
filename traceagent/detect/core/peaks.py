"""Peak dense throughput of common GPUs per data type (TFLOP/s), for MFU, and peak memory (HBM or
GDDR) bandwidth, for the roofline. Each row names its source, which gives both figures; sparse
figures from datasheets are halved to dense. `fp32` is the non-tensor-core rate
(PyTorch runs float32 matmuls without TF32 unless allowed); `tf32`, `fp16`, `bf16`, `fp8` are
tensor-core rates with FP32 accumulation where the datasheet distinguishes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    gpu: str  # the family this row describes
    tflops: dict[str, float]  # dtype → dense TFLOP/s
    source: str
    hbm_gbps: float | None = None  # peak memory bandwidth, GB/s (the same datasheet), for the roofline


_PEAKS: list[tuple[str, Peak]] = [  # the device-name pattern; the most specific first
    (r"V100.*PCIE", Peak("V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, "NVIDIA V100 datasheet (PCIe)", hbm_gbps=900)),
    (r"V100", Peak("V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, "NVIDIA V100 datasheet (SXM2)", hbm_gbps=900)),
    (r"\bT4\b", Peak("T4", {"fp32": 8.1, "fp16": 65.0}, "NVIDIA T4 datasheet", hbm_gbps=320)),
    (r"\bA10\b", Peak("A10", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0},
                      "NVIDIA A10 datasheet (dense = sparse / 2)", hbm_gbps=600)),
    (r"\bL4\b", Peak("L4", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "fp8": 242.5},
                     "NVIDIA L4 datasheet (dense = sparse / 2)", hbm_gbps=300)),
    (r"A100.*40GB", Peak("A100 40GB", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
                         "NVIDIA A100 datasheet (dense; 40GB: 1,555 GB/s)", hbm_gbps=1555)),
    (r"A100", Peak("A100", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
                   "NVIDIA A100 datasheet (dense; 80GB SXM: 2,039 GB/s)", hbm_gbps=2039)),
    (r"H100.*PCIE", Peak("H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0},
                         "NVIDIA H100 datasheet, PCIe (dense = sparse / 2)", hbm_gbps=2000)),
    (r"H100|H800", Peak("H100 SXM", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0},
                        "NVIDIA H100 datasheet, SXM (dense = sparse / 2)", hbm_gbps=3350)),
    (r"H200", Peak("H200", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0},
                   "NVIDIA H200 datasheet (dense = sparse / 2)", hbm_gbps=4800)),
    (r"B200", Peak("B200", {"fp32": 75.0, "tf32": 1125.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
                   "NVIDIA HGX B200 specifications (per GPU = 8-GPU system / 8; dense = sparse / 2)", hbm_gbps=8000)),
    (r"RTX\s*3090", Peak("RTX 3090", {"fp32": 35.6, "fp16": 71.0, "bf16": 71.0},
                         "NVIDIA Ampere GA102 whitepaper (tensor FP16/BF16, FP32 accumulate, dense)", hbm_gbps=936)),
    (r"RTX\s*4090", Peak("RTX 4090", {"fp32": 82.6, "fp16": 165.2, "bf16": 165.2, "fp8": 330.3},
                         "NVIDIA Ada Lovelace whitepaper (tensor, FP32 accumulate, dense)", hbm_gbps=1008)),
    (r"MI250X", Peak("MI250X", {"fp32": 95.7, "fp16": 383.0, "bf16": 383.0}, "AMD Instinct MI250X datasheet", hbm_gbps=3277)),
    (r"MI300X", Peak("MI300X", {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9},
                     "AMD Instinct MI300X datasheet (dense)", hbm_gbps=5300)),
]

#: PyTorch's names for tensor element types → the table's
DTYPES = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8",
          "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8", "double": "fp64"}


def peak_for(device_name: str) -> Peak | None:
    """The table's row for a device name ("NVIDIA H100 80GB HBM3", "Tesla V100-DGXS-32GB")."""
    upper = device_name.upper()
    return next((peak for pattern, peak in _PEAKS if re.search(pattern, upper)), None)


def autocast_dtype(peak: Peak) -> str | None:
    """The lower precision autocast would run in on this GPU: bf16 where it has it, else fp16, else
    None (what mixed precision means here, for whatif's amp and precision's advice)."""
    return next((d for d in ("bf16", "fp16") if d in peak.tflops), None)


def known_gpus() -> list[str]:
    """The GPU families the table has, for messages."""
    return [peak.gpu for _, peak in _PEAKS]
