"""Crash safety: a run killed with SIGKILL at chosen and seeded random moments of every stage, then rerun,
gives exactly the results of an uninterrupted run, with no cache row duplicated and exactly
the missing texts embedded again."""
from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from retbench.support import crash_worker
from retbench.support.crash_worker import TABLES, cache_rows
from retbench.support.crash_runs import STAGES, WINDOW, check_rerun, provider_folders, start_and_kill

# Chosen kill points: the moment each stage starts, and the middle of the embed stage (where a kill
# must leave some, not all, texts to embed again). Then a bounded random sample of
# moments on top, seeded; benchmarks/bench_crash.py runs the long random soak (120 trials).
CHOSEN = [(stage, 0.0) for stage in STAGES] + [("embed", WINDOW["embed"] / 2)]
RANDOM_TRIALS = 2


def kill_points() -> list[tuple[str, float]]:
    rng = random.Random(20240607)
    drawn = [(rng.choice(STAGES), 0.0) for _ in range(RANDOM_TRIALS)]
    return CHOSEN + [(stage, rng.uniform(0.0, WINDOW[stage])) for stage, _ in drawn]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    crash_worker.run(base / "store", base / "out")
    tables = {name: pl.read_parquet(base / "out" / f"{name}.parquet") for name in TABLES}
    needed = {name: cache_rows(folder)[1] for name, folder in provider_folders(base / "store").items()}
    return tables, needed


def test_kill_at_chosen_and_random_moments_of_every_stage_then_rerun(tmp_path, reference):
    outcomes = []
    for trial, (stage, delay) in enumerate(kill_points()):
        store, out = tmp_path / f"t{trial}" / "store", tmp_path / f"t{trial}" / "out"
        what = start_and_kill(store, out, stage, delay)
        figures = check_rerun(store, out, reference)
        outcomes.append((stage, round(delay, 3), what, figures["missing"]))
    killed = [o for o in outcomes if o[2] == "killed"]
    print("\ntrials (stage, delay, outcome, texts missing after the kill):", *outcomes, sep="\n  ")
    # Every chosen point lands inside the run (only the random sample may fall after its end).
    assert all(o[2] == "killed" for o in outcomes[:len(CHOSEN)]), outcomes
    assert {o[0] for o in killed} == set(STAGES), outcomes
    # Kills inside the embed stage must have left some, not all, texts to embed again.
    assert any(0 < o[3] < 2 * sum(len(k) for k in reference[1].values()) for o in killed if o[0] == "embed"), outcomes


def test_kill_between_a_parts_shard_and_its_journals_removal_leaves_no_duplicate_after_rerun(tmp_path, reference,
                                                                                            monkeypatch):
    """The known gap: a finished part's journal becomes a shard, then the journal is deleted."""
    from retbench.tasks.store import shards

    real_drop = shards.drop_journal
    calls = {"n": 0}

    def dies_after_one(part):
        calls["n"] += 1
        if calls["n"] > 1:
            raise KeyboardInterrupt("killed between the part's shard and the journal's removal")
        real_drop(part)

    monkeypatch.setattr(shards, "drop_journal", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        crash_worker.run(tmp_path / "store", tmp_path / "out")
    monkeypatch.setattr(shards, "drop_journal", real_drop)
    folder = provider_folders(tmp_path / "store")["hash64"]
    rows, keys = cache_rows(folder)
    assert rows > len(keys)  # the crash did leave duplicates ...
    check_rerun(tmp_path / "store", tmp_path / "out", reference)  # ... and the rerun removed them, embedding nothing


def test_force_reembed_leaves_one_row_per_key(tmp_path):
    from retbench.tasks.stages.embed import embed_texts, load_vectors
    from retbench.tasks.providers import create_provider

    provider = create_provider("hashing", {"dim": 32})
    texts = [f"text number {i}" for i in range(40)]
    embed_texts(provider, "h", texts, texts, "document", tmp_path, batch_size=8)
    again = embed_texts(provider, "h", texts[:10], texts[:10], "document", tmp_path, batch_size=8, force=True)
    rows, keys = cache_rows(Path(again.cache_dir))
    assert (rows, len(keys)) == (40, 40)
    assert load_vectors(again)[1].shape == (10, 32)
