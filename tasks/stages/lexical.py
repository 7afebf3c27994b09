"""BM25 first stage on bm25s: our own tokeniser (Devanagari-safe), a content-addressed index
folder per (chunks, tokeniser, k1, b, method), and MaxP document runs in the dense run schema.

bm25s's default token pattern `\\b\\w\\w+\\b` cuts Hindi words apart: Devanagari vowel signs and the
virama are combining marks, which Python's `\\w` does not match ("भारत" -> "रत"). So terms are made
here and bm25s is given token lists.

Layout under the store:
    indexes/bm25/<key>/  bm25s's arrays + vocab.index.json + params.index.json, chunks.parquet, index.json (last)
    runs/<key>.parquet   a run, like tasks/stages/retrieve.py's
"""
from __future__ import annotations

import functools
import json
import re
import sys
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import polars as pl

from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order
from retbench.tasks.config.systems import LexicalSpec, TokenizerSpec
from retbench.tasks.stages.maxp import document_run
from retbench.tasks.store.build import StageResult, build_folder_once, build_once
from retbench.tasks.store.files import file_sha256, stable_hash, write_parquet
from retbench.tasks.store.integrity import parquet_readable, recorded_checksum

INDEX_LABEL = "bm25"
_BM25S_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json",
                "params.index.json")
_NONOCCURRENCE = "nonoccurrence_array.index.npy"  # bm25l and bm25+ only
_CHUNKS = "chunks.parquet"
_METADATA = "index.json"

# Common Hindi function words (postpositions, auxiliaries, pronouns, conjunctions); bm25s ships none for Hindi.
HINDI_STOPWORDS = (
    "का", "की", "के", "को", "में", "से", "पर", "ने", "तक", "है", "हैं", "था", "थे", "थी", "हो", "होता", "होती",
    "होते", "और", "या", "कि", "तो", "भी", "ही", "यह", "वह", "ये", "वे", "इस", "उस", "इन", "उन", "एक", "लिए",
    "जो", "कर", "किया", "गया", "गई", "गए", "नहीं", "साथ", "द्वारा", "अपने", "अपनी", "अपना", "कुछ", "बहुत",
)


# ---------------------------------------------------------------- tokeniser


@functools.lru_cache(maxsize=1)
def _token_pattern() -> re.Pattern[str]:
    # A term is a run of word characters and combining marks (categories Mn, Mc, Me).
    marks = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)).startswith("M")]
    ranges, start, prev = [], None, None
    for ch in marks:
        code = ord(ch)
        if start is None:
            start = prev = code
        elif code == prev + 1:
            prev = code
        else:
            ranges.append((start, prev))
            start = prev = code
    ranges.append((start, prev))
    cls = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return re.compile(rf"[\w{cls}]+")


@functools.lru_cache(maxsize=32)
def _stopwords(stopwords: str | tuple[str, ...] | None) -> frozenset[str]:
    if stopwords is None:
        return frozenset()
    if isinstance(stopwords, tuple):
        return frozenset(stopwords)
    if stopwords == "hi":
        return frozenset(HINDI_STOPWORDS)
    from bm25s.tokenization import _infer_stopwords

    return frozenset(_infer_stopwords(stopwords))


