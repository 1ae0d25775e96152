"""FLOPs, achieved TFLOP/s and MFU from recorded shapes: the formulas by hand, a hand-built trace
whose throughput is worked out in the test, and a real trace against an independent reading."""

from __future__ import annotations

import gzip
import json

import pytest
from builder import TraceBuilder
from conftest import DATA, analyzed, offline_answer

from traceagent import analyze
from traceagent.detect.core.peaks import _PEAKS, peak_for
from traceagent.detect.detectors.flops import flops_sentence, op_bytes, op_flops, uncounted_sentence

H100_QWEN = DATA / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BF16 = '"c10::BFloat16"'


def shapes(dims: list, types: str = BF16, concrete: list | None = None) -> str:
    return f"[{json.dumps(dims)},[{types}, {types}],{json.dumps(concrete)}]"


@pytest.mark.parametrize("name, dims, concrete, expected", [
    ("aten::mm", [[64, 128], [128, 256]], None, 2 * 64 * 128 * 256),
    # addmm and baddbmm: the product, and the bias added to each of the M·N outputs
    ("aten::addmm", [[256], [64, 128], [128, 256], [], []], None, 2 * 64 * 128 * 256 + 64 * 256),
    ("aten::bmm", [[8, 64, 128], [8, 128, 32]], None, 2 * 8 * 64 * 128 * 32),
    ("aten::baddbmm", [[8, 64, 32], [8, 64, 128], [8, 128, 32]], None, 2 * 8 * 64 * 128 * 32 + 8 * 64 * 32),
    # attention: QKᵀ and AV, each 2·B·H·L·S·E; the backward twice the forward
    ("aten::_scaled_dot_product_flash_attention", [[2, 4, 16, 8], [2, 4, 32, 8], [2, 4, 32, 8]], None,
     2 * (2 * 2 * 4 * 16 * 32 * 8)),
    ("aten::_scaled_dot_product_flash_attention_backward",
     [[2, 4, 16, 8], [2, 4, 16, 8], [2, 4, 32, 8], [2, 4, 32, 8]], None, 2 * 2 * (2 * 2 * 4 * 16 * 32 * 8)),
    # 3×3 stride 2 padding 1 on 32×32: 16×16 outputs, each a dot product over 3·3·3 inputs
    ("aten::_convolution", [[4, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], []],
     ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False"], 2 * 4 * 16 * 3 * 9 * 16 * 16),
    ("aten::convolution_backward", [[4, 16, 16, 16], [4, 3, 32, 32], [16, 3, 3, 3]], None,
     2 * (2 * 4 * 16 * 3 * 9 * 16 * 16)),
])
def test_flops_by_hand(name, dims, concrete, expected):
    assert op_flops(name, shapes(dims, concrete=concrete)) == (expected, "bf16")


# causal attention: (query, key, value, dropout_p, is_causal, return_debug_mask, scale) for flash,
# is_causal sixth for efficient and cudnn, twelfth for flash's backward; a square mask keeps half
FLASH, EFFICIENT = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention"
SQUARE = [[2, 4, 32, 8], [2, 4, 32, 8], [2, 4, 32, 8]]
FULL = 2 * (2 * 2 * 4 * 32 * 32 * 8)


@pytest.mark.parametrize("name, dims, concrete, expected", [
    (FLASH, SQUARE, ["", "", "", "0.", "True", "False", "0.125"], FULL / 2),
    (FLASH, SQUARE, ["", "", "", "0.", "False", "False", "0.125"], FULL),
    (FLASH, SQUARE, None, FULL),  # not recorded: the whole matrix
    (EFFICIENT, [*SQUARE, [], [], [], [], []], ["", "", "", "", "True", "0.", "True", "0.125"], FULL / 2),
    (EFFICIENT, [*SQUARE, [], [], [], [], []], ["", "", "", "", "True", "0.", "False", "0.125"], FULL),
    ("aten::_scaled_dot_product_flash_attention_backward", [[2, 4, 32, 8], *SQUARE],
     [""] * 11 + ["True", "", "", "0.125"], 2 * FULL / 2),
    # 4 queries against 32 keys, top-left aligned as PyTorch's tril: rows keep 1, 2, 3, 4 keys of 32
    (FLASH, [[2, 4, 4, 8], [2, 4, 32, 8], [2, 4, 32, 8]], ["", "", "", "0.", "True", "False", "0.125"],
     2 * (2 * 2 * 4 * 4 * 32 * 8) * (1 + 2 + 3 + 4) / (4 * 32)),
])
def test_causal_attention_counts_only_the_scores_it_computes(name, dims, concrete, expected):
    assert op_flops(name, shapes(dims, concrete=concrete)) == (pytest.approx(expected), "bf16")


def test_sdpa_flops_per_call_on_the_qwen_trace_equal_tracelens_rule_read_from_the_raw_json():
    # TraceLens's SDPA model (perf_model.SDPA.flops_func): 2·B·H·L·S·(Eqk + Ev), halved when causal
    # and L == S. Worked out here from the raw events' shapes and is_causal, not from either tool.
    raw = json.loads(gzip.decompress(H100_QWEN.read_bytes()))["traceEvents"]
    calls = [e["args"] for e in raw if e.get("name") == "aten::_scaled_dot_product_flash_attention"]
    assert calls and all(a["Concrete Inputs"][4] == "True" for a in calls)  # the model attends causally
    per_call = []
    for a in calls:
        (b, h, length, e), (_, _, keys, _), (_, _, _, ev) = a["Input Dims"][:3]
        per_call.append(2 * b * h * length * keys * (e + ev) / (2 if length == keys else 1))
    sdpa = next(o for o in analyzed(H100_QWEN).ranks[0].findings.flops.by_op
                if o.name == "aten::_scaled_dot_product_flash_attention")
    assert sdpa.count == len(calls) and sdpa.gflop == pytest.approx(sum(per_call) / 1e9, abs=1e-3)


def test_what_cannot_be_counted_is_none():
    assert op_flops("aten::_convolution", shapes([[4, 3, 32, 32], [16, 3, 3, 3]]))[0] is None  # no stride
    assert op_flops("aten::mm", "not json")[0] is None
    assert op_flops("aten::mm", shapes([[64], [128, 256]]))[0] is None


def test_achieved_throughput_and_mfu_on_a_hand_built_trace(tmp_path):
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    mm = b.op("aten::mm", 0, 100)
    mm["args"] |= {"Input Dims": [[1000, 1000], [1000, 1000]], "Input type": ["c10::BFloat16"] * 2}
    b.kernel("sm90_gemm", 20, 10, launch_at=10)  # launched inside the op: 10 µs of device time
    result = analyze(b.write(tmp_path / "t.json"), use_cache=False).ranks[0].findings.flops
    flops = 2 * 1000**3  # 2 GFLOP in 10 µs: 200 TFLOP/s; the H100 SXM bf16 dense peak is 989.5
    assert (result.gflop, result.gpu_us, result.achieved_tflops) == (2.0, 10.0, 200.0)
    assert result.by_op[0].mfu_pct == round(100 * 200 / 989.5, 2)
    assert result.mfu_pct == round(100 * flops / 10e-6 / 989.5e12, 2)  # the span is that one kernel
    assert (result.gpu, result.dtype, result.peak_tflops) == ("NVIDIA H100 80GB HBM3", "bf16", 989.5)


def test_mfu_says_how_much_matmul_time_ran_outside_the_counted_ops(tmp_path):
    # by hand: a counted aten::mm (10 µs of gemm), a fused MoE op of its own (30 µs of gemm) and a
    # kernel no op launched (a graph replay, 20 µs of gemm): 60 µs of compute-heavy kernels, 50 outside
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    mm = b.op("aten::mm", 0, 100)
    mm["args"] |= {"Input Dims": [[1000, 1000], [1000, 1000]], "Input type": ["c10::BFloat16"] * 2}
    b.kernel("sm90_gemm", 20, 10, launch_at=10)
    b.op("mylib::fused_moe", 200, 100)
    b.kernel("sm90_gemm_grouped", 220, 30, launch_at=210)
    b.kernel("sm90_gemm_grouped", 320, 20, launch_at=310)  # launched outside every op
    b.kernel("vectorized_elementwise_kernel", 350, 40, launch_at=315)  # not compute-heavy: not in the figure
    analysis = analyze(b.write(tmp_path / "t.json"), use_cache=False)
    flops = analysis.ranks[0].findings.flops
    assert (flops.compute_heavy_us, flops.uncounted_us, flops.uncounted_pct) == (60.0, 50.0, round(100 * 50 / 60, 2))
    assert (flops.uncounted_kernel, flops.uncounted_op) == ("sm90_gemm_grouped", "mylib::fused_moe")
    said = flops_sentence(flops)
    assert "MFU and the achieved rate are lower bounds: 83.3% of the 60.0 µs" in said
    assert "(led by `sm90_gemm_grouped` from `mylib::fused_moe`)" in said
    answer = offline_answer(analysis, "what is my MFU?")
    assert "(a lower bound: kernels outside the counted ops" in answer and "83.3%" in answer


def test_mfu_inside_counted_ops_alone_says_no_lower_bound(tmp_path):
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    mm = b.op("aten::mm", 0, 100)
    mm["args"] |= {"Input Dims": [[1000, 1000], [1000, 1000]], "Input type": ["c10::BFloat16"] * 2}
    b.kernel("sm90_gemm", 20, 10, launch_at=10)
    analysis = analyze(b.write(tmp_path / "t.json"), use_cache=False)
    flops = analysis.ranks[0].findings.flops
    assert (flops.compute_heavy_us, flops.uncounted_us, flops.uncounted_kernel) == (10.0, 0.0, None)
    assert uncounted_sentence(flops) is None
    assert "lower bound" not in offline_answer(analysis, "what is my MFU?")


def test_a_real_trace_matches_an_independent_reading():
    raw = json.loads(gzip.decompress(H100_QWEN.read_bytes()))["traceEvents"]
    expected = sum(2 * a[0] * a[1] * b[1] for e in raw if e.get("name") == "aten::mm"
                   for a, b in [e["args"]["Input Dims"][:2]])
    result = analyzed(H100_QWEN).ranks[0].findings.flops
    mm = next(o for o in result.by_op if o.name == "aten::mm")
    assert mm.gflop == pytest.approx(expected / 1e9, abs=1e-3)
    assert result.mfu_pct is not None and result.gpu and result.dtype == "bf16" and result.peak_source


def test_every_peak_has_a_source_and_names_match():
    assert all(peak.source and peak.tflops for _, peak in _PEAKS)
    assert peak_for("Tesla V100-DGXS-32GB").gpu == "V100 SXM2"
    assert peak_for("NVIDIA H100 PCIe").gpu == "H100 PCIe" and peak_for("NVIDIA A100-SXM4-80GB").gpu == "A100"
    assert peak_for("NVIDIA A10").gpu == "A10" and peak_for("Some GPU") is None


def test_the_html_report_charts_throughput_and_memory():
    from traceagent.format import size
    from traceagent.report.html import render_html

    analysis = analyzed(H100_QWEN)
    page = render_html(analysis)
    flops_chart = next(f for f in page.split("<figure>") if 'aria-label="achieved throughput"' in f)
    top = analysis.ranks[0].findings.flops.by_op[0]
    assert f"{top.achieved_tflops:g} TFLOP/s · {top.mfu_pct:.1f}% of peak" in flops_chart
    assert "H100 SXM peak" in flops_chart
    memory_chart = next(f for f in page.split("<figure>") if 'aria-label="memory over time"' in f)
    (gpu,) = analysis.ranks[0].findings.memory.devices
    assert f"up to {size(gpu.peak_allocated_bytes)}" in memory_chart


def test_each_kernel_gets_the_flops_of_the_ops_that_launched_it(tmp_path):
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    mm = b.op("aten::mm", 0, 100)
    mm["args"] |= {"Input Dims": [[1000, 1000], [1000, 1000]], "Input type": ["c10::BFloat16"] * 2}
    b.kernel("gemm_main", 20, 30, launch_at=10)  # 30 of the op's 40 µs: three quarters of its 2 GFLOP
    b.kernel("gemm_tail", 60, 10, launch_at=15)
    flops = analyze(b.write(tmp_path / "t.json"), use_cache=False).ranks[0].findings.flops
    kernels = {k.name: k for k in flops.by_kernel}
    assert kernels["gemm_main"].gflop == 1.5 and kernels["gemm_tail"].gflop == 0.5
    assert kernels["gemm_main"].achieved_tflops == 50.0  # 1.5 GFLOP in 30 µs
    real = analyzed(H100_QWEN).ranks[0].findings.flops
    assert sum(k.gflop for k in real.by_kernel) == pytest.approx(real.gflop, abs=0.01)  # shared out, not lost


@pytest.mark.parametrize("name, dims, expected_elements", [
    ("aten::mm", [[64, 128], [128, 256]], 64 * 128 + 128 * 256 + 64 * 256),  # A and B read, C written
    ("aten::addmm", [[256], [64, 128], [128, 256], [], []], 256 + 64 * 128 + 128 * 256 + 64 * 256),
    ("aten::_scaled_dot_product_flash_attention", [[2, 4, 16, 8], [2, 4, 32, 8], [2, 4, 32, 8]],
     2 * 4 * 16 * 8 + 2 * 2 * 4 * 32 * 8 + 2 * 4 * 16 * 8),  # Q, K, V read, O written
    ("aten::add", [[1024, 1024], [1024, 1024], []], 3 * 1024 * 1024),  # two read, one written
    ("aten::mul", [[8, 1024], [1024], []], 8 * 1024 + 1024 + 8 * 1024),  # the broadcast output
    ("aten::native_layer_norm", [[8, 1024], [], [1024], [1024], []], 2 * 8 * 1024 + 2 * 1024),
])
def test_bytes_by_hand(name, dims, expected_elements):
    assert op_bytes(name, shapes(dims)) == 2 * expected_elements  # bf16: 2 bytes an element


def test_roofline_side_and_memory_bandwidth_on_a_hand_built_trace(tmp_path):
    """H100 SXM bf16: ridge = 989.5 TFLOP/s / 3350 GB/s = 295.4 FLOP/byte.
    - a 4096³ GEMM: 2·4096³ FLOP over 2·3·4096² bytes = 1365 FLOP/byte: compute-bound;
    - a 16×4096×4096 GEMM (a decode step): 2·16·4096² FLOP over 2·(2·16·4096 + 4096²) bytes = 15.9: memory-bound;
    - an add of two 1024² bf16 tensors: 3·2 MiB in 10 µs = 629.1 GB/s, 18.8% of 3350 GB/s."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for start, name, dims, dur in [(0, "aten::mm", [[4096, 4096], [4096, 4096]], 200),
                                   (1000, "aten::addmm", [[4096], [16, 4096], [4096, 4096], [], []], 30),
                                   (2000, "aten::add", [[1024, 1024], [1024, 1024], []], 10)]:
        op = b.op(name, start, dur + 50)
        op["args"] |= {"Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims)}
        b.kernel(f"kernel_of_{name}", start + 20, dur, launch_at=start + 10)
    flops = analyze(b.write(tmp_path / "t.json"), use_cache=False).ranks[0].findings.flops
    assert flops.ridge_flop_per_byte == round(989.5e12 / 3350e9, 1) and flops.memory_gbps == 3350
    ops = {o.name: o for o in flops.by_op}
    assert ops["aten::mm"].intensity_flop_per_byte == round(2 * 4096**3 / (2 * 3 * 4096**2), 2)
    assert ops["aten::mm"].roofline == "compute"
    small = (2 * 16 * 4096 * 4096) / (2 * (4096 + 16 * 4096 + 4096 * 4096 + 16 * 4096))
    assert ops["aten::addmm"].intensity_flop_per_byte == round(small, 2) and ops["aten::addmm"].roofline == "memory"
    [add] = flops.traffic
    assert (add.name, add.gbytes, add.gpu_us) == ("aten::add", round(6 * 1024**2 / 1e9, 9), 10.0)
    assert add.achieved_gbps == round(6 * 1024**2 / 10_000, 1)
    assert add.memory_peak_pct == round(100 * (6 * 1024**2 / 10_000) / 3350, 2)


def test_a_tiny_matmuls_rate_is_quoted_in_gflop_s_not_rounded_to_zero(tmp_path):
    from traceagent.detect.detectors.flops import flops_sentence

    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    mm = b.op("aten::mm", 0, 20)
    mm["args"] |= {"Input Dims": [[16, 16], [16, 128]], "Input type": ["c10::BFloat16"] * 2}
    b.kernel("gemm_small", 5, 7.5, launch_at=2)
    result = analyze(b.write(tmp_path / "t.json"), use_cache=False).ranks[0].findings.flops
    # by hand: 2·16·16·128 = 65536 FLOP in 7.5 µs, 8.738 GFLOP/s (to the GFLOP/s, 0.009 TFLOP/s read "0.0")
    assert result.achieved_tflops == pytest.approx(65536 / 7.5e-6 / 1e12, rel=1e-3)
    assert "8.7 GFLOP/s achieved" in flops_sentence(result)


@pytest.mark.parametrize(("name", "dims", "concrete", "expected"), [
    ("aten::_convolution", [[10, 128, 28, 28], [256, 128, 1, 1], [], [], [], [], []],
     ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "False"], "in=[10, 128, 28, 28] weight=[256, 128, 1, 1] stride=[2, 2]"),
    # as MI300's ResNet trace records it: (grad_output, input, weight, bias_sizes, stride, …); the
    # bias_sizes [0] is not the stride
    ("aten::convolution_backward", [[10, 256, 14, 14], [10, 128, 28, 28], [256, 128, 1, 1], [], [], [], [], [], [], [], []],
     ["", "", "", "[0]", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"],
     "in=[10, 128, 28, 28] weight=[256, 128, 1, 1] stride=[2, 2]"),
])
def test_a_convolutions_shape_names_its_stride(name, dims, concrete, expected):
    from traceagent.detect.detectors.shapes import shape_key

    assert shape_key(name, shapes(dims, concrete=concrete)) == expected


def test_two_gemm_shapes_of_which_one_is_slow_by_hand(tmp_path):
    from traceagent.detect.detectors.shapes import detect_shapes, shapes_sentence

    # 4 calls of a 1024³ bf16 matmul in 10 µs each (2·1024³ FLOP / 10 µs = 214.7 TFLOP/s), and 4 calls
    # of 1024×1000×1024 in 20 µs each (2·1024·1000·1024 / 20 µs = 104.9 TFLOP/s: 48.8% of the best)
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    t = 0.0
    for k, (kdim, dur) in enumerate([(1024, 10.0), (1000, 20.0)] * 4):
        op = b.op("aten::mm", t, dur + 10)
        op["args"] |= {"Input Dims": [[1024, kdim], [kdim, 1024]], "Input type": ["c10::BFloat16"] * 2}
        b.kernel(f"sm90_gemm_{k}", t + 8, dur, launch_at=t + 2)
        t += dur + 20
    result = detect_shapes(b.load(tmp_path))
    fast, slow = (next(r for r in result.rows if r.shape == f"M=1024 K={k} N=1024") for k in (1024, 1000))
    assert (fast.calls, fast.gpu_us, slow.calls, slow.gpu_us) == (4, 40.0, 4, 80.0)
    assert fast.tflops == pytest.approx(2 * 1024**3 / 10e-6 / 1e12, abs=1e-3) and not fast.slow
    assert slow.tflops == pytest.approx(2 * 1024 * 1000 * 1024 / 20e-6 / 1e12, abs=1e-3)
    assert slow.slow and slow.of_best_pct == pytest.approx(100 * 1000 / 1024 / 2, abs=0.01)
    # what it loses: 80 µs, against the time its FLOPs take at the fast shape's rate (4 × 10 × 1000/1024 µs)
    assert slow.lost_us == pytest.approx(80 - 40 * 1000 / 1024, abs=0.001)
    assert slow.mfu_pct == pytest.approx(100 * slow.tflops / 989.5, abs=0.01)
    assert result.slow == [slow] and "M=1024 K=1000 N=1024" in shapes_sentence(result)


def test_an_op_called_inside_one_of_its_name_is_counted_once_and_no_op_beats_the_memory(tmp_path):
    """H100 SXM (3350 GB/s), bf16. aten::mm (1000³, 2 GFLOP) runs 0-100 µs and calls aten::mm again,
    with the same shapes, 5-95 (one dispatching to the other); one 10 µs kernel is launched inside
    both. By hand: 2 GFLOP in 10 µs, 200 TFLOP/s, once (not 4 GFLOP over 20 µs). An aten::add of two
    1024² tensors at 2000 µs: 6 MiB in 10 µs, 629.1 GB/s, listed; an aten::mul whose shapes say two
    4096² tensors (96 MiB) in 10 µs would be 10,066 GB/s, three times the memory's peak (a broadcast
    input, strides unrecorded): not listed."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for start, dur in ((0, 100), (5, 90)):
        mm = b.op("aten::mm", start, dur)
        mm["args"] |= {"Input Dims": [[1000, 1000], [1000, 1000]], "Input type": ["c10::BFloat16"] * 2}
    b.kernel("sm90_gemm", 20, 10, launch_at=10)
    for start, name, side in ((2000, "aten::add", 1024), (3000, "aten::mul", 4096)):
        op = b.op(name, start, 60)
        op["args"] |= {"Input Dims": [[side, side], [side, side], []], "Input type": ["c10::BFloat16"] * 3}
        b.kernel(f"kernel_of_{name}", start + 20, 10, launch_at=start + 10)
    flops = analyze(b.write(tmp_path / "t.json"), use_cache=False).ranks[0].findings.flops
    assert (flops.gflop, flops.gpu_us, flops.achieved_tflops) == (2.0, 10.0, 200.0)
    assert [(o.name, o.count) for o in flops.by_op] == [("aten::mm", 1)]
    assert [(t.name, t.achieved_gbps) for t in flops.traffic] == [("aten::add", round(6 * 1024**2 / 10_000, 1))]


def test_a_hot_kernel_near_its_peak_is_not_sent_to_nsight_compute(tmp_path):
    """2 GFLOP in 3 µs on an H100 is 666.67 TFLOP/s, 67.37% of the bf16 dense peak (989.5): at 60%
    or more the verdict looks past the kernel; in 10 µs (20.21%) it still says to profile it."""
    def verdict(dur: float):
        b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
        mm = b.op("aten::mm", 0, 100)
        mm["args"] |= {"Input Dims": [[1000, 1000], [1000, 1000]], "Input type": ["c10::BFloat16"] * 2}
        b.kernel("sm90_gemm", 20, dur, launch_at=10)
        return analyze(b.write(tmp_path / f"t{dur}.json"), use_cache=False).verdict

    near, far = verdict(3.0), verdict(10.0)
    assert near.root_cause == far.root_cause == "hot_kernel"
    assert f"It already runs at {round(100 * 2000 / 3 / 989.5, 1)}% of the GPU's bf16 peak" in near.hypothesis
    assert near.next_step.startswith("Look past this kernel") and "Nsight Compute" not in near.next_step
    assert far.next_step.startswith("Profile that kernel") and "already runs" not in far.hypothesis
