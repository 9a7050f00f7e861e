"""Hub download jobs: status and progress of background downloads.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 15:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "download_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo_id", AutoString(length=255), nullable=False),
        sa.Column("revision", AutoString(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("bytes_done", sa.Integer(), nullable=False),
        sa.Column("bytes_total", sa.Integer(), nullable=True),
        sa.Column("error", AutoString(), nullable=True),
        sa.Column("model_id", AutoString(length=255), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("download_jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_download_jobs_repo_id"), ["repo_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_download_jobs_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("download_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_download_jobs_status"))
        batch_op.drop_index(batch_op.f("ix_download_jobs_repo_id"))
    op.drop_table("download_jobs")
