"""Keys for remembering pure cost functions by the identity of the specs they read.

A search asks the cost model the same few hundred questions tens of thousands of times (NCCL's choice for one
collective, one layer's passes), always of the same `ModelSpec`, `JobSpec` and `ClusterSpec` objects. Hashing those
frozen dataclasses field by field costs more than some of the answers (about 10 µs for a cluster), so the caches key
them by identity: `Same(spec)` hashes by `id` and equals only a `Same` of the very same object. The cache entry
holds the key and with it the object, so no other object can take its id while the entry lives; an equal spec that is
another object is only a miss, never a wrong answer.
"""

from __future__ import annotations


class Same:
    """`value` as a cache key by identity."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.value is self.value
