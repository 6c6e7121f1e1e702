"""The workload profiler: attribution on a recorded GPU trace (figures worked out by hand), a
real CPU profile of the tiny decoder, and `evokernel profile` with its store."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
from pathlib import Path

import pytest

from evokernel.judge.hardware import PEAKS
from evokernel.model.profile import ROOT, load_target, parse_trace, profile_module
from evokernel.store import SQLiteStore

HERE = Path(__file__).resolve().parent
TRACE = HERE / "recorded" / "traces" / "gpu_small.json"
TARGET = HERE.parent / "examples" / "models" / "tiny_decoder.py"

H200 = PEAKS["NVIDIA H200"]
BF16, BW = H200.flops("bfloat16"), H200.bytes  # 790e12 FLOP/s, 4.3e12 B/s

# the recorded trace, by hand (times in us from the trace's start; bf16 = 2 bytes):
# kernel                  op                              module              start  dur  gap before
# gemm                    aten::addmm  (under linear)     layers.0.attn.qkv   1100   20   -
# flash_fwd_kernel        aten::_flash_attention_forward  layers.0.attn       1125   40   5
# splitk gemm             aten::mm                        layers.0.mlp        1230   30   65
# splitKreduce_kernel     aten::mm                        layers.0.mlp        1262   10   2
# vectorized_elementwise  aten::mul                       layers.0.mlp        1312    4   40
# Memset (Device)         aten::zero_                     layers.0.mlp        1342    2   26
# direct copy (stream 20) aten::copy_                     (outside)           1425    3   - (first on its stream)
BUSY, GAPS = 109.0, 138.0
TOTAL = BUSY + GAPS
ADDMM = (2 * 8 * 1024 * 3072, 2 * (3072 + 8 * 1024 + 1024 * 3072 + 8 * 3072))
FLASH = (2 * 16 * 128 * 512 * (128 + 128), 2 * (2 * 128 * 16 * 128 + 2 * 512 * 16 * 128))
MM = (2 * 8 * 1024 * 4096, 2 * (8 * 1024 + 1024 * 4096 + 8 * 4096))  # shared 3:1 by its two kernels
MUL_BYTES = 2 * 3 * 8 * 4096  # two inputs read, one output written
COPY_BYTES = 8 * 4096 * (4 + 2)  # fp32 source read, bf16 destination written


def ideal_us(flops: float, nbytes: float) -> float:
    return max(flops / BF16, nbytes / BW) * 1e6


@pytest.fixture(scope="module")
def gpu() -> object:
    return parse_trace(TRACE, target="gpu_small")


def test_recorded_trace_attribution(gpu):
    assert gpu.device == "cuda" and gpu.device_name == "NVIDIA H200" and gpu.peaks == "NVIDIA H200"
    got = [(k.op, k.module, k.stream, k.dur_us, k.gap_us) for k in gpu.kernels]
    assert got == [
        ("aten::addmm", "layers.0.attn.qkv", "0:7", 20.0, 0.0),
        ("aten::_flash_attention_forward", "layers.0.attn", "0:7", 40.0, 5.0),
        ("aten::mm", "layers.0.mlp", "0:7", 30.0, 65.0),
        ("aten::mm", "layers.0.mlp", "0:7", 10.0, 2.0),
        ("aten::mul", "layers.0.mlp", "0:7", 4.0, 40.0),
        ("aten::zero_", "layers.0.mlp", "0:7", 2.0, 26.0),
        ("aten::copy_", "(outside)", "0:20", 3.0, 0.0),
    ]
    assert gpu.kernels[5].name == "Memset (Device)"  # gpu_memset counts; gpu_user_annotation does not
    s = gpu.summary()
    assert s["busy_ms"] == pytest.approx(BUSY / 1e3) and s["gap_ms"] == pytest.approx(GAPS / 1e3)
    assert s["launches"] == 7 and s["launch_api_ms"] == pytest.approx((10 + 8 + 7 + 5 + 5 + 5 + 6) / 1e3)


def test_recorded_trace_roofline_and_ranking(gpu):
    k = gpu.kernels
    assert (k[0].flops, k[0].bytes) == ADDMM  # the work of addmm, not of the linear around it
    assert k[0].ideal_us == pytest.approx(ideal_us(*ADDMM))  # memory-bound: 6.36 MB at 4.3 TB/s
    assert (k[1].flops, k[1].bytes) == FLASH
    assert k[1].ideal_us == pytest.approx(ideal_us(*FLASH))
    assert k[2].flops == pytest.approx(MM[0] * 3 / 4) and k[3].flops == pytest.approx(MM[0] / 4)
    assert k[2].ideal_us + k[3].ideal_us == pytest.approx(ideal_us(*MM))
    assert k[4].bytes == MUL_BYTES and k[4].flops is None
    assert k[5].ideal_us is None  # aten::zero_ has no formula
    assert k[6].bytes == COPY_BYTES

    rows = gpu.opportunities()
    assert [(r.kind, r.module, r.op) for r in rows] == [
        ("gaps", "layers.0.mlp", "(gaps)"),
        ("kernel", "layers.0.attn", "aten::_flash_attention_forward"),
        ("kernel", "layers.0.mlp", "aten::mm"),  # the split-K gemm
        ("kernel", "layers.0.attn.qkv", "aten::addmm"),
        ("kernel", "layers.0.mlp", "aten::mm"),  # its reduction
        ("gaps", "layers.0.attn", "(gaps)"),
        ("kernel", "layers.0.mlp", "aten::mul"),
        ("kernel", "(outside)", "aten::copy_"),
        ("kernel", "layers.0.mlp", "aten::zero_"),  # no roofline: ranked by its share
    ]
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    gaps, flash = rows[0], rows[1]
    assert (gaps.calls, gaps.total_ms, gaps.score) == (4, pytest.approx(0.133), pytest.approx(133 / TOTAL))
    assert flash.share == pytest.approx(40 / TOTAL)
    assert flash.headroom_ms == pytest.approx((40 - ideal_us(*FLASH)) / 1e3)
    assert flash.score == pytest.approx((40 - ideal_us(*FLASH)) / TOTAL)
    assert flash.tflops == pytest.approx(FLASH[0] / 40e-6 / 1e12)  # 13.4 TFLOP/s
    assert flash.tbps == pytest.approx(FLASH[1] / 40e-6 / 1e12)
    assert flash.roofline == pytest.approx(ideal_us(*FLASH) / 40)
    assert rows[-1].score is None and rows[-1].headroom_ms is None


def test_launch_found_through_the_flow_or_the_external_id(gpu):
    trace = json.loads(TRACE.read_text())
    # without the runtime events, the ac2g flows still lead to the launch
    flows = copy.deepcopy(trace)
    flows["traceEvents"] = [e for e in flows["traceEvents"] if e.get("cat") != "cuda_runtime"]
    assert [(k.op, k.module) for k in parse_trace(flows).kernels] == [(k.op, k.module) for k in gpu.kernels]
    # without either, the kernel's External id names its op
    ext = copy.deepcopy(trace)
    ext["traceEvents"] = [e for e in ext["traceEvents"] if e.get("cat") not in ("cuda_runtime", "ac2g")]
    assert [(k.op, k.module) for k in parse_trace(ext).kernels] == [(k.op, k.module) for k in gpu.kernels]


def test_unknown_gpu_has_no_roofline_and_says_why():
    trace = json.loads(TRACE.read_text())
    trace["deviceProperties"][0]["name"] = "NVIDIA Imaginary 9000"
    p = parse_trace(trace)
    assert p.peaks is None and any("no roofline" in n and "Imaginary" in n for n in p.notes)
    assert all(r.headroom_ms is None for r in p.opportunities() if r.kind == "kernel")
    assert [r.kind for r in p.opportunities()][0] == "gaps"  # gaps need no peaks


def test_nn_module_events_stand_in_for_missing_scopes():
    ev = [
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Decoder_0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 30,
            "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]},
        },
    ]
    p = parse_trace({"traceEvents": ev})
    assert [(k.op, k.module, k.flops) for k in p.kernels] == [("aten::mm", "Decoder_0.Linear_0", 2 * 4 * 8 * 16)]


def test_grouped_mm_counts_each_row_against_its_groups_weight():
    # the MoE experts of examples/models/qwen3_moe_stack.py run as torch._grouped_mm (call S:
    # 6.7% of the Qwen3-MoE step per layer, with no roofline until this formula)
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::_grouped_mm",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 30,
            "args": {
                "Input Dims": [[12, 16], [3, 16, 8], [3], [], []],
                "Input type": ["c10::BFloat16", "c10::BFloat16", "int", "", ""],
            },
        }
    ]
    [k] = parse_trace({"traceEvents": ev}).kernels
    assert k.flops == 2 * 12 * 16 * 8 and k.bytes == 2 * (12 * 16 + 3 * 16 * 8 + 12 * 8)


def test_the_trace_own_flops_count_and_gzip(tmp_path):
    trace = _cpu_trace()
    trace["traceEvents"][0]["args"]["flops"] = 1000
    assert parse_trace(trace).kernels[0].flops == 1000  # the profiler's count wins over the formula
    path = tmp_path / "gpu_small.json.gz"
    with gzip.open(path, "wt") as f:
        f.write(TRACE.read_text())
    assert len(parse_trace(path).kernels) == 7


def test_cpu_profile_of_the_tiny_decoder():
    import torch

    model, inputs, name = load_target(TARGET)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        p = profile_module(model, inputs, device="cpu", warmup=1, iters=2, target=name)
    finally:
        torch.set_num_threads(threads)
    assert p.device == "cpu" and p.iterations == 2 and any("self time" in n for n in p.notes)
    rows = p.opportunities()
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    by = {(r.module, r.op) for r in rows}
    for module, op in [
        ("layers.0.attn.qkv", "aten::mm"),
        ("layers.1.attn.o_proj", "aten::mm"),
        ("layers.0.attn", "aten::_scaled_dot_product_flash_attention_for_cpu"),
        ("layers.1.mlp.experts.0.gate_up", "aten::mm"),
        ("embed", "aten::index_select"),
        ("lm_head", "aten::mm"),
    ]:
        assert (module, op) in by, (module, op)
    assert any(r.module == ROOT for r in rows) and all(r.module != "(outside)" for r in rows)
    attn = next(
        r for r in rows if r.op == "aten::_scaled_dot_product_flash_attention_for_cpu" and r.module == "layers.0.attn"
    )
    assert attn.calls == 2 and attn.tflops is not None and attn.headroom_ms is None  # no CPU peaks
    mm = [k for k in p.kernels if k.module == "layers.0.attn.qkv" and k.op == "aten::mm"]
    assert mm and all(k.flops == 2 * 32 * 64 * (4 + 2 * 2) * 16 for k in mm)  # 32 tokens, 64 -> 128 features
    # with peaks given, the CPU ops get a roofline too
    assert parse_trace(_cpu_trace(), peaks=H200).opportunities()[0].headroom_ms is not None


def _cpu_trace() -> dict:
    return {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": 10,
                "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]},
            }
        ]
    }


def _run(cmd: list[str], env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_cli_profile_json_and_store(evokernel_cmd, cli_env, tmp_path):
    db = tmp_path / "p.db"
    env = {**cli_env, "OMP_NUM_THREADS": "1"}
    out = _run(
        evokernel_cmd,
        env,
        "profile",
        str(TARGET),
        "--device",
        "cpu",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--db",
        str(db),
        "--json",
        "--top",
        "5",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["target"] == "tiny-decoder" and data["device"] == "cpu" and len(data["rows"]) == 5
    assert data["profile_id"] == 1 and data["summary"]["launches"] > 100
    out = _run(evokernel_cmd, env, "profile", "--trace", str(TRACE), "--db", str(db), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "layers.0.attn" in out.stdout and "flash_fwd_kernel" in out.stdout and "saved as profile 2" in out.stdout

    with SQLiteStore(db, create=False) as store:
        saved = store.profiles()
        assert [(p["id"], p["name"], p["device"]) for p in saved] == [
            (1, "tiny-decoder", "cpu"),
            (2, "gpu_small", "NVIDIA H200"),
        ]
        assert sum(r["share"] for r in saved[0]["rows"]) == pytest.approx(1.0)  # the store keeps every row
        assert saved[1]["rows"][0]["module"] == "layers.0.mlp" and saved[1]["summary"]["iterations"] == 1
        assert saved[1]["toolchain"]["device_name"] == "NVIDIA H200" and "torch" in saved[1]["toolchain"]
        assert [p["id"] for p in store.profiles(name="gpu_small")] == [2]


def test_cli_profile_usage_errors(evokernel_cmd, cli_env, tmp_path):
    for args, text in [
        ((), "one of them"),
        ((str(TARGET), "--trace", str(TRACE)), "one of them"),
        (("--trace", str(tmp_path / "none.json")), "no such trace"),
        ((str(tmp_path / "none.py"),), "no such target"),
    ]:
        out = _run(evokernel_cmd, cli_env, "profile", *args, "--db", str(tmp_path / "x.db"), cwd=tmp_path)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith("evokernel: error:") and text in out.stderr


def test_profiling_an_sglang_engine_without_sglang_says_so(tmp_path):
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed: the device run covers it")
    out = subprocess.run(
        [sys.executable, "-m", "evokernel.cli", "profile", "--sglang", str(tmp_path), "--db", str(tmp_path / "p.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "--sglang needs SGLang installed" in out.stderr and "Traceback" not in out.stderr
    both = subprocess.run(
        [sys.executable, "-m", "evokernel.cli", "profile", "--sglang", str(tmp_path), "--trace", "t.json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert both.returncode == 2 and "one of them" in both.stderr


def test_the_engine_profile_reports_an_engine_that_cannot_start(tmp_path):
    # the engine driver runs (python -m evokernel.integrations.sglang.driver) and answers with why it could
    # not load; profile_engine turns that into a clear error naming the engine's log
    from evokernel.core.errors import ConfigError
    from evokernel.evaluators.sglang import profile_engine

    with pytest.raises(ConfigError, match="the SGLang engine did not start") as err:
        profile_engine(
            ["--model-path", str(tmp_path)],
            trace_path=tmp_path / "t.json",
            log_dir=tmp_path / "logs",
            load_timeout_s=120,
        )
    assert "profile.log" in str(err.value)


def test_a_fused_moe_op_counts_the_experts_the_batch_touches():
    # SGLang's fused-MoE custom op (call W's engine profile: 85% of the kernel time had no
    # roofline): 6 T k I H FLOPs, and the weights of E (1 - (1 - k/E)^T) experts
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "sglang::inplace_fused_experts",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 30,
            "args": {
                "Input Dims": [[4, 16], [8, 12, 16], [8, 16, 6], [4, 2], [4, 2], [], []],
                "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float", "int", "", ""],
            },
        }
    ]
    [k] = parse_trace({"traceEvents": ev}).kernels
    touched = 8 * (1 - (1 - 2 / 8) ** 4)
    assert k.flops == 2 * 4 * 2 * (12 * 16 + 16 * 6)
    assert k.bytes == pytest.approx(touched * 2 * (12 * 16 + 16 * 6) + 2 * 2 * 4 * 16)
