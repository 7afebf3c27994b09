"""The environment checks of `retbench run` (flows/environment.py) as plain functions: what a log of
an API server that could not start says, and a port setting that is not a port."""
from __future__ import annotations

import pytest

from retbench.flows.environment import EnvironmentFault, api_start_failure, check_prefect_home, loopback_port


def test_a_server_that_lost_its_port_to_another_process_is_told_so(tmp_path):
    log = tmp_path / "embedded-api.log"
    log.write_text("INFO: Started server process\nERROR: [Errno 98] error while attempting to bind on address "
                   "('127.0.0.1', 4321): address already in use\n")
    assert str(api_start_failure(1, 4321, log)) == (
        "the embedded Prefect API could not bind port 4321 of 127.0.0.1 (address already in use: another process took "
        "it); rerun, or set RETBENCH_API_PORT to a free port")
    log.write_text("Traceback (most recent call last):\nModuleNotFoundError: No module named 'aiosqlite'\n")
    assert str(api_start_failure(1, 4321, log)) == (
        "the embedded Prefect API server exited with code 1 while starting on port 4321: ModuleNotFoundError: No module "
        f"named 'aiosqlite' (its log: {log})")


@pytest.mark.parametrize("value", ["abc", "70000", "-1"])
def test_a_port_setting_that_is_not_a_port_is_refused(monkeypatch, value):
    monkeypatch.setenv("RETBENCH_API_PORT", value)
    with pytest.raises(EnvironmentFault, match=rf"^RETBENCH_API_PORT '{value}' is not a port number \(1-65535\)"):
        loopback_port()
    monkeypatch.delenv("RETBENCH_API_PORT")
    assert 0 < loopback_port() < 65536


def test_a_prefect_home_created_to_probe_it_is_removed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "new" / "home"))
    check_prefect_home()
    assert not (tmp_path / "new").exists()  # a run refused later leaves no trace
    (tmp_path / "kept").mkdir()
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "kept"))
    check_prefect_home()
    assert list((tmp_path / "kept").iterdir()) == []
