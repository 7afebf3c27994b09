import flows  # noqa: F401  (Prefect environment defaults before Prefect is imported)

import os

import pytest

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# RETBENCH_SHARED_DATA: where the real collections are when the checkout is elsewhere (a worktree).
SHARED_DATA = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API (SQLite) for every flow test in the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
