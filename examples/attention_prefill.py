"""A search file for the flash-attention prefill template, for `evokernel search` and
`evokernel sweep` (the landscape recordings of issue 7):

    evokernel search examples/attention_prefill.py --budget 40
    evokernel sweep examples/attention_prefill.py --out attention_llama3.csv

The shape comes from the problem's environment (EVOKERNEL_ATTN_MODEL, EVOKERNEL_ATTN_SEQLENS,
...; see examples/problems/attention_prefill_bf16.py). On a GPU: bf16 at the model's shape
(Llama-3-8B, 4 x 2048, causal, by default). Without one: the tiny fp16 shape in Triton's
interpreter (the machinery, not speed).
"""

import os
from pathlib import Path

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("EVOKERNEL_ATTN_MODEL", "tiny")
    os.environ.setdefault("EVOKERNEL_ATTN_DTYPE", "float16")

from evokernel.evaluators import KernelEvaluator  # noqa: E402
from evokernel.engine.landscape import landscape_seeds  # noqa: E402
from evokernel.judge.problem import Problem  # noqa: E402
from evokernel.search_spaces import attention_class, attention_space  # noqa: E402
from evokernel.search_spaces.attention.template_prefill import candidate_source  # noqa: E402

problem = Problem.load(Path(__file__).resolve().parent / "problems" / "attention_prefill_bf16.py")
CAUSAL = bool(problem.module.CAUSAL)
space = attention_space(head_dim=problem.module.D, causal=CAUSAL)
evaluator = KernelEvaluator(problem, lambda genome: candidate_source(genome.params, causal=CAUSAL))
descriptor = attention_class
name = f"attention-prefill-{problem.module.MODEL}-" + ("gpu" if GPU else "interpreter")
# the first generation starts from the fastest points of the recorded H200 prefill landscape
# (shipped with evokernel; points invalid in this shape's space are left out)
seeds = landscape_seeds("attention_prefill_bf16_h200_causal_Hq32_Hkv8_B4_S2048", space) if GPU else []
