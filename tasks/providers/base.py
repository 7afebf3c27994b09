"""The provider protocol: a fingerprint and an encoder for queries and documents."""
from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import numpy as np

Role = Literal["query", "document"]
ROLES: tuple[Role, ...] = ("query", "document")


@runtime_checkable
class Provider(Protocol):
    kind: str

    def fingerprint(self) -> dict:
        """Everything that changes the vectors (model id, weights hash, prefixes, max length, dim, ...).

        Never secrets: the fingerprint is hashed into cache keys and written to manifests.
        """

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        """Vectors for `texts` as a (len(texts), dim) float array, in input order."""
