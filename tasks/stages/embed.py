"""Content-addressed embedding cache: every vector is stored once, under a key
derived from the provider's fingerprint, the role and the text.

Layout under the store root:
    embeddings/<kind>-<fingerprint hash>/fingerprint.json
    embeddings/<kind>-<fingerprint hash>/shard-<time>-<random>.parquet   (key, vector)
    sets/<set key>.parquet                                                (id, key) in set order

A provider whose fingerprint changes gets a new folder, so only its rows are
recomputed. Each batch is written as its own shard the moment it is embedded
(the provider plans its own calls and hands results over as they complete; HTTP
providers run several at once), so a crash loses at most the batches in flight; the shards of one call
are merged at the end, also after a failure, to keep the folder small.

Integrity: each shard has a `<shard>.sha256` sidecar; "check the cache, embed what is
missing, write it" runs under an exclusive flock on the folder's `.lock` (readers take it
shared), so concurrent runs never embed a text twice; and every call first heals the folder
(`heal_cache`): damaged shards go to quarantine (their rows are embedded again), rows
superseded by a newer shard (a merge or compaction killed half-way, a forced re-embed) are
dropped, and temporary files of killed writers are removed.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from retbench.tasks.progress import Progress
from retbench.tasks.providers import Provider, Role
from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages import embed_dim
from retbench.tasks.stages.vectors import l2_normalized
from retbench.tasks.store.build import StageResult, build_once, need_work
from retbench.tasks.store import shards
from retbench.tasks.store.files import stable_hash, write_json
from retbench.tasks.store.integrity import STORE_CHANGED, parquet_readable

log = logging.getLogger("retbench.embed")

@dataclass(frozen=True, kw_only=True)
class EmbeddingSet(StageResult):
    """Small, picklable handle to the vectors of an ordered list of texts.

    `path` is the set file (id, key in order), `key` its content key; the vectors live in
    the provider's cache folder `cache_dir`. `computed`: this call embedded something."""

    provider: str
    role: str
    cache_dir: str
    count: int
    dim: int
    embedded: int  # distinct texts embedded by this call
    from_cache: int  # texts whose vector was already in the cache
    repeated: int  # texts that repeat another text of this set (embedded once)
    seconds: float
    # For the cost ledger: tokens sent by this call and tokens the cache spared it.
    tokens: int = 0
    token_source: str = "none"  # usage | tokenizer | estimate (the weakest part of a mix); none if nothing embedded
    cached_tokens: int = 0
    cached_token_source: str = "none"  # tokenizer | estimate


def fingerprint_hash(fingerprint: dict) -> str:
    return stable_hash(fingerprint)


def cache_key(fp_hash: str, role: Role, text: str) -> str:
    digest = hashlib.sha256()
    for part in (fp_hash, role, text):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def cache_dir_for(store: Path, provider: Provider) -> tuple[Path, dict, str]:
    fingerprint = full_fingerprint(provider)
    fp_hash = fingerprint_hash(fingerprint)
    return Path(store) / "embeddings" / f"{provider.kind}-{fp_hash[:16]}", fingerprint, fp_hash


