"""Hard negatives for fine-tuning: (query, relevant document, non-relevant document the provider
ranked above it) triples from the train split (the dev split when there is no train query), as
sentence-transformers triplet JSONL.

The held-out test split is never mined: a model tuned on its own test queries would make every
later benchmark on them meaningless, so asking for them is an error, not a filter; and a
train/dev query whose text is a test query's (the same question under another id) is left out.
"""
from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from retbench.tasks.analysis.runs import trec_order
from retbench.tasks.datasets.document_text import document_text
from retbench.tasks.datasets.model import Dataset
from retbench.tasks.store.files import write_text

# The splits mining may take its queries from, in order of preference: train when the dataset has
# train queries, else dev (mining_split).
MINING_SPLITS = ("train", "dev")
HELD_OUT_SPLIT = "test"
log = logging.getLogger("retbench.hard_negatives")
# sentence-transformers reads the columns of a triplet dataset in this order (anchor, positive, negative).
TRIPLET_KEYS = ("anchor", "positive", "negative")

PAIR_SCHEMA = {
    "query_id": pl.String,
    "positive_id": pl.String,
    "positive_rank": pl.Int64,  # null: the relevant document was not retrieved at all
    "positive_grade": pl.Int64,
    "negative_id": pl.String,
    "negative_rank": pl.Int64,
    "anchor": pl.String,
    "positive": pl.String,
    "negative": pl.String,
}


class HeldOutSplitError(ValueError):
    """Hard negatives were asked for from the held-out test split."""


def mining_split(queries: pl.DataFrame, override: str | None = None) -> str:
    """The split mining and fine-tuning take their queries from: `override` ("train" or "dev")
    when given, else "train" when `queries` hold a train query, else "dev"."""
    if override is None:
        return "train" if (queries["split"] == "train").any() else "dev"
    if override == HELD_OUT_SPLIT:
        raise HeldOutSplitError(f"hard negatives come from the {' or '.join(map(repr, MINING_SPLITS))} split "
                                f"(asked for {override!r}); the {HELD_OUT_SPLIT!r} split is held out and must "
                                "never be trained on")
    if override not in MINING_SPLITS:
        raise ValueError(f"unknown mining split {override!r}; expected one of {list(MINING_SPLITS)}")
    return override


def normalised_query_text(text: str) -> str:
    """A query's text as compared with the test queries': Unicode NFKC, case-folded, runs of
    white space made one space, trimmed ("Refund  Time " and "refund time" are one question)."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


@dataclass(frozen=True)
class MiningQueries:
    """The queries mining takes: those of `split`, less any whose text is a test query's."""

    split: str
    queries: pl.DataFrame  # the dataset's query rows that are mined
    same_text_as_test: tuple[str, ...]  # ids of `split` queries left out: their text is a test query's


def mining_queries(queries: pl.DataFrame, split: str | None = None,
                   query_ids: Sequence[str] | None = None) -> MiningQueries:
    """The queries of the mining split (mining_split: train, else dev; `split` overrides), or
    of `query_ids` (each must be in that split), without those whose normalised text is a test
    query's; how many those were is logged and returned.

    Raises HeldOutSplitError for the test split or a selected test query."""
    chosen = mining_split(queries, split)
    if query_ids is not None:
        wanted = list(dict.fromkeys(query_ids))
        split_of = dict(queries.select("query_id", "split").iter_rows())
        unknown = [q for q in wanted if q not in split_of]
        if unknown:
            raise ValueError(f"queries not in the dataset: {unknown[:5]} ({len(unknown)} in all)")
        held_out = [q for q in wanted if split_of[q] == HELD_OUT_SPLIT]
        if held_out:
            raise HeldOutSplitError(
                f"{len(held_out)} selected queries are in the held-out {HELD_OUT_SPLIT!r} split "
                f"(first: {held_out[0]!r}); hard negatives come from the {chosen!r} split only"
            )
        elsewhere = [q for q in wanted if split_of[q] != chosen]
        if elsewhere:
            raise ValueError(f"{len(elsewhere)} selected queries are not in the {chosen!r} split being mined "
                             f"(first: {elsewhere[0]!r}, split {split_of[elsewhere[0]]!r})")
        queries_in = queries.filter(pl.col("query_id").is_in(wanted))
    else:
        queries_in = queries
    mined = queries_in.filter(pl.col("split") == chosen)
    if mined.height == 0:
        raise ValueError(f"no {chosen!r} queries to mine (the dataset holds splits {sorted(queries['split'].unique().to_list())})")
    test_texts = {normalised_query_text(t) for t in queries.filter(pl.col("split") == HELD_OUT_SPLIT)["text"].to_list()}
    leaked = [q for q, text in mined.select("query_id", "text").iter_rows() if normalised_query_text(text) in test_texts]
    if leaked:
        log.warning("%d %r queries left out of mining: their text is a %r query's (first: %r)",
                    len(leaked), chosen, HELD_OUT_SPLIT, leaked[0])
    return MiningQueries(chosen, mined.filter(~pl.col("query_id").is_in(leaked)), tuple(leaked))


