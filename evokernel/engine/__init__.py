"""The search engine: the loop, strategies, seeding and transfer, learned failures, sweeps."""
