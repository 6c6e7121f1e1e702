"""Tests of the fused RMSNorm family (search_spaces/rmsnorm/)."""
