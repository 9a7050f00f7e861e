"""Fetch an image URL without letting a request reach the server's own network (SSRF).

Only http and https. The host is resolved here and every address it resolves to must be public
(not loopback, private, link-local, multicast, unspecified or reserved) unless the policy allows
it; the connection then goes to the address that was checked, with the original name in the
Host header and in TLS (SNI and certificate check), so a second DNS answer cannot rebind it.
Redirects (at most 3) are followed by hand, each one checked the same way. The body is read in
chunks and the fetch stops once it passes the size limit, or when the whole fetch outlasts its
total time limit (a body trickling in under the read timeout)."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field

import httpx2

from mlx_server.config import MLXServerSettings
from mlx_server.services.images.decode import ImageRejected
from mlx_server.utils.addresses import (
    AddressRefused,
    AddressRule,
    IPAddress,
    IPNetwork,
    Resolver,
    checked_addresses,
    parse_networks,
    resolve_host,
)

_REDIRECTS = {301, 302, 303, 307, 308}


@dataclass(frozen=True)
class FetchPolicy:
    """What an image fetch may do; `from_settings` reads the server's settings."""

    allow_private_addresses: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()
    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 50_000_000
    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    total_timeout: float = 30.0
    max_redirects: int = 3
    resolver: Resolver = field(default=resolve_host, compare=False)
    # Whom https servers must prove they are: the system's CAs, or a context with a private CA.
    tls_verify: ssl.SSLContext | bool = field(default=True, compare=False)

    @classmethod
    def from_settings(cls, settings: MLXServerSettings) -> FetchPolicy:
        return cls(
            allow_private_addresses=settings.image_fetch_allow_private_addresses,
            allowed_networks=parse_networks(settings.image_fetch_allowed_networks),
            max_bytes=settings.image_max_bytes,
            max_pixels=settings.image_max_pixels,
            connect_timeout=settings.image_fetch_connect_timeout_seconds,
            read_timeout=settings.image_fetch_read_timeout_seconds,
            total_timeout=settings.image_fetch_total_timeout_seconds,
        )

    @property
    def addresses(self) -> AddressRule:
        """Public addresses only, unless private ones (link-local too) or networks are allowed."""
        private = self.allow_private_addresses
        return AddressRule(self.allowed_networks, allow_link_local=private, allow_private=private)


async def fetch_image_bytes(url: str, policy: FetchPolicy) -> bytes:
    """The body of `url`, fetched under `policy`; ImageRejected says why when refused."""
    try:
        async with asyncio.timeout(policy.total_timeout):
            return await _fetch(url, policy)
    except TimeoutError as error:
        raise ImageRejected(
            f"Fetching the image URL {url} took longer than {policy.total_timeout:g} s; "
            "send it as a data: URL or from a faster server."
        ) from error


async def _fetch(url: str, policy: FetchPolicy) -> bytes:
    timeout = httpx2.Timeout(policy.read_timeout, connect=policy.connect_timeout)
    async with httpx2.AsyncClient(
        timeout=timeout, follow_redirects=False, trust_env=False, verify=policy.tls_verify
    ) as client:
        current = _parse(url)
        for _ in range(policy.max_redirects + 1):
            location = await _fetch_once(client, current, policy)
            if isinstance(location, bytes):
                return location
            current = _parse(str(current.join(location)))
    raise ImageRejected(
        f"The image URL {url} redirects more than {policy.max_redirects} times; give the image's final URL."
    )


def _parse(url: str) -> httpx2.URL:
    try:
        parsed = httpx2.URL(url)
    except httpx2.InvalidURL as error:
        raise ImageRejected(f"The image URL {url[:200]!r} is not a valid URL ({error}).") from error
    if parsed.scheme not in ("http", "https"):
        raise ImageRejected(
            f"The image URL scheme {parsed.scheme + ':' if parsed.scheme else '(none)'} is not allowed; "
            "send an http(s) URL or a data: URL with the image in base64."
        )
    if not parsed.host:
        raise ImageRejected(f"The image URL {url[:200]!r} has no host.")
    return parsed


async def _checked_address(url: httpx2.URL, policy: FetchPolicy) -> IPAddress:
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = await checked_addresses(url.host, port, policy.addresses, policy.resolver)
    except AddressRefused as refused:
        raise ImageRejected(
            f"The image URL's {refused}; image URLs must point to public servers "
            "(or send the image as a data: URL)."
        ) from refused
    return addresses[0]


async def _fetch_once(client: httpx2.AsyncClient, url: httpx2.URL, policy: FetchPolicy) -> bytes | str:
    """The body, or the Location of a redirect."""
    address = await _checked_address(url, policy)
    host_header = url.host if url.port is None else f"{url.host}:{url.port}"
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    request = client.build_request(
        "GET",
        url.copy_with(host=str(address)),
        headers={"Host": host_header, "Accept": "image/*", "Accept-Encoding": "identity"},
        extensions=extensions,
    )
    try:
        response = await client.send(request, stream=True)
        try:
            if response.status_code in _REDIRECTS and "location" in response.headers:
                return response.headers["location"]
            if response.status_code != 200:
                raise ImageRejected(f"Fetching the image URL {url} returned HTTP {response.status_code}.")
            return await _read_limited(response, url, policy.max_bytes)
        finally:
            await response.aclose()
    except httpx2.TimeoutException as error:
        raise ImageRejected(f"Fetching the image URL {url} timed out ({type(error).__name__}).") from error
    except httpx2.HTTPError as error:
        raise ImageRejected(f"Fetching the image URL {url} failed: {error}.") from error


async def _read_limited(response: httpx2.Response, url: httpx2.URL, max_bytes: int) -> bytes:
    too_large = f"The image at {url} is larger than the limit of {max_bytes:,} bytes; send a smaller image."
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ImageRejected(too_large)
    body = bytearray()
    # Raw bytes (identity was asked for): a compressed body cannot expand past the count.
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > max_bytes:
            raise ImageRejected(too_large)
    return bytes(body)
