"""A search file for the split-KV paged decode template (`evokernel search` / `sweep`):

    evokernel search examples/attention_decode.py --budget 40
    EVOKERNEL_DECODE_BATCH=1 EVOKERNEL_DECODE_CONTEXT=32768 evokernel sweep examples/attention_decode.py --out decode_b1.csv

The shape comes from EVOKERNEL_DECODE_MODEL / _BATCH / _CONTEXT / _PAGE (see
examples/problems/attention_decode_bf16.py). Without a GPU: the tiny fp16 shape in Triton's
interpreter.
"""

import os
from pathlib import Path

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("EVOKERNEL_DECODE_MODEL", "tiny")
    os.environ.setdefault("EVOKERNEL_DECODE_DTYPE", "float16")
    os.environ.setdefault("EVOKERNEL_DECODE_BATCH", "3")
    os.environ.setdefault("EVOKERNEL_DECODE_CONTEXT", "40,7,100")
    os.environ.setdefault("EVOKERNEL_DECODE_PAGE", "8")

from evokernel.evaluators import KernelEvaluator  # noqa: E402
from evokernel.engine.landscape import landscape_seeds  # noqa: E402
from evokernel.judge.problem import Problem  # noqa: E402
from evokernel.search_spaces import decode_class, decode_space  # noqa: E402
from evokernel.search_spaces.attention.template_decode import candidate_source  # noqa: E402

problem = Problem.load(Path(__file__).resolve().parent / "problems" / "attention_decode_bf16.py")
space = decode_space(head_dim=problem.module.D, group=problem.module.HQ // problem.module.HKV)
evaluator = KernelEvaluator(problem, lambda genome: candidate_source(genome.params))
descriptor = decode_class
name = f"attention-decode-{problem.module.MODEL}-" + ("gpu" if GPU else "interpreter")
# the first generation starts from the fastest points of the recorded H200 decode landscape
# (shipped with evokernel; points invalid in this shape's space are left out)
seeds = landscape_seeds("attention_decode_bf16_h200_llama3-8b_B1_C32768", space) if GPU else []
