"""The commented starter spec `retbench init` writes for a detected dataset: offline providers,
BM25, a hybrid of the two, flat + IVF, and the split the data calls for."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class StarterFacts:
    """What the spec is written from: the dataset as detected and read."""

    name: str
    dataset_path: str  # as the spec writes it (relative to the spec's folder when possible)
    format: str
    options: dict
    split: str
    split_reason: str
    judged_splits: dict[str, int]  # split -> judged queries
    languages: tuple[str, ...]  # of documents and queries, most frequent first
    trec_qrels: tuple[str, ...] = ()  # TREC qrels files beside the collection (as the spec would write them)
    found: str = ""


def spec_name(folder_name: str) -> str:
    """A spec name (letters, digits, _ . -, starting with a letter or digit) from a folder's name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder_name).strip("-._")
    return name or "dataset"


def choose_split(judged_splits: dict[str, int]) -> tuple[str, str]:
    """The spec's `split` for a dataset whose judged queries fall in `judged_splits`, and why.
    Test beside train or dev is `all`: every query is scored under its own split and read apart
    (docs/guide/datasets.md), so the train queries are not silently left out."""
    present = {s for s, n in judged_splits.items() if n}
    if "test" in present and present - {"test"}:
        others = " and ".join(sorted(present - {"test"}))
        return "all", (f"{others} judged beside test: every query is scored and each split reported apart"
                       f"; `split: test` would leave the {others} queries out")
    for split in ("test", "dev"):
        if split in present:
            others = sorted(present - {split})
            reason = "the held-out split" if split == "test" else "the only judged split of dev and test"
            return split, reason + (f"; the {', '.join(others)} queries are left out" if others else "")
    return "all", f"queries in {', '.join(sorted(present)) or 'no split'}"


def starter_spec(facts: StarterFacts) -> str:
    """The YAML text (with comments) of a spec `retbench check` and `retbench run` accept."""
    hindi = "hi" in facts.languages
    options = "".join(f"\n    {key}: {value}" for key, value in facts.options.items())
    counts = ", ".join(f"{split} {n}" for split, n in facts.judged_splits.items())
    trec = "".join(f"\n  # qrels: {path}    # TREC qrels found beside the collection: uncomment to judge with them instead"
                   for path in facts.trec_qrels)
    return f"""\
# Starter spec written by `retbench init` for {facts.dataset_path} ({facts.format}: {facts.found}).
# Languages: {', '.join(facts.languages) or 'unknown'}; judged queries per split: {counts or 'none'}.
# Check it with `retbench check <this file>` (no model loaded), then `retbench run <this file>`.
# Relative paths are read from this file's folder.
name: {facts.name}
dataset:
  path: {_yaml_str(facts.dataset_path)}
  format: {facts.format}
  split: {facts.split}{' ' * max(1, 12 - len(facts.split))}# {facts.split_reason}{trec}{f'''
  options:{options}''' if facts.options else ''}
chunking:             # paragraphs packed up to 120 words; `strategy: none` embeds whole documents
  strategy: paragraph
  max_words: 120
providers:            # all local and offline: no key, no server, nothing downloaded
  - name: hashing     # hashed word features: no model, a floor every model should beat
    kind: hashing
  - name: minilm      # all-MiniLM-L6-v2, packaged{' (English only: expect it to miss Hindi)' if hindi else ''}
    kind: sentence-transformers
  - name: e5-small    # multilingual-e5-small, packaged{' (reads Hindi)' if hindi else ''}
    kind: e5-multilingual
lexical:              # BM25 (bm25s) as a first stage of its own
  - name: bm25{'''
    tokenizer: {stopwords: none}    # Hindi text: no English stop-word list''' if hindi else ''}
systems:              # a hybrid: BM25 and e5 fused by reciprocal rank fusion, paired with both
  - {{name: bm25+e5, first: "bm25:bm25", second: e5-small/flat}}
indexes:
  flat: true          # exact search: the reference every approximate index is measured against
  ivf:                # IVF, nlist derived from the number of chunks; searched at each nprobe
    nprobe: [1, 4, 16]
k: [5, 10, 20]
depth: 100
output_dir: out/{facts.name}
store_dir: .store     # the content-addressed cache: a rerun embeds only what changed
"""


def _yaml_str(text: str) -> str:
    """`text` as a YAML scalar: plain when safe, else double-quoted."""
    import json

    plain = re.fullmatch(r"[A-Za-z0-9_./~-][A-Za-z0-9_./ ~+-]*", text) and not text.endswith(" ")
    return text if plain else json.dumps(text, ensure_ascii=False)