def embed_texts(
    provider: Provider,
    provider_name: str,
    ids: Sequence[str],
    texts: Sequence[str],
    role: Role,
    store: Path,
    batch_size: int = 64,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> EmbeddingSet:
    """Make sure every text has a cached vector, then write the ordered set file.

    `force` embeds every text again; the new rows win over the old ones on read.
    """
    started = time.perf_counter()
    directory, keys, set_key, set_path = set_address(provider, ids, texts, role, store)
    # One writer per provider folder: a second run waits here, then finds the rows cached.
    with shards.folder_lock(directory):
        live = open_folder(directory, provider, store, provider_name)
        result = _embed_locked(provider, provider_name, ids, texts, keys, role, directory, set_key, set_path,
                               store, batch_size, progress, force, live, started)
        if force:
            heal_cache(directory, store)  # the old rows of re-embedded texts are dead now
    return result


def cached_vectors(provider: Provider, provider_name: str, ids: Sequence[str], texts: Sequence[str], role: Role,
                   store: Path, batch_size: int = 64, progress: Callable[[str], None] | None = None) -> np.ndarray:
    """embed_texts, then the set's vectors in order: for a caller that wants an array, not a set
    (the embedding-rescore reranker, which the rerank stage hands this bound to its store and log)."""
    return load_vectors(embed_texts(provider, provider_name, ids, texts, role, store, batch_size=batch_size,
                                    progress=progress))[1]


def set_address(provider: Provider, ids: Sequence[str], texts: Sequence[str], role: Role,
                store: Path) -> tuple[Path, list[str], str, Path]:
    """(cache folder, content key per text, set key, set file) of `texts` embedded by `provider`."""
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    directory, _, fp_hash = cache_dir_for(store, provider)
    directory.mkdir(parents=True, exist_ok=True)
    keys = [cache_key(fp_hash, role, text) for text in texts]
    set_key = embedding_set_key(fp_hash, role, keys, ids)
    return directory, keys, set_key, Path(store) / "sets" / f"{set_key}.parquet"


def embedding_set_key(fp_hash: str, role: Role, keys: Sequence[str], ids: Sequence[str]) -> str:
    """The key of an ordered set of texts (its set file's name, its indexes' folder): known before
    anything is embedded, so `retbench check` can tell which indexes exist."""
    return stable_hash(fp_hash, role, list(keys), list(ids))


def open_folder(directory: Path, provider: Provider, store: Path, provider_name: str) -> "LiveRows":
    """The provider's cache folder made ready (its fingerprint.json, shards of its one dimension,
    healed); its live rows, with that dimension. Call with the folder's lock held."""
    if not (directory / "fingerprint.json").exists():
        write_json(directory / "fingerprint.json", cache_dir_for(store, provider)[1])
    dim = embed_dim.settle(directory, store, provider_name)
    live = heal_cache(directory, store)
    live.dim = dim
    return live


def speaker(provider: Provider) -> str:
    """Who returned the vectors, in a message about their dimension."""
    # Not isinstance(HttpProvider): importing it imports httpx, which a local provider never needs.
    return "the server" if getattr(getattr(provider, "options", None), "base_url", None) else "the model"


def _embed_locked(provider, provider_name, ids, texts, keys, role, directory, set_key, set_path, store,
                  batch_size, progress, force, live, started) -> "EmbeddingSet":
    cached = set() if force else live
    missing: dict[str, str] = {}
    cached_texts: list[str] = []
    cached_keys_in_order: list[str] = []
    for key, text in zip(keys, texts):
        if key in cached:
            cached_texts.append(text)
            cached_keys_in_order.append(key)
        elif key not in missing:
            missing[key] = text
    dim, tokens, token_source = _embed_missing(provider, role, missing, directory, batch_size, progress, provider_name, live.dim)
    if dim is None:
        dim = live.dim if live.dim is not None else cache_dim(directory)
    cached_tokens, cached_source = _cached_tokens(provider, cached_texts, cached_keys_in_order, live, role)
    from_cache = len(cached_texts)

    set_table = pa.table({"id": pa.array(list(ids), pa.string()), "key": pa.array(keys, pa.string())})
    # The folder lock held by the caller covers the set file too.
    build_once(store, set_path, lambda tmp: pq.write_table(set_table, tmp, compression="zstd"),
               parse=parquet_readable, lock=False)
    return EmbeddingSet(
        provider=provider_name,
        role=role,
        cache_dir=str(directory),
        path=str(set_path),
        key=set_key,
        computed=bool(missing),
        count=len(keys),
        dim=dim,
        embedded=len(missing),
        from_cache=from_cache,
        repeated=len(keys) - len(missing) - from_cache,
        seconds=time.perf_counter() - started,
        tokens=tokens,
        token_source=token_source,
        cached_tokens=cached_tokens,
        cached_token_source=cached_source,
    )


def _cached_tokens(provider, texts, keys, live: dict, role) -> tuple[int, str]:
    """Tokens the cache spared this call: stored with the rows when they were embedded, so a
    fully cached run loads no tokenizer; rows from before that are counted now."""
    if not texts:
        return 0, "none"
    stored = [live.get(key) for key in keys]
    unknown = [text for text, count in zip(texts, stored) if count is None]
    total = sum(count for count in stored if count is not None)
    if not unknown:
        return total, live.source
    counted, source = count_tokens(provider, unknown, role)
    return total + counted, _weakest([source, live.source]) if len(unknown) < len(texts) else source


def _embed_missing(provider, role, missing, directory, batch_size, progress, provider_name, known_dim=None):
    """Embed `missing` ({key: text}), one shard per batch as it completes; (dim, tokens, token source)."""
    if not missing:
        return None, 0, "none"  # the stage logs the one line "0 embedded, N served from cache"
    need_work(f"embed {len(missing)} {role} texts with {provider_name}")
    # Similar lengths in one batch waste less padding (sentence-transformers pads to the
    # longest text of a batch); the cache is keyed, so the order does not matter.
    items = sorted(missing.items(), key=lambda item: len(item[1]))
    new_shards: list[Path] = []
    dim = known_dim
    done = tokens = 0
    sources: list[str] = []
    batches = _batches(provider, role, items, batch_size)
    shown = embed_progress(provider_name, role, len(items), progress)
    try:
        for batch_keys, raw, batch_tokens, source, row_tokens in batches:
            vectors = _checked(raw, len(batch_keys), provider_name)
            embed_dim.check_batch(provider_name, vectors.shape[1], dim, directory, speaker(provider))
            new_shards.append(_write_shard(directory, batch_keys, vectors, tokens=row_tokens))
            if dim is None:  # the folder's first vectors: their dimension is the folder's from now on
                dim = vectors.shape[1]
                embed_dim.record_dim(directory, dim)
            done += len(batch_keys)
            tokens += batch_tokens
            sources.append(source)
            shown.advance(len(batch_keys))  # the batch is on disk: a stop requested now keeps it
        shown.finish()
    finally:
        batches.close()  # stops a provider's in-flight requests if we failed first
        # Also on failure: what was embedded stays, in fewer files.
        if len(new_shards) > 1:
            _merge_shards(directory, new_shards)
    return dim, tokens, _weakest(sources)


def embed_progress(provider_name: str, role: str, total: int, emit: Callable[[str], None] | None) -> Progress:
    """Progress of embedding `total` texts ("embed minilm documents: 1,216/3,000 texts ..."); it is
    also where a stop request ends the loop, so it runs even when nobody reads the lines."""
    return Progress(embed_what(provider_name, role), total, "texts", emit=emit or (lambda line: None))


def embed_what(provider_name: str, role: str) -> str:
    """What embedding one set is called in progress and stop lines ("embed minilm documents")."""
    kind = {"document": "documents", "query": "queries"}.get(role, f"{role} texts")
    return f"embed {provider_name} {kind}"


def _batches(provider: Provider, role, items, batch_size):
    """(keys, vectors, tokens, token source) per batch, in completion order: the provider
    plans its calls (count, token budget) and runs them (one at a time, or several)."""
    texts = [text for _, text in items]
    plan = provider.plan_batches(texts, role, batch_size)
    with contextlib.closing(provider.encode_batches([[texts[i] for i in batch] for batch in plan], role)) as results:
        for index, result in results:
            batch = [texts[i] for i in plan[index]]
            row_tokens, row_source = result.row_tokens, result.token_source
            if row_tokens is None:  # an API's usage is per request: count each text as the provider would
                row_tokens, row_source = provider.token_counts(batch, role)
            yield [items[i][0] for i in plan[index]], result.vectors, result.tokens, result.token_source, (row_tokens, row_source)


def count_tokens(provider: Provider, texts: Sequence[str], role: Role) -> tuple[int, str]:
    """Tokens of `texts` as the provider counts them (its tokenizer, or an estimate)."""
    counts, source = provider.token_counts(texts, role)
    return int(sum(counts)), source


def _weakest(sources: list[str]) -> str:
    for source in ("estimate", "tokenizer", "usage"):
        if source in sources:
            return source
    return "none"


def _checked(vectors, expected_rows: int, provider_name: str) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != expected_rows:
        raise ValueError(f"provider {provider_name!r} returned shape {vectors.shape}, expected ({expected_rows}, dim)")
    if not np.isfinite(vectors).all():
        raise ValueError(f"provider {provider_name!r} returned non-finite values (NaN or inf)")
    return l2_normalized(vectors)


def _vector_table(keys: list[str], vectors: np.ndarray, tokens=None) -> pa.Table:
    """Shard rows: key, vector (float32 fixed-size list) and, when known, the text's tokens
    with where the count came from (the cost ledger reads them for cached rows)."""
    dim = vectors.shape[1]
    flat = pa.array(vectors.reshape(-1), type=pa.float32())
    columns = {"key": pa.array(keys, pa.string()), "vector": pa.FixedSizeListArray.from_arrays(flat, dim)}
    if tokens is not None:
        counts, source = tokens
        columns["tokens"] = pa.array(counts, pa.int32())
        columns["token_source"] = pa.array([source] * len(keys), pa.dictionary(pa.int8(), pa.string()))
    return pa.table(columns)


def _write_shard(directory: Path, keys: list[str], vectors: np.ndarray, tokens=None) -> Path:
    return shards.write_shard(directory, _vector_table(keys, vectors, tokens))


def _remove_shard(path: Path) -> None:
    shards.remove_shard(path)


def _merge_shards(directory: Path, paths: list[Path]) -> None:
    # The merged shard is complete on disk before the small ones go, so a crash here leaves
    # duplicates, never a gap; the next call's heal_cache drops them.
    shards.write_shard(directory, pa.concat_tables([shards.read_shard(path) for path in paths], promote_options="permissive"))
    for path in paths:
        _remove_shard(path)


def cache_lock(directory: Path) -> Path:
    return Path(directory) / ".lock"


class LiveRows(dict):
    """Live cache keys -> their stored token count (None: stored before counts were kept)."""

    source = "none"  # the weakest token source among the stored counts
    dim: int | None = None  # the folder's vector dimension (None: no vectors yet)


def heal_cache(directory: Path, store: Path) -> LiveRows:
    """Make the folder hold each key once, in intact shards; returns the live keys with their
    stored token counts.
    Call with the folder's lock held.

    - leftover temporary files of a killed writer are deleted (writers hold the lock);
    - a shard whose bytes do not match its sidecar, or that does not parse, is quarantined;
    - a shard written without its sidecar (killed between the two renames) gets one;
    - a row whose key a newer shard also holds is dead (newer wins, as on read): a shard with
      only dead rows is deleted, one with some is rewritten without them (same time stamp, so
      its place in the order is kept) before the old file goes. Killed half-way, this leaves
      duplicates again, never a gap, and the next call finishes the job.
    """
    seen = LiveRows()
    sources: set[str] = set()
    for path, head in shards.scan_shards(directory, store, ["key", "tokens", "token_source"], newest_first=True):
        shard_keys = head.column("key").to_pylist()
        counts = head.column("tokens").to_pylist() if "tokens" in head.column_names else [None] * len(shard_keys)
        if "token_source" in head.column_names:
            sources.update(head.column("token_source").unique().to_pylist())
        live_rows = []
        row_seen: dict[str, int | None] = {}
        for row, (key, count) in enumerate(zip(shard_keys, counts)):
            if key not in seen and key not in row_seen:
                live_rows.append(row)
                row_seen[key] = count
        if len(live_rows) < len(shard_keys):
            dropped = len(shard_keys) - len(live_rows)
            if live_rows:
                table = shards.read_shard(path).take(pa.array(live_rows, pa.int64()))
                shards.write_shard(directory, table, stamp=shards.shard_stamp(path))
            _remove_shard(path)
            log.info("embedding cache %s: dropped %d superseded row(s) of %s", directory, dropped, path.name,
                     extra=STORE_CHANGED)
        seen.update(row_seen)
    seen.source = _weakest([s for s in sources if s])
    return seen


shard_paths = shards.shard_paths


def cached_keys(directory: Path) -> set[str]:
    keys: set[str] = set()
    for path in shard_paths(directory):
        keys.update(shards.read_shard(path, ["key"]).column("key").to_pylist())
    return keys


def cache_dim(directory: Path) -> int:
    recorded = embed_dim.recorded_dim(directory)
    if recorded is not None:
        return recorded
    for path in shard_paths(directory):
        return pq.read_schema(path).field("vector").type.list_size
    raise FileNotFoundError(f"no cached vectors under {directory}")


def _vectors_of(table: pa.Table) -> np.ndarray:
    column = table.column("vector").combine_chunks()
    dim = column.type.list_size
    return column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)


