"""LoRA adapters registered over local text models, served as "<base>+<name>".

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 15:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lora_adapters",
        sa.Column("id", AutoString(length=255), nullable=False),
        sa.Column("base_model_id", AutoString(length=255), nullable=False),
        sa.Column("name", AutoString(length=64), nullable=False),
        sa.Column("path", AutoString(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("lora_adapters", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lora_adapters_base_model_id"), ["base_model_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("lora_adapters", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lora_adapters_base_model_id"))
    op.drop_table("lora_adapters")
