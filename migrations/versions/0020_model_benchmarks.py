"""Model benchmarks: each run's prompt and generated tokens, TTFT, prefill and decode tokens/s,
peak memory, weights, load time, device and versions, shown as a table across models.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_benchmarks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", AutoString(length=255), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("generated_tokens", sa.Integer(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=False),
        sa.Column("prefill_tokens_per_s", sa.Float(), nullable=False),
        sa.Column("decode_tokens_per_s", sa.Float(), nullable=False),
        sa.Column("peak_memory_bytes", sa.Integer(), nullable=False),
        sa.Column("model_bytes", sa.Integer(), nullable=False),
        sa.Column("load_s", sa.Float(), nullable=True),
        sa.Column("device", AutoString(length=255), nullable=False),
        sa.Column("versions", AutoString(length=255), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_benchmarks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_model_benchmarks_model_id"), ["model_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_model_benchmarks_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("model_benchmarks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_model_benchmarks_created_at"))
        batch_op.drop_index(batch_op.f("ix_model_benchmarks_model_id"))
    op.drop_table("model_benchmarks")
