"""A numpy-only lexical baseline: feature-hashed word and character n-grams.

Fast, deterministic and dependency-free, so tests can run the whole pipeline in
seconds; also the floor every real embedding model should beat.
"""
from __future__ import annotations

import re
import zlib

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from retbench.tasks.providers.base import Provider

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dim: int = Field(1024, ge=16, le=1 << 20)
    word_ngrams: int = Field(2, ge=1, le=3)
    char_ngrams: tuple[int, int] = (3, 5)
    lowercase: bool = True


class HashingProvider(Provider):
    kind = "hashing"
    Options = HashingOptions

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "version": 1, **self.options.model_dump(mode="json")}

    def declared_dim(self) -> int:
        return self.options.dim

    def without_window(self) -> str:
        return "none cut: feature hashing reads every word of a text"

    def encode(self, texts: list[str], role) -> np.ndarray:
        # Queries and documents share one space: a lexical model has no prefixes.
        out = np.zeros((len(texts), self.options.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            features = self._features(text)
            if not features:
                continue
            hashes = np.fromiter((zlib.crc32(f.encode("utf-8")) for f in features), dtype=np.uint64, count=len(features))
            buckets = (hashes % self.options.dim).astype(np.int64)
            # The top hash bit picks a sign so collisions cancel out on average.
            signs = np.where((hashes >> np.uint64(31)) & np.uint64(1), -1.0, 1.0).astype(np.float32)
            np.add.at(out[row], buckets, signs)
        # Sublinear term frequency, as in classic tf-idf weighting.
        return np.sign(out) * np.log1p(np.abs(out))

    def _features(self, text: str) -> list[str]:
        if self.options.lowercase:
            text = text.lower()
        words = _WORD.findall(text)
        features = [f"w:{w}" for w in words]
        for n in range(2, self.options.word_ngrams + 1):
            features += ["w:" + " ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
        low, high = self.options.char_ngrams
        for word in words:
            padded = f"<{word}>"
            for n in range(low, high + 1):
                features += [f"c:{padded[i : i + n]}" for i in range(len(padded) - n + 1)]
        return features
