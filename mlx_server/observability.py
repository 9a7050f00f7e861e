"""Traces (blueprint §13.1): logfire spans over OpenTelemetry, off unless configured.

`configure_tracing` sets up logfire when there is somewhere to send spans: Logfire's cloud (a
token) and/or any OpenTelemetry collector named by the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (with `OTEL_EXPORTER_OTLP_HEADERS` etc.; logfire adds
the OTLP exporter). With neither, logfire is never configured: no exporter exists and the span
helpers below are no-ops, so nothing is sent or even attempted.

What is traced: each request (FastAPI's own server span: method, route, status; it uses the
global tracer provider logfire sets), inside it the chat pipeline (`traced_pipeline`: routing,
model lease, prompt), and the generation (`generation_span`: model, prompt and completion
tokens, TTFT), ended when its stream ends.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class ForModel(Protocol):
    """What the pipeline's span needs of a request: the model it names."""

    @property
    def model(self) -> str: ...


P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R", bound=ForModel)
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_tracing = False


def otlp_endpoint_configured() -> bool:
    return any(os.environ.get(name) for name in OTLP_ENDPOINT_VARIABLES)


def configure_tracing(*, token: str | None, service_name: str) -> bool:
    """Export spans to Logfire (`token`) and/or the OTLP endpoint of the environment; returns
    whether anything was configured (nothing when neither is set)."""
    global _tracing
    if not token and not otlp_endpoint_configured():
        return False
    import logfire  # imported lazily: most installs never configure it

    logfire.configure(
        token=token,
        send_to_logfire=bool(token),
        service_name=service_name,
        console=False,
        metrics=False,  # metrics are Prometheus' (GET /metrics)
        inspect_arguments=False,
    )
    _tracing = True
    return True


def traced_pipeline(
    run: Callable[Concatenate[R, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[R, P], Coroutine[Any, Any, T]]:
    """`run(request, ...)` inside the span of the request's chat pipeline (the current span
    while it runs: routing, model lease, prompt), when tracing is on."""

    @functools.wraps(run)
    async def traced(request: R, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if not _tracing:
            return await run(request, *args, **kwargs)
        import logfire

        with logfire.span("chat pipeline {model}", model=request.model):
            return await run(request, *args, **kwargs)

    return traced


class GenerationSpan:
    """A generation's span: started under the current span (the pipeline's), ended by `end`
    from whatever task ends the stream. It is never made current, so a streamed response's
    yields never detach a context they did not attach (OpenTelemetry's own API, through the
    tracer provider logfire set)."""

    def __init__(self, model: str) -> None:
        self._span: Span | None = None
        if _tracing:
            from opentelemetry import trace

            tracer = trace.get_tracer("mlx_server.generation")
            self._span = tracer.start_span(f"generation {model}", attributes={"model": model})

    def end(self, figures: Mapping[str, int | float | str], error: BaseException | None = None) -> None:
        """End the span with the generation's figures as attributes (token counts, TTFT...)."""
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attributes(dict(figures))
        if error is not None:
            span.record_exception(error)
        span.end()
