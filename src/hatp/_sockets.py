"""A listening TCP socket for the servers hatp runs (``hatp serve``, the demos).

Bound before the server starts, so the port is known at once (0: the system
chooses) and a client may connect as soon as it is printed. Its protocol is
named (``IPPROTO_TCP``): asyncio turns Nagle's algorithm off (``TCP_NODELAY``)
only on sockets whose protocol says TCP, and on one made with protocol 0 a
response written in two pieces (headers, then body) waits for the client's
delayed ACK, about 40 ms a request. ``SO_REUSEADDR`` lets a restarted server
take the port of one just killed.
"""

from __future__ import annotations

import socket

__all__ = ["listening"]


def listening(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port``.

    Raises:
        OSError: the address is taken or cannot be bound (the socket is closed).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
