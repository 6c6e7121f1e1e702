"""Any GPU (issue 25): "cpu", "cuda" and "cuda:N" everywhere a device is taken. On the CPU
through torch's CUDA queries patched (a host of two GPUs, or of none); on a GPU (marked
`gpu`) the judge's inputs and its candidates' processes on the GPU asked for."""

from __future__ import annotations

import copy
import json
import multiprocessing
import warnings
from pathlib import Path

import msgspec
import pytest
import torch

from evokernel.core.errors import ConfigError
from evokernel.judge import device as dev
from evokernel.judge.env import toolchain
from evokernel.judge.hardware import PEAKS, peaks_for

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "tests/corpus/problems/matmul_small.py"
H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
HAS_CUDA = torch.cuda.is_available()


def _render(genome):
    from evokernel.search_spaces.matmul.template import candidate_source

    return candidate_source(genome.params)


@pytest.fixture
def two_gpus(monkeypatch):
    """A host whose torch sees two GPUs, by default two H200s; set `names` to mix them."""
    names = [H200, H200]
    current = [0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(names))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: names[current[0] if i is None else i])
    return names, current


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


# -- the helper -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "parsed"),
    [("cpu", ("cpu", None)), ("cuda", ("cuda", None)), ("cuda:0", ("cuda", 0)), ("cuda:12", ("cuda", 12))],
)
def test_device_strings_parse(text, parsed):
    assert dev.parse_device(text) == parsed
    assert dev.is_cuda(text) is (parsed[0] == "cuda")
    assert dev.device_kind(text) == parsed[0]


@pytest.mark.parametrize(
    "text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "cpu:0", "CUDA", "cuda1", "", "cuda:1\n", " cpu"]
)
def test_malformed_devices_are_config_errors(text):
    with pytest.raises(ConfigError, match="expected cpu, cuda or cuda:N"):
        dev.parse_device(text)
    assert not dev.is_cuda(text) or text.startswith("cuda:")


