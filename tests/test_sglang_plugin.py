"""The SGLang plugin's CPU parts: its entry point, the package `evokernel export
sglang-plugin` writes and its validation, and the fused-MoE hook (evokernel's template in
Triton's interpreter against the problem's torch reference; SGLang's kernel kept for every
call off the plain path). Registration inside a real SGLang process is exercised on the GPU."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel.integrations.sglang.plugin import (
    FORMAT,
    FUSED_EXPERTS,
    DecodeTable,
    MoeTable,
    Package,
    PackageError,
    decode_attention_hook,
    register,
)

from .test_export import ROOT, _search

UP = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}
DOWN = dict(UP, BLOCK_SIZE_M=32, BLOCK_SIZE_N=64)


def test_the_entry_point_is_installed_and_does_nothing_without_a_package(monkeypatch: pytest.MonkeyPatch):
    eps = [ep for ep in importlib.metadata.entry_points(group="sglang.srt.plugins") if ep.name == "evokernel"]
    assert len(eps) == 1 and eps[0].value == "evokernel.integrations.sglang.plugin:register"
    assert eps[0].load() is register
    monkeypatch.delenv("EVOKERNEL_SGLANG_PACKAGE", raising=False)
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    register()  # no package: SGLang untouched (and sglang need not even be installed)
    assert "SGLANG_MOE_CONFIG_DIR" not in os.environ


def test_a_broken_package_is_reported_and_leaves_sglang_unchanged(tmp_path: Path, monkeypatch, caplog):
    (tmp_path / "manifest.json").write_text('{"format": "something else"}')
    monkeypatch.setenv("EVOKERNEL_SGLANG_PACKAGE", str(tmp_path))
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    with caplog.at_level("ERROR", logger="evokernel.sglang"):
        register()
    assert "expected 'evokernel-sglang/1'" in caplog.text and "SGLang runs unchanged" in caplog.text
    assert "SGLANG_MOE_CONFIG_DIR" not in os.environ
    with pytest.raises(PackageError, match="no manifest.json"):
        Package.load(tmp_path / "missing")
    (tmp_path / "manifest.json").write_text(
        json.dumps({"format": FORMAT, "kernels": [{"op": "fused_moe", "table": "kernels/fused_moe.json"}]})
    )
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "fused_moe.json").write_text('{"E=4,N=32": {"8": {"up": {}}}}')
    with pytest.raises(PackageError, match="entry 'E=4,N=32' is malformed"):
        Package.load(tmp_path)
    # what a hand-edited or truncated package holds: each a PackageError with where, never a traceback
    broken = [
        ({"format": FORMAT, "kernels": 3}, {}, "kernels is 3"),
        ({"format": FORMAT, "configs": 5}, {}, "configs is 5"),
        (
            {"format": FORMAT, "kernels": [{"op": "decode_attention", "table": "d.json"}]},
            {"d.json": '{"Hq=32,Hkv=0,D=128": {"1": {}}}'},
            "must be positive",
        ),
        (
            {"format": FORMAT, "configs": "configs"},
            {"configs/E=8,N=64,device_name=X.json": '{"1": {"BLOCK_'},
            "not JSON",
        ),
        ({"format": FORMAT, "configs": "configs"}, {"configs/E=8,N=64,device_name=X.json": '{"1": [16]}'}, "malformed"),
    ]
    for i, (manifest, files, why) in enumerate(broken):
        root = tmp_path / f"broken{i}"
        (root / "configs").mkdir(parents=True)
        (root / "manifest.json").write_text(json.dumps(manifest))
        for name, text in files.items():
            (root / name).write_text(text)
        with pytest.raises(PackageError, match=why):
            Package.load(root)
        monkeypatch.setenv("EVOKERNEL_SGLANG_PACKAGE", str(root))
        caplog.clear()
        with caplog.at_level("ERROR", logger="evokernel.sglang"):
            register()
        assert "SGLang runs unchanged" in caplog.text and "SGLANG_MOE_CONFIG_DIR" not in os.environ


def test_the_table_picks_the_nearest_batch_size_like_sglang():
    table = MoeTable({(4, 32): {8: (UP, DOWN), 64: (DOWN, UP)}})
    assert table.lookup(4, 32, 4) == (UP, DOWN) and table.lookup(4, 32, 16) == (UP, DOWN)
    assert table.lookup(4, 32, 36) is None  # nearest is 8 (a tie goes to the smaller), but 36 is out of its reach
    assert table.lookup(4, 32, 37) == (DOWN, UP) and table.lookup(4, 32, 128) == (DOWN, UP)
    assert table.lookup(4, 32, 3) is None and table.lookup(4, 32, 129) is None and table.lookup(8, 32, 8) is None
    assert MoeTable.from_json(table.to_json()).entries == table.entries


DEC = {"NUM_SPLITS": 4, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2, "REDUCE": 0}
PRE = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}  # the Triton prefill form, small tiles
# the Gluon form as the H200's recorded winners run it: two ping-pong consumer warpgroups of 64 rows
GLUON = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "OVERLAP": 1, "PINGPONG": 1, "QSTAGES": 2}


def test_the_decode_table_and_a_package_holding_it(tmp_path: Path):
    table = DecodeTable({(8, 2, 64): {1: DEC, 16: dict(DEC, NUM_SPLITS=1)}})
    assert table.lookup(8, 2, 64, 1) == DEC and table.lookup(8, 2, 64, 2) == DEC
    assert table.lookup(8, 2, 64, 3) is None  # nearest 1, out of its reach (2x)
    assert table.lookup(8, 2, 64, 32)["NUM_SPLITS"] == 1 and table.lookup(8, 4, 64, 1) is None
    assert DecodeTable.from_json(table.to_json()).entries == table.entries
    with pytest.raises(PackageError, match="malformed.*multiple"):
        DecodeTable.from_json({"Hq=6,Hkv=4,D=64": {"1": DEC}})
    with pytest.raises(PackageError, match="malformed"):
        DecodeTable.from_json({"Hq=8,Hkv=2,D=64": {"1": {"NUM_SPLITS": 2}}})
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "decode_attention.json").write_text(json.dumps(table.to_json()))
    manifest = {"format": FORMAT, "kernels": [{"op": "decode_attention", "table": "kernels/decode_attention.json"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    package = Package.load(tmp_path)
    assert package.moe is None and package.decode is not None and package.decode.entries == table.entries
    manifest["kernels"].append({"op": "rmsnorm", "table": "x.json"})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        PackageError, match="unknown kernel entry.*'fused_moe', 'decode_attention', 'prefill_attention'"
    ):
        Package.load(tmp_path)


def test_auto_splits_resolve_at_the_context_the_search_tuned_not_at_the_engines_buffer():
    """NUM_SPLITS 0 ("auto") derives the splits from the longest context; in SGLang the slot
    list the hook sees is a buffer sized for the whole pool, so an exported entry names the
    context it was tuned at and the hook resolves "auto" there (what the search measured)."""
    import torch

    from evokernel.search_spaces.attention.template_decode import auto_splits

    table = DecodeTable.from_json(
        {"Hq=8,Hkv=2,D=64": {"1": dict(DEC, NUM_SPLITS=0, context=32768), "8": dict(DEC, PREFETCH=1, PDL=1)}}
    )
    assert table.lookup(8, 2, 64, 1)["context"] == 32768 and "context" not in table.lookup(8, 2, 64, 8)
    seen: list[dict] = []
    hook = decode_attention_hook(table, run=lambda *a, **kw: seen.append(kw))
    for b in (1, 8):
        q, o = torch.zeros(b, 8, 64, dtype=torch.float16), torch.zeros(b, 8, 64, dtype=torch.float16)
        kb = torch.zeros(100_000, 2, 64, dtype=torch.float16)  # the pool's slots: far more than any sequence
        hook(sglang_decode_attention_fwd, q, kb, kb, o, torch.zeros(b + 1, dtype=torch.int32),
             torch.zeros(100_000, dtype=torch.int32), None, None, None, 8, 0.125, 1.0, 1.0)  # fmt: skip
    assert seen[0]["NUM_SPLITS"] == auto_splits(1, 2, 32768, 4) and seen[1]["NUM_SPLITS"] == DEC["NUM_SPLITS"]
    assert "PREFETCH" not in seen[0] and seen[1]["PREFETCH"] == 1  # optional: passed where the entry has it
    assert "PDL" not in seen[0] and seen[1]["PDL"] == 1
    assert hook.stats == {"template": 2, "fallback": 0}


def sglang_decode_attention_fwd(
    q,
    k_buffer,
    v_buffer,
    o,
    kv_indptr,
    kv_indices,
    attn_logits,
    attn_lse,
    num_kv_splits,
    max_kv_splits,
    sm_scale,
    k_scale,
    v_scale,
    logit_cap=0.0,
    sinks=None,
    xai_temperature_len=-1,
    has_mla=False,
    use_pdl=False,
    page_size: int = 1,
    score_mod=None,
    aux_tensors=None,
):
    """SGLang 0.5.17's `decode_attention_fwd` signature, computing in torch: softmax over each
    sequence's slots, written into `o` (nothing returned, as SGLang's)."""
    import torch

    group = q.shape[1] // k_buffer.shape[1]
    for b in range(q.shape[0]):
        rows = kv_indices[kv_indptr[b] : kv_indptr[b + 1]].long()
        k = k_buffer[rows].double().repeat_interleave(group, 1)
        v = v_buffer[rows].double().repeat_interleave(group, 1)
        s = torch.einsum("hd,nhd->hn", q[b].double(), k) * sm_scale
        o[b] = torch.einsum("hn,nhd->hd", s.softmax(-1), v).to(o.dtype)
    sglang_decode_attention_fwd.calls += 1


@pytest.mark.slow
def test_the_decode_hook_runs_the_template_into_sglangs_buffer_on_the_plain_path_only(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    code = r"""
import math, os, sys
sys.path.insert(0, os.environ["ROOT"])
import torch
from tests.test_sglang_plugin import DEC, sglang_decode_attention_fwd as impl
from evokernel.integrations.sglang.plugin import DecodeTable, decode_attention_hook
impl.calls = 0
g = torch.Generator().manual_seed(0)
lens, hq, hkv, d = [40, 7, 100], 8, 2, 64
B, slots = len(lens), sum(lens) + 9
q = (1.5 * torch.randn(B, hq, d, generator=g)).half()
kb = (1.5 * torch.randn(slots, hkv, d, generator=g)).half()
vb = torch.randn(slots, hkv, d, generator=g).half()
indices = torch.randperm(slots, generator=g)[: sum(lens)]
indptr = torch.zeros(B + 5, dtype=torch.int32)  # a graph's buffer: longer than B + 1
indptr[1 : B + 1] = torch.tensor(lens).cumsum(0)
want = torch.empty_like(q)
impl(q, kb, vb, want, indptr, indices, None, None, None, 8, 1 / math.sqrt(d), 1.0, 1.0)
assert impl.calls == 1
hook = decode_attention_hook(DecodeTable({(hq, hkv, d): {4: DEC}}))
o = torch.full_like(q, float("nan"))
args = (q, kb, vb, o, indptr, indices, None, None, None, 8, 1 / math.sqrt(d), 1.0, 1.0)
assert hook(impl, *args) is None and impl.calls == 1 and hook.stats == {"template": 1, "fallback": 0}
assert torch.allclose(o.float(), want.float(), rtol=2e-3, atol=2e-3), (o.float() - want.float()).abs().max()
# off the plain path or off the table: SGLang's kernel
hook(impl, *args, logit_cap=30.0)
hook(impl, *args, page_size=16)
hook(impl, *args[:11], 0.5, 1.0)
hook(impl, *args, sinks=torch.zeros(hq))
hook(impl, q[:, :4], kb, vb, o[:, :4], indptr, indices, None, None, None, 8, 0.125, 1.0, 1.0)
hook(impl, q.float(), kb, vb, o.float(), indptr, indices, None, None, None, 8, 0.125, 1.0, 1.0)
assert impl.calls == 7 and hook.stats == {"template": 1, "fallback": 6}
print("ok")
"""
    env = dict(os.environ, ROOT=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def sglang_extend_attention_fwd(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    is_causal,
    mask_indptr,
    max_len_extend,
    k_scale,
    v_scale,
    sm_scale=None,
    logit_cap=0.0,
    skip_prefix_custom_mask=True,
    sliding_window_size=-1,
    sinks=None,
    window_kv_offsets=None,
    xai_temperature_len=-1,
    lse_extend=None,
    skip_prefix=False,
    skip_extend=False,
    page_size: int = 1,
    score_mod=None,
    aux_tensors=None,
):
    """SGLang 0.5.17's `extend_attention_fwd` signature (the hook binds calls to it); marks `o`."""
    o_extend.fill_(-1.0)


