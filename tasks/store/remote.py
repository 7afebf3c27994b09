"""A store on an object store (s3://, gs://, ...) read and written object by object through pyarrow.fs.

Stages see a local scratch folder, but nothing is mirrored whole: an object is fetched when a
stage asks for it and uploaded the moment it is written (docs/guide/scale.md: "A store on an object store").
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from retbench.tasks.store.cache_dir import user_cache_dir

log = logging.getLogger("retbench.store")

# In the scratch root; names the object store the scratch folder stands for, so that every
# process on this machine (Dask workers, the CLI) finds it from a store path alone.
MARKER = ".object-store.json"
# {"<scratch folder>": "<store URI>"}: set by `attach` for child processes; set it on Dask
# workers of other machines (copied from the run's environment) so they use the same store.
ENVIRONMENT = "RETBENCH_OBJECT_STORES"
SIDECAR = ".sha256"  # retbench.tasks.store.integrity.SIDECAR_SUFFIX (which imports this module lazily)
STALE_SECONDS = 600

# There are no locks on an object store. What replaces them:
# - names are content-addressed, so an object is written once; two runs racing on one key
#   write the same bytes, and the last single PUT wins harmlessly;
# - an object becomes visible whole or not at all (one PUT, or a multipart upload that
#   appears on completion), so a reader never sees half of one;
# - a file's checksum sidecar is uploaded after the file, and `build_once`'s metadata after
#   both: a reader treats an object as present only when its sidecar is, so a writer killed
#   between the two leaves something that is simply built again;
# - embedding / rerank shards have unique names; a shard merged away by one run but still
#   listed by another only duplicates rows, and readers keep one row per key.
# The local flocks still serialise processes sharing one scratch folder.


def is_remote(store: str | Path) -> bool:
    scheme = urlsplit(str(store)).scheme
    return len(scheme) > 1 and scheme != "file"  # one letter would be a Windows drive


def display_uri(uri: str) -> str:
    """The URI without its query string (endpoint options) or user info (possible keys)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"


def refuse_credentials(uri: str) -> None:
    """Keys in the URI would land in the scratch marker and child processes' environment."""
    if "@" in urlsplit(uri).netloc or any(k in uri for k in ("secret_key=", "access_key=", "session_token=")):
        raise ValueError(f"store_dir {display_uri(uri)}: credentials in the URI are not accepted; set them in the "
                         "environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ...) instead")


def default_scratch(uri: str) -> Path:
    return user_cache_dir() / "scratch" / hashlib.sha256(display_uri(uri).encode()).hexdigest()[:16]


def _with_delayed_open(fs: pafs.S3FileSystem) -> pafs.S3FileSystem:
    """The same S3 filesystem with `allow_delayed_open`: a file smaller than one part is then
    written by a single PUT instead of a three-request multipart upload (the store's files are
    mostly small). The URI has no query option for it, hence the rebuild from its settings."""
    rebuild, (options,) = fs.__reduce__()
    try:
        return rebuild({**options, "allow_delayed_open": True})
    except (TypeError, ValueError):  # another pyarrow's settings: keep the filesystem as it is
        return fs


