"""The math kernels' precision and tensor-core use (a registered detector), read from kernel names:
a trace built here with its shares worked out by hand, the names of real kernels from the traces
in tests/data with what each one's name says read by hand, and the verdict and answers that use it."""

from __future__ import annotations

import pytest
from builder import TraceBuilder
from conftest import RESNET_NW0, analyzed, offline_answer

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.detect.detectors.kernels import distinct_labels
from traceagent.detect.detectors.precision import kernel_precision, precision_sentence

SGEMM = "volta_sgemm_128x64_nn"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
FLASH_FP16 = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::half_t>>(Flash_fwd_params)"
NVJET = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
LAYOUT = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(cudnn::ops::nchw2nhwc_params_t<float>)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float)"


def mixed_trace(tmp_path, gpu: str):
    """By hand: math kernels 60 (fp32 sgemm, plain cores) + 30 (bf16, tensor cores) + 10 (fp16 flash
    attention) + 20 µs (nvjet: tensor cores, precision unsaid) = 120 µs; the layout kernel under the
    convolution (20 µs) and the add (50 µs) do no math; device time 190 µs. Tensor cores 60/120 = 50%,
    plain cores 60/120 = 50%; fp32 50%, bf16 25%, unknown 16.67%, fp16 8.33%; math 120/190 = 63.16%."""
    b = TraceBuilder(device_name=gpu)
    b.op("aten::mm", 0, 10)
    b.kernel(SGEMM, 0, 60, launch_at=1)
    b.op("aten::linear", 20, 10)
    b.kernel(BF16_GEMM, 60, 30, launch_at=21)
    b.op("aten::_scaled_dot_product_flash_attention", 40, 10)
    b.kernel(FLASH_FP16, 90, 10, launch_at=41)
    b.op("aten::matmul", 60, 10)
    b.kernel(NVJET, 100, 20, launch_at=61)
    b.op("aten::cudnn_convolution", 80, 10)
    b.kernel(LAYOUT, 120, 20, launch_at=81)
    b.kernel(ADD, 140, 50, launch_at=100)
    return b.write(tmp_path / "mixed.json")


def test_shares_by_precision_and_by_units_are_worked_out_by_hand(tmp_path):
    result = analyze(mixed_trace(tmp_path, "NVIDIA A100-SXM4-80GB"), use_cache=False).ranks[0].results["precision"]
    assert (result.math_us, result.math_pct) == (120.0, 63.16)
    assert (result.tensor_core_pct, result.plain_core_pct, result.unknown_pct, result.plain_core_us) == (50.0, 50.0, 0.0, 60.0)
    assert [(p.precision, p.time_us, p.share_pct) for p in result.precisions] == [
        ("fp32", 60.0, 50.0), ("bf16", 30.0, 25.0), ("unknown", 20.0, 16.67), ("fp16", 10.0, 8.33)]
    assert result.plain_core_kernels == [SGEMM]
    # an A100 has bf16 and TF32: both named, with the whatif that predicts them
    said = precision_sentence(result)
    assert ("50.0% of their time on tensor cores, 50.0% in fp32 or fp64 on the plain cores "
            "(led by `volta_sgemm_128x64_nn`)") in said
    assert 'torch.set_float32_matmul_precision("high")' in said and "dtype=torch.bfloat16" in said
    assert "--change amp" in said


def test_a_gpu_without_bf16_is_told_fp16_with_a_grad_scaler(tmp_path):
    result = analyze(mixed_trace(tmp_path, "Tesla V100-SXM2-16GB"), use_cache=False).ranks[0].results["precision"]
    assert "dtype=torch.float16" in result.advice and "GradScaler" in result.advice
    assert "bfloat16" not in result.advice and "TF32 tensor-core path" in result.advice


@pytest.mark.parametrize(("name", "expected"), [
    # what each real kernel's name says, read by hand (from the traces in tests/data)
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*)", ("fp32", 0)),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", ("fp32", 0)),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
     ("fp32", 0)),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_alignc4_execute_kernel__5x_cudnn", ("tf32", 1)),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)", ("bf16", 1)),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1", ("bf16", 1)),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN", ("fp4", 1)),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", ("fp8", 1)),
    ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0, 1>()",
     ("bf16", 1)),  # an fp8 KV cache that is off ("…DataType)0") is not fp8 math
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", ("bf16", 1)),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", ("unknown", 1)),
    ("kernel_unified_attention_2d", ("unknown", -1)),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16>(float)", ("bf16", -1)),
    ("void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false>(float)", ("fp32", -1)),  # bytes bind it
])
def test_what_a_real_kernels_name_says(name, expected):
    assert kernel_precision(name) == expected


@pytest.mark.parametrize("name", [
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>(int)",
    "batched_transpose_16x32_half", LAYOUT, ADD])
def test_layout_cache_and_elementwise_kernels_do_no_math(name):
    assert kernel_precision(name) is None


def test_a_fp32_v100_run_is_told_its_math_misses_the_tensor_cores():
    """The bundled ResNet-50 (V100, fp32): its convolutions and matmuls are cuDNN's and cuBLAS's fp32
    kernels; the shares add up to 100% of the math kernels' time, a part of the compute-heavy classes'."""
    analysis = analyzed(RESNET_NW0)
    result = analysis.ranks[0].results["precision"]
    classes = {c.name: c.time_us for c in analysis.ranks[0].results["time_by_class"].classes}
    assert result.math_us <= classes["convolution"] + classes.get("gemm", 0) + classes.get("attention", 0)
    assert result.tensor_core_pct == 0.0 and result.plain_core_pct > 99.0
    assert result.tensor_core_pct + result.plain_core_pct + result.unknown_pct == pytest.approx(100.0, abs=0.15)
    answer = offline_answer(analysis, "Are my convolutions using tensor cores?")
    assert precision_sentence(result) in answer and "V100 SXM2 has no bf16 or TF32" in answer


