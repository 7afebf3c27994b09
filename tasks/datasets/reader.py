"""A dataset format as the registry holds it: its name, the options it takes, and the function that
reads a folder into rows; `read` turns those rows into a validated Dataset the same way for all."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retbench.tasks.datasets.controls import refuse_control_ids, replace_controls
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.model import SPLITS, Dataset, RawCollection, assemble
from retbench.tasks.datasets.normalise import UNICODE_FORMS, normalise_text
from retbench.tasks.datasets.trec_qrels import read_trec_qrels


@dataclass(frozen=True)
class FormatReader:
    """One registered format (tasks/datasets/__init__.py: register)."""

    name: str  # what `dataset.format` says in a spec
    options: frozenset[str]  # the keys `dataset.options` may hold for this format
    read_rows: Callable[..., RawCollection]  # (folder, split, **options) -> rows, each with its file:line

    def read(
        self,
        path: str | Path,
        split: str = "all",
        options: dict[str, Any] | None = None,
        *,
        qrels_path: str | Path | None = None,
        grade_map: dict[int, int] | None = None,
        unicode: str = "nfc",
    ) -> Dataset:
        """Read and validate the collection in `path`, keeping only the queries of `split`
        ("train", "dev", "test", "all"); see retbench.tasks.stages.dataset.load_dataset for the arguments."""
        options = options or {}
        if split not in SPLITS:
            raise DatasetError(f"unknown split {split!r} (expected one of {list(SPLITS)})")
        if unicode not in UNICODE_FORMS:
            raise DatasetError(f"unknown unicode form {unicode!r} (expected one of {list(UNICODE_FORMS)})")
        unknown = sorted(set(options) - self.options)
        if unknown:
            raise DatasetError(
                f"unknown option(s) {unknown} for format {self.name!r} (expected some of {sorted(self.options)})"
            )
        raw = self.read_rows(Path(path), split, **options)
        if qrels_path is not None:
            raw.qrels = read_trec_qrels(Path(qrels_path))
            raw.notes.append(f"judgments from TREC qrels file {Path(qrels_path).name}")
        if grade_map is None:
            grade_map = raw.default_grade_map
        refuse_control_ids(raw)  # the built-in readers refuse them line by line; a plug-in may not
        replace_controls(raw)
        normalise_text(raw, unicode)
        return assemble(raw, split, grade_map)
