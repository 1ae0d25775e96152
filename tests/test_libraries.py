"""Kernel time by library: worked by hand on a built trace with one kernel for each rule (name, op,
template argument, module launch, a graph replay's name elsewhere), and on the bundled ResNet50 trace
against a plain reader of its JSON written here."""

from __future__ import annotations

import gzip
import json

import pytest
from builder import TraceBuilder
from conftest import RESNET_NW0, analyzed

from traceagent.detect.analysis import analyze_trace
from traceagent.detect.detectors.libraries import library_sentence
from traceagent.detect.verdict.whatif import parse_change, simulate

CUTLASS_GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(Params)"


def one_of_each() -> TraceBuilder:
    """Kernels (µs) whose library each rule decides: by hand, cuDNN 100 (named) + 50 (its op), cuBLAS
    80 (a CUTLASS GEMM under aten::mm) + 10 + 10 (a kernel launched under aten::mm, then replayed
    with no launch), CUTLASS 30 (the GEMM under another op), Triton 20, a module launch 40, vLLM 25
    (c10:: in its template arguments does not make it PyTorch's), PyTorch 15, other 5, a collective 45."""
    b = TraceBuilder()
    b.kernel("void cudnn::detail::dgrad_engine<float, 512>(int, float const*)", 10, 100, launch_at=5)
    b.op("aten::cudnn_convolution", 20, 10)
    b.kernel("conv_helper_kernel", 120, 50, launch_at=22)
    b.op("aten::mm", 40, 10)
    b.kernel(CUTLASS_GEMM, 180, 80, launch_at=42)
    b.op("mylib::fused_mlp", 60, 10)
    b.kernel(CUTLASS_GEMM, 270, 30, launch_at=62)
    b.kernel("triton_poi_fused_add_0", 310, 20, launch_at=80, call="cuLaunchKernel")
    b.kernel("my_jit_kernel", 340, 40, launch_at=90, call="cuLaunchKernel")
    b.kernel("void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, int)", 390, 25, launch_at=100)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >(int)", 420, 15,
             launch_at=110)
    b.op("aten::mm", 120, 10)
    b.kernel("replayed_kernel", 440, 10, launch_at=122)
    b.kernel("replayed_kernel", 455, 10)
    b.kernel("mystery_kernel", 470, 5)
    b.collective(480, 45, nelems=1024)
    return b


def test_each_kernel_goes_to_the_library_its_name_op_or_launch_says(tmp_path):
    result = analyze_trace(one_of_each().load(tmp_path)).results["libraries"]
    assert result.kernel_time_us == 430
    by_hand = {"cudnn": 150, "blas": 100, "collectives": 45, "module": 40, "cutlass": 30, "serving": 25, "triton": 20,
               "pytorch": 15, "other": 5}
    assert [(lib.library, lib.time_us) for lib in result.libraries] == list(by_hand.items())
    assert sum(lib.share_pct for lib in result.libraries) == pytest.approx(100, abs=0.05)
    blas = result.libraries[1]
    assert (blas.launches, blas.kernels, blas.share_pct) == (3, 2, pytest.approx(100 * 100 / 430, abs=0.01))
    assert library_sentence(result, "cudnn").startswith("**cuDNN / MIOpen: 34.9%** of the rank's kernel time "
                                                        "(150.0 µs of 430.0 µs")
    assert library_sentence(result, "triton").endswith("is launched from loaded modules, as Triton launches its "
                                                       "kernels, under names that say no library.")
    assert library_sentence(result, "fbgemm").startswith("**No FBGEMM kernels:**")


def resnet_kernels_by_hand() -> dict[str, float]:
    """Kernel name → its time (µs), read from the trace's JSON with the standard library."""
    with gzip.open(RESNET_NW0, "rt") as f:
        events = json.load(f)["traceEvents"]
    times: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat", "").lower() == "kernel":
            times[e["name"]] = times.get(e["name"], 0.0) + e["dur"]
    return times


def test_on_resnet50_the_libraries_add_up_to_the_kernel_time_and_cudnn_holds_its_own_kernels():
    result = analyzed(RESNET_NW0).ranks[0].results["libraries"]
    by_hand = resnet_kernels_by_hand()
    assert result.kernel_time_us == pytest.approx(sum(by_hand.values()), abs=0.01 * len(by_hand))
    assert {lib.library for lib in result.libraries} == {"cudnn", "pytorch", "blas"}
    # every kernel named for cuDNN is counted as cuDNN's: its share is at least theirs
    named = sum(t for name, t in by_hand.items() if "cudnn" in name.lower())
    cudnn = next(lib for lib in result.libraries if lib.library == "cudnn")
    assert cudnn.time_us >= named
    assert cudnn.top_kernel == "dgrad_engine"
    pytorch = next(lib for lib in result.libraries if lib.library == "pytorch")
    # PyTorch's: its at::native kernels, its legacy THCUNN ones (cunn_…) and its softmax kernels in an anonymous
    # namespace (their ops, aten::_log_softmax…, place them); cuBLAS's splitKreduce_kernel is not
    mine = sum(t for name, t in by_hand.items() if "at::native::" in name or name.startswith("void cunn_")
               or name.startswith("void (anonymous namespace)::softmax_warp_"))
    assert pytorch.time_us == pytest.approx(mine, abs=1)


def test_a_library_made_faster_is_replayed_on_its_kernels_alone(tmp_path):
    # by hand: a cuDNN kernel (100 µs) then PyTorch's (50 µs), back to back on one stream, both launched
    # before the first starts: the span is 150 µs, 100 with cuDNN's kernel twice as fast; PyTorch's made
    # twice as fast, 125
    b = TraceBuilder()
    b.kernel("void cudnn::detail::dgrad_engine<float, 512>(int)", 10, 100, launch_at=1, launch_dur=2)
    b.kernel("void at::native::vectorized_elementwise_kernel<4>(int)", 110, 50, launch_at=4, launch_dur=2)
    trace = b.load(tmp_path)
    assert simulate(trace, [parse_change("lib:cudnn=x2")]).predicted_us == pytest.approx(100)
    assert simulate(trace, [parse_change("lib:pytorch=x2")]).predicted_us == pytest.approx(125)
    with pytest.raises(ValueError, match="no library 'cudn'; the libraries are triton, cudnn"):
        parse_change("lib:cudn=x2")
    with pytest.raises(ValueError, match="no kernel is of library triton"):
        simulate(trace, [parse_change("lib:triton=x2")])
