"""Judgments overlays in the store. `retbench judge import` keeps a qrels file's judgments beside
the dataset they judge, under the dataset's base content key (the key of the collection as read
from its files), and never writes into those files; a run merges the overlays the spec's
`judgments:` key chooses into the judgments it scores with.

The merged dataset has its own content key (the base key and the overlays used), so the history
starts a new series; the chunks, embeddings, indexes and runs stay keyed by the base key, so a
rescore after an import searches nothing again."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
import polars as pl
import pyarrow.parquet as pq

from retbench.tasks.config.spec import BenchmarkSpec, SpecError
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.judgments import Conflict, conflict_summary, conflicts, merge, read_overlay
from retbench.tasks.datasets.model import QRELS_SCHEMA, Dataset
from retbench.tasks.store.build import build_folder_once, build_once, read_metadata
from retbench.tasks.store.files import file_sha256, stable_hash
from retbench.tasks.store.integrity import parquet_readable

BASE = "base"  # the source label of the dataset's own judgments


@dataclass(frozen=True)
class Overlay:
    """One imported file's judgments, as the store keeps them (`table`: its Parquet file)."""

    file: str  # the imported file's name
    sha256: str
    source: str  # who judged: "human", a name, a tool
    imported_at: str  # ISO 8601, UTC
    judgments: int
    overrides: int  # judgments that replaced another grade (imported with --override)
    table: str

    def described(self) -> str:
        return f"{self.file} (source {self.source}, {self.judgments} judgments, sha256 {self.sha256[:12]})"


@dataclass(frozen=True)
class ImportResult:
    overlay: Overlay
    added: bool  # False: this very file (by its sha256) was imported before; nothing changed
    overridden: tuple[Conflict, ...] = ()  # conflicts settled by --override
    agreeing: int = 0  # judgments the dataset or an earlier overlay already had, with the same grade
    dataset: str = ""
    base_key: str = ""


def overlay_folder(store: str | Path, base_key: str) -> Path:
    """Beside the dataset's folder (datasets/<key>): datasets/overlays/<base key>/."""
    return Path(store) / "datasets" / "overlays" / base_key[:32]


def stored_overlays(store: str | Path, base_key: str) -> list[Overlay]:
    """The overlays imported for the dataset with content key `base_key`, in import order."""
    folder = overlay_folder(store, base_key)
    found = []
    for table in sorted(folder.glob("*.parquet")) if folder.is_dir() else ():
        facts = read_metadata(table)
        if not facts:  # a table whose import did not finish: it never counted
            continue
        found.append(Overlay(**{k: facts[k] for k in ("file", "sha256", "source", "imported_at", "judgments",
                                                      "overrides")}, table=str(table)))
    return sorted(found, key=lambda o: (o.imported_at, o.sha256))


def labels(overlays: list[Overlay]) -> list[str]:
    """A name per overlay: its file's name, with the start of its sha256 when two share a name
    (a pool file imported again after more judging)."""
    names = [o.file for o in overlays]
    return [o.file if names.count(o.file) == 1 else f"{o.file}@{o.sha256[:8]}" for o in overlays]


def overlay_table(overlay: Overlay) -> pl.DataFrame:
    return pl.read_parquet(overlay.table).select(list(QRELS_SCHEMA))


def check_import(spec: BenchmarkSpec, path: Path, source: str) -> None:
    """What an import refuses before the dataset is read: a remote store, a missing file, a bad label."""
    from retbench.tasks.store.remote import is_remote

    if is_remote(spec.store_dir):
        raise SpecError(f"store_dir {spec.store_dir}: judge import keeps overlays in a local store only; "
                        "pass --store-dir with a local folder")
    if not path.is_file():
        raise DatasetError(f"{path}: not found; expected a TREC qrels file (qid iter docid grade)")
    if not source or any(c.isspace() for c in source):
        raise DatasetError(f"--source {source!r}: expected one word, such as human or a judge's name")


