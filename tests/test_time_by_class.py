"""GPU time by class of work (a registered detector): each device op classed by its kernel's name
and the op that launched it. The trace is built here and every share worked out by hand."""

from __future__ import annotations

import json

import jsonschema
import pandas as pd
import pytest
from builder import TraceBuilder
from conftest import offline_answer

from traceagent import analyze
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.detect.core.encode import to_data
from traceagent.detect.detectors.time_by_class import time_by_class_sentence
from traceagent.schema import SCHEMAS

#: (launching op or None, kernel name, µs): 300 µs of device work back to back from t=0, plus a
#: collective (25 µs) and a copy (15 µs) — 340 µs in all
WORK = [
    ("aten::mm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 100),
    # cuDNN runs a GEMM for the convolution: the op decides, it is the convolution's time
    ("aten::cudnn_convolution", "volta_sgemm_64x64_nt", 50),
    ("aten::_flash_attention_forward", "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)", 40),
    ("aten::mul", "void at::native::vectorized_elementwise_kernel<4, at::native::mul_kernel>(int, T)", 30),
    ("aten::native_layer_norm", "void at::native::vectorized_layer_norm_kernel<float>(int, float)", 20),
    # a generic op: the kernel's name decides (a softmax, not an elementwise op)
    ("aten::_softmax", "void softmax_warp_forward<float, float, float, 10>(float*, int)", 10),
    # rotary embedding is elementwise work, not an embedding lookup
    (None, "rotary_embedding_kernel", 5),
    ("aten::embedding", "void at::native::indexSelectLargeIndex<float, long>(T*, long)", 5),
    (None, "my_custom_kernel", 40),
]


def classes_trace(tmp_path):
    b = TraceBuilder()
    t = 0
    for op, kernel, dur in WORK:
        if op:
            b.op(op, t, 4)
        b.kernel(kernel, t, dur, launch_at=t + 1, launch_dur=2)
        t += dur
    b.collective(t, 25, nelems=1 << 20)
    b.memcpy(t + 25, 15, 1 << 20, src="Pinned", launch_at=t + 20, launch_dur=2)
    return b.write(tmp_path / "classes.json")


def test_every_op_is_classed_and_the_shares_are_worked_out_by_hand(tmp_path):
    analysis = analyze(classes_trace(tmp_path))
    result = analysis.ranks[0].results["time_by_class"]
    assert result.device_time_us == 340.0
    by_name = {c.name: (c.ops, c.time_us, c.share_pct) for c in result.classes}
    assert by_name == {
        "gemm": (1, 100.0, 29.41), "convolution": (1, 50.0, 14.71), "attention": (1, 40.0, 11.76),
        "other": (1, 40.0, 11.76), "elementwise": (2, 35.0, 10.29), "communication": (1, 25.0, 7.35),
        "normalization": (1, 20.0, 5.88), "copy": (1, 15.0, 4.41), "reduction": (1, 10.0, 2.94),
        "indexing": (1, 5.0, 1.47)}
    assert [c.name for c in result.classes][:3] == ["gemm", "convolution", "attention"]  # most time first
    assert result.classes[0].top == ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"]
    # by nature: compute 190 µs, memory (elementwise 35, norm 20, copy 15, reduction 10, indexing 5) 85 µs
    assert (result.compute_pct, result.memory_pct, result.communication_pct, result.other_pct) == (
        55.88, 25.0, 7.35, 11.76)
    data = json.loads(json.dumps(analysis.to_dict()))
    assert data["ranks"][0]["time_by_class"] == to_data(result)
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(data)


@pytest.mark.parametrize("op, kernel, expected", [
    # FBGEMM (Facebook's GEMM library) hosts DLRM's embedding and sparse ops: "gemm" in its name is no matmul
    ("fbgemm::permute_2D_sparse_data", "void fbgemm_gpu::permute_2D_data_kernel<false, int, float>(int, int)",
     "elementwise"),
    ("fbgemm::permute_2D_sparse_data", "void cub::DeviceScanKernel<cub::DeviceScanPolicy<int>>(int*, int)",
     "reduction"),
    ("fbgemm::split_embedding_codegen_lookup_adagrad_function",
     "void split_embedding_codegen_forward_unweighted_kernel<float, float>(int)", "indexing"),
    ("aten::mm", "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false>(float*)", "gemm"),
    (None, "fbgemm_gpu_gemm_kernel", "gemm"),  # a kernel that says gemm past the library's name is one
])
def test_a_library_named_after_gemm_does_not_make_its_ops_matmuls(op, kernel, expected):
    from traceagent.detect.detectors.time_by_class import CLASSES, classes_of
    rows = pd.DataFrame({"name": pd.Categorical([kernel]), "op": pd.Categorical([op]), "is_comm": [False],
                         "kind": ["kernel"]})
    assert list(CLASSES)[classes_of(rows)[0]] == expected


def test_the_tool_the_report_and_the_offline_analyst_say_the_same_shares(tmp_path, capsys):
    path = classes_trace(tmp_path)
    analysis = analyze(path)
    result = analysis.ranks[0].results["time_by_class"]
    ctx = AnalysisContext(analysis)
    tool = {t.name: t for t in build_tools(ctx)}["time_by_class"]
    assert json.loads(tool.invoke({}))["classes"] == to_data(result)["classes"]
    attention = next(c for c in result.classes if c.name == "attention")
    assert f"attention {attention.share_pct:.1f}%" in offline_answer(analysis, "How much time does attention take?")
    assert main(["report", str(path), "-o", str(tmp_path / "report.md")]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "GPU time by class" in report and f"| attention | {attention.share_pct:.1f}% |" in report


def test_mostly_memory_bound_kernels_get_the_advice_to_fuse_them_and_copies_do_not(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 4)
    b.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 0, 30, launch_at=1)
    for i, functor in enumerate(FUNCTORS):  # 70 µs of elementwise kernels, one each, against 30 µs of matmul
        b.op(f"aten::{functor}", 30 + i * 10, 4)
        b.kernel(ELEMENTWISE.replace("add", functor), 30 + i * 10, 10, launch_at=31 + i * 10)
    eager = analyze(b.write(tmp_path / "eager.json")).ranks[0].results["time_by_class"]
    assert "70.0% of it is in kernels that are memory-bound by nature" in time_by_class_sentence(eager)
    copies = TraceBuilder()
    copies.memcpy(0, 90, 1 << 24, launch_at=0)
    copies.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>(int, T)", 90, 10)
    moved = analyze(copies.write(tmp_path / "copies.json")).ranks[0].results["time_by_class"]
    assert moved.memory_pct == 100.0 and "fusing" not in time_by_class_sentence(moved)


def test_a_rank_without_device_work_cannot_say(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 10)
    analysis = analyze(b.write(tmp_path / "cpu.json"))
    assert analysis.ranks[0].results["time_by_class"] is None


ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>(int, T)"
#: eager PyTorch's elementwise ops: one kernel template, a different functor (a different kernel) each
FUNCTORS = ["add", "mul", "silu", "neg", "pow", "rsqrt", "copy"]


def eager_trace(tmp_path, name: str, elementwise: list[float], kernel: str = ELEMENTWISE):
    """A matmul of 30 µs, then elementwise kernels of the lengths given (each op its own kernel:
    `kernel` with the next functor), back to back from t=0 on one stream with no launch calls (the
    replay keeps each op's measured gap after the one before: 0)."""
    b = TraceBuilder()
    b.op("aten::mm", 0, 1)
    b.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 0, 30)
    t = 30.0
    for functor, dur in zip(FUNCTORS, elementwise):
        b.kernel(kernel.replace("add", functor), t, dur)
        t += dur
    return b.write(tmp_path / name)