@dataclass(frozen=True)
class LoadReport:
    """How the vectors came out of the cache: what was decoded and copied."""

    zero_copy: bool  # the matrix is a view of Arrow's buffers (never: see read_vectors)
    decoded_bytes: int  # float32 bytes Parquet decoded (unavoidable: the file is zstd)
    copied_bytes: int  # bytes copied after decoding: each decoded batch once into the matrix
    shards: int
    batches: int


_READ_BATCH = 8192  # rows decoded at a time: bounds the decoder's working memory


def read_vectors(embedding_set: EmbeddingSet, out: np.ndarray | None = None) -> tuple[list[str], np.ndarray, LoadReport]:
    """The set's ids and (count, dim) float32 matrix in set order, with peak memory of about
    one matrix, and a report of what was decoded and copied.

    Each shard is streamed in small record batches (no pre-buffering of the whole column
    chunk) and every batch is copied once into a preallocated matrix, at its rows' set
    positions. Measured on pyarrow 26: decoding a whole fixed_size_list column at once (the
    zero-copy route, `read_table(..., memory_map=True)` then `flatten().to_numpy()`) peaks at
    ~4.6x the vector bytes (levels and growing builders) and keeps ~2.6x resident; streaming
    costs one copy of the bytes and peaks at the matrix plus a few batches.

    `out`: a (count, dim) float32 C-contiguous array to fill instead of a new matrix (an
    index's own storage, so the vectors are never held twice); it is returned as the matrix.
    """
    wanted = pl.read_parquet(embedding_set.path, columns=["id", "key"])
    ids = wanted["id"].to_list()
    keys = wanted.select("key").with_row_index("position")
    del wanted
    # Shared lock: no writer merges or heals (deletes shards) while we plan and read.
    with shards.folder_lock(embedding_set.cache_dir, shared=True):
        return _read_vectors_locked(embedding_set, ids, keys, out)


