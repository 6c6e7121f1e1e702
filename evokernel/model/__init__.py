"""The model-level track: profiles, workloads, model-level latency, ablation."""
