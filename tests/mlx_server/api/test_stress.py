"""The stress harness's short run (benchmark/stress.py; the issue's run is 50 clients for two
minutes): clients with random prompts, lengths and disconnects against a real server on a
loopback port, with fewer admission slots than clients so some are refused (all ten start at
once), and more drops than the benchmark's one in four so every path is taken in four seconds
(the first round alone takes each: six admitted, four refused, seed 7 drops six of the ten).
Every request completes, is dropped by its client or is refused with 503 + Retry-After; none
hangs, the server drains, and the audit log has a row for each request sent, each completed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session

from mlx_server.benchmark.stress import stress
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.store import DEFAULT_MODEL_ID
from mlx_server.records import ModelRecord, ModelSource


@pytest.fixture
def six_slots(monkeypatch: pytest.MonkeyPatch, home: Path, smollm_dir: Path) -> Iterator[None]:
    monkeypatch.setenv("MLX_SERVER_MAX_PENDING_REQUESTS", "6")
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id=DEFAULT_MODEL_ID, source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    yield


def test_clients_with_random_prompts_and_disconnects(six_slots: None, live_server: str) -> None:
    httpx.post(f"{live_server}/v1/admin/models/{DEFAULT_MODEL_ID}/load", timeout=120).raise_for_status()
    tally = stress(live_server, clients=10, seconds=4, seed=7, deadline=90, drop_rate=0.4)
    assert (tally.hung, tally.errors, tally.drained) == (0, [], True)
    assert tally.sent == tally.completed + tally.refused + tally.disconnected  # unsent drops aside
    assert tally.completed > 0 and tally.refused > 0 and tally.disconnected > 0  # each path was taken
    assert tally.audit_rows == tally.sent and tally.audit_missing == 0 and tally.audit_open == 0
    assert len(tally.request_ids) >= tally.completed + tally.refused
