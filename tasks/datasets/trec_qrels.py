"""Judgments from a TREC qrels file (`qid iter docno rel`), replacing a format's own (dataset.qrels)."""
from __future__ import annotations

from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.lines import parse_int, text_lines
from retbench.tasks.datasets.model import Judgment


def read_trec_qrels(path: Path) -> list[Judgment]:
    qrels = []
    for lineno, line in text_lines(path, "TREC qrels (qid iter docno rel)"):
        where = f"{path}:{lineno}"
        fields = line.split()
        if len(fields) != 4:
            raise DatasetError(
                f"{where}: expected 4 whitespace-separated fields qid iter docno rel; found {len(fields)}"
            )
        qrels.append(Judgment(fields[0], fields[2], parse_int(fields[3], where, "rel"), where))
    return qrels
