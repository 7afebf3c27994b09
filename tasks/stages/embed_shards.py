"""Sharded embedding: one provider's missing texts, split by content key into parts that separate
task runs embed (on Dask: over all workers), every batch cached the moment it is embedded.

    plan_embedding  -> embed_part (one task run per shard, any worker) -> finish_embedding

The plan (under the cache folder's lock) heals the folder, finds the missing texts and writes
each part's (key, text) rows to `pending/` in the cache folder; it passes on paths, never texts
or vectors. A part is claimed by one worker at a time (its work lock): a concurrent run's worker
waits, then finds the part done and embeds nothing, so a text is never embedded twice. A worker
killed mid-part loses only its in-flight batches: the retry (or the next run, which claims the
part left in `pending/`) skips the rows written since the part was planned.
"""
from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from retbench.tasks.progress import Progress
from retbench.tasks.providers import Provider, Role
from retbench.tasks.stages.embed import (EmbeddingSet, _batches, _cached_tokens, _checked, _vector_table, _weakest,
                                cache_dim, embed_progress, heal_cache, open_folder, set_address, shard_paths, speaker)
from retbench.tasks.stages import embed_dim
from retbench.tasks.store import shards
from retbench.tasks.store.build import build_once, need_work
from retbench.tasks.store.integrity import parquet_readable

log = logging.getLogger("retbench.embed")
_PLANNED = b"planned_ns"  # part metadata: rows written to the cache after this moment are done


@dataclass(frozen=True)
class EmbedPlan:
    """Small, picklable: what the part tasks embed and what the finishing task reports."""

    provider: str  # the set's label
    role: str
    store: str
    cache_dir: str
    set_path: str
    set_key: str
    count: int
    missing: int  # distinct texts not in the cache when planned
    kept: int  # of those, how many a stopped run kept in a pending part's journal (not embedded again)
    repeated: int
    parts: tuple[str, ...]  # pending part files; part task i embeds parts[i::shards]
    dim: int | None  # the cache's dimension when planned (None: empty cache)
    force: bool
    cached_tokens: int
    cached_token_source: str
    started: float  # time.time() when planned: the set's seconds span plan to finish


@dataclass(frozen=True)
class PartResult:
    embedded: int
    tokens: int
    token_source: str
    dim: int | None


def shard_of(key: str, shards_: int) -> int:
    """A text's shard: its content key (a sha256 hex) modulo the shard count, so a text's shard
    depends on the text alone, not on which other texts are missing."""
    return int(key[:15], 16) % shards_


def plan_embedding(provider: Provider, provider_name: str, ids: Sequence[str], texts: Sequence[str], role: Role,
                   store: Path, shards_: int, batch_size: int, force: bool = False) -> EmbedPlan:
    """Write the set file and the pending parts of its missing texts: at most `shards_` parts,
    and none smaller than a batch (fewer parts when fewer texts are missing)."""
    started = time.time()
    directory, keys, set_key, set_path = set_address(provider, ids, texts, role, store)
    with shards.folder_lock(directory):
        live = open_folder(directory, provider, store, provider_name)
        cached = set() if force else live
        missing: dict[str, str] = {}
        cached_texts, cached_keys = [], []
        for key, text in zip(keys, texts):
            if key in cached:
                cached_texts.append(text)
                cached_keys.append(key)
            elif key not in missing:
                missing[key] = text
        cached_tokens, cached_source = _cached_tokens(provider, cached_texts, cached_keys, live, role)
        missing_count = len(missing)
        if missing:
            need_work(f"embed {missing_count} {role} texts with {provider_name}")
        wanted = set(missing)
        claimed = _claim_pending(directory, store, missing, live)
        # Missing from the cache, but in a claimed part's journal: kept by a stopped run, not to embed again.
        kept = len(wanted & {key for part in claimed for key in shards.journal_keys(part)})
        parts = claimed + _write_parts(directory, missing, shards_, batch_size)
        set_table = pa.table({"id": pa.array(list(ids), pa.string()), "key": pa.array(keys, pa.string())})
        build_once(store, set_path, lambda tmp: pq.write_table(set_table, tmp, compression="zstd"),
                   parse=parquet_readable, lock=False)
        dim = live.dim
    return EmbedPlan(provider=provider_name, role=role, store=str(store), cache_dir=str(directory),
                     set_path=str(set_path), set_key=set_key, count=len(keys),
                     missing=missing_count, kept=kept, repeated=len(keys) - missing_count - len(cached_texts), parts=tuple(str(p) for p in parts), dim=dim, force=force,
                     cached_tokens=cached_tokens, cached_token_source=cached_source, started=started)


