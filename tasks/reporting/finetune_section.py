"""The report's fine-tune section: did tuning on train (else dev) hard negatives help, did it hold on the
held-out test split, and did any language pair or category get worse (finetune_verdict.parquet)."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from retbench.tasks.reporting.verdict import read_table

OVERALL_COLUMNS = ("provider", "base_provider", "split", "measure", "n", "base", "tuned", "diff", "ci_low", "ci_high",
                   "p_value", "gain_not_on_test")
SLICE_COLUMNS = ("provider", "split", "slice_kind", "slice", "n", "base", "tuned", "diff", "ci_low", "ci_high",
                 "p_value", "worse_slice", "gain_not_on_test")
TRAINING_COLUMNS = ("provider", "base", "source_split", "triples", "epochs", "batch_size", "lr", "max_seq_length", "steps",
                    "final_loss", "train_seconds", "train_cpu_seconds", "peak_rss_mb", "trained_now")


def finetune_section(output_dir: Path, measure: str, section_type, paragraph, table):
    """None unless this run wrote a verdict (manifest.json lists finetune_verdict: a table left
    by an earlier run of another spec is not shown). `section_type`, `paragraph`, `table`: the
    report's Section class and its block helpers."""
    if "finetune_verdict" not in _tables_of_this_run(output_dir):
        return None
    verdict = read_table(output_dir, "finetune_verdict")
    if verdict is None or verdict.is_empty():
        return None
    section = section_type("Fine-tuning", "finetune")
    shown = [m for m in (measure, "recall@10") if m in set(verdict["measure"])] or [verdict["measure"][0]]
    overall = verdict.filter((pl.col("slice_kind") == "all") & pl.col("measure").is_in(shown))
    for line in verdict_lines(verdict, overall, measure):
        paragraph(section, line)
    paragraph(section, "Fine-tuned minus base, exact search, on the dev split (the queries it was trained on when "
                       "the dataset has no train split: source_split below) and on the held-out "
                       "test split; paired bootstrap 95% intervals and randomization p-values over the split's queries. "
                       "gain_not_on_test: a significant dev gain that is not significant on test.")
    table(section, overall.select([c for c in OVERALL_COLUMNS if c in overall.columns]))
    slices = verdict.filter((pl.col("slice_kind") != "all") & (pl.col("measure") == shown[0]))
    if slices.height:
        paragraph(section, f"By language pair and category ({shown[0]}); worse_slice: the whole interval below 0. "
                           "Every measure is in finetune_verdict.parquet.")
        table(section, slices.select([c for c in SLICE_COLUMNS if c in slices.columns]))
    training = read_table(output_dir, "finetune_training")
    if training is not None and training.height:
        paragraph(section, "Training (loss per step in finetune_loss.parquet); a reused model shows the time and peak "
                           "RSS recorded when it was trained.")
        table(section, training.select([c for c in TRAINING_COLUMNS if c in training.columns]))
    return section


def verdict_lines(verdict: pl.DataFrame, overall: pl.DataFrame, measure: str) -> list[str]:
    """One sentence per fine-tuned provider on `measure`, then the flags."""
    lines = []
    for provider in verdict["provider"].unique(maintain_order=True).to_list():
        rows = {r["split"]: r for r in overall.filter((pl.col("provider") == provider) & (pl.col("measure") == measure))
                .iter_rows(named=True)}
        parts = [f"{split} {r['base']:.3f} -> {r['tuned']:.3f} ({r['diff']:+.3f} [{r['ci_low']:+.3f}, "
                 f"{r['ci_high']:+.3f}], p {r['p_value']:.3g}, {r['n']} queries)" for split, r in rows.items()]
        if parts:
            base = rows[next(iter(rows))]["base_provider"]
            lines.append(f"{provider} vs {base} on {measure}: " + "; ".join(parts) + ".")
        mine = verdict.filter(pl.col("provider") == provider)
        worse = mine.filter(pl.col("worse_slice"))
        if worse.height:
            shown = ", ".join(f"{r['split']} {r['slice_kind']} {r['slice']} ({r['measure']} {r['diff']:+.3f})"
                              for r in worse.head(8).iter_rows(named=True))
            lines.append(f"Significantly worse after fine-tuning ({worse.height}): {shown}.")
        else:
            lines.append(f"{provider}: no slice significantly worse.")
        lost = mine.filter(pl.col("gain_not_on_test") & (pl.col("split") == "dev"))
        if lost.height:
            shown = ", ".join(f"{r['slice_kind']} {r['slice']} {r['measure']}" for r in lost.head(8).iter_rows(named=True))
            lines.append(f"Dev gain that did not survive on test ({lost.height}): {shown}.")
        elif "test" not in set(mine["split"]):
            lines.append(f"{provider}: no test split in this run, so the dev gain is untested on held-out queries.")
    return lines


def _tables_of_this_run(output_dir: Path) -> dict:
    path = Path(output_dir) / "manifest.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get("tables") or {}