@dataclass
class ObjectStore:
    """One object store seen through a local scratch folder: the object `<root>/<key>` is
    the scratch file `<scratch>/<key>`."""

    uri: str
    scratch: Path
    fs: pafs.FileSystem = field(init=False, repr=False)
    root: str = field(init=False)

    def __post_init__(self):
        self.scratch = Path(self.scratch).resolve()
        try:
            self.fs, root = pafs.FileSystem.from_uri(self.uri)
        except (OSError, ValueError) as error:
            raise OSError(f"cannot open the store {display_uri(self.uri)}: {error}") from error
        self.root = root.rstrip("/")
        if isinstance(self.fs, pafs.S3FileSystem):
            self.fs = _with_delayed_open(self.fs)

    def key(self, path: str | Path) -> str | None:
        """The object key of a scratch path; None outside the scratch, for temp files and
        lock files, which stay local."""
        try:
            relative = Path(path).resolve().relative_to(self.scratch)
        except ValueError:
            return None
        parts = relative.parts
        if not parts or any(p.startswith(".") for p in parts) or parts[0] == "quarantine":
            return None
        return "/".join(parts)

    def _object(self, key: str) -> str:
        return f"{self.root}/{key}"

    def fetch(self, path: str | Path) -> bool:
        """Download the object behind `path` unless the file is already here; False when
        the object does not exist."""
        path = Path(path)
        key = self.key(path)
        if key is None:
            return path.exists()
        if path.exists():
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.fetch.tmp")
        try:
            # Two requests, HEAD (the size) then GET, even when a listing gave the size: the C++
            # S3 filesystem can open from a FileInfo without the HEAD, but pyarrow 26's Python
            # open_input_stream/open_input_file take a path only (a FileInfo: TypeError); only
            # dataset scans pass one, and they give tables, not the bytes the checksum covers.
            # A missing object is the HEAD's 404 alone.
            with self.fs.open_input_stream(self._object(key)) as source, open(tmp, "wb") as sink:
                while block := source.read(1 << 20):
                    sink.write(block)
            os.replace(tmp, path)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise OSError(f"cannot read {key} from the store {display_uri(self.uri)}: {error}") from error
        finally:
            Path(tmp).unlink(missing_ok=True)
        return True

    def put(self, path: str | Path) -> None:
        """Upload a finished scratch file as one object (visible whole or not at all)."""
        key = self.key(path)
        if key is None:
            return
        try:
            with open(path, "rb") as source, self.fs.open_output_stream(self._object(key)) as sink:
                while block := source.read(1 << 20):
                    sink.write(block)
        except OSError as error:
            raise OSError(f"cannot write {key} to the store {display_uri(self.uri)}: {error}") from error

    def put_bytes(self, path: str | Path, data: bytes) -> None:
        """Upload `data` as the object of the scratch path `path` (no scratch file needed)."""
        key = self.key(path)
        if key is None:
            return
        try:
            with self.fs.open_output_stream(self._object(key)) as sink:
                sink.write(data)
        except OSError as error:
            raise OSError(f"cannot write {key} to the store {display_uri(self.uri)}: {error}") from error

    def delete(self, path: str | Path) -> None:
        key = self.key(path)
        if key is None:
            return
        try:
            self.fs.delete_file(self._object(key))
        except FileNotFoundError:
            pass

    def listing(self, folder: str | Path, recursive: bool = False) -> dict[str, int]:
        """{path relative to `folder`: size} of the objects under one folder's prefix (never
        a wider listing). Temp and hidden names are left out."""
        key = self.key(folder)
        if key is None:
            return {}
        prefix = self._object(key)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(prefix, recursive=recursive, allow_not_found=True))
        except OSError as error:
            raise OSError(f"cannot list {key}/ in the store {display_uri(self.uri)}: {error}") from error
        return {i.path[len(prefix) + 1:]: i.size for i in infos
                if i.type == pafs.FileType.File and not i.base_name.startswith(".")}

    def sync_folder(self, folder: str | Path, recursive: bool = False, keep_local: bool = True) -> None:
        """Make the scratch `folder` hold the objects under its prefix: download the missing
        ones (the sidecar of a file after the file, so the pair is complete when seen);
        `keep_local=False` also deletes scratch files the store no longer holds (shards
        merged away by another run), but only complete pairs (file and sidecar) whose sidecar
        is older than `STALE_SECONDS`: a writer in another process may have renamed its file
        into place and not uploaded it yet."""
        folder = Path(folder)
        listed_at = time.time()
        remote = self.listing(folder, recursive)
        names = sorted(remote, key=lambda n: (n.endswith(".sha256"), n))
        for name in names:
            target = folder / name
            if target.exists() and target.stat().st_size == remote[name]:
                continue
            if target.exists():
                target.unlink()  # another size: a file from an older attempt
            self.fetch(target)
        if not keep_local and folder.is_dir():
            for path in folder.glob(f"*{SIDECAR}"):
                data = path.with_name(path.name[:-len(SIDECAR)])
                if path.name in remote or data.name in remote or self.key(data) is None:
                    continue
                with contextlib.suppress(FileNotFoundError):  # another process got there first
                    if path.stat().st_mtime < listed_at - STALE_SECONDS:
                        data.unlink(missing_ok=True)
                        path.unlink(missing_ok=True)


def check_reachable(uri: str) -> None:
    """Before any work: the URI parses, and its bucket (the first path part) answers; one
    request, no listing. Raises OSError (ValueError for keys in the URI) naming the store and the fix."""
    refuse_credentials(uri)
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        bucket = root.strip("/").split("/", 1)[0]
        info = fs.get_file_info(bucket)
    except (OSError, ValueError) as error:
        raise OSError(f"store_dir {display_uri(uri)}: cannot reach the object store ({error}); check the "
                      "endpoint options in the URI and the credentials in the environment") from error
    if info.type != pafs.FileType.Directory:
        raise OSError(f"store_dir {display_uri(uri)}: bucket {bucket!r} does not exist; create it or fix the URI")


# ---------------------------------------------------------------- finding the store of a path

_attached: dict[Path, ObjectStore] = {}
_attached_lock = threading.Lock()


