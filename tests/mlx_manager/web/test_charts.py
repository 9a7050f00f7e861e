"""The Server page's charts as drawn from samples: rates over each column's seconds, a line cut
where the server was not sampling, no hit-rate point without a prompt, round scales."""

from __future__ import annotations

from mlx_manager.web.charts import engine_charts
from mlx_server.facade import EngineSample

T0 = 1_000_000.0


def _sample(
    at: float, *, generated: int = 0, drafted: int = 0, prompt: int = 0, cached: int = 0, memory: int = 0
) -> EngineSample:
    return EngineSample(
        at=at,
        seconds=2.0,
        generated_tokens=generated,
        drafted_tokens=drafted,
        prefilled_tokens=prompt - cached,
        prompt_tokens=prompt,
        cached_prompt_tokens=cached,
        queue_depth=0,
        running=0,
        mlx_memory_bytes=memory,
        pool_bytes=0,
    )


def test_decode_rate_and_a_gap_where_the_server_was_not_sampling() -> None:
    before = [_sample(T0 + 2 * i, generated=20) for i in range(10)]  # 10 tok/s
    after = [_sample(T0 + 200 + 2 * i, generated=40) for i in range(10)]  # 20 tok/s, 180 s later
    decode = engine_charts(before + after, 5, 2.0)[0]
    assert decode.key == "decode"
    labels = (decode.now_label, decode.peak_label, decode.top_label)
    assert labels == ("20.0 tok/s", "20.0 tok/s", "20.0 tok/s")
    assert len(decode.series[0].lines) == 2  # two runs: no line across the silent minutes
    heights = {float(p.split(",")[1]) for line in decode.series[0].lines for p in line.split()}
    assert heights == {30.0, 0.0}  # half the top, then the top of the 60-unit box


def test_hit_rate_has_no_point_without_a_prompt_and_memory_tops_at_round_gib() -> None:
    samples = [_sample(T0 + 2 * i, memory=600 * 2**20) for i in range(5)]
    samples.append(_sample(T0 + 10, prompt=100, cached=75, memory=600 * 2**20))
    charts = engine_charts(samples, 5, 2.0)
    cache = next(chart for chart in charts if chart.key == "cache")
    assert cache.now_label == "75 %" and cache.top_label == "100 %"
    assert len(cache.series[0].lines[0].split()) == 2  # one point (drawn as a dash), not six
    memory = next(chart for chart in charts if chart.key == "memory")
    assert (memory.now_label, memory.top_label) == ("600.0 MiB", "1.0 GiB")


def test_no_samples_draw_empty_charts() -> None:
    charts = engine_charts([], 60, 2.0)
    assert [chart.series for chart in charts] == [[]] * 7
    assert {chart.now_label for chart in charts} == {"–"}


def test_the_drafted_share_of_generated_tokens() -> None:
    samples = [_sample(T0 + 2 * i, generated=20, drafted=15) for i in range(3)]
    samples.append(_sample(T0 + 6, generated=40, drafted=10))
    drafts = next(chart for chart in engine_charts(samples, 5, 2.0) if chart.key == "drafts")
    assert (drafts.now_label, drafts.top_label) == ("25 %", "100 %")
