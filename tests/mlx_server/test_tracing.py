"""Traces: spans of request -> chat pipeline -> generation reach an OTLP collector named by the
standard OTEL_EXPORTER_OTLP_* variables; with neither that nor a Logfire token, nothing is
configured and no connection is ever attempted.

Tracing is process-wide once configured, so the traced case runs the standalone app in a fresh
interpreter (REQUESTS below); the untraced one runs here, with an audit hook listing every
outgoing connection attempted while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from mlx_server.main import create_app as create_server_app
from mlx_server.observability import OTLP_ENDPOINT_VARIABLES, configure_tracing
from tests.support import LocalHTTPServer

REQUESTS = """
import json, sys

from fastapi.testclient import TestClient
from sqlmodel import Session
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.main import create_app
from opentelemetry import trace

upgrade_database()
with Session(get_engine()) as session:
    session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=sys.argv[1]))
    session.commit()
with TestClient(create_app()) as client:
    body = {"model": "smol", "max_tokens": 2,
            "messages": [{"role": "user", "content": "Hi"}]}
    response = client.post("/v1/chat/completions", json=body)
    result = {"status": response.status_code, "usage": response.json().get("usage"),
              "tracing": not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)}
print(json.dumps(result), flush=True)  # spans are flushed after, at exit
"""


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps each /v1/traces export, decoded with opentelemetry-proto."""

    exports: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            self.exports.append(ExportTraceServiceRequest.FromString(body))
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_: Any) -> None:
        pass


def run_requests(model_dir: Path, **env: str) -> dict[str, Any]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOGFIRE_", "MLX_SERVER_LOGFIRE"))
    }
    done = subprocess.run(
        [sys.executable, "-c", REQUESTS, str(model_dir)],
        env={**clean, **env},
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_spans_reach_a_local_otlp_collector(smollm_dir: Path) -> None:
    Collector.exports = []
    with LocalHTTPServer(Collector) as collector:
        endpoint = f"http://127.0.0.1:{collector.port}"
        result = run_requests(smollm_dir, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result["status"] == 200 and result["tracing"] is True
    spans = {
        span.span_id: span
        for export in Collector.exports
        for resource in export.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }
    by_name = {span.name: span for span in spans.values()}
    generation = by_name["generation smol"]
    attributes = {a.key: a.value for a in generation.attributes}
    assert attributes["model"].string_value == "smol"
    assert attributes["gen_ai.usage.input_tokens"].int_value == result["usage"]["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"].int_value == result["usage"]["completion_tokens"] == 2
    assert 0 < attributes["ttft_ms"].double_value < 120_000
    pipeline = spans[generation.parent_span_id]
    assert pipeline.name == "chat pipeline {model}"  # logfire names a span by its template
    assert {a.key: a.value.string_value for a in pipeline.attributes}["model"] == "smol"
    # The pipeline runs inside FastAPI's span of the request (through its operation spans).
    ancestors = []
    parent = pipeline.parent_span_id
    while parent in spans:
        ancestors.append(spans[parent].name)
        parent = spans[parent].parent_span_id
    assert "POST /v1/chat/completions" in ancestors
    assert {span.trace_id for span in spans.values()} == {generation.trace_id}
    resource_names = {
        a.value.string_value
        for export in Collector.exports
        for resource in export.resource_spans
        for a in resource.resource.attributes
        if a.key == "service.name"
    }
    assert resource_names == {"mlx-server"}


_connects: list[list[str]] = []  # the lists a running test collects connections into
sys.addaudithook(
    lambda event, args: event == "socket.connect" and [c.append(repr(args[1])) for c in _connects]
)


def test_nothing_is_configured_or_attempted_without_a_token_or_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (*OTLP_ENDPOINT_VARIABLES, "LOGFIRE_TOKEN", "MLX_SERVER_LOGFIRE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    connects: list[str] = []
    _connects.append(connects)
    try:
        with TestClient(create_server_app()) as client:
            chat = {"model": "absent", "messages": [{"role": "user", "content": "Hi"}]}
            assert client.post("/v1/chat/completions", json=chat).status_code == 404
            assert client.get("/v1/models").status_code == 200
    finally:
        _connects.remove(connects)
    assert configure_tracing(token=None, service_name="mlx-server") is False
    # No tracer provider was ever set: OpenTelemetry's placeholder, which records nothing.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert connects == []
