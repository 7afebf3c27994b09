"""What every HTTP rerank API shares, on the embedding providers' HTTP machinery
(tasks/providers/http_base.py: retries, 429/Retry-After, bounded concurrency, keys by reference).

A batch is one query with its documents, sent as the text list [query, *documents]; a kind only
says how to build the body and where the (index, score) pairs and the usage are in the answer.
Every answer is checked: one score per document, indices in range and unique, finite scores;
a 200 whose body is an error message is an error, not an empty result.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np

from retbench.tasks.providers.http_base import HttpOptions, HttpProvider, HttpResponseError, estimate_tokens
from retbench.tasks.rerankers.base import RerankBatch

_ERROR_KEYS = ("error", "message", "detail", "error_message")


class RerankHttpOptions(HttpOptions):
    batch_size: int | None = None  # documents per request: the rerank stage's batch_size when unset


class HttpReranker(HttpProvider):
    kind = "http-rerank"
    Options: type[RerankHttpOptions] = RerankHttpOptions
    endpoint = "/rerank"
    documents_per_search_unit: int | None = None  # Cohere bills a query with up to 100 documents as 1 unit

    # ---- hooks for the kind files ---------------------------------------------------------
    def rerank_body(self, query: str, documents: list[str]) -> dict:
        raise NotImplementedError

    def results(self, payload: Any) -> list:
        """The list of {index, score} items."""
        raise NotImplementedError

    def score_of(self, item: dict) -> Any:
        return item["relevance_score"]

    def usage(self, payload: Any) -> tuple[int | None, float | None]:
        """(tokens, search units) the API reports, None where it reports nothing."""
        return None, None

    @property
    def documents_per_request(self) -> int | None:
        return self.options.batch_size

    # ---- the embedding machinery, used for scores -------------------------------------------
    def prefixed(self, texts, role):
        return list(texts)  # a rerank request has no prefixes

    def request_body(self, texts: list[str], role) -> dict:
        return self.rerank_body(texts[0], list(texts[1:]))

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        return next(self.score_batches([(query, documents)]))[1].scores

    def score_batches(self, batches: Sequence[tuple[str, list[str]]]) -> Iterator[tuple[int, RerankBatch]]:
        """(batch index, RerankBatch) as requests complete, `concurrency` at a time; after a
        failure, the batches in flight are still yielded, then the first error is raised."""
        yield from self.encode_batches([[query, *documents] for query, documents in batches], "query")

    def _result(self, payload, texts, role, run, index, seconds, attempts) -> RerankBatch:
        where = f"{self.host}{self.endpoint}"
        documents = len(texts) - 1
        if isinstance(payload, dict) and any(k in payload for k in _ERROR_KEYS) and not _has_results(payload):
            detail = next(str(payload[k]) for k in _ERROR_KEYS if k in payload)
            raise HttpResponseError(f"{where}: answered 200 with an error body (batch {index}): {self._redact(detail)[:300]}")
        try:
            items = self.results(payload)
            pairs = [(item["index"], self.score_of(item)) for item in items]
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            raise HttpResponseError(f"{where}: unexpected rerank response shape for {self.kind} "
                                    f"({type(error).__name__}: {error})") from None
        scores = _checked(pairs, documents, where, index)
        tokens, units = self.usage(payload)
        source = "usage"
        if tokens is None:
            # The query is read once per document (cross-attention over each pair).
            query_tokens = estimate_tokens(texts[0])
            tokens, source = sum(estimate_tokens(t) + query_tokens for t in texts[1:]), "estimate"
        if units is None and self.documents_per_search_unit:
            units = math.ceil(documents / self.documents_per_search_unit)
        return RerankBatch(scores, seconds, int(tokens), source, float(units or 0.0))


def _has_results(payload: dict) -> bool:
    return any(isinstance(payload.get(k), list) for k in ("results", "data"))


def _checked(pairs: list, expected: int, where: str, batch: int) -> np.ndarray:
    if len(pairs) != expected:
        raise HttpResponseError(f"{where}: {len(pairs)} scores for {expected} documents (batch {batch})")
    scores = np.full(expected, np.nan)
    for position, (index, score) in enumerate(pairs):
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
            raise HttpResponseError(f"{where}: result {position} has index {index!r}, outside 0..{expected - 1} (batch {batch})")
        if not np.isnan(scores[index]):
            raise HttpResponseError(f"{where}: index {index} appears twice in the results (batch {batch})")
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            raise HttpResponseError(f"{where}: result {position} (index {index}) has score {score!r}, not a finite number (batch {batch})")
        scores[index] = float(score)
    return scores