def hard_negative_pairs(run: pl.DataFrame, dataset: Dataset, provider: str, index: str = "flat",
                        nprobe: int | None = None, max_per_query: int = 5, split: str | None = None,
                        query_ids: Sequence[str] | None = None, relevance_level: int = 1,
                        include_unretrieved: bool = True, mined: MiningQueries | None = None) -> pl.DataFrame:
    """The triples with their provenance (PAIR_SCHEMA), ordered by query id and negative rank.

    The queries are mining_queries' (the train split, else dev; `split` "train" or "dev"
    overrides; never a test query, nor one with a test query's text), or `mined`, when the
    caller has chosen them already (and reports what was left out). For each query, the
    negatives are the documents that are judged below `relevance_level`
    or unjudged and ranked above at least one relevant document, best ranked first, at most
    `max_per_query`. Each is paired with the highest-graded relevant document ranked below it
    (the better ranked on a tie). With `include_unretrieved`, a relevant document the run did
    not retrieve counts as ranked below everything. A negative whose text equals its
    positive's (a duplicate document) is skipped.

    Raises HeldOutSplitError if `split` is "test" or a query of `query_ids` is a test query.
    """
    if max_per_query < 1:
        raise ValueError(f"max_per_query must be >= 1 (got {max_per_query})")
    queries = (mined or mining_queries(dataset.queries, split, query_ids)).queries

    setting = _setting(run, provider, index, nprobe)
    judged = dataset.qrels.select("query_id", "doc_id", pl.col("grade").cast(pl.Int64))
    ranked = (
        trec_order(setting.select("query_id", "doc_id", pl.col("score").cast(pl.Float64)))
        .join(queries.select("query_id"), on="query_id", how="semi")
        .join(judged, on=["query_id", "doc_id"], how="left")
    )
    negatives = ranked.filter(pl.col("grade").fill_null(0) < relevance_level).select(
        "query_id", negative_id="doc_id", negative_rank="rank")
    positives = (
        judged.filter(pl.col("grade") >= relevance_level)
        .join(queries.select("query_id"), on="query_id", how="semi")
        .join(ranked.select("query_id", "doc_id", "rank"), on=["query_id", "doc_id"], how="left")
        .select("query_id", positive_id="doc_id", positive_rank="rank", positive_grade="grade")
    )
    if not include_unretrieved:
        positives = positives.filter(pl.col("positive_rank").is_not_null())
    below = pl.col("positive_rank").is_null() | (pl.col("positive_rank") > pl.col("negative_rank"))
    candidates = negatives.join(positives, on="query_id", how="inner").filter(below)
    texts = _texts(dataset.corpus, pl.concat([candidates["positive_id"], candidates["negative_id"]]))
    pairs = (
        candidates
        .join(texts.rename({"doc_id": "positive_id", "text": "positive"}), on="positive_id", how="left")
        .join(texts.rename({"doc_id": "negative_id", "text": "negative"}), on="negative_id", how="left")
        .filter(pl.col("positive") != pl.col("negative"))
        # best positive for each negative: highest grade, then best rank (unretrieved last)
        .sort(["query_id", "negative_rank", "positive_grade", "positive_rank"],
              descending=[False, False, True, False], nulls_last=True)
        .unique(subset=["query_id", "negative_id"], keep="first", maintain_order=True)
        .group_by("query_id", maintain_order=True).head(max_per_query)
        .join(queries.select("query_id", anchor="text"), on="query_id", how="left")
    )
    return pairs.select(list(PAIR_SCHEMA)).cast(PAIR_SCHEMA)


def hard_negative_triples(run: pl.DataFrame, dataset: Dataset, provider: str, index: str = "flat",
                          max_per_query: int = 5, **options) -> list[dict]:
    """[{"anchor": query, "positive": document, "negative": document}, ...] from the train (else dev) split;
    `options` go to hard_negative_pairs (nprobe, split, query_ids, relevance_level, include_unretrieved)."""
    pairs = hard_negative_pairs(run, dataset, provider, index, max_per_query=max_per_query, **options)
    return pairs.select(TRIPLET_KEYS).to_dicts()


def write_triples(path: str | Path, triples: Sequence[dict]) -> Path:
    """One JSON object per line with exactly anchor, positive, negative: what
    `datasets.load_dataset("json", data_files=...)` hands to a sentence-transformers triplet loss
    (extra columns would be taken as more inputs)."""
    lines = []
    for i, triple in enumerate(triples):
        if set(triple) != set(TRIPLET_KEYS):
            raise ValueError(f"triple {i} has keys {sorted(triple)}; expected exactly {list(TRIPLET_KEYS)}")
        lines.append(json.dumps({key: triple[key] for key in TRIPLET_KEYS}, ensure_ascii=False))
    return write_text(path, "".join(line + "\n" for line in lines))


def _texts(corpus: pl.DataFrame, doc_ids: pl.Series) -> pl.DataFrame:
    """doc_id, text (title + blank line + text, as the chunker sees a document) of the given documents."""
    needed = corpus.filter(pl.col("doc_id").is_in(doc_ids.unique().implode()))
    missing = set(doc_ids.unique().to_list()) - set(needed["doc_id"].to_list())
    if missing:
        raise ValueError(f"run retrieves documents not in the dataset's corpus: {sorted(missing)[:5]} ({len(missing)} in all)")
    texts = [document_text(title, text) for title, text in needed.select("title", "text").iter_rows()]
    return pl.DataFrame({"doc_id": needed["doc_id"], "text": pl.Series(texts, dtype=pl.String)})


def _setting(run: pl.DataFrame, provider: str, index: str, nprobe: int | None) -> pl.DataFrame:
    missing = [c for c in ("provider", "index", "nprobe", "query_id", "doc_id", "score") if c not in run.columns]
    if missing:
        raise ValueError(f"run: missing columns {missing} (found {run.columns})")
    nprobe_match = pl.col("nprobe").is_null() if nprobe is None else pl.col("nprobe") == nprobe
    chosen = run.filter((pl.col("provider") == provider) & (pl.col("index") == index) & nprobe_match)
    if chosen.height == 0:
        found = sorted({f"{p}/{i}/{n if n is not None else 'exact'}" for p, i, n in run.select("provider", "index", "nprobe").unique().rows()})
        raise ValueError(f"run has no rows for provider {provider!r}, index {index!r}, nprobe {nprobe!r} (found {found})")
    return chosen
