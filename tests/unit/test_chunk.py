import polars as pl
import pytest

from retbench.tasks.datasets.document_text import document_text
from retbench.tasks.stages.chunk import CHUNK_SCHEMA, ChunkConfig, chunk_corpus, chunk_spans

ENGLISH = (
    "The wing was tested in a slipstream. Lift rose with the angle of attack!\n\n"
    "A second paragraph follows here. Does it split at 3.5 degrees or not? It should not.\n"
    "  \n"
    "Third paragraph, one sentence only"
)
HINDI = "भारत एक विशाल देश है। यहाँ अनेक भाषाएँ बोली जाती हैं। हिंदी सबसे अधिक बोली जाती है॥ क्या यह सही है?"

CONFIGS = [
    ChunkConfig("none"),
    ChunkConfig("fixed", size=5, overlap=2),
    ChunkConfig("fixed", size=7, overlap=3, unit="tokens"),
    ChunkConfig("sentence", max_words=12),
    ChunkConfig("paragraph", max_words=10),
]


def corpus() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_id": ["en-1", "hi-1", "empty"],
            "title": ["Wings", "", ""],
            "text": [ENGLISH, HINDI, "  \n "],
            "language": ["en", "hi", "en"],
        }
    )


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_offsets_reproduce_text_and_ids_are_stable(config):
    first = chunk_corpus(corpus(), config)
    assert first.schema == pl.Schema(CHUNK_SCHEMA)
    assert first.equals(chunk_corpus(corpus(), config))
    sources = {row["doc_id"]: document_text(row["title"], row["text"]) for row in corpus().iter_rows(named=True)}
    for row in first.iter_rows(named=True):
        assert row["text"] == sources[row["doc_id"]][row["start"]:row["end"]]
        assert row["text"].strip() == row["text"] != ""
        assert row["chunk_id"] == f"{row['doc_id']}#{row['chunk_index']}"
    assert set(first["doc_id"]) == {"en-1", "hi-1"}  # a whitespace-only document yields no chunk
    for doc_id, group in first.group_by("doc_id"):
        assert group["chunk_index"].to_list() == list(range(group.height))
    assert first.filter(pl.col("doc_id") == "hi-1")["language"].unique().to_list() == ["hi"]


def test_document_text_joins_title_and_text():
    assert document_text("T", "body") == "T\n\nbody"
    assert document_text("", "body") == "body"
    assert document_text(None, "body") == "body"
    assert document_text("T", "") == "T"


def test_fixed_word_windows_overlap():
    text = " ".join(f"w{i}" for i in range(11))  # w0 .. w10
    spans = chunk_spans(text, ChunkConfig("fixed", size=4, overlap=1))
    # step 3: w0-w3, w3-w6, w6-w9, w9-w10 (the last window is short and ends the text)
    assert [text[s:e] for s, e in spans] == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9", "w9 w10"]


def test_fixed_window_stops_when_text_is_covered():
    text = " ".join(f"w{i}" for i in range(10))
    spans = chunk_spans(text, ChunkConfig("fixed", size=4, overlap=1))
    # w9 is already in the third window: no fourth window holding only w9
    assert [text[s:e] for s, e in spans] == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]


def test_tokens_keep_devanagari_words_whole():
    text = "हिंदी भाषा, ठीक।"
    spans = chunk_spans(text, ChunkConfig("fixed", size=1, overlap=0, unit="tokens"))
    assert [text[s:e] for s, e in spans] == ["हिंदी", "भाषा", ",", "ठीक", "।"]


def test_sentences_split_at_danda():
    # 5, 6, 6 and 4 words: with max 6 no two sentences fit together, so each chunk is one sentence
    spans = chunk_spans(HINDI, ChunkConfig("sentence", max_words=6))
    assert [HINDI[s:e] for s, e in spans] == [
        "भारत एक विशाल देश है।",
        "यहाँ अनेक भाषाएँ बोली जाती हैं।",
        "हिंदी सबसे अधिक बोली जाती है॥",
        "क्या यह सही है?",
    ]


def test_sentence_packing_respects_max_words():
    spans = chunk_spans(HINDI, ChunkConfig("sentence", max_words=11))  # 5+6 fit, 6+4 fit
    texts = [HINDI[s:e] for s, e in spans]
    assert texts == [
        "भारत एक विशाल देश है। यहाँ अनेक भाषाएँ बोली जाती हैं।",
        "हिंदी सबसे अधिक बोली जाती है॥ क्या यह सही है?",
    ]


def test_decimal_point_does_not_end_a_sentence():
    text = "It turns at 3.5 degrees. Then it stops."
    spans = chunk_spans(text, ChunkConfig("sentence", max_words=5))
    assert [text[s:e] for s, e in spans] == ["It turns at 3.5 degrees.", "Then it stops."]


def test_overlong_sentence_is_cut_to_max_words():
    text = "one two three four five six seven."
    spans = chunk_spans(text, ChunkConfig("sentence", max_words=3))
    assert [text[s:e] for s, e in spans] == ["one two three", "four five six", "seven."]


def test_paragraphs_split_on_blank_lines_and_long_ones_by_sentence():
    # paragraphs of 14, 16 and 5 words: only the second is over the limit
    spans = chunk_spans(ENGLISH, ChunkConfig("paragraph", max_words=14))
    assert [ENGLISH[s:e] for s, e in spans] == [
        "The wing was tested in a slipstream. Lift rose with the angle of attack!",
        "A second paragraph follows here. Does it split at 3.5 degrees or not?",
        "It should not.",
        "Third paragraph, one sentence only",
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "semantic"}, "strategy 'semantic' is unknown"),
        ({"strategy": "fixed", "size": 40, "overlap": 40}, "overlap 40 must be >= 0 and < size 40"),
        ({"strategy": "fixed", "size": 0}, "size 0 must be > 0"),
        ({"strategy": "fixed", "size": 10, "overlap": -1}, "overlap -1"),
        ({"strategy": "fixed", "unit": "chars"}, "unit 'chars' is unknown"),
        ({"strategy": "sentence", "max_words": 0}, "max_words 0 must be > 0"),
    ],
)
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ChunkConfig(**kwargs)


def test_config_name_holds_only_what_matters():
    assert ChunkConfig("fixed", size=100, overlap=20).name == "fixed_words-100_overlap-20"
    assert ChunkConfig("sentence", size=100, max_words=50).name == "sentence_max-words-50"
    assert ChunkConfig("none", size=7).name == "none"  # fixed-window settings are not checked here


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match=r"missing columns \['language'\]"):
        chunk_corpus(pl.DataFrame({"doc_id": ["a"], "text": ["x"]}), ChunkConfig("none"))
