"""A new PREFECT_HOME is seeded with the migrated database kept in retbench's cache folder
(flows/prefect_database.py); a home with a database, or a database URL of the user's, is left
alone, and a home or cache that cannot be written costs only the migrations."""
import sqlite3

import pytest

from retbench.flows import prefect_database


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RETBENCH_CACHE", str(tmp_path / "cache"))
    for name in ("PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def a_migrated_database(path):
    with sqlite3.connect(path) as db:
        db.execute("create table alembic_version (version_num text)")
        db.execute("insert into alembic_version values ('head')")
    return path


def test_the_first_fresh_home_builds_and_keeps_the_template_the_next_one_copies_it(tmp_path, cache):
    first = tmp_path / "first"
    assert prefect_database.seed(first) is True  # no template yet: the server migrates, then it is kept
    assert not (first / "prefect.db").exists()
    first.mkdir()
    a_migrated_database(first / "prefect.db")
    prefect_database.keep_as_template(first)
    template = prefect_database.template_path()
    assert template.parent.parent == cache and template.name.startswith("prefect-3.")

    second = tmp_path / "second"
    assert prefect_database.seed(second) is False
    with sqlite3.connect(second / "prefect.db") as db:
        assert db.execute("select version_num from alembic_version").fetchall() == [("head",)]
    assert [p.name for p in second.iterdir()] == ["prefect.db"]  # no temporary file left


def test_a_home_with_a_database_or_a_users_database_url_is_left_alone(tmp_path, cache, monkeypatch):
    template = prefect_database.template_path()
    template.parent.mkdir(parents=True)
    a_migrated_database(template)
    home = tmp_path / "home"
    home.mkdir()
    (home / "prefect.db").write_bytes(b"the user's own")
    assert prefect_database.seed(home) is False
    assert (home / "prefect.db").read_bytes() == b"the user's own"

    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db.example/prefect")
    elsewhere = tmp_path / "elsewhere"
    assert prefect_database.seed(elsewhere) is False and not elsewhere.exists()


def test_a_home_or_cache_that_cannot_be_written_costs_only_the_migrations(tmp_path, cache):
    template = prefect_database.template_path()
    template.parent.mkdir(parents=True)
    a_migrated_database(template)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert prefect_database.seed(blocker / "home") is False  # the server reports the home, as before

    cache.rename(tmp_path / "moved")
    cache.write_text("not a folder")  # the cache folder cannot be made
    home = tmp_path / "home"
    home.mkdir()
    a_migrated_database(home / "prefect.db")
    prefect_database.keep_as_template(home)  # no error
    assert cache.read_text() == "not a folder"
