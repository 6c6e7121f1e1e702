"""A search file for the warp-specialised Gluon prefill kernel (issue 28: FA3's structures as
genes: intra-warpgroup overlap, ping-pong consumer warpgroups, persistent programs, a second
Q slot, a TMA-store epilogue, sequence-major and snake schedules), for
`evokernel search` and `evokernel sweep`:

    evokernel search examples/attention_prefill_gluon.py --budget 20
    evokernel sweep examples/attention_prefill_gluon.py --out prefill_gluon.csv

The shape comes from the problem's environment as in examples/attention_prefill.py
(EVOKERNEL_ATTN_MODEL, EVOKERNEL_ATTN_SEQLENS, EVOKERNEL_ATTN_BATCH, ...). It needs a CUDA
GPU (a Hopper one: Triton's CPU interpreter does not run Gluon; the Triton template's search,
examples/attention_prefill.py, runs there).
"""

from pathlib import Path

from evokernel.evaluators import KernelEvaluator
from evokernel.judge.problem import Problem
from evokernel.search_spaces.attention import prefill_gluon_class, prefill_gluon_space
from evokernel.search_spaces.attention.template_prefill_gluon import GLUON_DEFAULTS, gluon_candidate_source

problem = Problem.load(Path(__file__).resolve().parent / "problems" / "attention_prefill_bf16.py")
CAUSAL = bool(problem.module.CAUSAL)
space = prefill_gluon_space(head_dim=problem.module.D, causal=bool(problem.module.CAUSAL))
evaluator = KernelEvaluator(problem, lambda genome: gluon_candidate_source(genome.params, causal=CAUSAL), device="cuda")
descriptor = prefill_gluon_class
name = f"attention-prefill-gluon-{problem.module.MODEL}"
# the first generation starts from the configuration that won most shapes of the H200 benchmark
# (BENCHMARKS.md, "Prefill attention against cuDNN"): the schedule genes are then a search's
seeds = [dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, QSTAGES=2, TMA_STORE=1)]