def import_overlay(spec: BenchmarkSpec, path: Path, dataset: Dataset, key: str | None, source: str = "human",
                   override: bool = False) -> ImportResult:
    """Check `path` against the spec's `dataset` (as read from its files; `key` its content key when
    the store holds it) and the judgments it has (its own and earlier overlays) and keep it as an
    overlay; refused (DatasetError) on an unknown id, a grade off the scale, or a conflict without
    `override`. A file imported before is left as it is."""
    from retbench.tasks.stages.dataset import content_hash

    check_import(spec, path, source)
    base_key = key or content_hash(dataset)
    sha = file_sha256(path)
    existing = stored_overlays(spec.store_dir, base_key)
    same = next((o for o in existing if o.sha256 == sha), None)
    if same is not None:
        return ImportResult(same, added=False, dataset=dataset.name, base_key=base_key)
    new = read_overlay(path, dataset)
    layers = [(BASE, dataset.qrels)] + [(label, overlay_table(o)) for label, o in zip(labels(existing), existing)]
    found = conflicts(new, layers, path)
    if found and not override:
        raise DatasetError(f"{path}: {conflict_summary(found)}; nothing imported (pass --override to let this "
                           f"file's grades win; the dataset's own files are never changed)")
    before = merge([frame for _, frame in layers])
    agreeing = new.join(before, on=["query_id", "doc_id", "grade"], how="inner").height
    facts = {"file": path.name, "sha256": sha, "source": source,
             "imported_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),  # orders overlays
             "judgments": new.height, "overrides": len(found), "dataset": dataset.name, "base_key": base_key}
    table = overlay_folder(spec.store_dir, base_key) / f"{sha[:32]}.parquet"

    def write(tmp: str) -> dict:
        pq.write_table(new.to_arrow(), tmp, compression="zstd")
        return facts

    build_once(spec.store_dir, table, write, parse=parquet_readable, work=False)
    overlay = next(o for o in stored_overlays(spec.store_dir, base_key) if o.sha256 == sha)
    return ImportResult(overlay, added=True, overridden=tuple(found), agreeing=agreeing, dataset=dataset.name,
                        base_key=base_key)


def chosen_overlays(spec: BenchmarkSpec, overlays: list[Overlay]) -> list[Overlay]:
    """The overlays a run of `spec` scores with (judgments.use, judgments.overlays); a name in
    judgments.overlays that matches no imported overlay is refused, naming its key."""
    choice = spec.judgments
    if choice.use == "base":
        return []
    if choice.overlays is None:
        return overlays
    for i, name in enumerate(choice.overlays):
        if not any(name in (o.source, o.file) for o in overlays):
            imported = ", ".join(f"{o.file} (source {o.source})" for o in overlays) or "none"
            raise SpecError(f"judgments.overlays[{i}]: no overlay imported for this dataset is named {name!r} "
                            f"(by source label or file name); imported: {imported}")
    return [o for o in overlays if o.source in choice.overlays or o.file in choice.overlays]


def check_choice(spec: BenchmarkSpec, dataset: Dataset, key: str | None) -> None:
    """What preflight refuses: judgments.overlays naming an overlay the store does not hold."""
    if spec.judgments.use == "base" or spec.judgments.overlays is None:
        return
    from retbench.tasks.stages.dataset import content_hash

    chosen_overlays(spec, stored_overlays(spec.store_dir, key or content_hash(dataset)))


def judged_key(base_key: str, overlays: list[Overlay]) -> str:
    """The content key of the dataset scored with `overlays` merged into its judgments."""
    return stable_hash("judged-dataset-v1", base_key, [o.sha256 for o in overlays]) if overlays else base_key


def with_overlays(ref, spec: BenchmarkSpec):
    """`ref` (the DatasetRef of the dataset as read from its files) with the chosen overlays merged into its
    judgments: a folder of its own in the store, under the merged dataset's content key."""
    from retbench.tasks.stages.dataset import load_saved_dataset, save_dataset

    overlays = stored_overlays(spec.store_dir, ref.key)
    chosen = chosen_overlays(spec, overlays)
    counted = ((BASE, ref.judgments),)
    if not chosen:
        return replace(ref, base_key=ref.key, judgments_from=counted, overlays_unused=len(overlays))
    key = judged_key(ref.key, chosen)
    base_folder = Path(ref.path)
    directory = base_folder.parent / key[:32]
    extras = [name for name in ("metadata.parquet", "filters.parquet") if (base_folder / name).is_file()]
    files = ("corpus.parquet", "queries.parquet", "qrels.parquet", *extras, "dataset.json")
    layers = [pl.read_parquet(ref.qrels_path).with_columns(source=pl.lit(BASE))]
    names = labels(chosen)
    layers += [overlay_table(o).with_columns(source=pl.lit(name)) for name, o in zip(names, chosen)]
    merged = merge(layers)
    by_layer = dict(merged.group_by("source").len().iter_rows())
    counted = tuple((label, by_layer.get(label, 0)) for label in [BASE, *names])
    note = "judgments: " + ", ".join(f"{n} from {label}" for label, n in counted)

    def build(tmp: Path) -> None:
        base = load_saved_dataset(base_folder)
        save_dataset(replace(base, qrels=merged.select(list(QRELS_SCHEMA)), notes=(*base.notes, note)), tmp)

    # A re-save of stored tables with the overlays applied: no model, no search (a cached rerun stays one).
    made = build_folder_once(spec.store_dir, directory, files, build, parse=parquet_readable, work=False)
    return replace(ref, path=str(directory), key=key, base_key=ref.key, judgments=merged.height,
                   computed=ref.computed or made.computed, notes=(*ref.notes, note), overlays=tuple(chosen),
                   judgments_from=counted, overlays_unused=len(overlays) - len(chosen))
