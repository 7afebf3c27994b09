"""One vector dimension per embedding cache folder: recorded in its fingerprint.json on the first
write; a batch or journal of another dimension is refused at write, a shard of one set aside."""
from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from retbench.tasks.store import shards
from retbench.tasks.store.files import write_json
from retbench.tasks.store.integrity import STORE_CHANGED, StoreError

log = logging.getLogger("retbench.embed")

DIM_KEY = "vector_dim"  # in fingerprint.json; not a fingerprint field (the folder's hash ignores it)


class DimensionChanged(StoreError):
    """The provider returns vectors of another dimension than its cache folder holds (an expected
    failure: one line, exit 2; the vectors already cached are kept)."""


def changed(provider_name: str, returned: int, held: int, directory: str | Path, who: str = "the server") -> DimensionChanged:
    return DimensionChanged(f"{provider_name}: {who} now returns {returned}-d vectors; the cache holds {held}-d ones "
                            f"(model changed?): set a new model name, or remove {directory}")


def check_batch(provider_name: str, returned: int, held: int | None, directory: str | Path, who: str) -> None:
    if held is not None and returned != held:
        raise changed(provider_name, returned, held, directory, who)


def recorded_dim(directory: str | Path) -> int | None:
    try:
        value = json.loads((Path(directory) / "fingerprint.json").read_text(encoding="utf-8")).get(DIM_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def record_dim(directory: str | Path, dim: int) -> None:
    """Write the folder's dimension into its fingerprint.json. Call with the folder lock held."""
    path = Path(directory) / "fingerprint.json"
    try:
        fingerprint = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no fingerprint yet: open_folder writes it before any vector is
    if fingerprint.get(DIM_KEY) != dim:
        write_json(path, {**fingerprint, DIM_KEY: int(dim)})


def shard_dim(path: Path) -> int | None:
    try:
        return pq.read_schema(path).field("vector").type.list_size
    except Exception:  # whatever pyarrow raises: a damaged shard, which heal_cache quarantines
        return None


def settle(directory: Path, store: Path, provider_name: str) -> int | None:
    """The folder's one dimension (None: no vectors yet). Call with the lock held, before
    heal_cache, whose "a newer shard's row wins" must never let a row of another dimension win.

    Recorded in fingerprint.json, or (a folder from before it was recorded) the dimension of most
    rows, ties to the oldest shard's, then recorded. Shards of another dimension (a model changed
    behind its name, cached by an older retbench) go to quarantine, told in one line; their texts
    are embedded again, and a provider still returning that dimension is refused at write."""
    dims = {path: dim for path in shards.shard_paths(directory) if (dim := shard_dim(path)) is not None}
    held = recorded_dim(directory)
    if held is None:
        if not dims:
            return None
        rows: Counter[int] = Counter()
        for path, dim in dims.items():  # oldest first: max() keeps the first of equal counts
            rows[dim] += pq.read_metadata(path).num_rows
        held = max(rows, key=rows.__getitem__)
        record_dim(directory, held)
    strays = [path for path, dim in dims.items() if dim != held]
    if strays:
        count = sum(pq.read_metadata(path).num_rows for path in strays)
        other = "/".join(str(d) for d in sorted({dims[path] for path in strays}))
        for path in strays:
            shards.set_aside(path, store, f"{dims[path]}-d vectors in a folder of {held}-d ones")
        log.warning("%s: embedding cache %s held %s-d vectors beside its %d-d ones (model changed?): moved %d shard(s), "
                    "%d rows, to %s; their texts are embedded again", provider_name, directory, other, held, len(strays),
                    count, Path(store) / "quarantine" / Path(directory).relative_to(store), extra=STORE_CHANGED)
    return held


def admit_journal(directory: Path, part: Path, store: Path, provider_name: str, held: int | None,
                  who: str, refuse: bool) -> int | None:
    """A part's journal joins the cache only in the folder's dimension; returns that dimension.
    Call with the folder lock held. A journal of another dimension is set aside: a killed worker's
    (`refuse=False`) is told in one line and its texts embedded again; this worker's own
    (`refuse=True`: another part recorded another dimension meanwhile) ends the run."""
    schema = shards.journal_schema(part)
    if schema is None or "vector" not in schema.names:
        return held
    dim = schema.field("vector").type.list_size
    recorded = recorded_dim(directory)
    held = recorded or held or dim  # the caller's: the plan's, or its own batches' (an empty folder)
    if dim == held and recorded is None:
        record_dim(directory, dim)
    if dim != held:
        target = shards.set_aside(shards.journal_path(part), store, f"{dim}-d vectors in a folder of {held}-d ones")
        if refuse:
            raise changed(provider_name, dim, held, directory, who)
        log.warning("%s: a killed run's %d-d vectors were set aside (%s): embedding cache %s holds %d-d ones "
                    "(model changed?); their texts are embedded again", provider_name, dim, target, directory, held,
                    extra=STORE_CHANGED)
    return held