@pytest.mark.parametrize(("question", "intent"), [
    ("Are tensor cores used?", "detector:precision"), ("what dtype does the model use?", "detector:precision"),
    ("Is TF32 enabled?", "detector:precision"), ("Is the model running in fp32?", "detector:precision"),
    ("Am I using AMP?", "detector:precision"),
    ("Would mixed precision help?", "whatif"), ("How much would bf16 save?", "whatif"), ("What's the MFU?", "mfu")])
def test_precision_questions_reach_it_and_what_a_change_buys_stays_whatifs(question, intent):
    assert understand(question, AnalysisContext(analyzed(RESNET_NW0))).intent == intent


def test_the_mfu_answer_says_whether_the_math_is_on_tensor_cores():
    analysis = analyzed(RESNET_NW0)
    answer = offline_answer(analysis, "What's the MFU?")
    assert "**Tensor cores:**" in answer and precision_sentence(analysis.ranks[0].results["precision"]) in answer


def test_a_compute_bound_fp32_run_is_told_to_use_the_tensor_cores(tmp_path):
    """A busy device whose top kernel is an fp32 SGEMM: the next step is the dtype, then the kernel;
    one whose top kernel is bf16 on tensor cores is told it is there already."""
    for kernel, says in [(SGEMM, "Run the math on tensor cores: autocast to bf16"),
                         (BF16_GEMM, "It runs in bf16 on tensor cores already")]:
        b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
        b.op("aten::mm", 0, 10)
        b.kernel(kernel, 0, 900, launch_at=1)
        b.kernel(ADD, 900, 100, launch_at=2)
        verdict = analyze(b.write(tmp_path / "busy.json"), use_cache=False).ranks[0].verdict
        assert (verdict.limiter, verdict.root_cause) == ("compute", "hot_kernel")
        assert says in verdict.next_step


def test_a_bare_wrapper_kernel_is_named_by_the_kernel_it_wraps():
    assert distinct_labels(["void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)", SGEMM]) == [
        "Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", SGEMM]


@pytest.mark.parametrize(("question", "lead"), [
    # the leads' figures from the result at test time; the sentence follows them
    ("Are tensor cores used?", lambda r: "**No:** none of the math kernels' time runs on tensor cores."),
    ("Is it running in fp32?", lambda r: f"**Yes:** fp32 takes {r.precisions[0].share_pct:.1f}% of the math kernels' time."),
    ("Am I using AMP?", lambda r: "**No:** no math kernel's name says bf16 or fp16 or fp8 or fp4 (for "
                                  f"{r.precisions[1].share_pct:.1f}% of their time the names say no format)."),
])
def test_a_yes_or_no_about_precision_is_answered_first(question, lead):
    analysis = analyzed(RESNET_NW0)
    result = analysis.ranks[0].results["precision"]
    assert [p.precision for p in result.precisions] == ["fp32", "unknown"]
    answer = offline_answer(analysis, question)
    assert answer.startswith(lead(result)) and precision_sentence(result) in answer


def test_diff_says_whether_the_math_moved_to_tensor_cores(tmp_path):
    """Before: the matmul is an fp32 SGEMM (0% on tensor cores); after: a bf16 GEMM (100%)."""
    from traceagent.detect.compare.diff import diff

    def run(kernel: str, name: str):
        b = TraceBuilder(device_name="NVIDIA A100-SXM4-80GB")
        b.op("aten::mm", 0, 10)
        b.kernel(kernel, 10, 100, launch_at=1)
        return analyze(b.write(tmp_path / name), use_cache=False)

    result = diff(run(SGEMM, "before.json"), run(BF16_GEMM, "after.json"))
    metric = next(m for m in result.metrics if m.name == "math on tensor cores")
    assert (metric.before, metric.after, metric.change) == (0.0, 100.0, 100.0)


def test_fp32_math_is_named_beside_the_limiter_once():
    """The bundled ResNet-50 is limited by data loading; its fp32 convolutions (a tenth of the
    device time or more) are named as a loss beside it, with the change for a V100."""
    analysis = analyzed(RESNET_NW0)
    verdict, result = analysis.ranks[0].verdict, analysis.ranks[0].results["precision"]
    assert verdict.root_cause == "dataloader"
    share = result.math_pct * result.plain_core_pct / 100
    said = [o for o in verdict.other_losses if o.startswith("fp32 math off the tensor cores")]
    assert len(said) == 1 and f"also takes {share:.1f}% of the rank's device time" in said[0]
    assert result.advice in said[0]


def test_a_verdict_that_already_says_so_does_not_repeat_it(tmp_path):
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    b.op("aten::mm", 0, 10)
    b.kernel(SGEMM, 0, 900, launch_at=1)
    verdict = analyze(b.write(tmp_path / "busy.json"), use_cache=False).ranks[0].verdict
    assert verdict.next_step.startswith("Run the math on tensor cores")
    assert not any("fp32 math" in o for o in verdict.other_losses)