def read_vector_range(embedding_set: EmbeddingSet, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows start..stop of the set's matrix and nothing else held (a search shard's vectors,
    tasks/stages/sharded_search.py); the cache files are streamed as read_vectors does."""
    # Sliced in the scan: only the set file's row groups holding these rows are decoded.
    wanted = pl.scan_parquet(embedding_set.path).select("id", "key").slice(start, stop - start).collect()
    return _read_wanted(embedding_set, wanted, out)


def read_vector_rows(embedding_set: EmbeddingSet, rows: np.ndarray) -> np.ndarray:
    """The set's rows at these (sorted) row numbers and nothing else held: an IVF quantizer's
    training sample in a sharded build (tasks/stages/sharded_index.py)."""
    wanted = pl.read_parquet(embedding_set.path, columns=["id", "key"])[np.asarray(rows, dtype=np.int64)]
    return _read_wanted(embedding_set, wanted)


def _read_wanted(embedding_set: EmbeddingSet, wanted: pl.DataFrame, out: np.ndarray | None = None) -> np.ndarray:
    """The vectors of `wanted` (id, key rows of the set), in its order, read under the folder's shared lock."""
    keys = wanted.select("key").with_row_index("position")
    with shards.folder_lock(embedding_set.cache_dir, shared=True):
        return _read_vectors_locked(embedding_set, wanted["id"].to_list(), keys, out)[1]


