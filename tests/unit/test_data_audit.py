import polars as pl

from retbench.tasks.analysis.data_audit import data_audit, duplicate_groups, first_on_tie, lost_ties


def corpus(rows):
    return pl.DataFrame(rows, schema=["doc_id", "title", "text", "language"], orient="row")


CORPUS = corpus([
    ("d1", "Tax", "How to  file\nyour return", "en"),
    ("d9", "tax", "how to file your return ", "en"),  # d1 with other case and spacing: a duplicate
    ("d10", "", "क्‍षमा", "hi"),  # with a ZWJ
    ("d2", "", "क्षमा", "hi"),
    ("d3", "Other", "Something else", "en"),
])
QRELS = pl.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "d10"], "grade": [2, 1]})


def test_duplicates_are_grouped_with_their_judged_ids_and_the_tie_winner():
    groups = duplicate_groups(CORPUS, set(QRELS["doc_id"]))
    # trec_eval ranks the larger id first on a tie, byte-wise: "d9" > "d1", "d2" > "d10".
    assert groups == [
        {"doc_ids": ["d1", "d9"], "judged": ["d1"], "first_on_tie": "d9", "judged_loses_ties": True},
        {"doc_ids": ["d10", "d2"], "judged": ["d10"], "first_on_tie": "d2", "judged_loses_ties": True},
    ]
    assert first_on_tie(["d10", "d9", "d100"]) == "d9"


def test_a_relevant_document_ranked_below_its_unjudged_twin_is_counted_per_setting():
    groups = duplicate_groups(CORPUS, set(QRELS["doc_id"]))
    runs = pl.DataFrame({
        "setting": ["a", "a", "b", "b", "c", "a"],
        "query_id": ["q1", "q1", "q1", "q1", "q1", "q2"],
        "doc_id": ["d9", "d1", "d1", "d9", "d9", "d2"],  # a: twin first; b: judged first; c: judged missing
        "rank": [1, 2, 1, 2, 1, 3],
    })
    assert lost_ties(runs, QRELS, groups) == {"a": 2, "c": 1}  # a: q1 (d9 > d1) and q2 (d2 in, d10 missing)


def test_the_audit_counts_labels_and_joiners():
    queries = pl.DataFrame({"query_id": ["q1", "q2"], "text": ["file taxes", "क्‍षमा"], "language": ["en", "hi"],
                            "category": ["c", "c"], "split": ["test", "test"]})
    audit = data_audit(CORPUS, queries, QRELS, unicode="nfc")
    assert (audit["duplicates"]["groups"], audit["duplicates"]["documents"], audit["duplicates"]["judged_losing_ties"]) == (2, 4, 2)
    assert audit["languages"]["documents"] == {"en": 3, "hi": 2}
    assert (audit["joiners"]["documents"], audit["joiners"]["queries"]) == (1, 1)


def test_the_report_section_flags_a_large_share_cut_and_names_the_losing_judged_copies(tmp_path):
    import json

    from retbench.tasks.reporting.data_audit_section import data_audit_section
    from retbench.tasks.reporting.html import ReportInputs, render_markdown

    truncation = [{"provider": "minilm", "role": "document", "window": 256, "texts": 240, "truncated": 225,
                   "tokens": 100_000, "tokens_dropped": 43_800, "share_dropped": 0.438, "token_source": "tokenizer"},
                  {"provider": "minilm", "role": "query", "window": 256, "texts": 10, "truncated": 0,
                   "tokens": 100, "tokens_dropped": 0, "share_dropped": 0.0, "token_source": "tokenizer"}]
    queries = pl.DataFrame({"query_id": ["q1"], "text": ["x"], "language": ["en"], "category": ["c"], "split": ["test"]})
    audit = data_audit(CORPUS, queries, QRELS, unicode="nfc")
    (tmp_path / "manifest.json").write_text(json.dumps({"truncation": truncation, "data_audit": audit}))
    section = data_audit_section(ReportInputs(tmp_path, "ndcg@10", None))
    text = render_markdown("t", "", [section])
    assert "minilm: 43.8% of the document tokens are past the 256-token window (225 of 240 texts cut; 5% or more" in text
    assert "query tokens are past" not in text
    assert "In 2 groups the judged copy loses that tie to an unjudged twin" in text
    assert "| d1, d9 | d1 | d9 | True |" in text
