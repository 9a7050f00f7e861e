"""Chat messages: a status, so a reply saved as it grows can be told apart from one that ended,
was stopped, or was cut by a restart.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 09:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing messages were all saved once finished.
    with op.batch_alter_table("chat_messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("status", sa.String(length=16), nullable=False, server_default="done"))
        batch_op.create_index(batch_op.f("ix_chat_messages_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("chat_messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chat_messages_status"))
        batch_op.drop_column("status")
