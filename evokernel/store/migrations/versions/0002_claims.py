"""Schema 2: claims, so that drivers sharing a store measure each genome once.

Revision ID: 0002
Revises: 0001

`claims` holds who is measuring a genome under an evaluator fingerprint now (an owner, its
run: alive while the run's lock is held), until when (evokernel.engine.claims). `meta.schema_version` becomes 2, which the first release
refuses with its own clear message ("has store schema 2, this evokernel reads 1") instead
of writing results without claiming them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("genome_id", sa.Text, primary_key=True),
        sa.Column("fingerprint", sa.Text, primary_key=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_index("claims_by_owner", "claims", ["owner"])
    meta = sa.table("meta", sa.column("key", sa.Text), sa.column("value", sa.Text))
    op.execute(meta.update().where(meta.c.key == "schema_version").values(value="2"))
