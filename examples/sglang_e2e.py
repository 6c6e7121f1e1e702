"""Tune a model's fused MoE for SGLang and ship it: search, promotion, export, A/B, one command.

    python examples/sglang_e2e.py --model /path/to/model [--ms 1 16 64 256] [--serving trace.jsonl]

1. searches the fused-MoE kernel at the decode batch sizes (evokernel's template, seeded with
   SGLang's own default and shipped configs, judged by the sandboxed gate);
2. promotes to the end-to-end stage only the batch sizes whose winner beat SGLang's shipped
   config by --promote (the rule and each decision are recorded in the search database);
3. exports two packages (`evokernel export sglang-plugin`): the tuned configs for SGLang's own
   kernel, and those plus evokernel's kernel through the plugin;
4. runs SGLang engines side by side (unpatched, configs, kernel): decode at each batch size,
   prefill at 512 and 2048 tokens, warmed, interleaved, numerics checked against unpatched;
   with --serving, also launched servers replaying a request trace (TTFT, TPOT, p99).

Writes sglang_e2e.json / .md under --out. Needs a CUDA GPU and SGLang (`pip install
'evokernel[sglang]'`); the model folder may hold dummy weights (`--load-format dummy`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    import torch

    missing = [
        what
        for what, ok in (
            ("a CUDA GPU", torch.cuda.is_available()),
            ("SGLang (pip install 'evokernel[sglang]')", importlib.util.find_spec("sglang")),
        )
        if not ok
    ]
    if missing:
        print(f"examples/sglang_e2e.py needs {' and '.join(missing)}; nothing was run", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(ROOT / "benchmarks" / "sglang_e2e_h200.py"), *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
