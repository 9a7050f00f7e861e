"""Audit log: seconds of audio a speech or transcription request produced or read.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-25 12:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
# Numbered 0009 but written before 0008 (chat message images), which revises it.
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("audio_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_column("audio_seconds")
