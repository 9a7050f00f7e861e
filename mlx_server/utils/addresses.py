"""Which network addresses the server may connect to on a client's or an admin's behalf.

One rule for every outbound connection whose address someone else chose (image URLs, remote
backends): resolve the host, then judge each address it resolves to, looking through the IPv6
forms that carry an IPv4 address (IPv4-mapped `::ffff:169.254.169.254`, NAT64's `64:ff9b::/96`,
6to4's `2002::/16`), so no spelling of an address passes where its plain form would not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) → the addresses a connection could go to.
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

CLOUD_METADATA_ADDRESSES = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """The system resolver's answers for a TCP connection."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def parse_networks(networks: list[str]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(net, strict=False) for net in networks)


def plain_address(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), else the address."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour or address


@dataclass(frozen=True)
class AddressRule:
    """What a kind of connection may reach: addresses in `allowed_networks` always; the cloud
    metadata address never otherwise; link-local ones (169.254.0.0/16, fe80::/10) only with
    `allow_link_local`; loopback, private and other non-public ones only with `allow_private`."""

    allowed_networks: tuple[IPNetwork, ...] = ()
    allow_link_local: bool = False
    allow_private: bool = False


def refusal_reason(address: IPAddress, rule: AddressRule) -> str | None:
    """Why a connection to this address is not allowed, or None when it is."""
    if any(address in network for network in rule.allowed_networks):
        return None
    address = plain_address(address)
    if any(address in network for network in rule.allowed_networks):
        return None
    if address in CLOUD_METADATA_ADDRESSES:
        return "the cloud metadata address"
    if address.is_link_local and not rule.allow_link_local:
        return "a link-local address"
    if rule.allow_private:
        return None
    for kind, matches in (
        ("a loopback address", address.is_loopback),
        ("an unspecified address", address.is_unspecified),
        ("a multicast address", address.is_multicast),
        ("a private network address", address.is_private),
        ("not a public address", not address.is_global),
    ):
        if matches:
            return kind
    return None


class AddressRefused(ValueError):
    """A host resolves to an address its rule refuses, or cannot be resolved."""


async def checked_addresses(
    host: str, port: int, rule: AddressRule, resolver: Resolver = resolve_host
) -> list[IPAddress]:
    """Every address `host` resolves to, once each passed `rule`; AddressRefused says why not:
    "host x resolves to 169.254.169.254, a link-local address" (or "address ... is ...")."""
    literal = host.strip("[]")
    try:
        addresses = [ipaddress.ip_address(literal)]
    except ValueError:
        literal = ""
        try:
            addresses = await resolver(host, port)
        except OSError as error:
            raise AddressRefused(f"host {host} could not be resolved ({error})") from error
    if not addresses:
        raise AddressRefused(f"host {host} resolves to no address")
    for address in addresses:
        reason = refusal_reason(address, rule)
        if reason is not None:
            where = f"address {literal} is" if literal else f"host {host} resolves to {address},"
            raise AddressRefused(f"{where} {reason}")
    return addresses
