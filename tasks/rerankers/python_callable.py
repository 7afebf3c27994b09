"""`kind: python` reranker: your own scoring code, as the python provider takes your embedding code.

It accepts a function `score(query, documents) -> scores`, a CrossEncoder-style object with
`predict(pairs) -> scores` (pairs of (query, document)), an object with such a `score` method, or a
class or factory making one from `kwargs`. Scores may be lists, arrays or tensors; higher is better.
The rerank stage hands it pairs of all queries together (`score_pairs`): a `predict` object scores
them in calls of `batch_size` pairs, a `score` function once per query among them. Its cache
identity is that of the python provider (tasks/user_code.py).
"""
from __future__ import annotations

import inspect
import threading
import time
from typing import Any, Callable

import numpy as np
from pydantic import Field

from retbench.tasks.rerankers.base import RerankBatch
from retbench.tasks.user_code import UserCodeError, UserCodeOptions, as_scores, raised

PROBE = ("what does a probe look like?", ["A probe document.", "Another, longer probe document about probes."])


class PythonRerankerOptions(UserCodeOptions):
    batch_size: int = Field(32, ge=1, description="pairs per predict() call (a CrossEncoder-style object)")


class PythonReranker:
    kind = "python"
    Options = PythonRerankerOptions

    def __init__(self, **options):
        self.options = PythonRerankerOptions(**options)
        self._scorer: Callable[[list[tuple[str, str]]], Any] | None = None
        self._secrets: dict[str, str] = {}
        self._loading = threading.Lock()
        self._fingerprint: dict | None = None

    def fingerprint(self) -> dict:
        o = self.options
        if o.callable is None:
            if self._fingerprint is None:
                self._fingerprint = o.identity(self.kind, probe=self._probe)
            return self._fingerprint
        fingerprint = o.identity(self.kind)
        if self._fingerprint is not None and fingerprint != self._fingerprint:
            self._scorer = None  # changed on disk since it was loaded
        self._fingerprint = fingerprint
        return fingerprint

    def _probe(self) -> str:
        scores = self.score(*PROBE)
        return " ".join(f"{s:.3g}" for s in scores)  # a reranker's scores, coarsely: two models differ here

    @property
    def pair_batch_size(self) -> int:
        return self.options.batch_size

    def scorer(self) -> Callable[[list[tuple[str, str]]], Any]:
        with self._loading:
            if self._scorer is None:
                from retbench.tasks.providers.python_callable import redacting, secret_values

                self._secrets = secret_values(self.options)
                with redacting(self._secrets):
                    self._scorer = adapt(self.options.target(), {**self.options.kwargs, **self._secrets},
                                         self.options.factory, self.options.described)
        return self._scorer

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        return self.score_pairs([(query, d) for d in documents]).scores

    def score_batch(self, query: str, documents: list[str]) -> RerankBatch:
        return self.score_pairs([(query, d) for d in documents])

    def score_pairs(self, pairs: list[tuple[str, str]]) -> RerankBatch:
        from retbench.tasks.providers.python_callable import redacting

        scorer = self.scorer()
        started = time.perf_counter()
        with redacting(self._secrets):
            try:
                value = scorer(list(pairs))
            except UserCodeError:
                raise
            except Exception as error:  # noqa: BLE001  the user's code raised: one line naming it
                raise raised(self.options.described, error, f"on a batch of {len(pairs)} (query, document) pairs") from error
            return RerankBatch(as_scores(value, len(pairs), self.options.described), time.perf_counter() - started)


def adapt(target: Any, kwargs: dict, factory: bool | None, where: str) -> Callable[[list[tuple[str, str]]], Any]:
    """pairs -> scores, for a predict() object, a score() object or function, a class or a factory."""
    if inspect.isclass(target):
        return adapt(_made(target, kwargs, where), {}, False, where)
    if callable(getattr(target, "predict", None)):
        predict = target.predict
        quiet = {"show_progress_bar": False} if "show_progress_bar" in _parameters(predict) else {}
        return lambda pairs: predict(pairs, **quiet)
    if callable(getattr(target, "score", None)) and not inspect.isfunction(target):
        return _per_query(target.score, where)
    if not callable(target):
        raise UserCodeError(f"{where}: {type(target).__name__} is neither a function nor an object with predict(pairs) "
                            f"or score(query, documents)")
    if factory is None:
        factory = _complete_with(target, kwargs)
    if factory:
        return adapt(_made(target, kwargs, where), {}, False, where)
    return _per_query(lambda query, documents: target(query, documents, **kwargs), where)


def _per_query(score: Callable[[str, list[str]], Any], where: str) -> Callable[[list[tuple[str, str]]], Any]:
    """pairs of several queries -> one score() call per query, scores back in the pairs' order."""
    def scored(pairs: list[tuple[str, str]]) -> np.ndarray:
        out = np.empty(len(pairs), dtype=np.float64)
        by_query: dict[str, list[int]] = {}
        for i, (query, _) in enumerate(pairs):
            by_query.setdefault(query, []).append(i)
        for query, rows in by_query.items():
            out[rows] = as_scores(score(query, [pairs[i][1] for i in rows]), len(rows), where)
        return out

    return scored


def _made(factory: Callable, kwargs: dict, where: str) -> Any:
    try:
        return factory(**kwargs)
    except Exception as error:  # noqa: BLE001
        raise raised(where, error, f"when called with kwargs {sorted(kwargs)} to make the reranker") from error


def _complete_with(function: Callable, kwargs: dict) -> bool:
    try:
        inspect.signature(function).bind(**kwargs)
        return True
    except (TypeError, ValueError):
        return False


def _parameters(function: Callable) -> dict:
    try:
        return dict(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return {}
