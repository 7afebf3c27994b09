"""The pre-flight: what `retbench run` and `retbench check` refuse before Prefect starts or a model
loads (spec, files, ids, grades, filters, secrets), and what a run would do with what the store holds."""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl

from retbench.tasks.config.spec import BenchmarkSpec, SpecError
from retbench.tasks.datasets.model import Dataset


def preflight(spec: BenchmarkSpec, create_folders: bool = True) -> tuple[Dataset, str | None]:
    """Raise the first problem a run would meet before embedding anything: check_inputs' files,
    folders, filters and secrets, then every id and grade of the dataset. Returns the validated
    dataset and its content key when the store already holds it (None: parsed now).
    create_folders=False (`retbench check`): the output and store folders are not made."""
    from retbench.tasks.stages.prepare import check_inputs

    require_extras(spec)
    require_devices(spec)
    check_inputs(spec, create_folders=create_folders)
    dataset, key = validated_dataset(spec)
    from retbench.tasks.stages.judgments import check_choice

    check_choice(spec, dataset, key)  # judgments.overlays naming an overlay the store does not hold
    id_problems = provider_id_problems(spec, dataset)
    if id_problems:
        raise SpecError(f"the vectors do not fit the dataset:\n" + "\n".join(f"  {line}" for line in id_problems))
    return dataset, key


def require_extras(spec: BenchmarkSpec) -> None:
    """The optional parts the spec's providers need (tasks/extras.py), refused in one line if absent."""
    from retbench.tasks.extras import require

    for i, provider in enumerate(spec.providers):
        where = f"providers[{i}] ({provider.name!r}, kind {provider.kind})"
        if provider.kind == "finetuned":
            require("finetune", where)
        backend = (provider.options or {}).get("backend")
        if provider.kind in ("sentence-transformers", "finetuned") and backend in ("onnx", "onnx-int8"):
            require("onnx", f"{where}, backend: {backend}")


def require_devices(spec: BenchmarkSpec) -> None:
    """A device the host lacks (`device: cuda` without a CUDA device, or a backend without an engine
    on it) refused in one line naming the spec key, before any work: on a GPU nothing falls back
    to the CPU in silence. A spec on the CPU imports no engine here."""
    from retbench.tasks.devices import DeviceUnavailable, missing_device
    from retbench.tasks.providers import create_provider

    for i, provider in enumerate(spec.providers):
        device = (provider.options or {}).get("device", "cpu")
        if provider.kind != "sentence-transformers" or device == "cpu":
            continue
        where = f"providers[{i}].options.device ({provider.name!r}, kind {provider.kind})"
        try:
            create_provider(provider.kind, provider.options)  # chooses its engine, or refuses the device
        except DeviceUnavailable as error:
            raise error.at(where) from error
        except Exception:  # noqa: BLE001  any other problem of the provider is the plan's to say (plan_run)
            pass
    for i, reranker in enumerate(spec.rerankers):
        device = (reranker.options or {}).get("device", "cpu")
        missing = missing_device(device) if reranker.kind == "cross-encoder" and device != "cpu" else None
        if missing is not None:
            raise missing.at(f"rerankers[{i}].options.device ({reranker.name!r}, kind {reranker.kind})")


def provider_id_problems(spec: BenchmarkSpec, dataset: Dataset) -> list[str]:
    """For providers keyed by id (vectors made elsewhere): ids without a vector, vectors of ids the
    collection does not have, dimensions that differ, chunking or query variants that cannot fit."""
    from retbench.tasks.providers import create_provider, provider_class
    from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus

    problems: list[str] = []
    keyed = [(i, p) for i, p in enumerate(spec.providers) if provider_class(p.kind).keyed_by_id]
    if not keyed:
        return problems
    query_ids = set(dataset.queries["query_id"].to_list())
    others = spec.dataset.split != "all" or bool(dataset.unjudged_queries)
    known = {"document": set(dataset.corpus["doc_id"].to_list()), "query": None if others else query_ids}
    for variant in spec.chunking_variants:
        config = ChunkConfig(**variant.model_dump(exclude={"name"}))
        chunk_ids = set(chunk_corpus(dataset.corpus, config)["chunk_id"].to_list())
        for i, provider_spec in keyed:
            where = f"providers[{i}] ({provider_spec.name!r}, kind {provider_spec.kind})"
            if spec.queries.variants:
                problems.append(f"{where}: serves one vector per query id, but queries.variants rewrite the query texts; "
                                f"leave the variants out of a spec with vectors made elsewhere")
                continue
            provider = create_provider(provider_spec.kind, provider_spec.options)
            found = provider.check_ids({"document": chunk_ids, "query": query_ids}, known, variant.strategy)
            problems += [f"{where}: {line}" for line in found if f"{where}: {line}" not in problems]
    return problems


