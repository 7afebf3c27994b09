"""Retrieval systems beyond one embedding over FAISS: BM25 first stages, hybrids of two or more
stages, and any stage with a reranker. Each makes a run file in the dense run schema
(provider = the system's name), so every table scores it like a provider's setting.

A first stage is named `<provider>/flat`, `<provider>/ivf` (its widest nprobe) or `bm25:<name>`;
a system may also read another system's run by its name (a reranked hybrid).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from retbench.tasks.config.setting import FirstStage, Setting
from retbench.tasks.store.build import StageResult, build_once
from retbench.tasks.store.files import stable_hash, write_parquet
from retbench.tasks.store.integrity import parquet_readable

log = logging.getLogger("retbench")


@dataclass(frozen=True)
class StageInput:
    """A run a system reads: what computed it, and its file."""

    setting: Setting
    path: str

    @property
    def columns(self) -> tuple:
        """(provider, index, nprobe) of its rows."""
        return self.setting.provider, self.setting.index, self.setting.nprobe


@dataclass(frozen=True, kw_only=True)
class SystemRun(StageResult):
    """A system's run file; `first` and `second` are the settings it builds on (`inputs`: all of
    them, for a fusion of more than two)."""

    system: str
    kind: str  # bm25 | hybrid | rerank | first (a renamed first stage)
    index: str  # the run's `index` column
    nprobe: int | None = None  # the run's `nprobe` column
    first: tuple | None = None  # (provider, index, nprobe) of the first stage
    second: tuple | None = None
    facts: dict = field(default_factory=dict)  # alpha choice, rerank counts and added latency, ...
    setting: Setting | None = None  # the stage tree this run computes: its `setting` and `params` columns
    inputs: tuple = ()  # (provider, index, nprobe) of every stage it reads

    @property
    def as_input(self) -> StageInput:
        return StageInput(self.setting, self.path)

    @property
    def provider(self) -> str:
        """The run's `provider` column: the system's name."""
        return self.system


def first_stage_names(providers: list[str], ivf: bool, lexical: list[str]) -> list[str]:
    """Every name a `systems[].first` may use."""
    names = [f"{p}/flat" for p in providers] + ([f"{p}/ivf" for p in providers] if ivf else [])
    return names + [f"bm25:{name}" for name in lexical]


def setting_of(reference: str, runs: list) -> tuple:
    """(provider, index, nprobe) of a first-stage reference among the pipeline's run records."""
    if reference.startswith("bm25:"):
        return reference.removeprefix("bm25:"), "bm25", None
    provider, _, index = reference.partition("/")
    candidates = [r for r in runs if getattr(r, "provider", None) == provider and r.index == index]
    if not candidates:
        raise ValueError(f"first stage {reference!r} has no run in this pipeline (is its index planned?)")
    widest = max(candidates, key=lambda r: -1 if r.nprobe is None else r.nprobe)
    return provider, index, widest.nprobe


def stage_input(reference: str, runs: list, made: dict[str, SystemRun]) -> StageInput:
    """The run a `systems[]` reference names: a system built before (by name), a BM25 first
    stage (`bm25:<name>`, in `made` under that name) or a dense `<provider>/<index>`."""
    if reference in made:
        return made[reference].as_input
    provider, index, nprobe = setting_of(reference, runs)
    path = next(r.path for r in runs if (getattr(r, "provider", None), r.index, r.nprobe) == (provider, index, nprobe))
    return StageInput(Setting(FirstStage.dense(provider, index, {} if nprobe is None else {"nprobe": nprobe})), path)


def run_of(setting: tuple, run_files: dict[tuple, str]) -> pl.DataFrame:
    return pl.read_parquet(run_files[setting])


def bm25_stage(lexical, chunks, dataset, store: str, depth: int, force: bool) -> SystemRun:
    from retbench.tasks.stages.lexical import bm25_run, build_bm25_index

    index = build_bm25_index(chunks.path, lexical, store, chunks_key=chunks.key, force=force)
    queries = pl.read_parquet(dataset.queries_path, columns=["query_id", "text"])
    run = bm25_run(index, queries, lexical.name, depth, store, tokenizer=lexical.tokenizer, force=force)
    log.info(f"bm25:{lexical.name}: index {'built' if index.computed else 'reused'} ({index.chunks} chunks, "
             f"{index.vocabulary} terms); run {'computed' if run.computed else 'reused'}")
    return SystemRun(path=run.path, key=run.key, computed=run.computed or index.computed, seconds=index.seconds + run.seconds,
                     system=lexical.name, kind="bm25", index="bm25", setting=Setting(FirstStage.bm25(lexical.name)),
                     facts={"search_seconds": run.search_seconds, "empty_queries": run.empty_queries, "queries": run.queries,
                            "vocabulary": index.vocabulary, "index_path": index.path,
                            # Counted, so the ladder never has to call BM25's index size unknown.
                            "index_bytes": sum(f.stat().st_size for f in Path(index.path).rglob("*") if f.is_file())})


