"""The split fine-tuning mines: train when the dataset has train queries, else dev, or the
provider's source_split; never a test query, by id or by text (tasks/stages/finetune*.py)."""
from types import SimpleNamespace

import polars as pl
import pytest

from retbench.tasks.analysis.hard_negatives import HeldOutSplitError
from retbench.tasks.stages.finetune import FinetuneInputError, check_training_queries
from retbench.tasks.stages.finetune_step import enough_dev_queries, queries_with_a_positive

QUERIES = pl.DataFrame({"query_id": ["a1", "a2", "a3", "v1", "v2", "t1"],
                        "text": ["alpha", "beta", "gamma", "delta", "epsilon", "what is lift"],
                        "split": ["train", "train", "train", "dev", "dev", "test"]})
# a3 judges nothing relevant: only a1 and a2 can yield triples from train.
QRELS = pl.DataFrame({"query_id": ["a1", "a2", "a3", "v1", "v2", "t1"], "doc_id": ["d"] * 6, "grade": [1, 2, 0, 1, 1, 1]})


def _spec(**options):
    tuned = SimpleNamespace(name="ft", kind="finetuned", options={"base": "m", **options})
    return SimpleNamespace(providers=[SimpleNamespace(name="m", kind="sentence-transformers", options={}), tuned])


def test_the_preflight_counts_the_split_that_will_be_mined():
    assert queries_with_a_positive(QUERIES, QRELS, "train") == 2
    assert queries_with_a_positive(QUERIES, QRELS, "dev") == 2
    # min_triples 3 at max_per_query 1 needs 3 judged queries: train has 2.
    with pytest.raises(FinetuneInputError, match=r"providers\[1\]\.options: here has 2 'train'-split queries with a "
                                                 r"relevant judgment, but provider 'ft' needs at least 3"):
        enough_dev_queries(_spec(min_triples=3, max_per_query=1), QUERIES, QRELS, "here")
    enough_dev_queries(_spec(min_triples=2, max_per_query=1), QUERIES, QRELS, "here")
    # Without train queries the dev split is the one counted, and source_split names it outright.
    no_train = QUERIES.filter(pl.col("split") != "train")
    with pytest.raises(FinetuneInputError, match=r"has 2 'dev'-split queries"):
        enough_dev_queries(_spec(min_triples=3, max_per_query=1), no_train, QRELS, "here")
    with pytest.raises(FinetuneInputError, match=r"has 0 'train'-split queries"):
        enough_dev_queries(_spec(min_triples=1, source_split="train"), no_train, QRELS, "here")
    with pytest.raises(FinetuneInputError, match=r"has 2 'dev'-split queries"):
        enough_dev_queries(_spec(min_triples=3, max_per_query=1, source_split="dev"), QUERIES, QRELS, "here")


def test_the_last_guard_takes_only_the_mined_split_and_never_a_test_text():
    train_pairs = pl.DataFrame({"query_id": ["a1", "a2"], "anchor": ["alpha", "beta"]})
    check_training_queries(train_pairs, QUERIES)  # train is present, so train is the split
    dev_pairs = pl.DataFrame({"query_id": ["v1"], "anchor": ["delta"]})
    with pytest.raises(HeldOutSplitError, match=r"1 training queries are not in the 'train' split \(first: 'v1', split 'dev'\)"):
        check_training_queries(dev_pairs, QUERIES)
    check_training_queries(dev_pairs, QUERIES, "dev")
    with pytest.raises(HeldOutSplitError, match="not in the 'train' split .*split 'test'"):
        check_training_queries(pl.DataFrame({"query_id": ["t1"], "anchor": ["what is lift"]}), QUERIES)
    smuggled = pl.DataFrame({"query_id": ["a1"], "anchor": ["What  is LIFT "]})
    with pytest.raises(HeldOutSplitError, match="training query 'a1' has the text of a 'test'-split query"):
        check_training_queries(smuggled, QUERIES)
