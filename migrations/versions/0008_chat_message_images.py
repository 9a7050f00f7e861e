"""Chat messages: the images attached to them ([{"sha256", "media_type", "width", "height"}]);
the image bytes are files under the home directory's chat-images/, named by their sha256.

Revision ID: 0008
Revises: 0009
Create Date: 2026-11-25 12:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
# 0009 (audit audio seconds) was written beside this one from 0007 and is applied first.
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chat_messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("images", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_messages", schema=None) as batch_op:
        batch_op.drop_column("images")
