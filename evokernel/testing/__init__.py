"""Helpers for testing code built on evokernel, shared by evokernel's own tests and its users'
(as `optuna.testing` is): nothing here is imported by the library itself.

- `evokernel.testing.postgres`: `PostgresServer`, a throwaway PostgreSQL server in a
  temporary folder (a real server for tests of the PostgreSQL store).
"""
