import retbench.flows  # noqa: F401  (Prefect environment defaults before Prefect is imported)

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API (SQLite) for every flow test in the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture
def registries_restored(monkeypatch):
    """A test that registers kinds (a plug-in module, retbench.register_*) leaves the four
    registries as it found them: with pytest-xdist or in one process, no other test sees them."""
    import sys

    from retbench.tasks import datasets, indexes, plugins, providers, rerankers

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(plugins.ENVIRONMENT, raising=False)
    monkeypatch.setattr(plugins, "_imported", set(plugins._imported))

    registries = [package._REGISTRY for package in (providers, rerankers, indexes, datasets)]
    for registry in registries:
        registry.kinds()  # the built-in kinds in, before the copy
    saved = [(dict(registry._kinds), dict(registry._origins)) for registry in registries]
    yield
    for registry, (kinds, origins) in zip(registries, saved):
        registry._kinds.clear(), registry._kinds.update(kinds)
        registry._origins.clear(), registry._origins.update(origins)


# The slowest files (CI's --durations), handed out first. pytest-xdist gives files to workers in
# collection order (`make test` passes --no-loadscope-reorder: by default it puts files with the
# most tests first, which left these one-test files for last), so the suite now ends on the short
# unit files, not on one worker running a 70 s test while the other idles (87 s of a 10.5 min run).
SLOW_FIRST = ("test_dask_stop.py", "test_dask_cluster.py", "test_object_store.py", "test_dask_progress.py",
              "test_crash_safety.py", "test_dask.py", "test_deployments.py", "test_xquad_languages.py",
              "test_own_model.py", "test_examples.py", "test_integrity.py", "test_interrupted_runs.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: files stay whole, in order
