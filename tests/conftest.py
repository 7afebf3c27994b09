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
