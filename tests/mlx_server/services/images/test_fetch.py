"""Safe image fetching against real local servers: every refusal names why, and nothing past
the size limit is read. Hostnames are mapped by a resolver given to the policy."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from mlx_server.services.images import FetchPolicy, ImageRejected, LoadedImage, load_image
from mlx_server.services.images.fetch import IPAddress, Resolver
from tests.image_server import ImageServer, Route

# A second loopback address stands in for a public image host: the policy allows exactly it.
PUBLIC_STAND_IN = "127.0.0.2"


def png(color: str = "red", size: tuple[int, int] = (32, 24)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG")
    return buffer.getvalue()


def mapped(names: dict[str, str], calls: list[str] | None = None) -> Resolver:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        if calls is not None:
            calls.append(host)
        if host not in names:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return [ipaddress.ip_address(names[host])]

    return resolve


def load(url: str, policy: FetchPolicy) -> LoadedImage:
    return asyncio.run(load_image(url, policy=policy))


def refusal(url: str, policy: FetchPolicy) -> str:
    with pytest.raises(ImageRejected) as refused:
        load(url, policy)
    return str(refused.value)


@pytest.fixture(scope="module")
def loopback_server() -> Iterator[ImageServer]:
    with ImageServer("127.0.0.1") as server:
        server.routes["/cat.png"] = Route(png(), headers={"Content-Type": "image/png"})
        yield server


@pytest.fixture
def public_server() -> Iterator[ImageServer]:
    with ImageServer(PUBLIC_STAND_IN) as server:
        yield server


def public_policy(**overrides: object) -> FetchPolicy:
    names = {"images.example.com": PUBLIC_STAND_IN, "intranet.example.com": "127.0.0.1"}
    settings: dict[str, object] = {
        "allowed_networks": (ipaddress.ip_network(f"{PUBLIC_STAND_IN}/32"),),
        "resolver": mapped(names),
    }
    settings.update(overrides)
    return FetchPolicy(**settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/cat.png", "address 127.0.0.1 is a loopback address"),
        ("http://10.0.0.1/cat.png", "address 10.0.0.1 is a private network address"),
        ("http://169.254.169.254/latest/meta-data/", "address 169.254.169.254 is the cloud metadata address"),
        ("http://[::1]/cat.png", "address ::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]/cat.png", "a loopback address"),
        ("http://0.0.0.0/cat.png", "an unspecified address"),
        ("http://224.0.0.1/cat.png", "a multicast address"),
        ("http://100.64.0.1/cat.png", "not a public address"),
        ("file:///etc/passwd", "scheme file: is not allowed"),
        ("ftp://images.example.com/cat.png", "scheme ftp: is not allowed"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "scheme gopher: is not allowed"),
    ],
)
def test_refuses_urls_outside_public_http(url: str, reason: str) -> None:
    assert reason in refusal(url, FetchPolicy())


def test_metadata_address_stays_refused_when_private_addresses_are_allowed() -> None:
    message = refusal("http://169.254.169.254/latest/", FetchPolicy(allow_private_addresses=True))
    assert "the cloud metadata address" in message


def test_hostname_resolving_to_loopback_is_refused_before_connecting(loopback_server: ImageServer) -> None:
    url = loopback_server.url("/cat.png", host="intranet.example.com")
    message = refusal(url, public_policy())
    assert "host intranet.example.com resolves to 127.0.0.1, a loopback address" in message
    assert not loopback_server.requests


def test_public_url_redirecting_to_loopback_is_refused(
    public_server: ImageServer, loopback_server: ImageServer
) -> None:
    public_server.routes["/moved.png"] = Route(
        status=302, headers={"Location": loopback_server.url("/cat.png")}
    )
    message = refusal(public_server.url("/moved.png", host="images.example.com"), public_policy())
    assert "address 127.0.0.1 is a loopback address" in message
    assert [path for path, _ in public_server.requests] == ["/moved.png"]
    assert not loopback_server.requests


def test_fetch_connects_to_the_checked_address_with_the_name_in_host(public_server: ImageServer) -> None:
    public_server.routes["/a.png"] = Route(status=301, headers={"Location": "/b.png"})
    public_server.routes["/b.png"] = Route(png("blue"), headers={"Content-Type": "application/octet-stream"})
    calls: list[str] = []
    names = {"images.example.com": PUBLIC_STAND_IN}
    loaded = load(
        public_server.url("/a.png", host="images.example.com"), public_policy(resolver=mapped(names, calls))
    )
    assert loaded.image.getpixel((0, 0)) == (0, 0, 255)
    # The content type comes from the bytes, not the header.
    assert loaded.media_type == "image/png"
    host = f"images.example.com:{public_server.port}"
    assert public_server.requests == [("/a.png", host), ("/b.png", host)]
    assert calls == ["images.example.com", "images.example.com"]  # one lookup per hop


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for images.example.com (openssl), and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
         "-out", str(cert), "-subj", "/CN=images.example.com",
         "-addext", "subjectAltName=DNS:images.example.com"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_https_connects_to_the_checked_address_and_verifies_the_name(certificate: tuple[Path, Path]) -> None:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*certificate)
    trust = ssl.create_default_context(cafile=str(certificate[0]))
    names = {"images.example.com": PUBLIC_STAND_IN, "other.example.com": PUBLIC_STAND_IN}
    policy = public_policy(resolver=mapped(names), tls_verify=trust)
    with ImageServer(PUBLIC_STAND_IN, tls=server_context) as server:
        server.routes["/cat.png"] = Route(png("green"))
        loaded = load(server.url("/cat.png", host="images.example.com"), policy)
        assert loaded.image.getpixel((1, 1)) == (0, 128, 0)
        # The certificate is checked against the URL's name, not the address connected to.
        message = refusal(server.url("/cat.png", host="other.example.com"), policy)
        assert "certificate verify failed" in message and "other.example.com" in message
    assert server.requests == [("/cat.png", f"images.example.com:{server.port}")]


def test_more_than_three_redirects_are_refused(public_server: ImageServer) -> None:
    for hop in range(4):
        public_server.routes[f"/{hop}"] = Route(status=302, headers={"Location": f"/{hop + 1}"})
    public_server.routes["/4"] = Route(png())
    message = refusal(public_server.url("/0"), public_policy())
    assert "redirects more than 3 times" in message
    assert len(public_server.requests) == 4


def test_body_over_the_limit_stops_the_fetch(public_server: ImageServer) -> None:
    fifty_mb = 50 * 1024 * 1024
    public_server.routes["/huge"] = Route(stream_bytes=fifty_mb)
    message = refusal(public_server.url("/huge"), public_policy())
    assert "larger than the limit of 20,971,520 bytes" in message
    # The client hung up: the server could push the limit plus what the socket buffers hold.
    assert not public_server.finished["/huge"]
    assert public_server.sent["/huge"] < 20 * 1024 * 1024 + 12 * 1024 * 1024


def test_declared_length_over_the_limit_is_refused_before_reading(public_server: ImageServer) -> None:
    public_server.routes["/declared"] = Route(
        stream_bytes=50 * 1024 * 1024, headers={"Content-Length": "52428800"}
    )
    message = refusal(public_server.url("/declared"), public_policy(max_bytes=1024 * 1024))
    assert "larger than the limit of 1,048,576 bytes" in message
    assert public_server.sent.get("/declared", 0) < 50 * 1024 * 1024


def test_non_image_body_is_refused_naming_what_it_looks_like(public_server: ImageServer) -> None:
    public_server.routes["/page"] = Route(
        b"<!DOCTYPE html><html>login</html>", headers={"Content-Type": "image/png"}
    )
    message = refusal(public_server.url("/page"), public_policy())
    assert "not a PNG, JPEG, WebP or GIF image (it looks like an HTML page)" in message


def test_slow_server_times_out(public_server: ImageServer) -> None:
    public_server.routes["/slow.png"] = Route(png(), delay=1.5)
    message = refusal(public_server.url("/slow.png"), public_policy(read_timeout=0.3))
    assert "timed out (ReadTimeout)" in message


def test_trickling_body_is_cut_at_the_total_time_limit(public_server: ImageServer) -> None:
    public_server.routes["/trickle.png"] = Route(stream_bytes=64 * 1024 * 40, piece_delay=0.1)
    message = refusal(public_server.url("/trickle.png"), public_policy(read_timeout=1.0, total_timeout=0.6))
    assert "took longer than 0.6 s" in message
    assert not public_server.finished["/trickle.png"]


def test_error_status_and_unknown_host_are_named(public_server: ImageServer) -> None:
    assert "returned HTTP 404" in refusal(public_server.url("/missing.png"), public_policy())
    assert "could not be resolved" in refusal("http://nowhere.example.com/a.png", public_policy())


def test_settings_can_allow_private_addresses(
    loopback_server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = loopback_server.url("/cat.png")
    with pytest.raises(ImageRejected, match="loopback"):
        asyncio.run(load_image(url))
    monkeypatch.setenv("MLX_SERVER_IMAGE_FETCH_ALLOW_PRIVATE_ADDRESSES", "true")
    from mlx_server.config import reset_settings

    reset_settings()
    loaded = asyncio.run(load_image(url))
    assert (loaded.width, loaded.height) == (32, 24)
