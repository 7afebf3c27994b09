"""Unicode normalisation of titles and texts as read, before validation (dataset.unicode)."""
from __future__ import annotations

import unicodedata

from retbench.tasks.datasets.model import RawCollection

# NFC by default: the same words typed on two systems (é as one code point or as e + U+0301)
# are then the same text, with the same cache keys, tokens and scores; "raw" keeps the bytes.
# nfc_strip_joiners also removes the zero-width joiner and non-joiner (U+200D, U+200C): in
# Devanagari they only choose a glyph (क्‍ष vs क्ष), so one Hindi word typed three ways becomes
# one text, one cache row and one set of tokens. (In Persian or Malayalam ZWNJ can tell words
# apart, which is why folding is an option and not the default.)
UNICODE_FORMS = ("nfc", "raw", "nfc_strip_joiners")
JOINERS = ("\u200c", "\u200d")
_STRIP_JOINERS = str.maketrans("", "", "".join(JOINERS))


def has_joiner(text: str) -> bool:
    return "\u200c" in text or "\u200d" in text


def normalised(text: str, form: str) -> str:
    """`text` in Unicode form `form` (one of UNICODE_FORMS)."""
    if form == "raw":
        return text
    text = unicodedata.normalize("NFC", text)
    return text.translate(_STRIP_JOINERS) if form == "nfc_strip_joiners" else text


def normalise_text(raw: RawCollection, form: str) -> None:
    """Rewrite the rows' titles and texts in `form`, noting what changed and, in every form, how
    many documents and queries hold a joiner (before folding)."""
    joined_docs = sum(has_joiner(title) or has_joiner(text) for _, title, text, _ in raw.docs)
    joined_queries = sum(has_joiner(text) for _, text, *_ in raw.queries)
    if form == "raw":
        raw.notes.append("text kept as read (dataset.unicode: raw, no Unicode normalisation)")
    else:
        docs = [(i, normalised(title, form), normalised(text, form), language) for i, title, text, language in raw.docs]
        queries = [(i, normalised(text, form), *rest) for i, text, *rest in raw.queries]
        changed_docs = sum(a != b for a, b in zip(docs, raw.docs))
        changed_queries = sum(a != b for a, b in zip(queries, raw.queries))
        raw.docs, raw.queries = docs, queries
        what = "Unicode NFC, zero-width joiners removed" if form == "nfc_strip_joiners" else "Unicode NFC"
        raw.notes.append(f"text normalised to {what} (dataset.unicode: {form}): {changed_docs} documents and "
                         f"{changed_queries} queries changed")
    if joined_docs or joined_queries:
        fate = ("removed, so spellings with and without them are one text" if form == "nfc_strip_joiners" else
                "kept, so spellings with and without them are separate texts and cache rows; "
                "dataset.unicode: nfc_strip_joiners folds them")
        raw.notes.append(f"{JOINER_NOTE}: {joined_docs} documents and {joined_queries} queries contain one; {fate}")


JOINER_NOTE = "zero-width joiners (U+200C ZWNJ, U+200D ZWJ)"