def attach(uri: str, scratch: str | Path) -> ObjectStore:
    """Point the scratch folder `scratch` at the object store `uri`: from now on files written
    under it are uploaded and missing ones fetched, in every process that sees the folder."""
    refuse_credentials(uri)
    store = ObjectStore(uri, Path(scratch))
    store.scratch.mkdir(parents=True, exist_ok=True)
    marker = store.scratch / MARKER
    text = json.dumps({"uri": uri}) + "\n"
    if not marker.exists() or marker.read_text(encoding="utf-8") != text:
        tmp = marker.with_name(f"{MARKER}.{uuid.uuid4().hex[:8]}.tmp")
        # The URI carries endpoint options (never keys: refused above); readable by this user only.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, marker)
    with _attached_lock:
        _attached[store.scratch] = store
        # Child processes started from now on (a local Dask cluster) find it without the marker.
        os.environ[ENVIRONMENT] = json.dumps({**_from_environment(), str(store.scratch): uri})
    return store


def _from_environment() -> dict[str, str]:
    try:
        stores = json.loads(os.environ.get(ENVIRONMENT) or "{}")
    except ValueError as error:
        raise ValueError(f"{ENVIRONMENT}: not JSON ({error}); expected {{\"<scratch folder>\": \"<store URI>\"}}") from None
    if not isinstance(stores, dict):
        raise ValueError(f"{ENVIRONMENT}: expected a JSON object {{\"<scratch folder>\": \"<store URI>\"}}")
    return stores


def store_of(path: str | Path) -> ObjectStore | None:
    """The object store a path lies in (its scratch folder has the marker), or None for a
    path of a local store or outside any store."""
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        found = _attached.get(folder)
        if found is not None:
            return found
        marker = folder / MARKER
        if marker.is_file():
            uri = json.loads(marker.read_text(encoding="utf-8"))["uri"]
            with _attached_lock:
                found = _attached.setdefault(folder, ObjectStore(uri, folder))
            return found
    # A worker on another machine has no scratch folder yet: the environment names it.
    for scratch, uri in _from_environment().items():
        if path == Path(scratch) or Path(scratch) in path.parents:
            return attach(uri, scratch)
    return None


# ---------------------------------------------------------------- the hooks tasks/store calls


def uploaded(path: str | Path) -> None:
    """Called after a file is complete in the scratch folder (renamed into place)."""
    store = store_of(path)
    if store is not None:
        store.put(path)


def fetched(path: str | Path) -> bool:
    """Is `path` here, after fetching it from the object store if it lies in one?"""
    store = store_of(path)
    if store is None:
        return Path(path).exists()
    return store.fetch(path)


def removed(path: str | Path) -> None:
    store = store_of(path)
    if store is not None:
        store.delete(path)


def synced(folder: str | Path, recursive: bool = False, keep_local: bool = True) -> None:
    """Bring one folder's objects (only that prefix) into the scratch folder."""
    store = store_of(folder)
    if store is not None:
        store.sync_folder(folder, recursive, keep_local)


def fetch_inputs(*values) -> list[Path]:
    """Fetch the store files named in a stage call's arguments (paths in the records earlier stage
    calls returned) that this scratch folder lacks: on a cluster the call that wrote a file may
    have run on another machine, whose scratch folder is not this one. A file counts only with
    its sidecar. Folders are left to their readers (an embedding cache is synced under its lock,
    a saved dataset fetches its own files), and so are pending parts (the part that claims one
    fetches it). Returns the files fetched."""
    found: list[Path] = []
    for path in _named_paths(values, depth=0):
        if path.exists() or not path.suffix or path.parent.name == "pending":
            continue
        store = store_of(path)
        if store is None or store.key(path) is None:
            continue
        if store.fetch(path.with_name(path.name + SIDECAR)) and store.fetch(path):
            found.append(path)
    return found


def _named_paths(value, depth: int):
    """Absolute paths in `value`: strings and Paths, inside lists, tuples, dicts and dataclasses."""
    if depth > 6:
        return
    if isinstance(value, Path) or (isinstance(value, str) and value.startswith("/") and "\n" not in value):
        yield Path(value)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _named_paths(item, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _named_paths(item, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from _named_paths(getattr(value, item.name), depth + 1)


def scratch_for(uri: str, scratch: str | Path | None = None) -> Path:
    """Attach `uri` to its scratch folder and return the folder stages use as the store."""
    return attach(uri, scratch or default_scratch(uri)).scratch


def fetch_history(table_folder: str | Path, run_id: str | None = None) -> None:
    """The run files (`date=.../<run id>.parquet`) of one history table from an object store:
    one listing of that table's prefix, then every file, or only `run_id`'s."""
    store = store_of(table_folder)
    if store is None:
        return
    for name in store.listing(table_folder, recursive=True):
        if run_id is None or name.endswith(f"/{run_id}.parquet"):
            store.fetch(Path(table_folder) / name)
