"""KvEventPublisher's arguments, checked before any socket exists, each refusal a KvbArgumentError (a
TypeError and a ValueError) naming the argument: what ZMQ would do with them otherwise is worse than an
error. It binds "tcp://*:99999" to some other port and "tcp://*:-1" to port 65535 without a word, takes
a negative high-water mark as a bare ZMQError, and msgpack would publish dp_rank=True as a bool."""
from __future__ import annotations

from typing import Any, Optional

from ._convert import scalar
from .errors import KvbArgumentError

_INT_MAX = 2**31 - 1  # ZMQ socket options are C ints


def tcp_port_ok(endpoint: str) -> bool:
    """Whether a tcp:// endpoint names a port ZMQ binds as written: "*" (any free port) or 0..65535."""
    _, sep, port = endpoint[len("tcp://"):].rpartition(":")
    return bool(sep) and (port == "*" or (port.isascii() and port.isdigit() and int(port) <= 65535))


def _endpoint(value: Any, what: str) -> None:
    if not isinstance(value, str) or "://" not in value:
        raise KvbArgumentError(f"{what} must be a ZMQ endpoint string such as 'tcp://*:5557', got {value!r}")
    if value.startswith("tcp://") and not tcp_port_ok(value):
        raise KvbArgumentError(f"{what} {value!r}: the port must be '*' or a number in [0, 65535] "
                               "(ZMQ would silently use another port)")


def check(*, endpoint: Any, replay_endpoint: Optional[Any], topic: Any, dp_rank: Any, hwm: Any,
          linger_ms: Any, max_queue_batches: Any, replay_buffer: Any, drain_capacity: Any,
          lora_name: Any = None) -> None:
    _endpoint(endpoint, "endpoint")
    if replay_endpoint is not None:
        _endpoint(replay_endpoint, "replay_endpoint")
    if not isinstance(topic, (str, bytes)):
        raise KvbArgumentError(f"topic must be a str or bytes (frame 0 of every message), got "
                               f"{type(topic).__name__} {topic!r}")
    if lora_name is not None and not isinstance(lora_name, str):
        raise KvbArgumentError(f"lora_name must be a str or None (vLLM's field), got {type(lora_name).__name__}")
    scalar(dp_rank, "dp_rank", 0, _INT_MAX, "a data-parallel rank")
    scalar(hwm, "hwm", 0, _INT_MAX, "ZMQ_SNDHWM, 0 = no limit")
    scalar(linger_ms, "linger_ms", -1, _INT_MAX, "ZMQ_LINGER, -1 = forever")
    scalar(max_queue_batches, "max_queue_batches", 1, 2**63 - 1, "batches")
    scalar(replay_buffer, "replay_buffer", 0, 2**63 - 1, "batches")
    scalar(drain_capacity, "drain_capacity", 1, 2**32 - 1, "events per drain")