def hybrid_stage(system, setting: Setting, inputs: list[StageInput], dataset, store: str, depth: int) -> SystemRun:
    """Two or more stages fused (RRF, or normalised scores of two with alpha chosen on the dev split)."""
    from retbench.tasks.analysis.fusion import choose_alpha, reciprocal_rank_fusion, score_fusion
    from retbench.tasks.stages.dataset import load_saved_dataset

    fusion = system.fusion
    paths = [i.path for i in inputs]
    # An alpha chosen on the dev split depends on the judgments; a fixed alpha or RRF does not
    # (a judgments overlay must not make them fuse again).
    judged = fusion.method != "rrf" and fusion.alpha is None
    key = stable_hash("hybrid-v1", *[Path(p).name for p in paths], system.name,
                      fusion.model_dump(mode="json"), depth, dataset.key if judged else dataset.collection_key)
    path = Path(store) / "runs" / f"{key}.parquet"
    label = setting.index

    def build(tmp: str) -> dict:
        runs = [pl.read_parquet(p) for p in paths]
        cut = fusion.depth or depth
        if fusion.method == "rrf":
            run, facts = reciprocal_rank_fusion(*runs, k=fusion.k, name=system.name, depth=cut), {"k": fusion.k}
        elif fusion.alpha is not None:
            a, b = runs
            run = score_fusion(a, b, alpha=fusion.alpha, normalization=fusion.normalization, name=system.name, depth=cut)
            facts = {"alpha": fusion.alpha, "chosen_on": "spec"}
        else:
            a, b = runs
            saved = load_saved_dataset(dataset.path)
            if not (saved.queries["split"] == "dev").any():
                raise ValueError(f"system {system.name!r}: fusion.alpha is null, so it is chosen on the dev split, but this "
                                 "dataset has no dev query; set fusion.alpha, use fusion.method: rrf, or a dataset with dev queries")
            choice = choose_alpha(a, b, saved.qrels, saved.queries, alphas=fusion.alphas, measure=fusion.measure,
                                  normalization=fusion.normalization, name=system.name, depth=cut)
            run, facts = choice.run, choice.manifest()
        run = run.with_columns(provider=pl.lit(system.name), index=pl.lit(label), nprobe=pl.lit(None, dtype=pl.Int64))
        from retbench.tasks.analysis.runs import RUN_SCHEMA, trec_order

        write_parquet(trec_order(run.select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)), tmp)
        return {"method": fusion.method, **facts}

    built = build_once(store, path, build, parse=parquet_readable)
    if "alpha" in built.metadata and built.metadata.get("chosen_on") == "dev":
        log.info(f"{system.name}: alpha {built.metadata['alpha']} chosen on {built.metadata['dev_queries']} dev queries "
                 f"({built.metadata['measure']}); reported on test")
    columns = tuple(i.columns for i in inputs)
    return SystemRun(path=str(path), key=key, computed=built.computed, seconds=built.seconds, system=system.name,
                     kind="hybrid", index=label, first=columns[0], second=columns[1], facts=dict(built.metadata),
                     setting=setting, inputs=columns)


def rerank_stage(system, reranker_spec, setting: Setting, source: StageInput, chunks, dataset, store: str,
                 force: bool) -> SystemRun:
    from retbench.tasks.rerankers import create_reranker
    from retbench.tasks.stages.rerank import rerank_run

    first = source.columns
    run = pl.read_parquet(source.path)
    queries = pl.read_parquet(dataset.queries_path, columns=["query_id", "text"])
    reranker = create_reranker(reranker_spec.kind, reranker_spec.options)
    result = rerank_run(run, reranker, reranker_spec.name, queries, chunks.path, store, system=system.name,
                        top_n=system.top_n, batch_size=reranker_spec.batch_size, force=force, progress=log.info)
    log.info(f"{system.name}: {result.pairs} pairs reranked, {result.scored} scored now, {result.from_cache} from cache")
    facts = {"reranker": reranker_spec.name, "kind": reranker_spec.kind, "top_n": system.top_n, "pairs": result.pairs,
             "scored": result.scored, "from_cache": result.from_cache, "latency": result.latency,
             "tokens": result.tokens, "token_source": result.token_source, "search_units": result.search_units}
    return SystemRun(path=result.path, key=result.key, computed=result.computed, seconds=result.seconds,
                     system=system.name, kind="rerank", index=f"{first[1]}+{reranker_spec.name}", nprobe=first[2],
                     first=first, facts=facts, setting=setting, inputs=(first,))


def rename_stage(system, setting: Setting, source: StageInput, store: str) -> SystemRun:
    """A system that is only another stage under another name (e.g. `e5` for `e5-small/flat`)."""
    first = source.columns
    run = pl.read_parquet(source.path).with_columns(provider=pl.lit(system.name))
    key = stable_hash("renamed-v1", Path(source.path).name, system.name)
    path = Path(store) / "runs" / f"{key}.parquet"
    built = build_once(store, path, lambda tmp: run.write_parquet(tmp, compression="zstd"), parse=parquet_readable)
    return SystemRun(path=str(path), key=key, computed=built.computed, seconds=built.seconds, system=system.name,
                     kind="first", index=first[1], nprobe=first[2], first=first, setting=setting, inputs=(first,))
