import pytest

from retbench.tasks.language import detect_language


@pytest.mark.parametrize("text, label", [
    ("The Panthers won", "en"),
    ("aap kaise ho", "en"),  # Hinglish: Latin script, not told from English
    ("cafe\u0301 noir", "en"),  # a combining accent counts with its Latin letter
    ("हिंदी सबसे अधिक बोली जाती है", "hi"),
    ("مرحبا بالعالم", "und-Arab"),  # Arabic, Urdu and Persian share the script
    ("یہ اردو ہے", "und-Arab"),
    ("Привет мир", "und-Cyrl"),
    ("東京大学", "und-Hani"),  # Han alone: Chinese, or Japanese kanji
    ("東京の大学", "ja"),  # any kana
    ("서울 대학교", "ko"),
    ("Ελληνικά", "und-Grek"),
    ("NFL में", "und"),  # 3 Latin letters, 3 Devanagari (म, े, ं): no majority
    ("42 !", "und"),
    ("", "und"),
])
def test_language_by_script(text, label):
    assert detect_language(text) == label


def test_joiner_spellings_fold_to_one_text_and_one_cache_key_and_are_counted_either_way():
    from retbench.tasks.datasets.model import RawCollection
    from retbench.tasks.datasets.normalise import normalise_text
    from retbench.tasks.stages.embed import cache_key

    # क्ष (kṣa) as typed plainly, with a ZWJ and with a ZWNJ after the virama: one word, three strings.
    spellings = ["क्षमा", "क्\u200dषमा", "क्\u200cषमा"]

    def raw():
        return RawCollection("t", [(f"d{i}", "", s, "hi") for i, s in enumerate(spellings)],
                             [("q", spellings[1], "hi", "c", "test")], [], "c.jsonl", "q.jsonl", [])

    kept, folded = raw(), raw()
    normalise_text(kept, "nfc")
    normalise_text(folded, "nfc_strip_joiners")
    assert len({cache_key("fp", "document", text) for _, _, text, _ in kept.docs}) == 3
    assert len({cache_key("fp", "document", text) for _, _, text, _ in folded.docs}) == 1
    assert folded.queries[0][1] == spellings[0]
    assert "2 documents and 1 queries contain one; kept" in kept.notes[-1]
    assert "2 documents and 1 queries contain one; removed" in folded.notes[-1]
    assert "2 documents and 1 queries changed" in folded.notes[-2]
