"""The addresses this machine answers at from the LAN, for the start-up line (issue 31).

Bound to 0.0.0.0, "listening on http://127.0.0.1:8080/" names the one address nobody on the
LAN can use, and the hostname's own lookup gives Debian's ``127.0.1.1``. So the interfaces
are asked directly: the names from /proc/net/dev, each one's IPv4 address with the
SIOCGIFADDR ioctl on an AF_INET socket, and the global IPv6 addresses from
/proc/net/if_inet6. No netlink (``ip``, ``if_nameindex``): the hardened unit allows only
AF_INET, AF_INET6 and AF_UNIX sockets.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from pathlib import Path

SIOCGIFADDR = 0x8915
PROC_NET = Path("/proc/net")


def interface_names(proc_net: Path = PROC_NET) -> list[str]:
    """The network interfaces, from /proc/net/dev (two header lines, then ``name: counters``)."""
    try:
        lines = (proc_net / "dev").read_text().splitlines()[2:]
    except OSError:
        return []
    return [line.split(":", 1)[0].strip() for line in lines if ":" in line]


def ipv4_of(name: str) -> str | None:
    """The interface's IPv4 address, or None when it has none (or is down and unaddressed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])


def ipv6_global(proc_net: Path = PROC_NET) -> list[str]:
    """Global-scope IPv6 addresses (link-local ones need a %zone no browser URL carries)."""
    try:
        lines = (proc_net / "if_inet6").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[3] == "00":
            found.append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    return found


def lan_addresses(family: str = "ipv4", proc_net: Path = PROC_NET) -> list[str]:
    """Non-loopback addresses of this machine: IPv4, or IPv4 and IPv6 (``family="both"``)."""
    found = []
    for name in interface_names(proc_net):
        address = ipv4_of(name)
        if address and not ipaddress.ip_address(address).is_loopback and address not in found:
            found.append(address)
    if family == "both":
        found += [a for a in ipv6_global(proc_net) if a not in found]
    return found


def listen_urls(host: str, port: int) -> str:
    """What the start-up line says: the URLs that reach this server, from the LAN when it serves it."""
    if host not in ("0.0.0.0", "::", ""):
        return _url(host, port)
    addresses = lan_addresses("both" if host == "::" else "ipv4")
    if not addresses:
        return (f"all addresses, but this machine has no network address yet (only "
                f"{_url('127.0.0.1', port)} from this machine)")
    return ", ".join(_url(a, port) for a in addresses)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
