"""Models: generation options set per model: a draft model for speculative decoding and the
KV cache's quantization (bits, group size).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 15:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("draft_model", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("kv_bits", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("kv_group_size", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("kv_group_size")
        batch_op.drop_column("kv_bits")
        batch_op.drop_column("draft_model")
