"""A text's language guessed from its script, for data that does not say its language.

Only the script is looked at, so a label is given only where the script names the language as
far as this benchmark can tell: Latin -> "en", Devanagari -> "hi" (the two languages the project's
collections hold), kana -> "ja", Hangul -> "ko". A script several languages share is labelled
with the BCP 47 code of an undetermined language in that script: Arabic script (Arabic, Urdu,
Persian) -> "und-Arab", Cyrillic -> "und-Cyrl", Han alone (Chinese, or Japanese kanji) ->
"und-Hani", Greek, Hebrew, Thai likewise. No script holding most of the letters, or no letters
at all -> "und". Hinglish (Hindi in Latin letters) cannot be told from English this way and is
"en"; a collection that knows better carries its language in the data (the JSONL `language` field).
"""

from __future__ import annotations

import unicodedata

# (first, last code point, script code); the letters of the scripts this benchmark tells apart.
_RANGES = (
    (0x0041, 0x024F, "Latn"), (0x1E00, 0x1EFF, "Latn"), (0xFF21, 0xFF5A, "Latn"),
    (0x0370, 0x03FF, "Grek"), (0x1F00, 0x1FFF, "Grek"),
    (0x0400, 0x052F, "Cyrl"),
    (0x0590, 0x05FF, "Hebr"),
    (0x0600, 0x06FF, "Arab"), (0x0750, 0x077F, "Arab"), (0x08A0, 0x08FF, "Arab"), (0xFB50, 0xFDFF, "Arab"),
    (0xFE70, 0xFEFF, "Arab"),
    (0x0900, 0x097F, "Deva"), (0xA8E0, 0xA8FF, "Deva"),
    (0x0E00, 0x0E7F, "Thai"),
    (0x1100, 0x11FF, "Hang"), (0x3130, 0x318F, "Hang"), (0xAC00, 0xD7AF, "Hang"),
    (0x3040, 0x309F, "Kana"), (0x30A0, 0x30FF, "Kana"), (0x31F0, 0x31FF, "Kana"), (0xFF66, 0xFF9F, "Kana"),
    (0x3400, 0x4DBF, "Hani"), (0x4E00, 0x9FFF, "Hani"), (0xF900, 0xFAFF, "Hani"), (0x20000, 0x2FA1F, "Hani"),
)
# The script's language where the script tells it (see the module docstring).
_LANGUAGE = {"Latn": "en", "Deva": "hi"}
_CJK = ("Hani", "Kana", "Hang")
UNDETERMINED = "und"


def script_of(ch: str) -> str | None:
    """The script code of one character among those of _RANGES, else None."""
    code = ord(ch)
    for first, last, script in _RANGES:
        if first <= code <= last:
            return script
    return None


def detect_language(text: str) -> str:
    """The label of the script most letters of `text` are in (more than half of them), as the
    module docstring lists; "und" when no script has that majority or there is no letter.

    Letters are characters of Unicode category L* or M*: Devanagari vowel signs are combining
    marks (M*), and leaving them out would undercount Hindi words by about half; a combining
    accent outside every script's block counts with the letter before it. Japanese mixes
    kanji with kana and Korean may mix Hanja with Hangul, so the CJK scripts are counted
    together: any kana makes it "ja", else any Hangul "ko", else "und-Hani".
    """
    letters = 0
    counts: dict[str | None, int] = {}
    previous = None
    for ch in text:
        category = unicodedata.category(ch)
        if category[0] in "LM":
            letters += 1
            script = script_of(ch)
            if script is None and category[0] == "M":  # a combining accent (U+0301) is its base letter's
                script = previous
            counts[script] = counts.get(script, 0) + 1
            previous = script
    cjk = sum(counts.get(s, 0) for s in _CJK)
    if cjk * 2 > letters:
        return "ja" if counts.get("Kana") else "ko" if counts.get("Hang") else "und-Hani"
    for script, count in counts.items():
        if script is not None and count * 2 > letters:
            return _LANGUAGE.get(script, f"{UNDETERMINED}-{script}")
    return UNDETERMINED