def test_a_gpu_index_past_the_ones_torch_sees_says_how_many_it_sees(two_gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert dev.check_device("cuda:1") == "cuda:1" and dev.check_device("cuda") == "cuda"
    with pytest.raises(ConfigError) as err:
        dev.check_device("cuda:2", "KernelEvaluator(device='cuda:2')")
    assert str(err.value) == "KernelEvaluator(device='cuda:2'): no such GPU: torch sees 2 CUDA GPUs (cuda:0 to cuda:1)"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with pytest.raises(ConfigError, match=r"torch sees 2 CUDA GPUs \(cuda:0 to cuda:1\); CUDA_VISIBLE_DEVICES='3,5'"):
        dev.check_device("cuda:7")


def test_cuda_without_a_gpu_is_a_config_error(no_gpu):
    assert dev.check_device("cpu") == "cpu"
    for text in ("cuda", "cuda:0", "cuda:1"):
        with pytest.raises(ConfigError, match=rf"needs a CUDA GPU \(device='{text}'\) and torch sees none here"):
            dev.check_device(text)
    assert dev.default_device() == "cpu" and dev.gpu_name("cuda:0") is None


def test_cuda_is_the_current_device_and_cuda_n_is_gpu_n(two_gpus):
    names, current = two_gpus
    names[1] = A100
    assert dev.cuda_index("cuda:1") == 1 and dev.cuda_index("cuda") == 0
    assert dev.gpu_name("cuda") == H200 and dev.gpu_name("cuda:1") == A100 and dev.gpu_name("cpu") is None
    current[0] = 1
    assert dev.cuda_index("cuda") == 1 and dev.gpu_name("cuda") == A100
    with pytest.raises(ValueError):
        dev.cuda_index("cpu")
    with dev.on_device("cpu"):  # nothing to select on the CPU
        pass


# -- fingerprints: the GPU that ran, by name, not by index ------------------------------------
def test_toolchain_names_the_devices_gpu_and_the_host_keeps_nvidia_smis(two_gpus, monkeypatch):
    import evokernel.judge.env as env

    names, _ = two_gpus
    names[1] = A100
    monkeypatch.setattr(env, "_gpus", lambda: ([H200, A100], "570.1"))
    assert toolchain()["gpu"] == H200  # the host's first GPU, without torch
    assert toolchain("cuda:1")["gpu"] == A100 and toolchain("cuda:0")["gpu"] == H200
    assert toolchain("cuda:1")["driver"] == "570.1" and toolchain("cpu")["gpu"] is None
    assert env.environment()["gpus"] == [H200, A100]
    assert peaks_for("cuda:0") is PEAKS[H200] and peaks_for("cuda:1") is None and peaks_for("cpu") is None


def test_kernel_fingerprints_name_the_gpu_not_its_index(two_gpus, monkeypatch):
    """Two H200s share results (same fingerprint and transfer key, the same as "cuda"'s);
    an H200 and an A100 do not. The device is recorded as its kind, "cuda"; where torch and
    nvidia-smi name the GPU alike, a "cuda" fingerprint is what it was (nvidia-smi's toolchain)."""
    import evokernel.judge.env as env
    from evokernel.evaluators import KernelEvaluator

    names, _ = two_gpus
    monkeypatch.setattr(env, "_gpus", lambda: ([H200, H200], "570.1"))

    def of(device):
        ev = KernelEvaluator(MATMUL, _render, device=device, template="t")
        return ev.fingerprint(), ev.transfer_key()

    (f0, k0), (f1, k1), (fc, kc) = of("cuda:0"), of("cuda:1"), of("cuda")
    assert f0 == f1 == fc and k0 == k1 == kc
    assert f0["device"] == "cuda" and f0["gpu"] == H200 and k0["family"].endswith(f"@{H200}")
    assert {k: fc[k] for k in toolchain()} == toolchain()  # as before: toolchain() was nvidia-smi's first GPU
    names[1] = A100
    (g0, _), (g1, j1) = of("cuda:0"), of("cuda:1")
    assert g0 == f0 and g1 != g0
    assert g1["gpu"] == A100 and g1["device"] == "cuda" and j1["family"].endswith(f"@{A100}")
    assert {k: v for k, v in g1.items() if k != "gpu"} == {k: v for k, v in g0.items() if k != "gpu"}


def test_a_runs_environment_names_the_gpu_that_judged_and_its_index(two_gpus):
    from evokernel.evaluators import KernelEvaluator

    names, current = two_gpus
    names[1] = A100
    env = KernelEvaluator(MATMUL, _render, device="cuda:1", template="t").environment()
    assert env["device"] == "cuda:1" and env["gpu"] == A100 and "sandbox" in env
    current[0] = 1
    assert KernelEvaluator(MATMUL, _render, device="cuda", template="t").environment()["device"] == "cuda:1"
    assert KernelEvaluator(MATMUL, _render, device="cpu", template="t").environment()["device"] == "cpu"


def test_model_fingerprint_names_the_devices_gpu(two_gpus):
    from evaluators.model import _device_name

    names, _ = two_gpus
    names[1] = A100
    assert _device_name("cuda:1") == A100 and _device_name("cuda:0") == _device_name("cuda") == H200


# -- where a device is taken -------------------------------------------------------------------
def test_kernel_evaluator_on_a_missing_gpu_says_so_at_once(no_gpu):
    from evokernel.evaluators import KernelEvaluator

    with pytest.raises(ConfigError) as err:
        KernelEvaluator(MATMUL, _render, device="cuda:1")
    assert str(err.value) == "needs a CUDA GPU (KernelEvaluator(device='cuda:1')) and torch sees none here"


def test_kernel_evaluator_and_judge_on_an_index_past_the_gpus(two_gpus):
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.gate import Judge
    from evokernel.judge.problem import Problem

    with pytest.raises(ConfigError, match=r"KernelEvaluator\(device='cuda:2'\): no such GPU: torch sees 2 CUDA GPUs"):
        KernelEvaluator(MATMUL, _render, device="cuda:2")
    with pytest.raises(ConfigError, match=r"Judge\(device='cuda:5'\): no such GPU: torch sees 2"):
        Judge(Problem.load(MATMUL), "cuda:5")
    with pytest.raises(ConfigError, match="expected cpu, cuda or cuda:N"):
        KernelEvaluator(MATMUL, _render, device="gpu")


def test_model_evaluator_checks_its_device(no_gpu):
    from evaluators.model import ModelEvaluator

    with pytest.raises(ConfigError, match=r"needs a CUDA GPU \(ModelEvaluator\(device='cuda:1'\)\)"):
        ModelEvaluator(torch.nn.Linear(4, 4), (torch.randn(2, 4),), name="linear", device="cuda:1")


def test_check_and_profile_take_cuda_n(no_gpu, tmp_path):
    from evokernel.cli import _build_parser, check

    problem, cand = tmp_path / "p.py", tmp_path / "c.py"
    problem.write_text("")
    cand.write_text("")
    parser = _build_parser()
    for text in ("cpu", "cuda", "cuda:1"):
        assert parser.parse_args(["check", str(problem), str(cand), "--device", text]).device == text
        assert parser.parse_args(["profile", "--device", text, "t.py"]).device == text
    args = parser.parse_args(["check", str(problem), str(cand), "--device", "cuda:1"])
    with pytest.raises(ConfigError, match=r"needs a CUDA GPU \(--device cuda:1\) and torch sees none here"):
        check.run(args)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["check", str(problem), str(cand), "--device", "gpu:1"])
    assert exc.value.code == 2


