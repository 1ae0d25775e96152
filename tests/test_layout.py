"""The convolution work's memory layout (a registered detector), read from kernel names: traces
built here with their times worked out by hand, the MI300 ResNet trace against an independent
reader of its JSON, and the answer to "am I using channels_last?"."""

from __future__ import annotations

import gzip
import json
import re

from builder import TraceBuilder
from conftest import B200, DATA, RESNET_NW0, analyzed, offline_answer

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.detect.detectors.layout import layout_sentence
from traceagent.format import duration

MIXED_CONV = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize128x128x32_execute_kernel_cudnn"
TO_NHWC = "void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true>(cudnn::ops::nchw2nhwc_params_t<float>)"
BN_NCHW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, 512, true, 1>(cudnnTensorStruct)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float)"


def channels_first_trace(tmp_path):
    """By hand: a convolution whose kernel reads NHWC and writes NCHW (100 µs: channels-first, its last
    word), the conversion cuDNN runs before it (20 µs), a transpose under a convolution op (10 µs: a
    conversion too) and one under a matmul (30 µs: no layout), an NCHW batch norm (50 µs), an add (190 µs),
    a copy (100 µs). Device time 500 µs; conversions 30 µs (6%), 2 launches; channels-first 150 µs,
    channels-last 0; the convolution class: its kernel, the conversion and the transpose its op
    launched, 130 µs (26%)."""
    b = TraceBuilder("NVIDIA A100-SXM4-80GB")
    b.op("aten::cudnn_convolution", 0, 20)
    b.kernel(TO_NHWC, 0, 20, launch_at=1)
    b.kernel(MIXED_CONV, 20, 100, launch_at=5)
    b.op("aten::miopen_convolution", 30, 10)
    b.kernel("transpose_kernel_2d", 120, 10, launch_at=31)
    b.op("aten::mm", 50, 10)
    b.kernel("transpose_kernel_2d", 130, 30, launch_at=51)
    b.op("aten::cudnn_batch_norm", 70, 10)
    b.kernel(BN_NCHW, 160, 50, launch_at=71)
    b.kernel(ADD, 210, 190, launch_at=90)
    b.memcpy(400, 100, 1 << 20)
    return b.write(tmp_path / "nchw.json")


def test_channels_first_work_and_its_conversions_are_worked_out_by_hand(tmp_path):
    rank = analyze(channels_first_trace(tmp_path), use_cache=False).ranks[0]
    result = rank.results["layout"]
    assert result.layout == "channels_first"
    assert (result.conversion_us, result.conversion_pct, result.conversions) == (30.0, 6.0, 2)
    assert (result.channels_first_us, result.channels_last_us) == (150.0, 0.0)
    assert (result.convolution_us, result.convolution_pct) == (130.0, 26.0)
    assert result.conversion_kernels == ["nchwToNhwcKernel", "transpose_kernel_2d"]
    # 6% of the device time in conversions: the verdict names them beside its limiter, whatever that is
    assert any(line.startswith("Layout conversions also take 6.0% of the rank's device time (2 kernels converting")
               for line in rank.verdict.other_losses)
    said = layout_sentence(result)
    assert said.startswith("Channels-first, converted: the model's tensors are channels-first (NCHW), and kernels convert")
    assert "2 conversion kernels take 30.0 µs, 6.0% of the rank's device time" in said
    assert "memory_format=torch.channels_last" in said
    # asked yes or no: the model's tensors are channels-first, converted around the convolutions
    assert offline_answer(analyze(channels_first_trace(tmp_path)), "Am I using channels_last?").startswith(
        "**No:** the model's tensors are channels-first (NCHW); 2 kernels convert them to and from channels-last around "
        "the convolutions (30.0 µs).")


def test_channels_last_work_without_conversions_is_a_yes_with_no_advice(tmp_path):
    # by hand: 80 µs of NHWC convolution, 20 µs of channels-last batch norm, no conversion: 100% channels-last
    b = TraceBuilder("NVIDIA H100 80GB HBM3")
    b.op("aten::miopen_convolution", 0, 10)
    b.kernel("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32", 0, 80, launch_at=1)
    b.op("aten::native_batch_norm", 20, 10)
    b.kernel("void at::native::batch_norm_collect_statistics_channels_last_kernel<float>(float)", 80, 20, launch_at=21)
    result = analyze(b.write(tmp_path / "nhwc.json"), use_cache=False).ranks[0].results["layout"]
    assert (result.layout, result.channels_last_us, result.conversion_us, result.advice) == ("channels_last", 100.0,
                                                                                            0.0, None)
    assert layout_sentence(result).startswith("Channels-last: the kernels that name a layout run channels-last (NHWC): "
                                              "100.0 µs, 100.0% of their time")
    assert offline_answer(analyze(tmp_path / "nhwc.json"), "Is it using NHWC?").startswith(
        "**Yes:** the kernels that name a layout run channels-last (NHWC) for 100.0 µs of 100.0 µs.")


def test_the_mi300_resnet_converts_around_its_convolutions_as_an_independent_reader_sums_them():
    # the independent reader: every kernel event whose name is one of MIOpen's layout transposes
    # (batched_transpose_*, transpose_NCHW2CNHW / CNHW2NCHW), summed from the JSON
    path = DATA / "tracelens" / "mi300_resnet_act_checkpoint.json.gz"
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    transposes = [e["dur"] for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"
                  and re.match(r"batched_transpose_|transpose_(?:NCHW2CNHW|CNHW2NCHW)", e["name"])]
    result = analyzed(path).ranks[0].results["layout"]
    assert result.conversions == len(transposes) and abs(result.conversion_us - sum(transposes)) < 0.01 * len(transposes)
    assert result.conversion_pct > 1 and result.advice is not None


def test_the_question_is_answered_no_on_the_channels_first_resnet_and_the_b200_has_no_convolutions():
    analysis = analyzed(RESNET_NW0)
    result = analysis.ranks[0].results["layout"]
    question = "Are my convolutions using channels_last?"
    assert understand(question, AnalysisContext(analysis)).intent == "detector:layout"
    answer = offline_answer(analysis, question)
    # the no first (the detector's lead), its sentence after
    named = result.channels_first_us + result.channels_last_us
    assert answer.startswith(f"**No:** the kernels that name a layout run channels-last (NHWC) for "
                             f"{duration(result.channels_last_us)} of {duration(named)}.\n\n**Memory layout.** "
                             "Channels-first: the kernels that name a layout run channels-first (NCHW)")
    assert f"convolution kernels take {result.convolution_pct:.1f}% of the rank's device time" in answer
    assert not any("Layout conversions" in line for line in analysis.ranks[0].verdict.other_losses)  # 0.1%: too little
    assert analyzed(B200).ranks[0].results["layout"] is None
