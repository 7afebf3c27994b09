"""A new PREFECT_HOME starts from a migrated copy of Prefect's database, not from nothing.

The embedded API server creates `PREFECT_HOME/prefect.db` on its first start and runs every one
of Prefect's migrations on it: about 6 of the 13 s of a first run in a new folder here (the
default PREFECT_HOME is `./.prefect`, so every new project folder pays it once, and a test suite
with a home per test pays it per test). The database a server leaves after its start-up (the
schema at the migration head, the built-in block types) depends only on Prefect's version, so
the first fresh start on a machine keeps a copy of it in retbench's cache folder, and a later
fresh start copies that instead of migrating. Prefect still checks the copy at start-up: it is
at the migration head, so nothing runs.

Only the default database (SQLite in PREFECT_HOME) is seeded: with a connection URL set in the
environment the database is the user's, and a home that already has one is left alone.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from importlib.metadata import version
from pathlib import Path

DATABASE = "prefect.db"
_URL_SETTINGS = ("PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL")


def template_path() -> Path:
    """The migrated database kept for this Prefect version (retbench's cache folder)."""
    from retbench.tasks.store.cache_dir import user_cache_dir

    return user_cache_dir() / "prefect-database" / f"prefect-{version('prefect')}.db"


def seed(home: Path) -> bool:
    """Put the kept database into a `home` that has none; True when the server will build a
    database from nothing here (no template yet), so `keep_as_template` should run once it is up."""
    if any(os.environ.get(name) for name in _URL_SETTINGS) or (home / DATABASE).exists():
        return False
    template = template_path()
    if not template.is_file():
        return True
    temporary = home / f".{DATABASE}.{os.getpid()}.tmp"
    try:  # a home that cannot be written is the server's to report, as without a template
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, temporary)
        os.replace(temporary, home / DATABASE)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return False


def keep_as_template(home: Path) -> None:
    """Copy the database a server has just migrated (before the run records anything in it) as the
    template; SQLite's backup API reads it consistently while the server holds it open. Best effort:
    a cache folder that cannot be written only costs the next fresh home its migrations."""
    template = template_path()
    temporary = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        source, target = sqlite3.connect(home / DATABASE), sqlite3.connect(temporary)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        os.replace(temporary, template)  # another process's template, made at the same time, is as good
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            temporary.unlink()