def _claim_pending(directory: Path, store: Path, missing: dict[str, str], live) -> list[Path]:
    """Parts left in `pending/` by a concurrent run (being embedded now) or a killed one: texts of
    ours they hold are theirs to embed (we wait on their work lock); a part whose texts are all
    cached by now is finished business and removed. Call with the folder lock held."""
    claimed = []
    # With nothing missing there is nothing to claim: a cached rerun lists no `pending/`.
    for path in shards.pending_paths(directory, bucket=bool(missing)):
        table = shards.read_pending(path, store)
        if table is None:
            continue
        part_keys = table.column("key").to_pylist()
        if any(key in missing for key in part_keys):
            claimed.append(path)
            for key in part_keys:
                missing.pop(key, None)
        elif all(key in live for key in part_keys):
            shards.remove_pending(path)
    return claimed


def _write_parts(directory: Path, missing: dict[str, str], shards_: int, batch_size: int) -> list[Path]:
    if not missing:
        return []
    count = max(1, min(shards_, math.ceil(len(missing) / batch_size)))
    groups: list[list[str]] = [[] for _ in range(count)]
    for key in missing:
        groups[shard_of(key, count)].append(key)
    planned = time.time_ns()
    run = uuid.uuid4().hex[:8]
    paths = []
    for index, group in enumerate(groups):
        if not group:
            continue
        table = pa.table({"key": pa.array(group, pa.string()), "text": pa.array([missing[k] for k in group], pa.string())})
        table = table.replace_schema_metadata({_PLANNED: str(planned).encode()})
        # Names are never reused (plan time, run), so a finished part's lock file can go with it.
        paths.append(shards.write_pending(directory, f"{planned:020d}-{run}-{index:04d}", table))
    return paths


# One part of a provider at a time per process: a Dask worker with several threads still keeps
# an HTTP provider's requests in flight at most `concurrency`, and a local model's cores unshared.
_slots: dict[str, threading.Lock] = {}
_slots_guard = threading.Lock()


def _slot(cache_dir: str) -> threading.Lock:
    with _slots_guard:
        return _slots.setdefault(cache_dir, threading.Lock())


def embed_part(provider: Provider, plan: EmbedPlan, index: int, shards_: int, batch_size: int,
               progress: Callable[[str], None] | None = None) -> PartResult:
    """Embed the parts `plan.parts[index::shards_]`, each batch kept in the part's journal as it
    completes; a finished part becomes one shard of the cache."""
    mine = [Path(p) for p in plan.parts[index::shards_]]
    directory = Path(plan.cache_dir)
    embedded = tokens = 0
    sources: list[str] = []
    dim = plan.dim
    if not mine:
        return PartResult(0, 0, "none", dim)
    # One count over this call's parts (one part holds the whole set by default), its total fixed
    # now, before any part is embedded: what a stopped run kept in their journals counts as done
    # before this run (corrected part by part once each is read under its lock). The stop is
    # checked after every batch, not every part.
    rows = {path: _part_rows(path) for path in mine}
    for path in mine:  # on an object store: the batches a killed worker of another machine uploaded
        shards.fetch_journal(path)
    journaled = {path: len(shards.journal_keys(path)) for path in mine}
    shown = embed_progress(plan.provider, plan.role, sum(rows.values()), progress)
    shown.already(sum(journaled.values()))
    with _slot(plan.cache_dir):
        for path in mine:
            with shards.work_lock(path):
                table = shards.read_pending(path, plan.store)
                if table is None:  # another run embedded it while we waited: already kept, as a stopped run's
                    shown.already(max(0, rows[path] - journaled[path]))
                    continue
                done = _written_since(directory, int(table.schema.metadata[_PLANNED]))
                # A worker killed mid-part left its journal: those rows go into the cache first.
                with shards.folder_lock(directory):
                    dim = embed_dim.admit_journal(directory, path, Path(plan.store), plan.provider, dim,
                                                  speaker(provider), refuse=False)
                    done.update(shards.shard_from_journal(directory, path, skip=done))
                items = [(k, t) for k, t in zip(table.column("key").to_pylist(), table.column("text").to_pylist())
                         if k not in done]
                if table.num_rows != rows[path]:  # a part only now fetched from an object store
                    shown.total += table.num_rows - rows[path]
                # Kept by a stopped run (its journal, or shards written since the part was planned).
                shown.already(max(0, table.num_rows - len(items) - journaled[path]))
                count, part_tokens, source, dim = _embed_items(provider, plan, path, items, batch_size, dim, shown)
                embedded += count
                tokens += part_tokens
                sources.append(source)
                with shards.folder_lock(directory):
                    # Another part (another process) may have recorded another dimension meanwhile.
                    dim = embed_dim.admit_journal(directory, path, Path(plan.store), plan.provider, dim,
                                                  speaker(provider), refuse=True)
                    shards.shard_from_journal(directory, path)
                    shards.remove_pending(path)
    shown.finish()
    return PartResult(embedded, tokens, _weakest(sources), dim)


