"""UCX's environment: the variables the transport sets, unless already set, before ucxx is
first imported (UCX reads its environment once, when its context is created), so that no
GPU, CUDA driver or user shell setting is needed."""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket

UCX_ENV_DEFAULTS = {
    # ucxx asks rendezvous fragments to be staged in CUDA memory unless told otherwise;
    # tensors here are host memory and the machine may have no GPU at all.
    "UCX_RNDV_FRAG_MEM_TYPE": "host",
    # ucxx sets UCX_MEMTYPE_CACHE, which UCX >= 1.19 no longer knows: a warning per process.
    "UCX_WARN_UNUSED_ENV_VARS": "n",
    # UCX's TCP transport moves data in segments of 8 KiB (send) / 64 KiB (receive) by
    # default; 1 MiB ones make a 64 MiB fetch ~2.5x faster on loopback (1.3 -> 3+ GB/s),
    # for 8 MiB of buffers per direction and process (allocated 8 at a time).
    "UCX_TCP_TX_SEG_SIZE": "1m",
    "UCX_TCP_RX_SEG_SIZE": "1m",
    # A task restarted at its port after a crash must be able to listen again while the old
    # connections linger in TIME_WAIT (SO_REUSEADDR; a live listener still holds the port).
    "UCX_TCP_CM_REUSEADDR": "y",
    # ucxx logs every endpoint error at ERROR level; a peer going away is reported to the
    # caller as UnavailableError instead.
    "UCXX_LOG_LEVEL": "FATAL",
}


def apply(environ=os.environ) -> None:
    """Set every default the user has not set (a variable set by the user wins)."""
    for k, v in UCX_ENV_DEFAULTS.items():
        environ.setdefault(k, v)


# --- where UCX listens -----------------------------------------------------------------------
# Besides the listener a server asks for, UCX's TCP transport listens on every network
# interface it uses (a socket per interface, at a port of its own) for the connections of its
# data lanes. A server configured on one address keeps UCX to the interfaces that carry it
# (UCX_NET_DEVICES=^<every other interface>: RDMA devices, which listen on no IP socket, stay
# usable), so that a task told 127.0.0.1 is reachable on no other interface through them.


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [("ifa_next", ctypes.POINTER(_IfAddrs)), ("ifa_name", ctypes.c_char_p),
                     ("ifa_flags", ctypes.c_uint), ("ifa_addr", ctypes.c_void_p),
                     ("ifa_netmask", ctypes.c_void_p), ("ifa_ifu", ctypes.c_void_p),
                     ("ifa_data", ctypes.c_void_p)]


def sockaddr_ip(address: int):
    """The IP address of a ``struct sockaddr`` at ``address`` (IPv4 or IPv6), else None."""
    family = ctypes.c_ushort.from_address(address).value
    if family == socket.AF_INET:
        return ipaddress.ip_address(ctypes.string_at(address + 4, 4))
    if family == socket.AF_INET6:
        ip = ipaddress.ip_address(ctypes.string_at(address + 8, 16))
        return ip.ipv4_mapped or ip
    return None


_IFF_UP_AND_RUNNING = 0x1 | 0x40


def interface_addresses() -> list:
    """(interface name, IP address, up and running) of every address of this machine's
    interfaces (getifaddrs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        raise OSError(ctypes.get_errno(), "getifaddrs failed")
    out = []
    try:
        node = head
        while node:
            ifa = node.contents
            ip = sockaddr_ip(ifa.ifa_addr) if ifa.ifa_addr else None
            if ip is not None:
                active = ifa.ifa_flags & _IFF_UP_AND_RUNNING == _IFF_UP_AND_RUNNING
                out.append((ifa.ifa_name.decode(errors="replace"), ip, active))
            node = ifa.ifa_next
    finally:
        libc.freeifaddrs(head)
    return out


def host_addresses(host: str):
    """The IP addresses ``host`` names (a literal, or what it resolves to); None for a
    wildcard ("", "0.0.0.0", "::": every interface) or a name that does not resolve."""
    try:
        infos = socket.getaddrinfo(host or None, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return None
    out = set()
    for family, *_, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        ip = getattr(ip, "ipv4_mapped", None) or ip
        if ip.is_unspecified:
            return None
        out.add(ip)
    return out or None


def net_devices_for(host: str) -> str | None:
    """The ``UCX_NET_DEVICES`` value that keeps UCX's network transports off every interface
    that does not carry ``host`` (``"^eth0,..."``), or None: a wildcard host, one no
    interface carries, or no other interface to exclude."""
    wanted = host_addresses(host)
    if not wanted:
        return None
    try:
        addresses = interface_addresses()
    except (OSError, AttributeError):
        return None
    carrying = {name for name, ip, _ in addresses if ip in wanted}
    if not carrying:
        return None
    # Only interfaces UCX would use (up, with an address): naming others makes it warn.
    others = sorted({name for name, _, active in addresses if active} - carrying)
    return "^" + ",".join(others) if others else None
