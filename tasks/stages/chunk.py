"""Cut documents into chunks whose ids are stable across runs and whose offsets map back to the text.

Every chunk is an exact slice `document_text(title, text)[start:end]` (tasks/datasets/document_text.py), so a retrieved chunk can
always be traced to its document and position.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import polars as pl

from retbench.tasks.datasets.document_text import document_text

STRATEGIES = ("none", "fixed", "sentence", "paragraph")
UNITS = ("words", "tokens")
CHUNK_SCHEMA = {
    "chunk_id": pl.String,
    "doc_id": pl.String,
    "chunk_index": pl.Int32,
    "start": pl.Int64,
    "end": pl.Int64,
    "text": pl.String,
    "language": pl.String,
}

_WORD = re.compile(r"\S+")
# A sentence ends at . ? ! followed by whitespace or the end (so "3.5" and "e.g.x" stay whole),
# at a danda / double danda wherever it is (it is never part of a word), or at a blank line.
_SENTENCE_END = re.compile(r"""[.?!]+["'”’)\]]*(?=\s|$)|[।॥]+["'”’)\]]*|\n[^\S\n]*\n""")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")

Span = tuple[int, int]


@dataclass(frozen=True)
class ChunkConfig:
    """How to chunk. `size`, `overlap` and `unit` apply to "fixed"; `max_words` to "sentence"
    and "paragraph"."""

    strategy: str
    size: int = 200
    overlap: int = 40
    unit: str = "words"
    max_words: int = 200

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"chunk strategy {self.strategy!r} is unknown (expected one of {list(STRATEGIES)})")
        # Only the settings the strategy uses are checked: ChunkConfig("sentence", size=10)
        # must not fail on the default overlap of a window it never cuts.
        if self.strategy == "fixed":
            if self.unit not in UNITS:
                raise ValueError(f"chunk unit {self.unit!r} is unknown (expected one of {list(UNITS)})")
            if self.size <= 0:
                raise ValueError(f"chunk size {self.size} must be > 0")
            if not 0 <= self.overlap < self.size:
                raise ValueError(f"chunk overlap {self.overlap} must be >= 0 and < size {self.size}")
        if self.strategy in ("sentence", "paragraph") and self.max_words <= 0:
            raise ValueError(f"chunk max_words {self.max_words} must be > 0")

    @property
    def name(self) -> str:
        """Canonical name holding only the parameters that affect the result (for cache keys, paths)."""
        if self.strategy == "fixed":
            return f"fixed_{self.unit}-{self.size}_overlap-{self.overlap}"
        if self.strategy in ("sentence", "paragraph"):
            return f"{self.strategy}_max-words-{self.max_words}"
        return "none"


def chunk_corpus(corpus: pl.DataFrame, config: ChunkConfig) -> pl.DataFrame:
    """One row per chunk: chunk_id "<doc_id>#<chunk_index>", doc_id, chunk_index, start, end, text,
    language. Documents without text yield no chunks."""
    missing = [c for c in ("doc_id", "text", "language") if c not in corpus.columns]
    if missing:
        raise ValueError(f"corpus is missing columns {missing} (found {corpus.columns})")
    titles = corpus["title"] if "title" in corpus.columns else [None] * corpus.height
    rows = []
    for doc_id, title, text, language in zip(corpus["doc_id"], titles, corpus["text"], corpus["language"]):
        full = document_text(title, text)
        for index, (start, end) in enumerate(chunk_spans(full, config)):
            rows.append((f"{doc_id}#{index}", doc_id, index, start, end, full[start:end], language))
    return pl.DataFrame(rows, schema=CHUNK_SCHEMA, orient="row")


def chunk_spans(text: str, config: ChunkConfig) -> list[Span]:
    """Character spans of the chunks of one document text, in order, none empty."""
    if config.strategy == "none":
        return [span] if (span := _trim(text, 0, len(text))) else []
    if config.strategy == "fixed":
        units = [m.span() for m in _unit_pattern(config.unit).finditer(text)]
        return _windows(units, config.size, config.overlap)
    if config.strategy == "sentence":
        return _pack(_sentences(text, 0, len(text)), config.max_words, text)
    spans = []
    for start, end in _paragraphs(text):
        if _count_words(text, start, end) <= config.max_words:
            spans.append((start, end))
        else:
            spans.extend(_pack(_sentences(text, start, end), config.max_words, text))
    return spans


def _windows(units: list[Span], size: int, overlap: int) -> list[Span]:
    """Windows of `size` units, each starting `size - overlap` units after the previous one;
    the last window ends at the last unit (it may be shorter)."""
    spans = []
    step = size - overlap
    for first in range(0, len(units), step):
        last = min(first + size, len(units)) - 1
        spans.append((units[first][0], units[last][1]))
        if last == len(units) - 1:
            break
    return spans


def _trim(text: str, start: int, end: int) -> Span | None:
    """The span without surrounding whitespace, or None when only whitespace is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _split(text: str, start: int, end: int, boundary: re.Pattern[str]) -> list[Span]:
    """Pieces of text[start:end] cut after each match of `boundary`, trimmed, empties dropped."""
    pieces = []
    piece_start = start
    for m in boundary.finditer(text, start, end):
        if (span := _trim(text, piece_start, m.end())):
            pieces.append(span)
        piece_start = m.end()
    if (span := _trim(text, piece_start, end)):
        pieces.append(span)
    return pieces


def _sentences(text: str, start: int, end: int) -> list[Span]:
    return _split(text, start, end, _SENTENCE_END)


def _paragraphs(text: str) -> list[Span]:
    return _split(text, 0, len(text), _BLANK_LINE)


def _count_words(text: str, start: int, end: int) -> int:
    return sum(1 for _ in _WORD.finditer(text, start, end))


def _pack(sentences: list[Span], max_words: int, text: str) -> list[Span]:
    """Join consecutive sentences while the chunk stays within max_words words; a sentence longer
    than that on its own is cut into windows of max_words words so no chunk exceeds the limit."""
    spans: list[Span] = []
    current: Span | None = None
    current_words = 0
    for start, end in sentences:
        words = _count_words(text, start, end)
        if current is not None and current_words + words <= max_words:
            current = (current[0], end)
            current_words += words
            continue
        if current is not None:
            spans.append(current)
            current = None
        if words > max_words:
            spans.extend(_windows([m.span() for m in _WORD.finditer(text, start, end)], max_words, 0))
        else:
            current, current_words = (start, end), words
    if current is not None:
        spans.append(current)
    return spans


def _unit_pattern(unit: str) -> re.Pattern[str]:
    return _WORD if unit == "words" else _token_pattern()


@lru_cache(maxsize=1)
def _token_pattern() -> re.Pattern[str]:
    r"""`\w+|[^\w\s]`, extended so combining marks stay inside words.

    Python's `\w` excludes combining marks, so Devanagari vowel signs and viramas would each
    become a token of their own ("हिंदी" -> 5 tokens). This only approximates a model's
    subword tokens: use it to bound chunk length roughly, not to count tokens exactly.
    """
    ranges = []
    start = None
    for cp in range(sys.maxunicode + 2):
        is_mark = cp <= sys.maxunicode and unicodedata.category(chr(cp))[0] == "M"
        if is_mark and start is None:
            start = cp
        elif not is_mark and start is not None:
            ranges.append(f"{re.escape(chr(start))}-{re.escape(chr(cp - 1))}")
            start = None
    marks = "".join(ranges)
    return re.compile(rf"[\w{marks}]+|[^\w\s{marks}]")
