"""The data audit: documents that are one text under several ids (and the judged copies that lose
ties to their unjudged twins), the languages the texts are labelled with, zero-width joiners, and
the control characters replaced at load."""
from __future__ import annotations

import re
import unicodedata
from collections import Counter

import polars as pl

from retbench.tasks.datasets.document_text import document_text

DUPLICATE_NORMALISATION = ("title and text as chunked (title, blank line, text), Unicode NFC, zero-width "
                           "joiners removed, case-folded, every run of white space one space, trimmed")
# trec_eval's order, which the scorer keeps (tasks/analysis/metrics.py): duplicates embed to one
# vector, so they always tie, and the twin with the larger id ranks first.
TIE_ORDER = "score descending, then doc id descending (byte-wise), as trec_eval orders ties"
EXAMPLES = 20  # duplicate groups listed in the manifest and the report (judged ones first)
_SPACE = re.compile(r"\s+")


def duplicate_key(title: str | None, text: str | None) -> str:
    """The text two documents must share to count as duplicates (DUPLICATE_NORMALISATION)."""
    folded = unicodedata.normalize("NFC", document_text(title, text)).replace("\u200c", "").replace("\u200d", "")
    return _SPACE.sub(" ", folded.casefold()).strip()


def first_on_tie(doc_ids: list[str]) -> str:
    """The id trec_eval ranks first among documents of one score: the largest, compared as bytes."""
    return max(doc_ids, key=lambda doc_id: doc_id.encode("utf-8"))


def duplicate_groups(corpus: pl.DataFrame, judged: set[str]) -> list[dict]:
    """Groups of two or more ids with one normalised text, judged groups first, then by their
    first id: ids sorted, the judged ones, the id that ranks first on a tie, and whether a judged
    id loses that tie to an unjudged one (then the judged copy ranks below a twin the qrels do not
    know, and the run is scored as if it had missed it)."""
    ids_by_text: dict[str, list[str]] = {}
    for doc_id, title, text in corpus.select("doc_id", "title", "text").iter_rows():
        ids_by_text.setdefault(duplicate_key(title, text), []).append(doc_id)
    groups = []
    for ids in ids_by_text.values():
        if len(ids) < 2:
            continue
        ids = sorted(ids)
        judged_ids = [i for i in ids if i in judged]
        winner = first_on_tie(ids)
        groups.append({"doc_ids": ids, "judged": judged_ids, "first_on_tie": winner,
                       "judged_loses_ties": bool(judged_ids) and winner not in judged_ids})
    return sorted(groups, key=lambda g: (not g["judged"], g["doc_ids"][0]))


def lost_ties(runs: pl.DataFrame, qrels: pl.DataFrame, groups: list[dict]) -> dict[str, int]:
    """Per setting, the (query, relevant document) pairs ranked below a duplicate the query has no
    judgment for (or missing from the run while that twin is in it)."""
    members = [(g_index, doc_id) for g_index, g in enumerate(groups) if g["judged"] for doc_id in g["doc_ids"]]
    if not members or runs.is_empty():
        return {}
    group_of = pl.DataFrame(members, schema={"group": pl.Int64, "doc_id": pl.String}, orient="row")
    relevant = (qrels.filter(pl.col("grade") > 0).select("query_id", "doc_id")
                .join(group_of, on="doc_id").rename({"doc_id": "judged_id"}))
    judged_pairs = qrels.select("query_id", "doc_id").unique()
    ranked = runs.select("setting", "query_id", "doc_id", "rank").join(group_of, on="doc_id")
    twins = (ranked.join(judged_pairs, on=["query_id", "doc_id"], how="anti")  # the query has no judgment for the twin
             .join(relevant, on=["query_id", "group"]).filter(pl.col("doc_id") != pl.col("judged_id")))
    judged_rank = ranked.select("setting", "query_id", pl.col("doc_id").alias("judged_id"), pl.col("rank").alias("judged_rank"))
    lost = (twins.join(judged_rank, on=["setting", "query_id", "judged_id"], how="left")
            .filter(pl.col("judged_rank").is_null() | (pl.col("rank") < pl.col("judged_rank")))
            .select("setting", "query_id", "judged_id").unique())
    counts = lost.group_by("setting").len().sort("setting")
    return dict(zip(counts["setting"].to_list(), counts["len"].to_list()))


def label_counts(frame: pl.DataFrame) -> dict[str, int]:
    """Texts per language label, most frequent first (ties by label)."""
    counts = Counter(frame["language"].to_list())
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def data_audit(corpus: pl.DataFrame, queries: pl.DataFrame, qrels: pl.DataFrame, *, unicode: str,
               notes: tuple[str, ...] = (), runs: pl.DataFrame | None = None) -> dict:
    """The manifest's `data_audit` (docs/reference/tables.md): duplicates, language labels, joiners,
    control characters replaced at load."""
    from retbench.tasks.datasets.controls import control_counts
    from retbench.tasks.datasets.normalise import JOINER_NOTE, has_joiner

    groups = duplicate_groups(corpus, set(qrels["doc_id"].to_list()))
    duplicates = {
        "normalisation": DUPLICATE_NORMALISATION,
        "tie_order": TIE_ORDER,
        "groups": len(groups),
        "documents": sum(len(g["doc_ids"]) for g in groups),
        "judged_groups": sum(bool(g["judged"]) for g in groups),
        "judged_losing_ties": sum(g["judged_loses_ties"] for g in groups),
        "examples": groups[:EXAMPLES],
    }
    if runs is not None:
        duplicates["relevant_ranked_below_unjudged_twin"] = lost_ties(runs, qrels, groups)
    joined_docs = sum(has_joiner(t or "") or has_joiner(x or "") for t, x in corpus.select("title", "text").iter_rows())
    return {
        "duplicates": duplicates,
        "languages": {"documents": label_counts(corpus), "queries": label_counts(queries),
                      "method": "the data's own label, else the script (tasks/language.py)"},
        "joiners": {"unicode": unicode, "documents": joined_docs,
                    "queries": sum(has_joiner(text) for text in queries["text"].to_list()),
                    "at_load": next((n for n in notes if n.startswith(JOINER_NOTE)), None)},
        # Counted at load, where they were replaced (tasks/datasets/controls.py): the tables no longer hold them.
        "controls": control_counts(notes),
    }
