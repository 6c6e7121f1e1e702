"""Tests of the kernel families: one folder per family (search_spaces/<family>/ <-> tests/families/<family>/)."""
