"""The admin account's session version: part of every session cookie's signed value, raised by
logout and by a new password, so a cookie captured before either no longer opens a page.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("admin_account", schema=None) as batch_op:
        batch_op.add_column(sa.Column("session_version", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("admin_account", schema=None) as batch_op:
        batch_op.drop_column("session_version")
