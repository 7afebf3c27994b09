"""One vector dimension per embedding cache folder (tasks/stages/embed_dim.py): recorded on the first
write, another refused at write (batch, journal), a shard of another one set aside when found."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from retbench.tasks.providers import create_provider
from retbench.tasks.stages.embed import _vector_table, cached_keys, cache_key, embed_texts, fingerprint_hash, read_vectors, shard_paths
from retbench.tasks.stages.embed_dim import DimensionChanged, recorded_dim
from retbench.tasks.stages.embed_shards import embed_part, finish_embedding, plan_embedding
from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.store import shards

IDS = [f"d{i}" for i in range(10)]
TEXTS = [f"document {i} about webhooks" for i in range(10)]


def provider(returns: int | None = None, from_batch: int = 0):
    """A hashing provider of 16 dimensions whose vectors are cut to `returns` from its batch
    `from_batch` on: a model changed behind one name (the fingerprint, hence the folder, stays)."""
    made = create_provider("hashing", {"dim": 16})
    if returns is not None:
        good = made.encode_batches

        def cut(batches, role):
            for index, result in good(batches, role):
                if index >= from_batch:
                    result = dataclasses.replace(result, vectors=np.asarray(result.vectors)[:, :returns])
                yield index, result

        made.encode_batches = cut
    return made


def folder_of(store: Path) -> Path:
    (folder,) = store.glob("embeddings/*")
    return folder


def test_the_first_write_records_the_dimension_and_another_one_is_refused_at_write(tmp_path):
    embed_texts(provider(), "h", IDS[:4], TEXTS[:4], "document", tmp_path, batch_size=2)
    folder = folder_of(tmp_path)
    assert recorded_dim(folder) == 16 and json.loads((folder / "fingerprint.json").read_text())["kind"] == "hashing"
    before = sorted(p.name for p in folder.iterdir()), list(tmp_path.glob("sets/*.parquet"))
    with pytest.raises(DimensionChanged) as caught:
        embed_texts(provider(returns=12), "h", IDS, TEXTS, "document", tmp_path, batch_size=2)
    assert str(caught.value) == (f"h: the model now returns 12-d vectors; the cache holds 16-d ones (model changed?): "
                                 f"set a new model name, or remove {folder}")
    # Nothing written (no shard, no set file for the refused set), nothing lost.
    assert (sorted(p.name for p in folder.iterdir()), list(tmp_path.glob("sets/*.parquet"))) == before


def test_a_batch_of_another_dimension_in_the_same_call_is_refused_and_the_earlier_batches_kept(tmp_path):
    with pytest.raises(DimensionChanged, match="now returns 12-d vectors; the cache holds 16-d ones"):
        embed_texts(provider(returns=12, from_batch=2), "h", IDS, TEXTS, "document", tmp_path, batch_size=2)
    folder = folder_of(tmp_path)
    assert recorded_dim(folder) == 16 and len(cached_keys(folder)) == 4  # batches 0 and 1, 16-d
    rerun = embed_texts(provider(), "h", IDS, TEXTS, "document", tmp_path, batch_size=2)
    assert (rerun.embedded, rerun.from_cache, rerun.dim) == (6, 4, 16)


def mixed_folder(store: Path) -> tuple[Path, object]:
    """What an older retbench left (the issue's store): texts 0-5 cached 16-d, then texts 6-9 12-d
    by a run of the changed model, and no dimension recorded."""
    first = embed_texts(provider(), "h", IDS[:6], TEXTS[:6], "document", store)
    folder = Path(first.cache_dir)
    fp_hash = fingerprint_hash(full_fingerprint(provider()))
    keys = [cache_key(fp_hash, "document", text) for text in TEXTS[6:]]
    shards.write_shard(folder, _vector_table(keys, np.ones((4, 12), np.float32) / np.sqrt(12)))
    fingerprint = json.loads((folder / "fingerprint.json").read_text())
    del fingerprint["vector_dim"]
    (folder / "fingerprint.json").write_text(json.dumps(fingerprint))
    return folder, first


def test_a_set_read_from_a_folder_of_mixed_dimensions_is_refused_not_an_index_error(tmp_path):
    folder, first = mixed_folder(tmp_path)
    both = dataclasses.replace(first, dim=12)  # the second run recorded its set as 12-d
    with pytest.raises(DimensionChanged, match=r"h: embedding cache .* holds 16-d vectors in shard-.*, but this set "
                                               r"is 12-d \(model changed\?\): rerun"):
        read_vectors(both)


def test_shards_of_another_dimension_found_in_a_folder_are_set_aside_in_one_line(tmp_path, caplog):
    folder, _ = mixed_folder(tmp_path)
    with caplog.at_level(logging.WARNING, logger="retbench"):
        result = embed_texts(provider(), "h", IDS, TEXTS, "document", tmp_path)
    # The dimension of most rows (6 rows 16-d, 4 rows 12-d) is kept and recorded; the 12-d shard moved.
    assert recorded_dim(folder) == 16 and (result.embedded, result.from_cache, result.dim) == (4, 6, 16)
    (moved,) = [p for p in (tmp_path / "quarantine").rglob("shard-*") if not p.name.endswith(".sha256")]
    assert moved.parent == tmp_path / "quarantine" / "embeddings" / folder.name
    assert [r.getMessage() for r in caplog.records] == [
        f"h: embedding cache {folder} held 12-d vectors beside its 16-d ones (model changed?): moved 1 shard(s), 4 rows, "
        f"to {tmp_path / 'quarantine' / 'embeddings' / folder.name}; their texts are embedded again"]
    ids, vectors = read_vectors(result)[:2]
    assert ids == IDS and vectors.shape == (10, 16)


def test_a_model_still_returning_the_other_dimension_is_then_refused(tmp_path):
    folder, _ = mixed_folder(tmp_path)
    with pytest.raises(DimensionChanged, match="now returns 12-d vectors; the cache holds 16-d ones"):
        embed_texts(provider(returns=12), "h", IDS, TEXTS, "document", tmp_path)
    assert len(shard_paths(folder)) == 1 and recorded_dim(folder) == 16


def test_a_killed_runs_journal_of_another_dimension_is_set_aside_and_its_texts_embedded_again(tmp_path, caplog):
    embed_texts(provider(), "h", IDS[:2], TEXTS[:2], "document", tmp_path)
    plan = plan_embedding(provider(), "h", IDS, TEXTS, "document", tmp_path, 1, 4)
    part = Path(plan.parts[0])
    fp_hash = fingerprint_hash(full_fingerprint(provider()))
    rows = _vector_table([cache_key(fp_hash, "document", t) for t in TEXTS[2:5]], np.ones((3, 12), np.float32))
    with shards.journal(part, rows.schema) as append:  # what a worker of the changed model left
        append(rows.to_batches()[0])
    with caplog.at_level(logging.WARNING, logger="retbench"):
        done = embed_part(provider(), plan, 0, 1, 4)
    assert done.embedded == 8 and done.dim == 16
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("h: a killed run's 12-d vectors were set aside (") and message.endswith(
        f"embedding cache {plan.cache_dir} holds 16-d ones (model changed?); their texts are embedded again")
    assert read_vectors(finish_embedding(plan, [done]))[1].shape == (10, 16)


def test_parts_returning_two_dimensions_into_an_empty_folder_keep_the_first_and_refuse_the_second(tmp_path):
    plan = plan_embedding(provider(), "h", IDS, TEXTS, "document", tmp_path, 2, 4)
    assert len(plan.parts) == 2 and plan.dim is None
    first = embed_part(provider(), plan, 0, 2, 4)
    with pytest.raises(DimensionChanged, match=f"now returns 12-d vectors; the cache holds 16-d ones .* remove {plan.cache_dir}$"):
        embed_part(provider(returns=12), plan, 1, 2, 4)
    assert recorded_dim(plan.cache_dir) == 16 and first.dim == 16
    assert {shards_dim for shards_dim in map(_dim, shard_paths(plan.cache_dir))} == {16}
    assert len(shards.pending_paths(plan.cache_dir)) == 1  # the refused part waits for a model of 16 dimensions


def _dim(path: Path) -> int:
    from retbench.tasks.stages.embed_dim import shard_dim

    return shard_dim(path)
