"""Audit rows written when a request arrives and completed when it ends: a state (in flight,
completed, interrupted by a crash), and status and latency empty until the response ends.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing rows were all written once their request had ended.
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("state", sa.String(length=16), nullable=False, server_default="completed")
        )
        batch_op.alter_column("status", existing_type=sa.Integer(), nullable=True)
        batch_op.alter_column("latency_ms", existing_type=sa.Float(), nullable=True)
        batch_op.create_index(batch_op.f("ix_audit_log_state"), ["state"], unique=False)


def downgrade() -> None:
    # Rows that never ended cannot satisfy the old NOT NULL columns.
    op.execute("DELETE FROM audit_log WHERE status IS NULL OR latency_ms IS NULL")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_state"))
        batch_op.alter_column("latency_ms", existing_type=sa.Float(), nullable=False)
        batch_op.alter_column("status", existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column("state")
