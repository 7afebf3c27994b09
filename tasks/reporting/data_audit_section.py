"""The report's "Data audit" section, from manifest.json: where the judgments came from (the dataset
or overlays imported with `retbench judge import`), texts cut at a provider's input window,
duplicate documents, language labels, zero-width joiners and control characters replaced at load."""
from __future__ import annotations

import json

import polars as pl

from retbench.tasks.reporting.html import ReportInputs, Section
from retbench.tasks.stages.clipping import CHUNKING_GUIDE, LARGE_SHARE


def data_audit_section(inputs: ReportInputs) -> Section | None:
    path = inputs.output_dir / "manifest.json"
    if not path.exists():
        return None
    manifest = json.loads(path.read_text(encoding="utf-8"))
    truncation, audit = manifest.get("truncation") or [], manifest.get("data_audit")
    dataset = manifest.get("dataset") or {}
    judged = bool(dataset.get("overlays") or dataset.get("overlays_unused"))
    if not truncation and not audit and not judged:
        return None
    section = Section("Data audit", "data-audit")
    if judged:
        _judgments(section, dataset)
    if truncation:
        _truncation(section, truncation)
    if audit:
        _duplicates(section, audit["duplicates"])
        _languages(section, audit["languages"])
        _joiners(section, audit["joiners"])
        if "controls" in audit:  # manifests written before it was counted have none
            _controls(section, audit["controls"])
    return section


def _judgments(section: Section, dataset: dict) -> None:
    """How many judgments came from which source: the dataset's own, and each overlay merged in."""
    listed = dataset.get("overlays") or []
    files = [o["file"] for o in listed]
    # Named as judgments_from names them: the file, with its sha256's start when two share a name.
    overlays = {o["file"] if files.count(o["file"]) == 1 else f"{o['file']}@{o['sha256'][:8]}": o for o in listed}
    counted = [(label, n) for label, n in dataset.get("judgments_from") or []]
    if overlays:
        section.paragraph(f"Judgments scored: {dataset.get('judgments')}, of which "
                          + ", ".join(f"{n} from the dataset's own judgments" if label not in overlays else
                                      f"{n} from {overlays[label]['source']} (overlay {label})" for label, n in counted)
                          + ". Overlays are added with retbench judge import and kept in the store; the dataset's "
                            "files are unchanged (a pair judged in both takes the overlay's grade only when it was "
                            "imported with --override).")
        section.table(pl.DataFrame({
            "overlay": list(overlays), "source": [o["source"] for o in overlays.values()],
            "judgments": [o["judgments"] for o in overlays.values()],
            "overrides": [o["overrides"] for o in overlays.values()],
            "imported_at": [o["imported_at"] for o in overlays.values()],
            "sha256": [o["sha256"][:12] for o in overlays.values()]}))
    unused = dataset.get("overlays_unused") or 0
    if unused:
        section.paragraph(f"{unused} judgments overlay(s) imported for this dataset are not scored with "
                          f"(the spec's judgments key leaves them out).")


def _truncation(section: Section, rows: list[dict]) -> None:
    frame = pl.DataFrame(rows, schema={"provider": pl.String, "role": pl.String, "window": pl.Int64, "texts": pl.Int64,
                                       "truncated": pl.Int64, "tokens": pl.Int64, "tokens_dropped": pl.Int64,
                                       "share_dropped": pl.Float64, "token_source": pl.String, "note": pl.String})
    if not (frame["note"].fill_null("").str.len_chars() > 0).any():  # every provider has a window: no note to show
        frame = frame.drop("note")
    section.paragraph("Texts longer than a provider's input window are cut: the model never reads the rest. Per "
                      "provider, its documents (the baseline chunking's chunks) and its queries; no window: the "
                      "provider declares none (it reads every token, or cannot say).")
    section.table(frame)
    for row in rows:
        if row["share_dropped"] >= LARGE_SHARE:
            advice = ("Chunk them shorter: a list of chunking configs compares chunk sizes in one run "
                      f"({CHUNKING_GUIDE})." if row["role"] == "document" else
                      "Shorten them (a query variant), or use a model with a longer window.")
            section.paragraph(f"{row['provider']}: {row['share_dropped']:.1%} of the {row['role']} tokens are past the "
                              f"{row['window']}-token window ({row['truncated']} of {row['texts']} texts cut; "
                              f"{LARGE_SHARE:.0%} or more is flagged). {advice}")


def _duplicates(section: Section, duplicates: dict) -> None:
    if not duplicates["groups"]:
        section.paragraph(f"No duplicate documents (compared as: {duplicates['normalisation']}).")
        return
    section.paragraph(
        f"{duplicates['documents']} documents share their text with another id, in {duplicates['groups']} groups "
        f"({duplicates['judged_groups']} holding a judged id); compared as: {duplicates['normalisation']}. Duplicates "
        f"get one vector, so they always tie; ties are ordered {duplicates['tie_order']}. In "
        f"{duplicates['judged_losing_ties']} groups the judged copy loses that tie to an unjudged twin, which then "
        f"takes its place in the ranking and is scored as not relevant.")
    lost = duplicates.get("relevant_ranked_below_unjudged_twin") or {}
    if lost:
        section.paragraph("Relevant documents ranked below (or missing beside) an unjudged duplicate, per setting "
                          "(query, document pairs):")
        section.table(pl.DataFrame({"setting": list(lost), "pairs": list(lost.values())}))
    examples = duplicates["examples"]
    section.table(pl.DataFrame({
        "doc_ids": [", ".join(g["doc_ids"]) for g in examples],
        "judged": [", ".join(g["judged"]) for g in examples],
        "first_on_tie": [g["first_on_tie"] for g in examples],
        "judged_loses_ties": [g["judged_loses_ties"] for g in examples],
    }))


def _languages(section: Section, languages: dict) -> None:
    labels = sorted(set(languages["documents"]) | set(languages["queries"]))
    section.paragraph(f"Language labels ({languages['method']}; und: no script holds most letters; und-Arab, "
                      "und-Cyrl, und-Hani: a script several languages share).")
    section.table(pl.DataFrame({"language": labels,
                                "documents": [languages["documents"].get(label, 0) for label in labels],
                                "queries": [languages["queries"].get(label, 0) for label in labels]}))


def _joiners(section: Section, joiners: dict) -> None:
    at_load = joiners.get("at_load")
    if joiners["unicode"] == "nfc_strip_joiners":
        section.paragraph(f"Zero-width joiners removed at load (dataset.unicode: nfc_strip_joiners): {at_load or 'none found'}.")
    elif joiners["documents"] or joiners["queries"]:
        section.paragraph(f"{joiners['documents']} documents and {joiners['queries']} queries hold a zero-width joiner "
                          "(U+200C, U+200D): spellings with and without one are different texts and cache rows; "
                          "dataset.unicode: nfc_strip_joiners folds them.")


def _controls(section: Section, controls: dict) -> None:
    if controls["documents"] or controls["queries"]:
        section.paragraph(f"Control characters replaced by a space at load: {controls['document_characters']} in "
                          f"{controls['documents']} documents and {controls['query_characters']} in "
                          f"{controls['queries']} queries ({controls['rule']}).")
