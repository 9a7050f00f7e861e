"""Audit log: the request's generation parameters; indexes for the dashboard's filters.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 15:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch: SQLite alters tables by copying them; existing rows get NULL parameters.
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parameters", sa.JSON(), nullable=True))
        batch_op.create_index(batch_op.f("ix_audit_log_endpoint"), ["endpoint"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_log_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_status"))
        batch_op.drop_index(batch_op.f("ix_audit_log_endpoint"))
        batch_op.drop_column("parameters")