def validated_dataset(spec: BenchmarkSpec) -> tuple[Dataset, str | None]:
    """The spec's dataset, validated: read from the store when a run parsed these very source files
    before (their hashes name a pointer there, so nothing is parsed again), else parsed now, in
    memory (the run's load-dataset stage stores it, and logs what it notes: silent here)."""
    from retbench.tasks.stages.dataset import load_saved_dataset, load_spec_dataset
    from retbench.tasks.stages.prepare import source_pointer
    from retbench.tasks.store.remote import is_remote

    if not is_remote(spec.store_dir):
        pointer = source_pointer(spec)
        if pointer.is_file():
            import json

            try:
                facts = json.loads(pointer.read_text(encoding="utf-8"))
                return load_saved_dataset(Path(spec.store_dir) / facts["folder"]), facts["key"]
            except Exception:  # noqa: BLE001  a damaged store entry is the run's to heal: parse the files instead
                pass
    with quiet_dataset_warnings():
        return load_spec_dataset(spec.dataset), None


@contextlib.contextmanager
def quiet_dataset_warnings() -> Iterator[None]:
    """Without the dataset loader's warnings (unjudged queries): the run's load-dataset stage
    says them in the run's log, where they belong, rather than twice."""
    logger = logging.getLogger("retbench.dataset")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


# ---------------------------------------------------------------- what a run would do


@dataclass(frozen=True)
class ProviderWork:
    """One provider's embedding: `texts` its sets hold, of which `distinct` are different texts
    (a text that is there twice, as a document or as a query, is embedded once) and `missing`
    the distinct ones not in its cache."""

    provider: str
    texts: int
    missing: int  # to embed: not in the cache, nor kept by a stopped run
    distinct: int | None = None  # None: not counted (see note)
    note: str = ""  # why nothing could be counted (a fine-tuned model not trained yet)
    kept: int = 0  # not in the cache yet, but embedded by a stopped run (its journal): the next run moves them in

    @property
    def duplicates(self) -> int:
        return self.texts - (self.texts if self.distinct is None else self.distinct)

    @property
    def cached(self) -> int:
        return 0 if self.distinct is None else self.distinct - self.missing - self.kept

    def described(self) -> str:
        """"minilm 17,410 texts to embed (2 duplicates of other texts; none in the cache yet)";
        after a stop, "minilm 404 texts to embed (2,192 kept by a stopped run; ...)"."""
        if self.note:
            return f"{self.provider} {self.note}"
        more = [f"{self.kept:,} kept by a stopped run"] if self.kept else []
        more += [f"{self.duplicates:,} duplicate{'s' * (self.duplicates != 1)} of other texts"] if self.duplicates else []
        more.append(f"{self.cached:,} already in the cache" if self.cached else "none in the cache yet")
        return f"{self.provider} {self.missing:,} text{'s' * (self.missing != 1)} to embed ({'; '.join(more)})"


@dataclass(frozen=True)
class IndexWork:
    setting: str  # provider, or provider@chunking
    kind: str
    file: str
    built: bool