def test_the_prefill_table_and_a_package_holding_it(tmp_path: Path):
    from evokernel.integrations.sglang.plugin import Package, PackageError, PrefillTable

    data = {"Hq=32,Hkv=4,D=128,causal=1": {"2048": dict(PRE, form="triton"), "8192": None}}
    table = PrefillTable.from_json(data)
    assert table.to_json() == {"Hq=32,Hkv=4,D=128,causal=1": {"2048": dict(PRE, form="triton"), "8192": None}}
    assert table.lookup(32, 4, 128, True, 600)["BLOCK_M"] == 32  # within 4x of 2048
    assert table.lookup(32, 4, 128, True, 400) is None  # beyond it
    assert table.lookup(32, 4, 128, True, 7000) is None  # nearest is 8192: SGLang's kernel there
    assert table.lookup(32, 4, 128, False, 2048) is None and table.lookup(32, 8, 128, True, 2048) is None
    for bad, why in (
        ({"Hq=32,Hkv=4,D=128,causal=1": {"64": dict(PRE, form="cuda")}}, "form is 'cuda'"),
        ({"Hq=32,Hkv=4,D=128,causal=1": {"64": {"form": "gluon", "BLOCK_M": 128}}}, "no ['BLOCK_N'"),
        # one warpgroup over 128 rows holds 320 fp32 accumulators a thread: refused at load, not
        # left to fall back at every launch
        ({"Hq=32,Hkv=4,D=128,causal=1": {"64": dict(GLUON, form="gluon", PINGPONG=0)}}, "cannot build it (320 acc"),
        ({"Hq=32,Hkv=5,D=128,causal=1": {"64": dict(PRE, form="triton")}}, "not a multiple"),
        ({"Hq=32,D=128": {}}, "malformed"),
    ):
        with pytest.raises(PackageError, match=re.escape(why)):
            PrefillTable.from_json(bad)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "prefill_attention.json").write_text(json.dumps(data))
    manifest = {"format": FORMAT, "kernels": [{"op": "prefill_attention", "table": "kernels/prefill_attention.json"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    pkg = Package.load(tmp_path)
    assert pkg.prefill is not None and pkg.decode is None and pkg.moe is None


def test_the_prefill_hook_runs_evokernels_kernel_only_where_no_prefix_is_cached():
    import torch

    from evokernel.integrations.sglang.plugin import PrefillTable, extend_attention_hook

    calls: list[dict] = []

    def triton_form(q, k, v, cu, max_seqlen, *, causal, sm_scale, **params):
        calls.append(
            dict(params, max_seqlen=max_seqlen, causal=causal, sm_scale=sm_scale, B=cu.numel() - 1, cu=cu.dtype)
        )
        return torch.ones_like(q)

    def failing(q, k, v, cu, max_seqlen, **kw):
        raise ValueError("no TMA on this machine")

    table = PrefillTable({(8, 2, 64, True): {256: dict(PRE, form="triton"), 1024: dict(PRE, form="gluon")}})
    hook = extend_attention_hook(table, run={"triton": triton_form, "gluon": failing})
    T = 300
    q, o = torch.zeros(T, 8, 64, dtype=torch.float16), torch.zeros(T, 8, 64, dtype=torch.float16)
    k = torch.zeros(T, 2, 64, dtype=torch.float16)
    kb = torch.zeros(1000, 2, 64, dtype=torch.float16)
    qo = torch.tensor([0, 100, 300], dtype=torch.int32)
    none = (torch.zeros(3, dtype=torch.int32), torch.empty(0, dtype=torch.int64))
    args = (q, k, k, o, kb, kb, qo, *none, None, True, None, 200, 1.0, 1.0)
    assert hook(sglang_extend_attention_fwd, *args) is None
    assert bool((o == 1).all()) and calls[-1]["max_seqlen"] == 200 and calls[-1]["B"] == 2
    assert calls[-1]["causal"] is True and calls[-1]["sm_scale"] == pytest.approx(1 / 8) and calls[-1]["BLOCK_M"] == 32
    assert hook.stats == {"template": 1, "fallback": 0}
    # SGLang's kernel: a cached prefix, a custom mask, a sliding window, a logit cap, a KV
    # scale, int64 offsets, the other masking, a length off the table
    cached = (torch.tensor([0, 0, 16], dtype=torch.int32), torch.arange(16))
    for call in (
        lambda: hook(sglang_extend_attention_fwd, q, k, k, o, kb, kb, qo, *cached, None, True, None, 200, 1.0, 1.0),
        lambda: hook(sglang_extend_attention_fwd, *args[:9], torch.ones(5, dtype=torch.bool), *args[10:]),
        lambda: hook(sglang_extend_attention_fwd, *args, sliding_window_size=128),
        lambda: hook(sglang_extend_attention_fwd, *args, logit_cap=30.0),
        lambda: hook(sglang_extend_attention_fwd, *args[:13], 0.5, 1.0),
        lambda: hook(sglang_extend_attention_fwd, *args[:10], False, *args[11:]),
        lambda: hook(sglang_extend_attention_fwd, *args[:12], 40, 1.0, 1.0),
    ):
        o.zero_()
        call()
        assert bool((o == -1).all())
    assert hook.stats == {"template": 1, "fallback": 7}
    # int64 query offsets (SGLang's engine keeps them so): converted on the device, the kernel runs
    o.zero_()
    assert hook(sglang_extend_attention_fwd, *args[:6], qo.long(), *args[7:]) is None
    assert bool((o == 1).all()) and calls[-1]["B"] == 2 and calls[-1]["cu"] == torch.int32
    assert hook.stats == {"template": 2, "fallback": 7}
    # a configuration that fails to launch: SGLang's kernel, and not tried again
    for _ in range(2):
        o.zero_()
        hook(sglang_extend_attention_fwd, *args[:12], 900, 1.0, 1.0)
        assert bool((o == -1).all())
    assert hook.stats == {"template": 2, "fallback": 9} and len(calls) == 2
    # each fallback counted by its reason, the failed launch kept: what the engine driver reports
    assert hook.why_not == {
        "cached prefix": 1,
        "not the plain path": 4,
        "no entry for the length": 2,
        "launch failed": 1,
        "launch failed before": 1,
    }
    assert len(hook.errors) == 1 and "ValueError: no TMA on this machine" in hook.errors[0]


def test_the_hooks_check_their_output_against_sglangs_kernel_on_their_first_eager_calls(
    monkeypatch: pytest.MonkeyPatch,
):
    import torch

    from evokernel.integrations.sglang import plugin

    def prefill_args(o):
        T = 300
        q, k = torch.zeros(T, 8, 64, dtype=torch.float16), torch.zeros(T, 2, 64, dtype=torch.float16)
        kb = torch.zeros(1000, 2, 64, dtype=torch.float16)
        qo = torch.tensor([0, 100, 300], dtype=torch.int32)
        none = (torch.zeros(3, dtype=torch.int32), torch.empty(0, dtype=torch.int64))
        return (q, k, k, o, kb, kb, qo, *none, None, True, None, 200, 1.0, 1.0)

    table = plugin.PrefillTable({(8, 2, 64, True): {256: dict(PRE, form="triton")}})
    quarter = {"triton": lambda q, *a, **kw: torch.full_like(q, 0.75)}
    monkeypatch.delenv(plugin.CHECK_ENV, raising=False)
    unchecked = plugin.extend_attention_hook(table, run=quarter)
    unchecked(sglang_extend_attention_fwd, *prefill_args(torch.zeros(300, 8, 64, dtype=torch.float16)))
    assert unchecked.checks.seen == {}  # off by default: a served engine never waits for a check

    monkeypatch.setenv(plugin.CHECK_ENV, "1")
    hook = plugin.extend_attention_hook(table, run=quarter)
    for _ in range(2):
        o = torch.zeros(300, 8, 64, dtype=torch.float16)
        assert hook(sglang_extend_attention_fwd, *prefill_args(o)) is None
        assert bool((o == 0.75).all())  # SGLang's kernel wrote into a copy, not the engine's buffer
    # the stand-in SGLang kernel writes -1: the check reads the distance, once per length
    assert hook.checks.seen == {"max_len=200": {"calls": 1, "max_err": 1.75, "ref_absmax": 1.0, "finite": True}}

    # the decode hook, its template exact here (the stand-in SGLang kernel itself)
    def exact(q, k, v, indptr, indices, *, sm_scale, out, **params):
        sglang_decode_attention_fwd(q, k, v, out, indptr, indices, None, None, None, 8, sm_scale, 1.0, 1.0)

    monkeypatch.setattr(sglang_decode_attention_fwd, "calls", 0, raising=False)
    dec = plugin.decode_attention_hook(DecodeTable.from_json({"Hq=8,Hkv=2,D=64": {"2": DEC}}), run=exact)
    g = torch.Generator().manual_seed(0)
    q, o = torch.randn(2, 8, 64, generator=g).half(), torch.zeros(2, 8, 64, dtype=torch.float16)
    kb = torch.randn(50, 2, 64, generator=g).half()
    indptr, indices = torch.tensor([0, 20, 50], dtype=torch.int32), torch.arange(50, dtype=torch.int32)
    dec(sglang_decode_attention_fwd, q, kb, kb, o, indptr, indices, None, None, None, 8, 0.125, 1.0, 1.0)
    got = dec.checks.seen["B=2"]
    assert got["calls"] == 1 and got["max_err"] == 0.0 and got["ref_absmax"] > 0.1 and got["finite"]

    # a reference that fails is recorded; the engine's call is not affected
    def broken(*a, **kw):
        raise RuntimeError("no such kernel")

    hook2 = plugin.extend_attention_hook(table, run=quarter)
    o = torch.zeros(300, 8, 64, dtype=torch.float16)
    broken.__signature__ = inspect.signature(sglang_extend_attention_fwd)  # type: ignore[attr-defined]
    hook2(broken, *prefill_args(o))
    assert bool((o == 0.75).all()) and "RuntimeError: no such kernel" in hook2.checks.seen["max_len=200"]["error"]

    monkeypatch.setattr(plugin, "INSTALLED", {"prefill_attention": hook, "decode_attention": dec})
    stats = plugin.hook_stats()
    assert stats["prefill_attention"]["checks"]["max_len=200"]["max_err"] == 1.75
    assert stats["decode_attention"]["checks"]["B=2"]["calls"] == 1


def test_the_engine_driver_reports_what_the_installed_hooks_ran(monkeypatch: pytest.MonkeyPatch):
    from evokernel.integrations.sglang import plugin
    from evokernel.integrations.sglang.driver import _hooks

    monkeypatch.setattr(plugin, "INSTALLED", {})
    assert _hooks() == {}  # no package: replies carry nothing
    hook = plugin.extend_attention_hook(plugin.PrefillTable({(8, 2, 64, True): {256: dict(PRE, form="triton")}}))
    hook.stats["fallback"] += 3
    hook.why_not["cached prefix"] = 3
    monkeypatch.setitem(plugin.INSTALLED, "prefill_attention", hook)
    assert _hooks() == {"prefill_attention": {"template": 0, "fallback": 3, "why_not": {"cached prefix": 3}}}


def _inputs(m: int):
    os.environ.setdefault("EVOKERNEL_MOE_MODEL", "tiny")
    from evokernel.judge.problem import Problem

    problem = Problem.load(ROOT / "examples" / "problems" / "moe_bf16.py")
    shape = dict(problem.shapes[0], M=m)
    return problem, problem.make_inputs(shape, 0, "cpu")


def sglang_fused_experts_impl(
    hidden_states,
    w1,
    w2,
    topk_weights,
    topk_ids,
    b1=None,
    b2=None,
    inplace=False,
    activation="silu",
    is_gated=True,
    apply_router_weight_on_input=False,
    use_fp8_w8a8=False,
    use_int8_w8a8=False,
    use_int8_w8a16=False,
    use_int4_w4a16=False,
    per_channel_quant=False,
    w1_scale=None,
    w2_scale=None,
    w1_zp=None,
    w2_zp=None,
    a1_scale=None,
    a2_scale=None,
    block_shape=None,
    no_combine=False,
    routed_scaling_factor=None,
    gemm1_alpha=None,
    gemm1_limit=None,
    filter_expert=True,
    swiglu_limit=None,
    gate_up_interleaved=True,
    a1_q=None,
):
    """SGLang 0.5.17's `fused_experts_impl` signature, computing in torch (the problem's reference)."""
    from evokernel.judge.problem import Problem

    ref = Problem.load(ROOT / "examples" / "problems" / "moe_bf16.py").reference
    out = ref(hidden_states, w1, w2, topk_weights, topk_ids)
    sglang_fused_experts_impl.calls += 1
    if inplace:
        hidden_states.copy_(out)
        return hidden_states
    return out


@pytest.mark.slow
def test_the_hook_runs_the_template_on_the_plain_path_and_sglangs_kernel_otherwise(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("EVOKERNEL_MOE_MODEL", "tiny")
    monkeypatch.setenv("EVOKERNEL_MOE_DTYPE", "float16")
    code = r"""
import os, sys
sys.path.insert(0, os.environ["ROOT"])
import torch
from tests.test_sglang_plugin import UP, DOWN, _inputs, sglang_fused_experts_impl as impl
from evokernel.integrations.sglang.plugin import MoeTable, fused_experts_hook
impl.calls = 0
problem, (x, w1, w2, tw, ti) = _inputs(11)
E, two_n, _ = w1.shape
hook = fused_experts_hook(MoeTable({(E, two_n // 2): {8: (UP, DOWN)}}))
want = problem.reference(x, w1, w2, tw, ti).float()
got = hook(impl, x, w1, w2, tw, ti)
assert impl.calls == 0 and hook.stats == {"template": 1, "fallback": 0}
assert torch.allclose(got.float(), want, rtol=5e-3, atol=5e-3), (got.float() - want).abs().max()
y = x.clone()
assert hook(impl, y, w1, w2, topk_weights=tw, topk_ids=ti, inplace=True) is y and torch.allclose(y.float(), want, rtol=5e-3, atol=5e-3)
scaled = hook(impl, x, w1, w2, tw, ti, routed_scaling_factor=2.5)
assert torch.allclose(scaled.float(), 2.5 * want, rtol=5e-3, atol=2e-2)
# off the plain path (quantised, clamped, or an (E, N) the package was not tuned for): SGLang's kernel
hook(impl, x, w1, w2, tw, ti, use_fp8_w8a8=True)
hook(impl, x, w1, w2, tw, ti, gemm1_limit=7.0)
hook(impl, x, w1[:, :16], w2[:, :, :8], tw, ti)
assert impl.calls == 3 and hook.stats["fallback"] == 3
# a table entry that chose the small-batch GEMV path runs it
gemv = fused_experts_hook(MoeTable({(E, two_n // 2): {8: (dict(UP, GEMV=1), DOWN)}}))
assert torch.allclose(gemv(impl, x, w1, w2, tw, ti).float(), want, rtol=5e-3, atol=5e-3) and impl.calls == 3
# the GEMV path with its down GEMV per pair
pairs = fused_experts_hook(MoeTable({(E, two_n // 2): {8: (dict(UP, GEMV=2), DOWN)}}))
assert torch.allclose(pairs(impl, x, w1, w2, tw, ti).float(), want, rtol=5e-3, atol=5e-3) and impl.calls == 3
# and one that fused SiLU into the up GEMM runs that structure
fused = fused_experts_hook(MoeTable({(E, two_n // 2): {8: (dict(UP, FUSE_SILU=1), DOWN)}}))
assert torch.allclose(fused(impl, x, w1, w2, tw, ti).float(), want, rtol=5e-3, atol=5e-3) and impl.calls == 3
table = MoeTable.from_json({f"E={E},N={two_n // 2}": {"8": {"up": dict(UP, FUSE_SILU=1), "down": DOWN}}})
assert table.lookup(E, two_n // 2, 8)[0]["FUSE_SILU"] == 1
print("ok")
"""
    env = dict(os.environ, ROOT=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.slow
def test_export_writes_a_package_the_plugin_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db = tmp_path / "moe.db"
    _search(db, 8, monkeypatch)
    out = tmp_path / "pkg"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOKERNEL_MOE")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "export",
            "sglang-plugin",
            str(db),
            "--out",
            str(out),
            "--device-name",
            "NVIDIA H200",
            "--triton-version",
            "3.6.0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "EVOKERNEL_SGLANG_PACKAGE=" in done.stdout
    package = Package.load(out)
    assert package.config_dir == out and (out / "configs" / "triton_3_6_0").is_dir()
    assert json.loads((out / "manifest.json").read_text())["provenance"]["seeded_from_sglang"] == []  # none for E=4
    assert package.moe is not None and package.moe.lookup(4, 32, 8) is not None
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kernels"] == [{"op": "fused_moe", "target": FUSED_EXPERTS, "table": "kernels/fused_moe.json"}]
    assert manifest["provenance"]["fused_moe"][0]["M"] == 8


@pytest.mark.slow
def test_the_package_keeps_sglangs_shipped_configs_for_batch_sizes_not_tuned(tmp_path: Path, monkeypatch):
    import evokernel.search_spaces.moe.sglang as sglang_configs
    from evokernel.integrations.sglang.export import sglang_plugin_package
    from evokernel.store import SQLiteStore

    db = tmp_path / "moe.db"
    _search(db, 8, monkeypatch)
    shipped = tmp_path / "E=4,N=32,device_name=NVIDIA_H200.json"
    cfg = dict(UP, BLOCK_SIZE_M=64)
    shipped.write_text(json.dumps({"1": cfg, "8": cfg, "4096": cfg}))
    monkeypatch.setattr(sglang_configs, "shipped_file", lambda E, N, gpu: shipped if (E, N) == (4, 32) else None)
    out = tmp_path / "pkg"
    sglang_plugin_package(SQLiteStore(db, create=False), out, device_name="NVIDIA H200", triton_version="3.6.0")
    folder = out / "configs" / "triton_3_6_0"
    for name in ("E=4,N=32,device_name=NVIDIA_H200.json", "E=4,N=32,device_name=NVIDIA_H200_down.json"):
        table = json.loads((folder / name).read_text())
        assert sorted(table, key=int) == ["1", "8", "4096"]
        assert table["1"] == cfg and table["4096"] == cfg and table["8"] != cfg  # M=8 is the tuned one
    assert json.loads((out / "manifest.json").read_text())["provenance"]["seeded_from_sglang"] == [shipped.name]


@pytest.mark.slow
def test_export_writes_the_decode_table_from_page_1_decode_searches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from evokernel import Budget, Search
    from evokernel.engine.search import SearchOptions
    from evokernel.evaluators import KernelEvaluator
    from evokernel.integrations.sglang.export import sglang_plugin_package
    from evokernel.integrations.sglang.plugin import DECODE_ATTENTION
    from evokernel.search_spaces import decode_space
    from evokernel.search_spaces.attention.template_decode import candidate_source
    from evokernel.store import SQLiteStore

    from .test_export import QUICK

    db = tmp_path / "decode.db"
    monkeypatch.setenv("EVOKERNEL_DECODE_MODEL", "tiny")
    monkeypatch.setenv("EVOKERNEL_DECODE_DTYPE", "float16")  # the interpreter cannot do bf16 dots
    monkeypatch.setenv("EVOKERNEL_DECODE_CONTEXT", "48")
    for page, batch in ((1, 2), (16, 4)):  # SGLang's page size, and one it does not use
        monkeypatch.setenv("EVOKERNEL_DECODE_PAGE", str(page))
        monkeypatch.setenv("EVOKERNEL_DECODE_BATCH", str(batch))
        ev = KernelEvaluator(
            ROOT / "examples" / "problems" / "attention_decode_bf16.py",
            lambda g: candidate_source(g.params),
            device="cpu",
            options=QUICK,
            workers=2,
        )
        report = Search(
            decode_space(head_dim=64, group=4),
            ev,
            store=SQLiteStore(db),
            options=SearchOptions(population=2, remeasure=0, report_elites=1),
        ).run(Budget(evaluations=2), seed=page)
        assert report.best is not None, report.statuses
    out = tmp_path / "pkg"
    with SQLiteStore(db) as store:
        done = sglang_plugin_package(store, out, device_name="NVIDIA H200", triton_version="3.6.0")
    assert any("page size 16" in s for s in done.skipped), done.skipped
    package = Package.load(out)
    assert package.moe is None and package.decode is not None
    assert list(package.decode.entries) == [(4, 1, 64)] and list(package.decode.entries[(4, 1, 64)]) == [2]
    assert package.decode.entries[(4, 1, 64)][2]["context"] == 48  # where "auto" splits resolve in the engine
    entry = package.decode.entries[(4, 1, 64)][2]
    # the optional genes travel with the entry
    assert entry["PREFETCH"] in (0, 1, 2) and entry["PDL"] in (0, 1, 2, 3, 6, 7)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kernels"] == [
        {"op": "decode_attention", "target": DECODE_ATTENTION, "table": "kernels/decode_attention.json"}
    ]
    (row,) = manifest["provenance"]["decode_attention"]
    assert (row["B"], row["C"]) == (2, 48) and row["latency_ms"] > 0


@pytest.mark.slow
def test_export_writes_the_prefill_table_from_packed_prefill_searches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from evokernel import Budget, Search
    from evokernel.engine.search import SearchOptions
    from evokernel.evaluators import KernelEvaluator
    from evokernel.integrations.sglang.export import sglang_plugin_package
    from evokernel.integrations.sglang.plugin import EXTEND_ATTENTION
    from evokernel.integrations.sglang.promote import changes, restrict
    from evokernel.search_spaces import attention_space
    from evokernel.search_spaces.attention.template_prefill import candidate_source
    from evokernel.store import SQLiteStore

    from .test_export import QUICK

    db = tmp_path / "prefill.db"
    monkeypatch.setenv("EVOKERNEL_ATTN_MODEL", "tiny")  # 4/2 heads, D 64, causal
    monkeypatch.setenv("EVOKERNEL_ATTN_DTYPE", "float16")  # the interpreter cannot do bf16 dots
    monkeypatch.setenv("EVOKERNEL_ATTN_SEQLENS", "40,70")
    ev = KernelEvaluator(
        ROOT / "examples" / "problems" / "attention_prefill_bf16.py",
        lambda g: candidate_source(g.params, causal=True),
        device="cpu",
        options=QUICK,
        workers=2,
    )
    report = Search(
        attention_space(head_dim=64, causal=True),
        ev,
        store=SQLiteStore(db),
        options=SearchOptions(population=2, remeasure=0, report_elites=1),
    ).run(Budget(evaluations=2), seed=0)
    assert report.best is not None, report.statuses
    out = tmp_path / "pkg"
    with SQLiteStore(db) as store:
        sglang_plugin_package(store, out, device_name="NVIDIA H200", triton_version="3.6.0")
    package = Package.load(out)
    assert package.prefill is not None and package.decode is None
    (entry,) = package.prefill.entries[(4, 2, 64, True)].values()
    assert list(package.prefill.entries[(4, 2, 64, True)]) == [70]  # keyed by the longest sequence
    # the run's elite (the archive's, noise-aware: with two candidates tied within the
    # interpreter's noise it can differ from the report's best: seen in a local run)
    with SQLiteStore(db) as store:
        elite = min(store.elites(run_id=report.run_id), key=lambda e: e.latency_ms)
    assert entry["form"] == "triton" and {k: entry[k] for k in elite.genome.params} == elite.genome.params
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kernels"] == [
        {"op": "prefill_attention", "target": EXTEND_ATTENTION, "table": "kernels/prefill_attention.json"}
    ]
    # a change the promotion judges; no decode step runs it, so it ships only once measured
    (change,) = changes(out)
    assert change.op == "prefill_attention" and change.batch == 70 and not change.serves(1)
    reverted = restrict(out, tmp_path / "reverted", keep=())
    assert json.loads((reverted / "kernels" / "prefill_attention.json").read_text()) == {
        "Hq=4,Hkv=2,D=64,causal=1": {"70": None}
    }


_REAL_SGLANG = r"""
import json, logging, math, os, sys
import torch
logging.basicConfig(level=logging.INFO)
from sglang.srt.plugins import load_plugins

load_plugins()  # SGLang's own entry point: finds evokernel's, which applies the package
import sglang.kernels.ops.attention.decode_attention as m

fwd = m.decode_attention_fwd
assert hasattr(fwd, "__wrapped__"), "the plugin did not hook decode_attention_fwd"
cuda = torch.cuda.is_available()
dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float16)  # the interpreter: no bf16 dots
g = torch.Generator(device=dev).manual_seed(0)
out = []
for b, ctx in ((1, 300), (4, 200)):
    slots = 1200
    q = torch.randn(b, 32, 128, generator=g, device=dev).to(dtype)
    kb = torch.randn(slots, 4, 128, generator=g, device=dev).to(dtype)
    vb = torch.randn(slots, 4, 128, generator=g, device=dev).to(dtype)
    indptr = torch.arange(0, (b + 1) * ctx, ctx, dtype=torch.int32, device=dev)
    indices = torch.randperm(slots, device=dev)[: b * ctx].to(torch.int64)

    def call(f):
        o = torch.zeros(b, 32, 128, dtype=dtype, device=dev)
        logits = torch.empty(b, 32, 8, 128, dtype=torch.float32, device=dev)
        lse = torch.empty(b, 32, 8, dtype=torch.float32, device=dev)
        splits = torch.full((b,), 8, dtype=torch.int32, device=dev)
        f(q, kb, vb, o, indptr, indices, logits, lse, splits, 8, 1 / math.sqrt(128), 1.0, 1.0,
          logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=False, use_pdl=False, page_size=1)
        return o.float()

    want, got = call(fwd.__wrapped__), call(fwd)
    out.append({"b": b, "err": (want - got).abs().max().item(), "finite": bool(torch.isfinite(got).all())})
from evokernel.integrations.sglang.plugin import hook_stats
print("STATS " + json.dumps(hook_stats()))
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="needs SGLang (the device's .sgl bundle)")
def test_inside_a_real_sglang_the_plugin_hooks_its_decode_attention_and_matches_its_kernel(tmp_path: Path):
    """SGLang's own `load_plugins()` finds evokernel's entry point, which applies a package
    (EVOKERNEL_SGLANG_PACKAGE) with decode entries for the Qwen3-30B-A3B heads (32/4, D 128);
    SGLang's `decode_attention_fwd`, called as its Triton backend calls it, then runs
    evokernel's kernel, whose output matches SGLang's own kernel on the same cache. On the
    CPU both run in Triton's interpreter (fp16); on a GPU, in bf16."""
    (tmp_path / "kernels").mkdir()
    table = {"Hq=32,Hkv=4,D=128": {"1": dict(DEC, NUM_SPLITS=0, BLOCK_N=64, context=300), "4": DEC}}
    (tmp_path / "kernels" / "decode_attention.json").write_text(json.dumps(table))
    manifest = {"format": FORMAT, "kernels": [{"op": "decode_attention", "table": "kernels/decode_attention.json"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    env = dict(
        os.environ,
        EVOKERNEL_SGLANG_PACKAGE=str(tmp_path),
        EVOKERNEL_SGLANG_CHECK="1",
        SGLANG_IS_FLASHINFER_AVAILABLE="false",
    )
    import torch

    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", _REAL_SGLANG], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "evokernel decode_attention at B=1" in done.stderr and "B=4" in done.stderr
    for row in got:
        assert row["finite"] and row["err"] < 2e-2, row
    # the hook's own check (EVOKERNEL_SGLANG_CHECK=1) against SGLang's kernel, on each batch size's first call
    stats = _stats(done.stdout)["decode_attention"]
    assert set(stats["checks"]) == {"B=1", "B=4"}, stats
    for c in stats["checks"].values():
        assert c["calls"] == 1 and c["finite"] and c["max_err"] < 2e-2 and c["ref_absmax"] > 0.1, c


def _stats(stdout: str) -> dict:
    """The hook counters a real-SGLang script printed (its "STATS {...}" line)."""
    return json.loads(next(x for x in stdout.splitlines() if x.startswith("STATS "))[6:])


_REAL_SGLANG_PREFILL = r"""
import json, logging, math
import torch
logging.basicConfig(level=logging.INFO)
from sglang.srt.plugins import load_plugins

load_plugins()
import sglang.kernels.ops.attention.extend_attention as m

fwd = m.extend_attention_fwd
assert hasattr(fwd, "__wrapped__"), "the plugin did not hook extend_attention_fwd"
cuda = torch.cuda.is_available()
dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float16)
g = torch.Generator(device=dev).manual_seed(0)
lens, prefix = [40, 70], [0, 0]
T, slots = sum(lens), 512
q = torch.randn(T, 32, 128, generator=g, device=dev).to(dtype)
k = torch.randn(T, 4, 128, generator=g, device=dev).to(dtype)
v = torch.randn(T, 4, 128, generator=g, device=dev).to(dtype)
kb = torch.randn(slots, 4, 128, generator=g, device=dev).to(dtype)
vb = torch.randn(slots, 4, 128, generator=g, device=dev).to(dtype)
qo = torch.tensor([0, 40, 110], dtype=torch.int32, device=dev)


def call(f, kv_indptr, kv_indices):
    o = torch.zeros(T, 32, 128, dtype=dtype, device=dev)
    f(q, k, v, o, kb, vb, qo, kv_indptr, kv_indices, None, True, None, max(lens), 1.0, 1.0,
      sm_scale=1 / math.sqrt(128), logit_cap=0.0, sliding_window_size=-1, sinks=None)
    return o.float()


rows = []
none = (torch.zeros(3, dtype=torch.int32, device=dev), torch.empty(0, dtype=torch.int64, device=dev))
want, got = call(fwd.__wrapped__, *none), call(fwd, *none)
rows.append({"case": "no prefix", "err": (want - got).abs().max().item(), "finite": bool(torch.isfinite(got).all())})
# a cached prefix of 16 tokens on the second sequence: SGLang's kernel runs it, bit for bit
cached = (torch.tensor([0, 0, 16], dtype=torch.int32, device=dev), torch.arange(100, 116, device=dev))
want, got = call(fwd.__wrapped__, *cached), call(fwd, *cached)
rows.append({"case": "prefix", "err": (want - got).abs().max().item(), "finite": bool(torch.isfinite(got).all())})
from evokernel.integrations.sglang.plugin import hook_stats
print("STATS " + json.dumps(hook_stats()))
print(json.dumps(rows))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="needs SGLang (the device's .sgl bundle)")
def test_inside_a_real_sglang_the_plugin_hooks_its_prefill_attention_where_no_prefix_is_cached(tmp_path: Path):
    """SGLang's `extend_attention_fwd`, hooked through its own `load_plugins()` with a
    package's prefill entry for the Qwen3-30B-A3B heads (32/4, D 128, causal), runs
    evokernel's prefill kernel on a batch with no cached tokens and matches SGLang's kernel;
    with a cached prefix on one sequence, SGLang's own kernel runs (identical output). On the
    CPU the Triton form runs in Triton's interpreter (fp16); the Gluon form needs the GPU."""
    import torch

    (tmp_path / "kernels").mkdir()
    form = "gluon" if torch.cuda.is_available() else "triton"
    tiles = GLUON if form == "gluon" else PRE
    table = {"Hq=32,Hkv=4,D=128,causal=1": {"64": dict(tiles, form=form)}}
    (tmp_path / "kernels" / "prefill_attention.json").write_text(json.dumps(table))
    manifest = {"format": FORMAT, "kernels": [{"op": "prefill_attention", "table": "kernels/prefill_attention.json"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    env = dict(
        os.environ,
        EVOKERNEL_SGLANG_PACKAGE=str(tmp_path),
        EVOKERNEL_SGLANG_CHECK="1",
        SGLANG_IS_FLASHINFER_AVAILABLE="false",
    )
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _REAL_SGLANG_PREFILL], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["case"]: r for r in json.loads(done.stdout.strip().splitlines()[-1])}
    stats = _stats(done.stdout)["prefill_attention"]
    assert stats["template"] == 1 and stats["why_not"] == {"cached prefix": 1}, stats
    check = stats["checks"]["max_len=70"]
    assert check["calls"] == 1 and check["finite"] and check["max_err"] < 2e-2 and check["ref_absmax"] > 0.1, check
    assert "evokernel prefill_attention at Hq=32 Hkv=4 D=128 causal=True max_len=70" in done.stderr
    assert rows["no prefix"]["finite"] and rows["no prefix"]["err"] < 2e-2, rows
    assert rows["prefix"]["err"] == 0.0, rows


def test_the_driver_steps_the_numerics_probe_once_outside_the_graphs_when_checks_are_on(
    monkeypatch: pytest.MonkeyPatch,
):
    """The decode hook's shadow check cannot read a captured call: with the check on, the
    probe's batch takes one more decode step with SGLang's decode graph runner set aside
    (model_runner.forward then runs eagerly), and the graph runner is put back whatever happens."""
    from types import SimpleNamespace

    from evokernel.integrations.sglang.driver import _eager_decode_check

    graphs = object()
    seen: list[object] = []
    model_runner = SimpleNamespace(decode_cuda_graph_runner=graphs)

    def decode(ids, batch):
        seen.append(model_runner.decode_cuda_graph_runner)
        if batch == "bad":
            raise RuntimeError("eager decode needs its metadata")

    bench = SimpleNamespace(torch_runner=model_runner, decode=decode)  # one_batch's runner shape
    monkeypatch.delenv("EVOKERNEL_SGLANG_CHECK", raising=False)
    assert _eager_decode_check(bench, None, "ok") == "" and seen == []
    monkeypatch.setenv("EVOKERNEL_SGLANG_CHECK", "1")
    assert _eager_decode_check(bench, None, "ok") == "ran" and seen == [None]
    assert model_runner.decode_cuda_graph_runner is graphs
    got = _eager_decode_check(bench, None, "bad")
    assert got.startswith("failed: RuntimeError") and model_runner.decode_cuda_graph_runner is graphs