def test_a_busy_device_mostly_in_memory_bound_kernels_is_told_to_fuse_them_and_the_saving_is_replayed(tmp_path):
    # 100 µs busy, no idle: 30 µs of matmul, 70 µs of elementwise kernels (70% memory-bound, 30% compute-heavy)
    analysis = analyze(eager_trace(tmp_path, "eager.json", [10.0] * 7))
    v = analysis.verdict
    assert (v.limiter, v.root_cause) == ("compute", "memory_bound_kernels")
    assert (v.evidence["memory_kernels_pct"], v.evidence["compute_heavy_pct"]) == (70.0, 30.0)
    assert "70.0% of device time is in kernels memory-bound by nature" in v.headline
    assert "torch.compile" in v.next_step
    # the bound: 70 µs 2× faster saves 35 µs of the 100 µs span; the replay: each elementwise kernel 5 µs
    # shorter, back to back, the span 65 µs: the same 35%
    assert v.saving is not None and v.saving.change == "class:memory_bound=x2"
    assert (v.saving.upper_bound_us, v.saving.pct, v.saving.simulated_pct) == (35.0, 35.0, 35.0)
    compiled = analyze(eager_trace(tmp_path, "compiled.json", [10.0] * 7, kernel="triton_poi_fused_add_mul_0"))
    assert "torch.compile's generated kernels already" in compiled.verdict.next_step
    # one hot matmul does not make it: 70 µs of GEMM against 30 µs of elementwise work
    b = TraceBuilder()
    b.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 0, 70)
    b.kernel(ELEMENTWISE, 70, 30)
    assert analyze(b.write(tmp_path / "matmul.json")).verdict.root_cause == "hot_kernel"
    # nor one slow elementwise kernel: 70 µs of memory-bound time, 40 µs of it one kernel (over half)
    one = analyze(eager_trace(tmp_path, "one.json", [40.0, 10.0, 10.0, 10.0])).verdict
    assert (one.root_cause, one.evidence["short_name"]) == ("hot_kernel", "vectorized_elementwise_kernel")


def test_whatif_makes_a_class_of_kernels_faster_and_diff_follows_their_share(tmp_path, capsys):
    before = eager_trace(tmp_path, "before.json", [10.0] * 7)
    assert main(["whatif", str(before), "--change", "class:elementwise=x2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["measured_us"], result["predicted_us"]) == (100.0, 65.0)
    assert main(["whatif", str(before), "--change", "class:matmuls=x2"]) == 2
    assert "no class 'matmuls'; the classes are gemm, attention" in capsys.readouterr().err
    # fused: one elementwise kernel of 20 µs; memory-bound kernels 70% of the span before, 40% after
    after = eager_trace(tmp_path, "after.json", [20.0])
    assert main(["diff", str(before), str(after), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    root = result["root_cause"]
    assert (root["cause"], root["before_pct"], root["after_pct"], root["gone"]) == ("memory_bound_kernels", 70.0, 40.0,
                                                                                    False)
    # the classes side by side (no steps: per trace), each a share of its own trace's device time
    assert [(c["name"], c["before_us"], c["after_us"], c["before_share_pct"], c["after_share_pct"])
            for c in result["classes"]] == [("elementwise", 70.0, 20.0, 70.0, 40.0), ("gemm", 30.0, 30.0, 30.0, 60.0)]
    assert main(["diff", str(before), str(after)]) == 0
    assert "GPU time by class of work (in the trace, every GPU)" in capsys.readouterr().out