@dataclass(frozen=True)
class RunPlan:
    spec: BenchmarkSpec
    dataset: Dataset
    dataset_stored: bool
    chunks: dict[str, int]  # chunking name -> chunks
    providers: list[ProviderWork]
    indexes: list[IndexWork]
    inspected: bool  # False: an object store, whose caches are not looked into
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One paragraph: the dataset, then per provider the texts to embed, the indexes to build, the rest."""
        spec, d = self.spec, self.dataset
        splits = d.queries.group_by("split").len().sort("split")
        per_split = ", ".join(f"{s} {n}" for s, n in splits.iter_rows())
        parts = [f"Spec {spec.name} is valid. Dataset {d.name} ({spec.dataset.format}, split {spec.dataset.split}): "
                 f"{d.corpus.height} documents, {d.queries.height} judged queries ({per_split}), "
                 f"{d.qrels.height} judgments" + (f", {len(d.unjudged_queries)} unjudged queries dropped"
                                                  if d.unjudged_queries else "")
                 + ("; already in the store." if self.dataset_stored else "; parsed now, stored by the run.")]
        parts.append("Chunks: " + ", ".join(f"{n} ({name})" for name, n in self.chunks.items()) + ".")
        if self.inspected:
            parts.append(f"Embedding: {', '.join(p.described() for p in self.providers)}.")
            todo = [i for i in self.indexes if not i.built]
            kinds = ", ".join(sorted({i.kind for i in todo})) or "none"
            parts.append(f"Indexes to build: {len(todo)} of {len(self.indexes)} ({kinds}).")
        else:
            parts.append(f"The store {spec.store_dir} is an object store: its caches were not inspected; "
                         f"{sum(p.texts for p in self.providers)} texts over {len(self.providers)} provider(s) and "
                         f"{len(self.indexes)} indexes at most.")
        rest = [f"BM25 {', '.join(e.name for e in spec.lexical)}" if spec.lexical else "",
                f"{len(spec.systems)} system(s) ({', '.join(s.name for s in spec.systems)})" if spec.systems else "",
                f"{len(spec.rerankers)} reranker(s)" if spec.rerankers else ""]
        rest = [r for r in rest if r]
        parts.append(("Then " + ", ".join(rest) + ", scoring" if rest else "Then scoring")
                     + f" and the report into {spec.output_dir} (store {spec.store_dir}).")
        parts += self.notes
        return " ".join(parts)


def plan_run(spec: BenchmarkSpec, dataset: Dataset, dataset_key: str | None,
             chunks: dict[str, pl.DataFrame] | None = None) -> RunPlan:
    """What a full run of `spec` would embed and build, against what the store holds, computed
    from content keys alone: chunks, provider fingerprints and cache keys; no model is loaded
    (a provider's fingerprint names its model files, it does not read them into memory).
    `chunks`: chunk_tables() when the caller has them already (`retbench check`'s estimate)."""
    from retbench.tasks.store.remote import is_remote

    inspected = not is_remote(spec.store_dir)
    store = Path(spec.store_dir)
    tables = chunks if chunks is not None else chunk_tables(spec, dataset, dataset_key)
    query_texts = _query_texts(spec, dataset)
    providers, indexes = [], []
    for i, provider_spec in enumerate(spec.providers):
        work, built = _provider_work(spec, i, provider_spec, tables, query_texts, store, inspected)
        providers.append(work)
        indexes += built
    return RunPlan(spec, dataset, dataset_key is not None, {n: t.height for n, t in tables.items()},
                   providers, indexes, inspected)


def chunk_tables(spec: BenchmarkSpec, dataset: Dataset, dataset_key: str | None) -> dict[str, pl.DataFrame]:
    """Chunking name -> (chunk_id, text) of the chunks a run embeds."""
    from retbench.tasks.store.remote import is_remote

    inspected = not is_remote(spec.store_dir)
    return {variant.name: _chunks(spec, dataset, dataset_key, variant, inspected) for variant in spec.chunking_variants}


def _chunks(spec, dataset: Dataset, dataset_key: str | None, variant, inspected: bool) -> pl.DataFrame:
    """The chunks the run embeds: the stored file when the store has it, else cut now (in memory)."""
    from retbench.tasks.stages.chunk import ChunkConfig, chunk_corpus
    from retbench.tasks.stages.prepare import chunks_address

    config = ChunkConfig(**variant.model_dump(exclude={"name"}))
    if dataset_key is not None and inspected:
        path = chunks_address(spec.store_dir, dataset_key, config)[1]
        with contextlib.suppress(Exception):  # damaged: the run rebuilds it; cut it here
            return pl.read_parquet(path, columns=["chunk_id", "text"])
    return chunk_corpus(dataset.corpus, config).select("chunk_id", "text")


def _query_texts(spec, dataset: Dataset) -> dict[str, tuple[list[str], list[str]]]:
    """Query variant name -> (ids, texts) as the run embeds them (the raw queries first)."""
    from retbench.tasks.config.variants import RAW_QUERIES
    from retbench.tasks.stages.variants import preprocess

    ids, texts = dataset.queries["query_id"].to_list(), dataset.queries["text"].to_list()
    out = {RAW_QUERIES: (ids, texts)}
    for variant in spec.queries.variants:
        out[variant.name] = (ids, preprocess(texts, variant))
    return out


def _provider_work(spec, i: int, provider_spec, chunk_tables: dict[str, pl.DataFrame],
                   query_texts: dict, store: Path, inspected: bool) -> tuple[ProviderWork, list[IndexWork]]:
    from retbench.tasks.providers import create_provider
    from retbench.tasks.stages.embed import cache_dir_for, cache_key, cached_keys, embedding_set_key
    from retbench.tasks.stages.index import plan_indexes
    from retbench.tasks.store.shards import kept_in_journals

    total = sum(t.height for t in chunk_tables.values()) + sum(len(ids) for ids, _ in query_texts.values())
    plans = {name: plan_indexes(spec.indexes.flat, spec.indexes.ivf, table.height, spec.indexes.other_kinds())
             for name, table in chunk_tables.items()}
    labels = {name: provider_spec.name if n == 0 else f"{provider_spec.name}@{name}"
              for n, name in enumerate(chunk_tables)}
    if provider_spec.kind == "finetuned":
        # Its fingerprint is the trained model's, which does not exist before the fine-tune stage.
        unbuilt = [IndexWork(labels[name], s.kind, s.file_name, False) for name, plan in plans.items() for s in plan.settings]
        return ProviderWork(provider_spec.name, total, total, note="trained first, then embedded"), unbuilt
    try:
        provider = create_provider(provider_spec.kind, provider_spec.options, provider_spec.dimensions)
        directory, _, fp_hash = cache_dir_for(store, provider)
    except Exception as error:  # noqa: BLE001  said as the spec key it comes from, in one line
        raise SpecError(f"providers[{i}] ({provider_spec.name!r}, kind {provider_spec.kind}): "
                        f"{type(error).__name__}: {error}") from error
    cached = cached_keys(directory) if inspected and directory.is_dir() else set()
    kept = kept_in_journals(directory) - cached if inspected and directory.is_dir() else set()
    missing: set[str] = set()
    distinct: set[str] = set()
    indexes = []
    by_id = provider.keyed_by_id  # vectors made elsewhere: the cache is keyed by id, not by text
    for name, table in chunk_tables.items():
        keys = [cache_key(fp_hash, "document", text) for text in table["chunk_id" if by_id else "text"].to_list()]
        distinct.update(keys)
        missing.update(k for k in keys if k not in cached)
        folder = store / "indexes" / embedding_set_key(fp_hash, "document", keys, table["chunk_id"].to_list())[:32]
        indexes += [IndexWork(labels[name], s.kind, s.file_name, inspected and (folder / s.file_name).is_file())
                    for s in plans[name].settings]
    for ids, texts in query_texts.values():
        keys = [cache_key(fp_hash, "query", t) for t in (ids if by_id else texts)]
        distinct.update(keys)
        missing.update(k for k in keys if k not in cached)
    return (ProviderWork(provider_spec.name, total, len(missing - kept), len(distinct), kept=len(missing & kept)),
            indexes)


def try_user_code(spec: BenchmarkSpec, dataset: Dataset) -> list[str]:
    """`retbench check` on providers and rerankers of kind python: each is imported and made, and
    given one document and one query of the dataset (a reranker: one query, two documents), so a
    wrong import, a crash or a wrong shape shows before a run; nothing is cached. One line each,
    with the dimension and the time per text (loading apart)."""
    import time

    from retbench.tasks.providers import create_provider
    from retbench.tasks.rerankers import create_reranker

    documents = [t for t in dataset.corpus["text"].to_list() if t.strip()][:2] or ["a document"]
    query = dataset.queries["text"][0] if dataset.queries.height else "a query"
    lines = []
    for i, provider_spec in enumerate(spec.providers):
        if provider_spec.kind != "python":
            continue
        provider = create_provider(provider_spec.kind, provider_spec.options)
        started = time.perf_counter()
        provider.encoder()
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        vectors = [provider.encode([documents[0]], "document"), provider.encode([query], "query")]
        per_text = (time.perf_counter() - started) / 2
        dims = {v.shape[1] for v in vectors}
        if len(dims) > 1:
            raise SpecError(f"providers[{i}] ({provider_spec.name!r}): the document vector is {vectors[0].shape[1]}-"
                            f"dimensional but the query vector {vectors[1].shape[1]}-dimensional")
        lines.append(f"{provider.options.described}: {dims.pop()}-dimensional "
                     f"vectors, {1000 * per_text:.1f} ms per text (one document and one query embedded now, not cached; "
                     f"made in {loaded:.2f} s).")
    for i, reranker_spec in enumerate(spec.rerankers):
        if reranker_spec.kind != "python":
            continue
        reranker = create_reranker(reranker_spec.kind, reranker_spec.options)
        started = time.perf_counter()
        reranker.scorer()
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        reranker.score(query, (documents * 2)[:2])
        per_pair = (time.perf_counter() - started) / 2
        lines.append(f"{reranker.options.described}: "
                     f"{1000 * per_pair:.1f} ms per pair (one query and two documents scored now, not cached; "
                     f"made in {loaded:.2f} s).")
    return lines