class Tokenizer:
    """Text -> terms: NFC, optional lower-casing, split into word-and-mark runs, drop short terms
    and stop words, optional Snowball stemming (stop words are matched before stemming)."""

    def __init__(self, spec: TokenizerSpec | None = None):
        self.spec = spec or TokenizerSpec()
        words = self.spec.stopwords
        self._stop = _stopwords(tuple(words) if isinstance(words, list) else words)
        if self.spec.lowercase:
            self._stop = frozenset(w.lower() for w in self._stop)
        self._stemmer = None
        if self.spec.stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(self.spec.stemmer)

    def __call__(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFC", text or "")
        if self.spec.lowercase:
            text = text.lower()
        n = self.spec.min_length
        terms = [t for t in _token_pattern().findall(text) if len(t) >= n and t not in self._stop]
        return self._stemmer.stemWords(terms) if self._stemmer and terms else terms

    def many(self, texts: Sequence[str]) -> list[list[str]]:
        return [self(t) for t in texts]


# ---------------------------------------------------------------- index


@dataclass(frozen=True, kw_only=True)
class Bm25Index(StageResult):
    """A BM25 index folder in the store (`path`), addressed by `key`."""

    name: str
    chunks: int
    vocabulary: int
    settings: dict


def chunks_identity(chunks_path: str | Path) -> str:
    """The chunk file's content key: its recorded checksum, else the hash of its bytes."""
    return recorded_checksum(chunks_path) or file_sha256(chunks_path)


def index_files(method: str) -> tuple[str, ...]:
    extra = (_NONOCCURRENCE,) if method in ("bm25l", "bm25+") else ()
    return (*_BM25S_FILES, *extra, _CHUNKS, _METADATA)  # metadata last: build_folder_once's convention


def build_bm25_index(chunks_path: str | Path, spec: LexicalSpec, store: str | Path, *,
                     chunks_key: str | None = None, force: bool = False) -> Bm25Index:
    """Index every chunk of `chunks_path` (columns chunk_id, doc_id, text) once per content and settings."""
    settings = spec.index_settings()
    key = stable_hash("bm25-index-v1", chunks_key or chunks_identity(chunks_path), settings)
    folder = Path(store) / "indexes" / "bm25" / key[:32]
    built = build_folder_once(store, folder, index_files(spec.method),
                              lambda tmp: _build(tmp, chunks_path, spec, settings),
                              parse=_parse_index_file, force=force)
    meta = json.loads((folder / _METADATA).read_text(encoding="utf-8"))
    return Bm25Index(path=str(folder), key=key, computed=built.computed, seconds=built.seconds, name=spec.name,
                     chunks=meta["chunks"], vocabulary=meta["vocabulary"], settings=settings)


def _build(tmp: Path, chunks_path, spec: LexicalSpec, settings: dict) -> None:
    import bm25s

    chunks = pl.read_parquet(chunks_path, columns=["chunk_id", "doc_id", "text"])
    if chunks.is_empty():
        raise ValueError(f"{chunks_path}: no chunks to index")
    started = time.perf_counter()
    tokens = Tokenizer(spec.tokenizer).many(chunks["text"].to_list())
    if not any(tokens):
        raise ValueError(f"{chunks_path}: none of the {chunks.height} chunks has a term left after tokenising "
                         f"({spec.tokenizer.model_dump()}): nothing to index for BM25 {spec.name!r}")
    retriever = bm25s.BM25(k1=spec.k1, b=spec.b, method=spec.method, delta=spec.delta)
    retriever.index(tokens, show_progress=False)
    tmp.mkdir(parents=True)
    retriever.save(str(tmp), show_progress=False)
    write_parquet(chunks.select("chunk_id", "doc_id"), tmp / _CHUNKS)
    meta = {"chunks": chunks.height, "vocabulary": len(retriever.vocab_dict), "settings": settings,
            "bm25s_version": bm25s.__version__, "seconds": time.perf_counter() - started}
    (tmp / _METADATA).write_text(json.dumps(meta, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def _parse_index_file(path: Path) -> None:
    if path.suffix == ".npy":
        np.load(path, mmap_mode="r")
    elif path.suffix == ".parquet":
        parquet_readable(path)
    else:
        json.loads(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=4)
def load_bm25(folder: str):
    """bm25s's retriever for an index folder (cached per folder: the folder never changes once written)."""
    import bm25s

    return bm25s.BM25.load(folder, load_corpus=False, show_progress=False, verbosity=0)


# ---------------------------------------------------------------- retrieval


@dataclass(frozen=True, kw_only=True)
class LexicalRun(StageResult):
    """A BM25 run file (RUN_SCHEMA) in the store."""

    system: str
    index: str
    queries: int
    empty_queries: int  # queries with no term in the index: they have no hits
    search_seconds: float


def bm25_run(index: Bm25Index, queries: pl.DataFrame, system: str, depth: int, store: str | Path, *,
             tokenizer: TokenizerSpec | None = None, force: bool = False) -> LexicalRun:
    """Rank documents for every query (columns query_id, text) by their best chunk's BM25 score.

    `tokenizer` must be the index's (default: read from the index settings)."""
    spec = tokenizer or TokenizerSpec(**index.settings["tokenizer"])
    query_key = stable_hash(queries["query_id"].to_list(), queries["text"].to_list())
    key = stable_hash("bm25-run-v1", index.key, query_key, system, depth)
    path = Path(store) / "runs" / f"{key}.parquet"
    facts: dict = {}

    def build(tmp: str) -> dict:
        run, seconds, empty = search_bm25(index.path, Tokenizer(spec).many(queries["text"].to_list()),
                                          queries["query_id"].to_list(), depth)
        run = run.with_columns(provider=pl.lit(system), index=pl.lit(INDEX_LABEL), nprobe=pl.lit(None, dtype=pl.Int64))
        write_parquet(trec_order(run.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)), tmp)
        facts.update(search_seconds=seconds, empty_queries=empty)
        return {"queries": queries.height, **facts}

    built = build_once(store, path, build, parse=parquet_readable, force=force)
    meta = facts or built.metadata
    if "empty_queries" not in meta:  # metadata lost (a crash after the run file): count from the run itself
        meta = {"empty_queries": queries.height - pl.scan_parquet(path).select(pl.col("query_id").n_unique()).collect().item()}
    return LexicalRun(path=str(path), key=key, computed=built.computed, seconds=built.seconds, system=system,
                      index=INDEX_LABEL, queries=queries.height, empty_queries=int(meta.get("empty_queries", 0)),
                      search_seconds=float(meta.get("search_seconds", 0.0)))  # as measured when the run was made


def search_bm25(folder: str | Path, query_tokens: list[list[str]], query_ids: list[str], depth: int
                ) -> tuple[pl.DataFrame, float, int]:
    """(run without provider columns, search seconds, queries without hits), MaxP over chunks.

    Only chunks holding a query term are candidates (from the index's postings), so a chunk that
    matches nothing never enters a run with a score of 0. Among them, the best chunks are taken
    deep enough to hold `depth` distinct documents, with every chunk tied at the cut included, so
    the cut is exact."""
    retriever = load_bm25(str(folder))
    chunks = pl.read_parquet(Path(folder) / _CHUNKS)
    doc_codes = chunks["doc_id"].rank("dense").to_numpy().astype(np.int64) - 1
    indptr = retriever.scores["indptr"]
    postings = retriever.scores["indices"]
    started = time.perf_counter()
    parts, empty = [], 0
    for row, tokens in enumerate(query_tokens):
        ids = retriever.get_tokens_ids(tokens)
        if not ids:
            empty += 1
            continue
        candidates = np.unique(np.concatenate([postings[indptr[t]:indptr[t + 1]] for t in ids]))
        if not len(candidates):
            empty += 1
            continue
        scores = retriever.get_scores(ids)[candidates].astype(np.float64)
        best_chunks, best_scores = _maxp_top(candidates, scores, doc_codes, depth)
        parts.append(pl.DataFrame({"query": np.full(len(best_chunks), row, dtype=np.int64),
                                   "chunk": best_chunks.astype(np.int64), "score": best_scores}))
    seconds = time.perf_counter() - started
    hits = pl.concat(parts) if parts else pl.DataFrame(schema={"query": pl.Int64, "chunk": pl.Int64, "score": pl.Float64})
    run = document_run(hits, doc_codes, pl.Series(query_ids, dtype=pl.String), chunks["doc_id"], chunks["chunk_id"])
    return run.group_by("query_id", maintain_order=True).head(depth), seconds, empty


def _maxp_top(candidates: np.ndarray, scores: np.ndarray, doc_codes: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Each document's best chunk among the top-scoring candidates, enough for `depth` documents."""
    take = min(len(scores), depth * 2)
    while True:
        if take >= len(scores):
            chosen = np.arange(len(scores))
        else:
            threshold = np.partition(scores, len(scores) - take)[len(scores) - take]
            chosen = np.flatnonzero(scores >= threshold)  # ties at the cut all come along
        if len(chosen) == len(scores) or len(np.unique(doc_codes[candidates[chosen]])) >= depth:
            break
        take *= 4
    chunk, score = candidates[chosen], scores[chosen]
    order = np.lexsort((-score, doc_codes[chunk]))  # by document, best chunk first
    first = np.ones(len(order), dtype=bool)
    docs = doc_codes[chunk[order]]
    first[1:] = docs[1:] != docs[:-1]
    keep = order[first]
    return chunk[keep], score[keep]
