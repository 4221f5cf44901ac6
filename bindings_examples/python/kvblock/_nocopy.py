"""Objects that own a C handle or memory described to C (a kvb_manager*, a KVCache's kvb_cache_desc
pointers, BatchBuffers' kvb_batch, a publisher's sockets and thread) cannot be copied or pickled.

A shallow copy would share the handle, and the copy's close() or finalizer would destroy it under the
original (every later call on the original: KvbClosedError); a deep copy would copy the arrays but keep C
pointers into the original's memory; a pickle cannot carry a pointer at all. So all three are refused
with a TypeError that says why, instead of whatever the default protocol would do."""
from __future__ import annotations

from typing import Any, NoReturn


class OwnsHandle:
    """Mixin: copy.copy, copy.deepcopy and pickle raise TypeError naming the object and the reason.
    _what_is_owned says what the object owns (the reason); subclasses set it."""
    __slots__ = ()
    _what_is_owned = "a C handle"

    def _refuse(self, action: str) -> NoReturn:
        raise TypeError(f"{type(self).__module__}.{type(self).__qualname__} cannot be {action}: it owns "
                        f"{self._what_is_owned}, which a copy would share (and destroy or overwrite under "
                        f"the original) and a pickle cannot carry; create a new object with the same "
                        f"arguments instead")

    def __copy__(self) -> NoReturn:
        self._refuse("copied (copy.copy)")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self._refuse("deep-copied (copy.deepcopy)")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        self._refuse("pickled")

    def __reduce__(self) -> NoReturn:
        self._refuse("pickled")
