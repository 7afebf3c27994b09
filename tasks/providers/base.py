"""The provider protocol: what the pipeline may ask of an embedding provider, with defaults.

A provider file subclasses `Provider`, names its `kind` and its pydantic `Options` model
(extra keys refused: the spec validates `providers[i].options` against it at load), and
implements `fingerprint` and `encode`. Every other capability the pipeline uses has a
default here, so the pipeline never probes with `hasattr`:

- `token_counts`: tokens per text for the cost ledger (default: ceil(chars / 4), "estimate");
- `input_window`: tokens of one text the model reads, the rest cut off (default: None, no cut
  known); the run counts the texts longer than it (tasks/stages/clipping.py);
- `plan_batches`: which texts go in one call (default: `batch_size` at a time);
- `encode_batches`: run the planned calls, yielding results as they complete (default: one
  at a time); HTTP providers run several at once;
- `timed_calls`: per-call latency for the latency profile (default: sequential);
  `concurrent` says whether the profile should sweep the number of concurrent calls;
- `first_use_modules`: what its first `encode` imports (`retbench run` imports them while
  Prefect's API server boots, when the provider has texts to embed);
- `engine` and `device_batch_size`: what computes the vectors, on which device and why (the
  manifest and the log say it), and the texts per call the provider picks for its device when
  the spec sets none (a GPU's, from its free memory; default: None, the spec's batch_size);
- `keyed_by_id`: `encode` is handed ids, not texts, and the cache is keyed by them (vectors
  made elsewhere, tasks/providers/precomputed.py); `check_ids` then says before any work what
  the ids of the run and the provider's own ids disagree on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Iterator, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

Role = Literal["query", "document"]
ROLES: tuple[Role, ...] = ("query", "document")


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class BatchResult:
    vectors: np.ndarray
    tokens: int
    token_source: str  # usage | tokenizer | estimate
    seconds: float  # the successful call's own latency (retries excluded)
    attempts: int = 1
    row_tokens: tuple[int, ...] | None = None  # per text, when known (stored with the cache rows)


def estimate_tokens(text: str) -> int:
    """ceil(chars / 4): the usual rule of thumb for English with BPE tokenizers."""
    return max(1, -(-len(text) // 4))


class Provider:
    kind: ClassVar[str] = "provider"
    Options: ClassVar[type[BaseModel]] = NoOptions
    concurrent: ClassVar[bool] = False  # calls may overlap (HTTP): the latency profile sweeps concurrency
    keyed_by_id: ClassVar[bool] = False  # encode() takes ids, not texts (no model to time, nothing to tokenise)

    def __init__(self, **options):
        self.options = self.Options(**options)

    def fingerprint(self) -> dict:
        """Everything that changes the vectors (model id, weights hash, prefixes, max length, dim, ...).

        Never secrets: the fingerprint is hashed into cache keys and written to manifests.
        """
        raise NotImplementedError

    def declared_dim(self) -> int | None:
        """The vector dimension known without encoding anything (options or the model's
        config), or None; the spec checks `dimensions:` against it at load."""
        return None

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        """Vectors for `texts` as a (len(texts), dim) float array, in input order."""
        raise NotImplementedError

    def token_counts(self, texts: Sequence[str], role: Role) -> tuple[list[int], str]:
        return [estimate_tokens(text) for text in texts], "estimate"

    def input_window(self) -> int | None:
        """Tokens of one text (as `token_counts` counts them) the model reads before cutting the
        rest off; None when nothing is cut or the provider does not know."""
        return None

    def without_window(self) -> str:
        """What the clipping audit says of a provider whose `input_window` is None."""
        return "no input window declared, none counted as truncated"

    def first_use_modules(self) -> tuple[str, ...]:
        return ()

    def engine(self):
        """The Engine (tasks/devices.py: backend, device, why) of a provider that computes vectors
        on this machine; None for the others (an API, vectors made elsewhere)."""
        return None

    def device_batch_size(self) -> tuple[int, str] | None:
        """(texts per call, how it was chosen) on a GPU; None: the spec's batch_size."""
        return None

    def check_ids(self, needed: dict[str, set[str]], known: dict[str, set[str] | None], chunking: str) -> list[str]:
        """Problems between the run's ids and a provider keyed by id, found before any work
        (`needed`: role -> ids the run embeds; `known`: role -> every id of the collection, or
        None when not all are known); a provider that embeds texts has none."""
        return []

    def plan_batches(self, texts: Sequence[str], role: Role, batch_size: int) -> list[list[int]]:
        return [list(range(start, min(start + batch_size, len(texts)))) for start in range(0, len(texts), batch_size)]

    def encode_batches(self, batches: Sequence[list[str]], role: Role) -> Iterator[tuple[int, BatchResult]]:
        for index, batch in enumerate(batches):
            started = time.perf_counter()
            vectors = self.encode(list(batch), role)
            seconds = time.perf_counter() - started
            counts, source = self.token_counts(batch, role)
            yield index, BatchResult(vectors, int(sum(counts)), source, seconds, row_tokens=tuple(counts))

    def timed_calls(self, batches: Sequence[list[str]], role: Role, concurrency: int,
                    warmup: int = 1) -> tuple[list[float], float]:
        """Per-call seconds and wall seconds; local providers run one call at a time."""
        for i in range(warmup):
            self.encode(list(batches[i % len(batches)]), role)
        latencies = []
        started = time.perf_counter()
        for batch in batches:
            t0 = time.perf_counter()
            self.encode(list(batch), role)
            latencies.append(time.perf_counter() - t0)
        return latencies, time.perf_counter() - started
