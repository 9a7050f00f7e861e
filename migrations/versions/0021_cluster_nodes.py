"""Cluster nodes: other MLX Managers (or mlx-servers) this one serves sharded models with, each
with the URL and admin API key to reach it (mlx_server/distributed/nodes.py).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cluster_nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", AutoString(length=64), nullable=False),
        sa.Column("url", AutoString(length=512), nullable=False),
        sa.Column("api_key", AutoString(length=512), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("cluster_nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cluster_nodes_name"), ["name"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("cluster_nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cluster_nodes_name"))
    op.drop_table("cluster_nodes")