def _read_vectors_locked(embedding_set: EmbeddingSet, ids: list[str], keys: pl.DataFrame, out: np.ndarray | None = None):
    dim = embedding_set.dim
    # Newest shard first: after a forced re-embed its rows win over the old ones.
    paths = shard_paths(Path(embedding_set.cache_dir))[::-1]
    if not paths:
        raise FileNotFoundError(f"embedding cache {embedding_set.cache_dir} is empty")

    # Which set positions each shard row serves; the first (newest) shard holding a key wins.
    plans = []
    served = pl.DataFrame(schema={"key": pl.String})
    for path in paths:
        shard_keys = pl.from_arrow(shards.read_shard(path, ["key"])).with_row_index("row")
        fresh = shard_keys.join(served, on="key", how="anti").unique(subset="key", keep="first", maintain_order=True)
        hits = fresh.join(keys, on="key", how="inner").select("row", "position", "key").sort("row")
        if hits.height:
            held = embed_dim.shard_dim(path)
            if held != dim:  # only a folder nobody healed since a model changed: never an IndexError below
                raise embed_dim.DimensionChanged(
                    f"{embedding_set.provider}: embedding cache {embedding_set.cache_dir} holds {held}-d vectors in "
                    f"{path.name}, but this set is {dim}-d (model changed?): rerun (the embed stage sets such shards "
                    f"aside), or remove {embedding_set.cache_dir}")
            plans.append((path, hits["row"].to_numpy(), hits["position"].to_numpy()))
            # Only the wanted keys: a reader of one range (a search shard) then holds its own keys,
            # not every key of the cache (~100 bytes a row, 10 GB at 100M rows).
            served = pl.concat([served, hits.select("key")])
        del shard_keys, fresh, hits
    covered = sum(len(rows) for _, rows, _ in plans)
    if covered < len(ids):
        missing = keys.join(served, on="key", how="anti")
        raise RuntimeError(
            f"{missing.height} vectors of set {embedding_set.key[:12]} are missing from {embedding_set.cache_dir} "
            f"(first id: {ids[missing['position'][0]]}); rerun the embed stage"
        )
    del keys, served

    if out is None:
        matrix = np.empty((len(ids), dim), dtype=np.float32)
    elif out.shape != (len(ids), dim) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {(len(ids), dim)} "
                         f"(got {out.dtype} {out.shape})")
    else:
        matrix = out
    decoded = batches = 0
    for path, rows, positions in plans:
        parquet = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
        start = 0
        for batch in parquet.iter_batches(batch_size=_READ_BATCH, columns=["vector"]):
            count = batch.num_rows
            lo, hi = np.searchsorted(rows, [start, start + count])
            if hi > lo:
                block = batch.column(0).flatten().to_numpy(zero_copy_only=True).reshape(-1, dim)
                matrix[positions[lo:hi]] = block[rows[lo:hi] - start]
                decoded += block.nbytes
                batches += 1
                del block
            start += count
            del batch
    pa.default_memory_pool().release_unused()
    return ids, matrix, LoadReport(False, decoded, matrix.nbytes, len(plans), batches)


