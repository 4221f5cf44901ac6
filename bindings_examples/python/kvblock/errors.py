"""The package's exceptions: every libkvblock failure is a KvbError; a bad Python argument (wrong type,
shape, dtype, device, out-of-range value) is a KvbArgumentError, which is also a TypeError and a ValueError
so that callers catching either keep working."""
from __future__ import annotations

import enum

from . import _lib

# KVB_OK, KVB_ERR_OUT_OF_BLOCKS, ... as Status.OK, Status.OUT_OF_BLOCKS, ... (read from the header).
Status = enum.IntEnum("Status", {name.removeprefix("KVB_").removeprefix("ERR_"): value
                                 for value, name in sorted(_lib.ffi.typeof("kvb_status").elements.items())})


class KvbError(Exception):
    """A libkvblock failure: .status (Status), .name ("KVB_ERR_..."), .message (kvb_last_error())."""

    def __init__(self, status: int, message: str) -> None:
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.name = _lib.ffi.string(_lib.lib.kvb_status_string(status)).decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


class KvbArgumentError(KvbError, TypeError, ValueError):
    """An argument refused on the Python side, before any C call; the message names the argument."""

    def __init__(self, message: str) -> None:
        KvbError.__init__(self, Status.INVALID_ARGUMENT, message)


def check(status: int) -> None:
    """Raises KvbError for a failed kvb_status."""
    if status != 0:
        raise KvbError(status, _lib.ffi.string(_lib.lib.kvb_last_error()).decode(errors="replace"))
