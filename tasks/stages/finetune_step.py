"""The fine-tune step of the pipeline: mine the base provider's exact-search run for hard
negatives on the train split (the dev split when there is no train query; `source_split`
chooses), train once per inputs (tasks/stages/finetune.py), and write its tables.

Also the pre-flight check: a mining split with too few judged queries cannot yield the triples a
`kind: finetuned` provider asks for, which is refused before any model is loaded.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import polars as pl

from retbench.tasks.analysis.hard_negatives import hard_negative_pairs, mining_queries, mining_split
from retbench.tasks.providers.finetuned import FinetunedOptions
from retbench.tasks.stages.dataset import load_saved_dataset
from retbench.tasks.stages.finetune import FinetunedModel, FinetuneInputError, finetune_provider, write_training_tables


def finetuned_providers(spec) -> list[tuple[int, object]]:
    """(index in spec.providers, provider) of every `kind: finetuned` provider."""
    return [(i, p) for i, p in enumerate(spec.providers) if p.kind == "finetuned"]


def queries_with_a_positive(queries: pl.DataFrame, qrels: pl.DataFrame, split: str, relevance_level: int = 1) -> int:
    """Queries of `split` judging at least one document relevant: the only ones that yield triples."""
    chosen = queries.filter(pl.col("split") == split).select("query_id")
    positive = qrels.filter(pl.col("grade") >= relevance_level).select("query_id").unique()
    return chosen.join(positive, on="query_id", how="semi").height


def enough_dev_queries(spec, queries: pl.DataFrame, qrels: pl.DataFrame, where: str) -> None:
    """Raise FinetuneInputError, naming the key path, when a fine-tuned provider's mining split
    (its source_split, else train when there are train queries, else dev) cannot give it its
    `min_triples`: a query yields at most `max_per_query` triples, so
    ceil(min_triples / max_per_query) judged queries of that split are needed at the very least."""
    for i, provider in finetuned_providers(spec):
        options = FinetunedOptions(**provider.options)
        split = mining_split(queries, options.source_split)
        have = queries_with_a_positive(queries, qrels, split)
        needed = math.ceil(options.min_triples / options.max_per_query)
        if have < needed:
            raise FinetuneInputError(
                f"providers[{i}].options: {where} has {have} {split!r}-split queries with a relevant judgment, "
                f"but provider {provider.name!r} needs at least {needed} to mine min_triples={options.min_triples} "
                f"triples at max_per_query={options.max_per_query}; add judged {split} queries, or lower "
                f"providers[{i}].options.min_triples / raise providers[{i}].options.max_per_query")


def check_finetune_inputs(spec) -> None:
    """Pre-flight (before Prefect starts): read the dataset and refuse too few judged queries to mine."""
    if not finetuned_providers(spec):
        return
    from retbench.tasks.stages.dataset import load_spec_dataset

    d = spec.dataset
    dataset = load_spec_dataset(d)
    enough_dev_queries(spec, dataset.queries, dataset.qrels, f"dataset {d.path} (split {d.split!r})")


def train_from_run(tuned, base_model, run_path: str, dataset_path: str, store: str | Path, force: bool,
                   progress: Callable[[str], None], key_path: str) -> FinetunedModel:
    """Mine (query, positive, hard negative) triples from the base's exact-search run on the
    mining split (train, else dev; never a test query, nor one with a test query's text), then
    train `tuned` (its ProviderSpec) from `base_model`, or find it in the store."""
    options = FinetunedOptions(**tuned.options)
    saved = load_saved_dataset(dataset_path)
    # The run file may be shared by settings: its provider column is whatever label wrote it.
    run = pl.read_parquet(run_path).with_columns(provider=pl.lit(options.base))
    mined = mining_queries(saved.queries, options.source_split)
    if mined.same_text_as_test:
        progress(f"{tuned.name}: {len(mined.same_text_as_test)} {mined.split!r} queries left out of mining: their text "
                 f"is a test-split query's (first: {mined.same_text_as_test[0]!r})")
    pairs = hard_negative_pairs(run, saved, options.base, "flat", None, max_per_query=options.max_per_query, mined=mined)
    pairs = capped(pairs, options)
    progress(f"{tuned.name}: {pairs.height} hard-negative triples mined from {pairs['query_id'].n_unique()} "
             f"{mined.split!r} queries of {options.base}'s exact-search run")
    return finetune_provider(base_model, options.base, pairs, saved.queries, options, Path(store), force=force,
                             progress=progress, key_path=key_path, source_split=mined.split)


def capped(pairs: pl.DataFrame, options: FinetunedOptions) -> pl.DataFrame:
    """At most `max_triples` triples: a seeded sample, in mining order. The cap bounds the
    training time on a large mining split (the time grows with the number of triples)."""
    if options.max_triples is None or pairs.height <= options.max_triples:
        return pairs
    return pairs.sample(options.max_triples, seed=options.seed).sort("query_id", "negative_rank")


def trained_spec(tuned, model: FinetunedModel):
    """The provider entry with its trained folder filled in: what the embed stage builds."""
    return tuned.model_copy(update={"options": {**tuned.options, "model": model.path}})


def finetune_tables(models: dict[str, FinetunedModel], bases: dict[str, str], per_query_path: str, dataset_path: str,
                    statistics, output_dir: Path) -> dict[str, str]:
    """finetune_training / finetune_loss (tasks/stages/finetune.py) and finetune_verdict: each
    fine-tuned provider against its base, exact search, on dev and on test, by slice."""
    from retbench.tasks.analysis.finetune_verdict import finetune_verdict
    from retbench.tasks.store.files import write_parquet, write_text

    saved = load_saved_dataset(dataset_path)
    per_query = pl.read_parquet(per_query_path)
    paths = write_training_tables(models, output_dir)
    parts = []
    for tuned, base in bases.items():
        verdict = finetune_verdict(per_query, saved.queries, (base, "flat", None), (tuned, "flat", None),
                                   saved.qrels, saved.corpus, resamples=statistics.resamples,
                                   permutations=statistics.permutations, seed=statistics.seed,
                                   level=statistics.confidence)
        parts.append(verdict.select(pl.lit(tuned).alias("provider"), pl.lit(base).alias("base_provider"), pl.all()))
    table = pl.concat(parts)
    paths["finetune_verdict"] = str(write_parquet(table, output_dir / "finetune_verdict.parquet"))
    paths["finetune_verdict_csv"] = str(write_text(output_dir / "finetune_verdict.csv", table.write_csv()))
    return paths
