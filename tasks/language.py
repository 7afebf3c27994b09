"""Tell Hindi from English by script, for data that does not say its language.

Only the script is looked at. Hinglish (Hindi written in Latin letters) is indistinguishable
from English this way, so it is detected as "en"; a Hinglish collection must carry its
language in the data (the `language` field of the project's JSONL format).
"""

from __future__ import annotations

import unicodedata

_DEVANAGARI = range(0x0900, 0x0980)


def detect_language(text: str) -> str:
    """Return "hi" when most letters of `text` are Devanagari, else "en".

    Letters are characters of Unicode category L* or M*: Devanagari vowel signs are
    combining marks (M*), and leaving them out would undercount Hindi words by about half.
    Text with no letters at all (empty, digits, punctuation) counts as "en".
    """
    letters = 0
    devanagari = 0
    for ch in text:
        if unicodedata.category(ch)[0] in "LM":
            letters += 1
            if ord(ch) in _DEVANAGARI:
                devanagari += 1
    return "hi" if devanagari * 2 > letters else "en"
