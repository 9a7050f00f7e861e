"""Audit log: time to first token, protocol and stream flag per request.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 10:12:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch: SQLite alters tables by copying them; existing rows get NULL in the new columns.
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ttft_ms", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("protocol", AutoString(length=16), nullable=True))
        batch_op.add_column(sa.Column("stream", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_column("stream")
        batch_op.drop_column("protocol")
        batch_op.drop_column("ttft_ms")
