"""How fast a decode step could be: the bytes it must read from HBM, over the copy bandwidth.

The benchmarks' own helper, not the library's: `decode_bounds.py` and
`sglang_long_h200.py` import it as a sibling module (benchmarks/ on sys.path).

A decode step of a transformer reads every weight its tokens touch (attention projections,
the MLP or the experts the router picked, the LM head) and each sequence's KV cache; at
small batch that traffic, not arithmetic, bounds the step. `decode_bytes` counts it from a
Hugging Face config (dense or mixture-of-experts: Qwen3-MoE, Mixtral and Llama-style
names), `bound_ms` turns bytes into the time the H200's copy bandwidth needs for them, and
a measured step over that is the fraction of the bound reached.

Experts: with `tokens` tokens each routed to k of E experts, the expected number of
distinct experts read is E (1 - (1 - k/E)^tokens) (uniform routing, as dummy weights give);
each is read once a step whatever the tokens on it.

>>> cfg = {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
...        "num_hidden_layers": 4, "num_experts": 128, "num_experts_per_tok": 8,
...        "moe_intermediate_size": 768, "vocab_size": 32000}
>>> b = decode_bytes(cfg, batch=1, context=512)
>>> round(b["experts"] / 1e6, 1), round(b["attention"] / 1e6, 1), round(b["kv"] / 1e6, 2)
(302.0, 151.0, 4.19)
>>> round(bound_ms(b["total"]), 3)
0.137
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["COPY_BANDWIDTH", "decode_bytes", "bound_ms", "expected_experts"]

#: the H200's device-to-device copy bandwidth measured here (bytes/s; BENCHMARKS.md)
COPY_BANDWIDTH = 4.3e12


def expected_experts(experts: int, per_token: int, tokens: int) -> float:
    """Distinct experts `tokens` tokens reach, each routed to `per_token` of `experts`
    uniformly at random.

    >>> round(expected_experts(128, 8, 1), 1), round(expected_experts(128, 8, 16), 1), round(expected_experts(128, 8, 256), 1)
    (8.0, 82.4, 128.0)
    """
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(per_token, experts) / experts) ** tokens)


def decode_bytes(
    config: Mapping[str, Any], *, batch: int, context: int, weight_bytes: int = 2, kv_bytes: int = 2
) -> dict[str, float]:
    """Bytes one decode step reads at `batch` sequences of `context` cached tokens each:
    attention projections, MLP or experts, router, LM head (and the embedding rows), KV
    cache; "total" is their sum."""
    h = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    d = int(config.get("head_dim") or h // heads)
    attention = layers * (h * heads * d + 2 * h * kv_heads * d + heads * d * h) * weight_bytes
    experts = int(config.get("num_experts") or config.get("num_local_experts") or 0)
    if experts:
        k = int(config["num_experts_per_tok"])
        inter = int(config.get("moe_intermediate_size") or config["intermediate_size"])
        touched = expected_experts(experts, k, batch)
        mlp = layers * touched * 3 * h * inter * weight_bytes
        router = layers * h * experts * weight_bytes
    else:
        mlp = layers * 3 * h * int(config["intermediate_size"]) * weight_bytes
        router = 0
    vocab = int(config["vocab_size"])
    head = vocab * h * weight_bytes + batch * h * weight_bytes  # LM head, and the tokens' embedding rows
    kv = layers * batch * context * 2 * kv_heads * d * kv_bytes
    out = {"attention": float(attention), "experts" if experts else "mlp": float(mlp), "router": float(router)}
    out.update({"lm_head": float(head), "kv": float(kv)})
    out["total"] = float(sum(out.values()))
    return out


def bound_ms(nbytes: float, bandwidth: float = COPY_BANDWIDTH) -> float:
    """The time (ms) reading `nbytes` takes at `bandwidth` (bytes/s)."""
    return 1e3 * nbytes / bandwidth
