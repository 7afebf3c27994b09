"""A store on an object store (s3://..., gs://...) through pyarrow's filesystems.

FAISS and the Parquet readers want local files, so a run works on a local mirror:
it pulls the remote store's files it does not have, works locally, and pushes
every new file back when it ends, also when it fails, so nothing computed is lost.
Store files are named by content hash and never rewritten, which makes both
directions a copy of what is missing. Credentials come from the environment
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ...), never from the spec.

Object-store behaviour: there are no file locks; two runs pushing to one bucket
at once each upload their own files (content-addressed names mean the same
content lands on the same key), and an embedding shard merged away locally
stays remotely as a harmless duplicate (readers keep one row per key).
"""
from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

log = logging.getLogger("retbench.store")


def is_remote(store: str | Path) -> bool:
    scheme = urlsplit(str(store)).scheme
    return len(scheme) > 1 and scheme != "file"  # one letter would be a Windows drive


def display_uri(uri: str) -> str:
    """The URI without its query string (which may carry endpoint options)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def default_mirror(uri: str) -> Path:
    cache = Path(os.environ.get("RETBENCH_CACHE", Path.home() / ".cache" / "retbench"))
    return cache / "mirrors" / hashlib.sha256(display_uri(uri).encode()).hexdigest()[:16]


@dataclass
class StoreMirror:
    uri: str
    local: Path

    def __post_init__(self):
        self.local = Path(self.local)
        self.fs, self.root = pafs.FileSystem.from_uri(self.uri)
        self.root = self.root.rstrip("/")

    def _remote_files(self) -> dict[str, int]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True, allow_not_found=True))
        except OSError as error:
            raise OSError(f"cannot list the store {display_uri(self.uri)}: {error}") from error
        prefix = self.root + "/"
        return {i.path[len(prefix):]: i.size for i in infos if i.type == pafs.FileType.File and not i.base_name.endswith(".tmp")}

    def _local_files(self) -> dict[str, int]:
        if not self.local.exists():
            return {}
        return {str(p.relative_to(self.local)): p.stat().st_size for p in self.local.rglob("*")
                if p.is_file() and not p.name.endswith(".tmp") and not p.name.startswith(".")}

    def pull(self) -> int:
        """Copy remote files missing (or of another size) locally; returns how many."""
        local = self._local_files()
        copied = 0
        for name, size in sorted(self._remote_files().items()):
            if local.get(name) == size:
                continue
            target = self.local / name
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.pull.tmp")
            with self.fs.open_input_stream(f"{self.root}/{name}") as source, open(tmp, "wb") as sink:
                while block := source.read(1 << 20):
                    sink.write(block)
            os.replace(tmp, target)
            copied += 1
        log.info("pulled %d files from %s", copied, display_uri(self.uri))
        return copied

    def push(self) -> int:
        """Copy local files missing (or of another size) remotely; returns how many."""
        remote = self._remote_files()
        copied = 0
        for name, size in sorted(self._local_files().items()):
            if remote.get(name) == size:
                continue
            # One PUT per object: a reader sees the whole object or none of it.
            with open(self.local / name, "rb") as source, self.fs.open_output_stream(f"{self.root}/{name}") as sink:
                while block := source.read(1 << 20):
                    sink.write(block)
            copied += 1
        log.info("pushed %d files to %s", copied, display_uri(self.uri))
        return copied
