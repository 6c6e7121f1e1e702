"""The judge: problems, candidates, the gate, the sandbox and its worker, timing, footing."""
