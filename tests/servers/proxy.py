"""A TCP proxy on a free local port in front of PostgreSQL that can stop forwarding: a link that goes
silent (no reset, no close, bytes held back in both directions) the way a partitioned network does,
and that comes back with every connection intact."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class PausableProxy:
    """Forward 127.0.0.1:<port> to ``target``; ``pause()`` stops moving bytes, ``resume()`` moves them
    again. Use as a context manager (closes every connection on exit)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._accepter = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)

    def __enter__(self) -> PausableProxy:
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def upstream_ports(self) -> list[int]:
        """The local ports of the proxy's connections to the target (pg_stat_activity.client_port of
        the sessions it carries), so that a test can end them as the server does when its keepalives
        find the client gone."""
        with self._lock:
            return [server.getsockname()[1] for _, server in self._pairs if server.fileno() != -1]

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for pair in self._pairs:
                for sock in pair:
                    with contextlib.suppress(OSError):
                        sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._flowing.wait()  # a paused link accepts (the kernel did) but answers nothing
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while not self._closed.is_set():
                self._flowing.wait()
                for key, _ in selector.select(timeout=0.05):
                    if not self._flowing.is_set():
                        break  # paused while waiting: leave the bytes where they are
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                        if data:
                            peers[sock].sendall(data)
                    except OSError:
                        data = b""
                    if not data:
                        for each in peers:
                            with contextlib.suppress(OSError):
                                each.close()
                        return
