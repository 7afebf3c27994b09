"""The environment checks of `retbench run` (flows/environment.py) as plain functions: what a log of
an API server that could not start says, and a port setting that is not a port."""
from __future__ import annotations

import os

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


def test_the_default_prefect_home_moves_to_the_cache_folder_when_it_cannot_be_written(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("x")  # a parent that is a file refuses root too (chmod would not)
    default = tmp_path / "a-file" / ".prefect"
    monkeypatch.setenv("PREFECT_HOME", str(default))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # The user's own PREFECT_HOME is never moved: refused as before.
    with pytest.raises(EnvironmentFault, match=rf"^PREFECT_HOME {default} cannot be written \(a parent is a file"):
        check_prefect_home(defaulted=False)
    notices = check_prefect_home(defaulted=True)
    fallback = tmp_path / "cache" / "retbench" / "prefect"
    assert notices == [f"PREFECT_HOME: {default} cannot be written (a parent is a file, not a folder), so Prefect's "
                       f"files go to {fallback} (set PREFECT_HOME to choose)"]
    assert os.environ["PREFECT_HOME"] == str(fallback)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PREFECT_HOME", str(default))
    check_prefect_home(defaulted=True)
    assert os.environ["PREFECT_HOME"] == str(tmp_path / "home" / ".cache" / "retbench" / "prefect")
    monkeypatch.setenv("PREFECT_HOME", str(default))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file" / "cache"))  # neither can be written
    with pytest.raises(EnvironmentFault, match=r"^PREFECT_HOME: neither the default .* nor .* can be written"):
        check_prefect_home(defaulted=True)
