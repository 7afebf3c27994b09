"""Texts longer than a provider's input window, per provider and role: how many were cut and what
share of their tokens the model never read. Counted from the token counts stored with the cache
rows (so a cached run loads no tokenizer); rows stored without one are counted now."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import polars as pl
import pyarrow.parquet as pq

from retbench.tasks.providers import Provider
from retbench.tasks.store import shards

# At or above this share of tokens cut, the log line and the report point to chunking: a twentieth
# of the text unread is more than a rounding matter for recall.
LARGE_SHARE = 0.05
CHUNKING_GUIDE = "docs/guide/variants.md"


@dataclass(frozen=True)
class Clipping:
    provider: str
    role: str
    window: int | None  # tokens the model reads per text; None: no cut known
    texts: int
    truncated: int  # texts longer than the window
    tokens: int | None  # tokens of all the texts (None when the window is unknown: not counted)
    tokens_dropped: int  # tokens past the window, summed over the truncated texts
    token_source: str  # tokenizer | estimate | usage | none
    note: str = ""  # without a window: what the provider says of long texts

    @property
    def share_dropped(self) -> float:
        return self.tokens_dropped / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "share_dropped": round(self.share_dropped, 6)}

    def line(self) -> str:
        what = f"{self.provider} {self.role} texts"
        if self.window is None:
            return f"{what}: {self.note or 'no input window declared, none counted as truncated'}"
        line = (f"{what}: {self.truncated} of {self.texts} longer than the {self.window}-token window, "
                f"{self.share_dropped:.1%} of the tokens cut ({self.token_source} counts)")
        if self.share_dropped >= LARGE_SHARE:
            line += "; " + self.advice()
        return line

    def advice(self) -> str:
        if self.role == "document":
            return f"chunk the documents shorter (chunking: {CHUNKING_GUIDE})"
        return "shorten the queries (a query variant) or use a model with a longer window"


def clipped_counts(counts: Sequence[int], window: int) -> tuple[int, int, int]:
    """(texts longer than `window`, tokens in all, tokens past the window) of per-text `counts`."""
    truncated = sum(1 for count in counts if count > window)
    return truncated, int(sum(counts)), int(sum(count - window for count in counts if count > window))


def set_clipping(provider: Provider, embedding_set, texts_path: str | Path, id_column: str) -> Clipping:
    """The clipping of one embedding set (`EmbeddingSet`) whose texts are in `texts_path`."""
    window = provider.input_window()
    name, role = embedding_set.provider, embedding_set.role
    if window is None:
        return Clipping(name, role, None, embedding_set.count, 0, None, 0, "none", provider.without_window())
    keys = pl.read_parquet(embedding_set.path, columns=["key"])["key"].to_list()
    stored, sources = _stored_counts(embedding_set.cache_dir, set(keys))
    counts = [stored.get(key) for key in keys]
    unknown = [i for i, count in enumerate(counts) if count is None]
    if unknown:  # rows cached before token counts were stored
        texts = pl.read_parquet(texts_path, columns=[id_column, "text"])
        ids = pl.read_parquet(embedding_set.path, columns=["id"])["id"].to_list()
        text_of = dict(zip(texts[id_column].to_list(), texts["text"].to_list()))
        counted, source = provider.token_counts([text_of[ids[i]] for i in unknown], role)
        for i, count in zip(unknown, counted):
            counts[i] = count
        sources.add(source)
    truncated, tokens, dropped = clipped_counts(counts, window)
    source = next((s for s in ("estimate", "tokenizer", "usage") if s in sources), "none")
    return Clipping(name, role, window, len(keys), truncated, tokens, dropped, source)


def _stored_counts(cache_dir: str, wanted: set[str]) -> tuple[dict[str, int], set[str]]:
    """Key -> stored token count (the newest shard's, as on read) of the `wanted` keys, and the sources."""
    keys = pl.DataFrame({"key": list(wanted)}, schema={"key": pl.String})
    found = []
    with shards.folder_lock(cache_dir, shared=True):
        for path in reversed(shards.shard_paths(cache_dir)):  # newest first: its count wins
            if "tokens" in pq.read_schema(path).names:
                rows = pl.from_arrow(shards.read_shard(path, ["key", "tokens", "token_source"]))
                found.append(rows.cast({"tokens": pl.Int64, "token_source": pl.String}).join(keys, on="key", how="semi"))
    if not found:
        return {}, set()
    rows = pl.concat(found).filter(pl.col("tokens").is_not_null()).unique(subset="key", keep="first", maintain_order=True)
    return dict(zip(rows["key"].to_list(), rows["tokens"].to_list())), set(rows["token_source"].unique().to_list())