def test_profile_names_the_gpu_the_kernels_ran_on(tmp_path):
    """A trace of a host of two GPUs lists both; the profile names the one its kernels ran on."""
    from evokernel.model.profile import parse_trace

    data = json.loads((ROOT / "tests/recorded/traces/gpu_small.json").read_text())
    data = copy.deepcopy(data)
    for e in data["traceEvents"]:
        if isinstance(e.get("args"), dict) and e["args"].get("device") == 0:
            e["args"]["device"] = 1
    h200 = data["deviceProperties"][0]
    data["deviceProperties"] = [{**h200, "id": 0, "name": A100}, {**h200, "id": 1}]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(data))
    prof = parse_trace(path, target="two")
    assert prof.device == "cuda" and prof.device_name == H200 and prof.peaks == H200


def test_the_candidates_process_selects_the_judges_gpu_first(monkeypatch, tmp_path):
    """`_worker._main` makes the judge's GPU (sent as "cuda:N") current before it maps the
    judge's block or touches CUDA; here the CPU build's CUDA init then fails, as a setup failure."""
    from evokernel.judge import _worker

    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: chosen.append(i))
    monkeypatch.setattr(torch.cuda, "init", lambda: (_ for _ in ()).throw(RuntimeError("no CUDA in this build")))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    setup = _worker.Setup(
        source="", device="cuda:1", log_path=str(tmp_path / "log"), work_dir=str(tmp_path), input_specs=[]
    )
    ours, theirs = multiprocessing.Pipe()
    with warnings.catch_warnings():  # (it silences warnings for the candidate)
        _worker._main(theirs, setup, None)
    msg = msgspec.msgpack.decode(ours.recv_bytes(), type=_worker.WorkerMessage)
    assert chosen == [1]
    assert isinstance(msg, _worker.Failed) and msg.kind == "setup" and "no CUDA in this build" in msg.error
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: (_ for _ in ()).throw(RuntimeError("invalid device")))
    with warnings.catch_warnings():
        _worker._main(theirs, setup, None)
    msg = msgspec.msgpack.decode(ours.recv_bytes(), type=_worker.WorkerMessage)
    assert isinstance(msg, _worker.Failed) and msg.error.startswith("cannot select cuda:1: ")


# -- on a GPU ----------------------------------------------------------------------------------
_ON_THE_GPU = """
import torch


def kernel(a, b):
    # where the judge sent this process: its current device and the inputs' device
    assert torch.cuda.current_device() == {index}, torch.cuda.current_device()
    assert a.device == torch.device("cuda", {index}), a.device
    return a @ b
"""


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_evaluator_on_cuda_0_judges_a_matmul_on_that_gpu():
    from evokernel.core.result import Status
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.gate import GateOptions
    from evokernel.search_spaces import matmul_space

    quick = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})
    genome = matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2)
    with KernelEvaluator(MATMUL, _render, device="cuda:0", options=quick, workers=1) as ev:
        result = next(iter(ev.evaluate([genome])))
        assert result.status is Status.OK, result.error
        assert ev.judge.index == 0 and ev.judge.worker_device == "cuda:0"
        assert all(t.device == torch.device("cuda", 0) for t in ev.judge.tuning[0].inputs if torch.is_tensor(t))
        assert torch.cuda.current_device() == 0  # (so "cuda" is GPU 0 here, and shares cuda:0's results)
        assert ev.fingerprint() == KernelEvaluator(MATMUL, _render, device="cuda", options=quick).fingerprint()
        assert ev.fingerprint()["gpu"] == torch.cuda.get_device_name(0)
        verdict = ev.judge.check(_ON_THE_GPU.format(index=0), label="where")
        assert verdict.accepted, verdict.reason


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_a_judge_on_cuda_1_keeps_its_inputs_and_its_candidates_there():
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem

    quick = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})
    torch.cuda.synchronize(0)
    on_0, on_1 = torch.cuda.memory_allocated(0), torch.cuda.memory_allocated(1)
    judge = Judge(Problem.load(MATMUL), "cuda:1", quick)
    try:
        assert judge.index == 1 and judge.worker_device == "cuda:1"
        assert judge.arena.base.device == torch.device("cuda", 1)
        assert torch.cuda.memory_allocated(1) > on_1 and torch.cuda.memory_allocated(0) == on_0
        verdict = judge.check(_ON_THE_GPU.format(index=1), label="on cuda:1")
        assert verdict.accepted, verdict.reason
        assert verdict.timings and all(t.median_ms > 0 for t in verdict.timings)
        assert torch.cuda.memory_allocated(0) == on_0  # nothing of the judge's landed on GPU 0
    finally:
        judge.close()
    with torch.cuda.device(1):  # "cuda" is the current device when the judge is made
        judge = Judge(Problem.load(MATMUL), "cuda", quick)
    try:
        assert judge.index == 1 and judge.worker_device == "cuda:1"
        assert judge.check(_ON_THE_GPU.format(index=1), label="cuda, current 1").accepted
    finally:
        judge.close()
