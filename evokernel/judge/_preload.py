"""Imported by the sandbox's fork server only (never by the judge): one-time costs that
every candidate would otherwise pay."""

import torch

# the first call imports torch's compiler modules (about a second): pay it once, here
torch.use_deterministic_algorithms(False)
