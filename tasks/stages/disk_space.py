"""Before a run: refuse it, in one line, when the store's disk clearly cannot hold what it will
write (the vectors of the texts not cached yet and the indexes not built, as `retbench check`
estimates them), rather than failing on a full disk an hour in."""
from __future__ import annotations

import shutil
from pathlib import Path

from retbench.tasks.config.spec import BenchmarkSpec
from retbench.tasks.store.integrity import StoreError

# With this much free the run is not planned (the plan hashes every text, and cuts the chunks
# when the store does not hold them): a run that fills it fails on the write, in one line, all
# the same, and keeps what it wrote.
PLENTY = 100e9


def check_free_space(spec: BenchmarkSpec, dataset, dataset_key: str | None) -> None:
    """Raise StoreError when the store's free space is less than what the run would add to it."""
    from retbench.tasks.stages.estimate import store_bytes
    from retbench.tasks.stages.preflight import plan_run
    from retbench.tasks.store.files import human_bytes
    from retbench.tasks.store.remote import is_remote

    if is_remote(spec.store_dir):
        return
    store = Path(spec.store_dir)
    existing = next((p for p in (store, *store.parents) if p.exists()), None)
    if existing is None:
        return
    free = shutil.disk_usage(existing).free
    if free >= PLENTY:
        return
    plan = plan_run(spec, dataset, dataset_key)
    needed, unsized = store_bytes(spec, plan)
    if needed <= free:
        return
    texts = sum(work.missing for work in plan.providers)
    not_counted = f", not counting {', '.join(unsized)} (dimension unknown)" if unsized else ""
    raise StoreError(f"store_dir {store}: {human_bytes(free)} free, and this run would add about {human_bytes(needed)} to it "
                     f"(the vectors of {texts:,} texts to embed and the indexes to build{not_counted}); free space "
                     f"on that disk or point --store-dir (or store_dir in the spec) at a larger one "
                     f"(`retbench check` shows the estimate)")
