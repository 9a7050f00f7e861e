"""Remote backends and routing rules (services/remote), and the backend that answered on
audit rows.

Revision ID: 0010
Revises: 0008
Create Date: 2026-11-25 15:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "remote_backends",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("base_url", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
        sa.Column("api_key", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=True),
        sa.Column("connect_timeout_s", sa.Float(), nullable=False),
        sa.Column("read_timeout_s", sa.Float(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("models_refreshed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("remote_backends", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_remote_backends_name"), ["name"], unique=True)
    op.create_table(
        "routing_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pattern", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("targets", sa.JSON(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("routing_rules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_routing_rules_pattern"), ["pattern"], unique=True)
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("backend", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_audit_log_backend"), ["backend"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_backend"))
        batch_op.drop_column("backend")
    with op.batch_alter_table("routing_rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_routing_rules_pattern"))
    op.drop_table("routing_rules")
    with op.batch_alter_table("remote_backends", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_remote_backends_name"))
    op.drop_table("remote_backends")
