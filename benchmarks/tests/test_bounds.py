"""The decode step's byte count and bound (benchmarks/decode_roofline.py) on three config
styles, its doctests, and the recorded short-context A/B read against it
(benchmarks/decode_bounds.py)."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import decode_roofline
from decode_roofline import bound_ms, decode_bytes, expected_experts

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


def test_the_modules_doctests():
    got = doctest.testmod(decode_roofline)
    assert got.attempted >= 2 and got.failed == 0


def test_dense_moe_and_mixtral_style_configs():
    llama = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
             "intermediate_size": 14336, "vocab_size": 128256}  # fmt: skip
    got = decode_bytes(llama, batch=1, context=0)
    params = got["total"] / 2  # bf16
    # Llama-3-8B's 8.03 B parameters but the embedding table (0.53 B; a step reads its rows)
    assert 7.45e9 < params < 7.55e9
    assert got["kv"] == 0 and "experts" not in got
    at_ctx = decode_bytes(llama, batch=4, context=8192)
    assert at_ctx["kv"] == 32 * 4 * 8192 * 2 * 8 * 128 * 2  # K and V of every layer, sequence and token
    mixtral = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
               "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 14336, "vocab_size": 32000}  # fmt: skip
    one, many = decode_bytes(mixtral, batch=1, context=0), decode_bytes(mixtral, batch=64, context=0)
    assert one["experts"] == pytest.approx(many["experts"] / expected_experts(8, 2, 64) * 2)
    assert many["experts"] == pytest.approx(32 * 8 * 3 * 4096 * 14336 * 2, rel=1e-6)  # every expert at 64 tokens
    assert bound_ms(4.3e12) == pytest.approx(1000.0)


def test_the_recorded_short_context_ab_against_the_bound():
    from decode_bounds import rows

    ab = json.loads((ROOT / "benchmarks" / "results" / "sglang_e2e.json").read_text())
    config = json.loads((ROOT / "benchmarks" / "results" / "sglang_model_config.json").read_text())
    got = {(r["variant"], r["point"]): r for r in rows(ab, config)}
    assert len(got) == 12 and all(0.0 < r["fraction"] < 1.0 for r in got.values())
    b1, b256 = got["sglang_shipped", "b1_i512_o32"], got["sglang_shipped", "b256_i512_o32"]
    assert b1["bytes"]["total"] < b256["bytes"]["total"] and b1["fraction"] < b256["fraction"]