def load_vectors(embedding_set: EmbeddingSet) -> tuple[list[str], np.ndarray]:
    """The set's ids and a (count, dim) float32 matrix in set order."""
    ids, matrix, _ = read_vectors(embedding_set)
    return ids, matrix


class PrecomputedProvider(Provider):
    """Vectors made elsewhere (synthetic benchmark data, imported embeddings), served by id:
    `store_vectors` puts them in the cache through the same writer as any provider."""

    def __init__(self, fingerprint: dict, ids: Sequence[str], vectors: np.ndarray):
        self.kind = str(fingerprint.get("kind", "precomputed"))
        self._fingerprint = dict(fingerprint)
        self._row = {id_: row for row, id_ in enumerate(ids)}
        self._vectors = vectors

    def fingerprint(self) -> dict:
        return self._fingerprint

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        return self._vectors[np.fromiter((self._row[t] for t in texts), dtype=np.int64, count=len(texts))]

    def token_counts(self, texts: Sequence[str], role: Role) -> tuple[list[int], str]:
        return [0] * len(texts), "none"  # nothing was sent anywhere


def store_vectors(store: Path, provider_name: str, fingerprint: dict, role: Role, ids: Sequence[str],
                  vectors: np.ndarray) -> EmbeddingSet:
    """Precomputed vectors into the embedding cache, each keyed as `embed_texts` keys a text,
    with its id standing in for the text: one shard, written under the cache's lock."""
    provider = PrecomputedProvider(fingerprint, ids, vectors)
    return embed_texts(provider, provider_name, list(ids), list(ids), role, Path(store), batch_size=max(1, len(ids)))