def _part_rows(path: Path) -> int:
    """The texts a pending part holds (its footer only); 0 when it is gone (done by another run)."""
    try:
        return pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowInvalid):  # gone, or damaged: read_pending quarantines it
        return 0


def _written_since(directory: Path, planned_ns: int) -> set[str]:
    """Keys in shards written after a part was planned: a killed worker's finished batches."""
    keys: set[str] = set()
    with shards.folder_lock(directory, shared=True):
        for path in shard_paths(directory):
            if shards.shard_stamp(path) >= planned_ns:
                keys.update(pq.read_table(path, columns=["key"]).column("key").to_pylist())
    return keys


def _embed_items(provider, plan: EmbedPlan, part: Path, items, batch_size, dim, shown: Progress):
    if not items:
        return 0, 0, "none", dim
    # Similar lengths in one batch waste less padding; the cache is keyed, so order does not matter.
    items = sorted(items, key=lambda item: len(item[1]))
    batches = _batches(provider, plan.role, items, batch_size)
    try:
        return _journal_batches(provider, plan, part, batches, dim, shown)
    except Exception:
        if shown.done > shown.before:  # said once, next to the error: nothing done is lost
            log.info(f"{plan.provider} {plan.role} texts: the batches embedded before the failure are kept; "
                     f"a rerun embeds only the rest")
        raise


def _journal_batches(provider, plan: EmbedPlan, part: Path, batches, dim, shown: Progress):
    done = tokens = 0
    sources: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.callback(batches.close)  # stops a provider's in-flight requests if we failed first
        append = None
        for batch_keys, raw, batch_tokens, source, row_tokens in batches:
            vectors = _checked(raw, len(batch_keys), plan.provider)
            embed_dim.check_batch(plan.provider, vectors.shape[1], dim, plan.cache_dir, speaker(provider))
            dim = vectors.shape[1]
            rows = _vector_table(batch_keys, vectors, row_tokens)
            if append is None:  # the schema (dimension) is known with the first batch
                append = stack.enter_context(shards.journal(part, rows.schema))
            for record_batch in rows.to_batches():
                append(record_batch)
            done += len(batch_keys)
            tokens += batch_tokens
            sources.append(source)
            # The batch is in the part's journal: a stop requested now keeps it (the next run's
            # plan claims the part and moves its journal into the cache).
            shown.advance(len(batch_keys))
    return done, tokens, _weakest(sources), dim


def finish_embedding(plan: EmbedPlan, parts: Sequence[PartResult]) -> EmbeddingSet:
    """The set's record once every part is in the cache (texts a concurrent run embedded count as
    served from the cache, as when a run waits for another)."""
    if plan.force:
        with shards.folder_lock(plan.cache_dir):
            heal_cache(Path(plan.cache_dir), Path(plan.store))  # the old rows of re-embedded texts are dead now
    dims = {p.dim for p in parts if p.dim is not None} | ({plan.dim} if plan.dim is not None else set())
    if len(dims) > 1:  # admit_journal refuses this first; kept for a part that wrote nothing
        ordered = sorted(dims, key=lambda d: d != plan.dim)
        raise embed_dim.changed(plan.provider, ordered[1], ordered[0], plan.cache_dir)
    if dims:
        dim = dims.pop()
    else:
        with shards.folder_lock(plan.cache_dir, shared=True):
            dim = cache_dim(Path(plan.cache_dir))
    embedded = sum(p.embedded for p in parts)
    return EmbeddingSet(
        provider=plan.provider, role=plan.role, cache_dir=plan.cache_dir, path=plan.set_path, key=plan.set_key,
        computed=plan.missing > 0, count=plan.count, dim=dim, embedded=embedded,
        from_cache=plan.count - plan.repeated - embedded, repeated=plan.repeated, seconds=time.time() - plan.started,
        tokens=sum(p.tokens for p in parts), token_source=_weakest([p.token_source for p in parts]),
        cached_tokens=plan.cached_tokens, cached_token_source=plan.cached_token_source,
    )
