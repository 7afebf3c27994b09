"""Unicode normalisation of titles and texts as read, before validation (dataset.unicode)."""
from __future__ import annotations

import functools
import unicodedata

from tasks.datasets.model import RawCollection

# NFC by default: the same words typed on two systems (é as one code point or as e + U+0301)
# are then the same text, with the same cache keys, tokens and scores; "raw" keeps the bytes.
UNICODE_FORMS = ("nfc", "raw")


def normalise_text(raw: RawCollection, form: str) -> None:
    if form == "raw":
        raw.notes.append("text kept as read (dataset.unicode: raw, no Unicode normalisation)")
        return
    nfc = functools.partial(unicodedata.normalize, "NFC")
    docs = [(i, nfc(title), nfc(text), language) for i, title, text, language in raw.docs]
    queries = [(i, nfc(text), *rest) for i, text, *rest in raw.queries]
    changed_docs = sum(a != b for a, b in zip(docs, raw.docs))
    changed_queries = sum(a != b for a, b in zip(queries, raw.queries))
    raw.docs, raw.queries = docs, queries
    raw.notes.append(f"text normalised to Unicode NFC (dataset.unicode: nfc): {changed_docs} documents and "
                     f"{changed_queries} queries changed")
