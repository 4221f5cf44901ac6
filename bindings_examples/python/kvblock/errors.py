"""The package's exceptions: every libkvblock failure is a KvbError; a bad Python argument (wrong type,
shape, dtype, device, out-of-range value) is a KvbArgumentError, which is also a TypeError and a ValueError
so that callers catching either keep working; bad kernel input that a CUDA kernel found on the device is a
KernelFault (kvblock.take_fault)."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Dict, Union

from . import _lib


def header_enum_members(c_type: str, *prefixes: str) -> Dict[str, int]:
    """A C enum of the header as {name without its prefixes: value}, in value order."""
    members = {}
    for value, name in sorted(_lib.ffi.typeof(c_type).elements.items()):
        for prefix in prefixes:
            name = name.removeprefix(prefix)
        members[name] = value
    return members


if TYPE_CHECKING:
    # The members come from the header at run time (a newer header brings new ones): to the type checker
    # every member name is one.
    class HeaderEnumMeta(enum.EnumMeta):
        def __getattr__(cls, name: str) -> Any: ...

    class Status(enum.IntEnum, metaclass=HeaderEnumMeta): ...

    class FaultKind(enum.IntEnum, metaclass=HeaderEnumMeta): ...

    class KernelId(enum.IntEnum, metaclass=HeaderEnumMeta): ...
else:
    # KVB_OK, KVB_ERR_OUT_OF_BLOCKS, ... as Status.OK, Status.OUT_OF_BLOCKS, ...
    Status = enum.IntEnum("Status", header_enum_members("kvb_status", "KVB_", "ERR_"))
    # kvb_fault_kind and kvb_kernel_id: FaultKind.SEQ_LEN, ..., KernelId.WRITE_KV, ...
    FaultKind = enum.IntEnum("FaultKind", header_enum_members("kvb_fault_kind", "KVB_FAULT_"))
    KernelId = enum.IntEnum("KernelId", header_enum_members("kvb_kernel_id", "KVB_KERNEL_"))


class KvbError(Exception):
    """A libkvblock failure: .status (Status), .name ("KVB_ERR_..."), .message (kvb_last_error())."""

    def __init__(self, status: int, message: str) -> None:
        self.status: Union[Status, int]
        try:
            self.status = Status(status)
        except ValueError:  # a status from a library newer than this package: its number
            self.status = status
        self.name = _lib.ffi.string(_lib.lib.kvb_status_string(status)).decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


class KvbArgumentError(KvbError, TypeError, ValueError):
    """An argument refused on the Python side, before any C call; the message names the argument."""

    def __init__(self, message: str) -> None:
        KvbError.__init__(self, Status.INVALID_ARGUMENT, message)


class KvbClosedError(KvbArgumentError):
    """A call on an object whose C handle close() (or the end of its with-block) destroyed: the handle is no
    longer a valid argument, as a NULL manager is not one for the C library (KVB_ERR_INVALID_ARGUMENT).
    .owner names the object."""

    def __init__(self, owner: str, what: str = "close() destroyed its C handle") -> None:
        self.owner = owner
        super().__init__(f"{owner} is closed: {what}; create a new one")


def _enum_or_int(cls: Any, value: int) -> int:
    try:
        return cls(value)
    except ValueError:  # a kind from a library newer than this package: its number
        return value


class KernelFault(KvbError):
    """Bad kernel input found on the device by a CUDA kernel (kvb_cuda_take_fault): the first fault since the
    last take. .kind (FaultKind), .kernel (KernelId), .index (sequence, or token for SLOT), .column (block
    table column for BLOCK_ID, else -1), .value (the bad seq_len, block id, slot or query_start), .count
    (faulty work items). .status is INVALID_ARGUMENT and .message the library's description."""

    def __init__(self, fault: Any, message: str) -> None:  # fault: a cffi kvb_fault
        self.kind = _enum_or_int(FaultKind, int(fault.kind))
        self.kernel = _enum_or_int(KernelId, int(fault.kernel))
        self.index, self.column = int(fault.index), int(fault.column)
        self.value, self.count = int(fault.value), int(fault.count)
        super().__init__(Status.INVALID_ARGUMENT, message)


def check(status: int) -> None:
    """Raises KvbError for a failed kvb_status."""
    if status != 0:
        raise KvbError(status, _lib.ffi.string(_lib.lib.kvb_last_error()).decode(errors="replace"))
