"""Which registered format a folder holds, told from its file names, for `retbench init`; a folder
that holds none gets one line naming what was looked for."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.datasets.glasgow import GLASGOW_FILES
from retbench.tasks.datasets.lines import located, open_binary

# What each format needs, as the one line for a folder that has none of them says it.
LOOKED_FOR = (
    ("jsonl", "corpus.jsonl, queries.jsonl, qrels.jsonl (each may be .gz)"),
    ("BEIR", "corpus.jsonl, queries.jsonl, qrels/<split>.tsv"),
    ("Cranfield/SMART", "cran.all.1400, cran.qry, cran.qrels"),
    ("Glasgow", "; ".join(f"{c.upper()} {'/'.join(files)}" for c, files in GLASGOW_FILES.items())),
    ("XQuAD", "xquad.<en|hi>.json"),
)
XQUAD_LANGUAGES = ("en", "hi")


@dataclass(frozen=True)
class Detected:
    """A folder's format, the options its reader needs, and TREC qrels files found beside it."""

    folder: Path
    format: str
    options: dict = field(default_factory=dict)
    trec_qrels: tuple[Path, ...] = ()
    what: str = ""  # the files that told, for the report

    @property
    def fixed_split(self) -> str | None:
        """The split of a format whose queries are all test queries (None: read the data)."""
        return None if self.format in ("jsonl", "beir") else "test"


def detect_format(folder: Path) -> Detected:
    """The format of `folder`; DatasetError (one line, naming what was looked for) when it holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{folder}: {'a file' if folder.exists() else 'not found'}; expected a dataset folder")
    found = _detect(folder)
    if found is not None:
        return found
    looked = "; ".join(f"{name}: {files}" for name, files in LOOKED_FOR)
    inner = sorted(p.name for p in folder.iterdir() if p.is_dir() and _detect(p) is not None)
    hint = f"; its subfolders {', '.join(inner)} hold datasets: point at one of them" if inner else ""
    raise DatasetError(f"{folder}: no dataset format recognised (looked for {looked}){hint}")


def _detect(folder: Path) -> Detected | None:
    has = lambda name: located(folder / name) is not None  # noqa: E731  (.gz counts)
    trec = trec_qrels_files(folder)
    if has("corpus.jsonl") and has("queries.jsonl"):
        if has("qrels.jsonl"):
            return Detected(folder, "jsonl", {}, trec, "corpus.jsonl, queries.jsonl, qrels.jsonl")
        if any((folder / "qrels").glob("*.tsv")):
            return Detected(folder, "beir", {}, trec, "corpus.jsonl, queries.jsonl, qrels/*.tsv")
    if all((folder / f).is_file() for f in ("cran.all.1400", "cran.qry", "cran.qrels")):
        return Detected(folder, "cranfield", {}, trec, "cran.all.1400, cran.qry, cran.qrels")
    for collection, files in GLASGOW_FILES.items():
        if all((folder / f).is_file() for f in files):
            return Detected(folder, "glasgow", {"collection": collection}, trec, ", ".join(files))
    languages = [lang for lang in XQUAD_LANGUAGES if (folder / f"xquad.{lang}.json").is_file()]
    if languages:
        # Hindi questions over English paragraphs when both are there: the cross-lingual case.
        query, doc = ("hi", "en") if len(languages) == 2 else (languages[0], languages[0])
        return Detected(folder, "xquad", {"query_language": query, "doc_language": doc}, trec,
                        ", ".join(f"xquad.{lang}.json" for lang in languages))
    return None


def trec_qrels_files(folder: Path) -> tuple[Path, ...]:
    """Files of `folder` named like qrels whose first lines read as TREC qrels (`qid iter docno rel`)."""
    named = [p for p in sorted(folder.iterdir()) if p.is_file() and "qrel" in p.name.lower()
             and not p.name.endswith((".jsonl", ".jsonl.gz", ".tsv", ".readme"))]
    return tuple(p for p in named if _reads_as_trec_qrels(p))


def _reads_as_trec_qrels(path: Path, lines: int = 5) -> bool:
    try:
        with open_binary(path) as handle:
            seen = 0
            for raw in handle:
                fields = raw.decode("utf-8").split()
                if not fields:
                    continue
                if len(fields) != 4 or not fields[3].lstrip("-").isdigit():
                    return False
                seen += 1
                if seen == lines:
                    break
            return seen > 0
    except (OSError, UnicodeDecodeError, EOFError):
        return False
