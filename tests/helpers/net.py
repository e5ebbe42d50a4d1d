"""A free TCP port (msrun's master port in the multi-process tests)."""
import socket


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
