"""The Backends page: a refused form says what to fix, a backend that cannot list its models is
saved and shown with its error, its key is never shown back, rules are added and deleted."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support import csrf_headers, free_port


def test_backends_page_saves_backends_and_rules_and_never_shows_the_key(client: TestClient) -> None:
    headers = csrf_headers(client)
    page = client.get("/backends")
    assert page.status_code == 200 and "No backends yet." in page.text and 'href="/backends"' in page.text

    bad = {"name": "mac2", "kind": "openai", "base_url": "ftp://x"}
    refused = client.post("/backends", data=bad, headers=headers)
    assert refused.status_code == 400 and "base_url must be an http(s) URL" in refused.text

    closed_port = free_port()  # nothing listens there: the refresh fails, the backend is kept
    form = {
        "name": "mac2",
        "kind": "openai",
        "base_url": f"http://127.0.0.1:{closed_port}/v1",
        "api_key": "sk-very-secret-9876",
    }
    saved = client.post("/backends", data=form, headers=headers)
    assert (
        saved.status_code == 400 and "did not list its models" in saved.text and "ConnectError" in saved.text
    )
    shown = client.get("/backends").text
    assert 'data-backend="mac2"' in shown and "…9876" in shown and "sk-very-secret" not in shown
    assert 'data-testid="breaker-mac2"' in shown and "closed (1 failures)" in shown

    rule = {"pattern": "gpt-*", "targets": "mac2:smol, smol", "position": "0"}
    added = client.post("/backends/rules", data=rule, headers=headers)
    assert added.status_code == 200 and "Rule gpt-* saved." in added.text
    assert "<code>mac2:smol</code> → <code>smol</code>" in added.text
    unknown = client.post("/backends/rules", data={**rule, "targets": "nope:x"}, headers=headers)
    assert unknown.status_code == 400 and "Unknown backends [&#39;nope&#39;]" in unknown.text

    too_far = client.post("/backends/rules", data={**rule, "position": str(2**70)}, headers=headers)
    assert too_far.status_code in (400, 422) and "position" in too_far.text
    no_rule = client.post("/backends/rules/delete", data={"rule_id": str(2**70)}, headers=headers)
    assert no_rule.status_code == 422
    huge_id = client.delete(f"/v1/admin/routing-rules/{2**70}")
    assert huge_id.status_code == 400 and "rule_id" in huge_id.text

    rule_id = client.get("/v1/admin/routing-rules").json()["data"][0]["id"]
    client.post("/backends/rules/delete", data={"rule_id": str(rule_id)}, headers=headers).raise_for_status()
    client.post("/backends/delete", data={"name": "mac2"}, headers=headers).raise_for_status()
    assert client.get("/v1/admin/backends").json()["data"] == []
