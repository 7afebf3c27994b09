"""A real local Prefect server: register the nightly and manual deployments, trigger a
parameterised manual run, and wait for it to complete. Marked `server` so it can be
skipped locally (-m "not server"); CI runs it."""
import json
import os
import subprocess
import sys

import pytest

from retbench.support.paths import ROOT
from retbench.support.faulty_server import free_port, stop_process, wait_for_http

pytestmark = pytest.mark.server

SPEC = """
name: deployed
dataset: {{path: {data}, format: jsonl, split: dev}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: lexical, kind: hashing, options: {{dim: 256}}}}
  - {{name: other, kind: hashing, options: {{dim: 128}}}}
indexes: {{ivf: {{nprobe: [2]}}}}
output_dir: {out}
store_dir: {store}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
           "PREFECT_UI_ENABLED": "false", "PREFECT_SERVER_API_HOST": "127.0.0.1"}
    env.pop("PREFECT_API_KEY", None)
    log = open(home / "server.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_http(f"{api}/health", 120)
        yield env
    finally:
        stop_process(process)
        log.close()


def test_manual_deployment_runs_with_parameters(server, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / "out", store=tmp_path / "store"))
    log = open(tmp_path / "serve.log", "w")
    serving = subprocess.Popen([sys.executable, str(ROOT / "deployments" / "serve.py"), "--spec", str(spec)],
                               env=server, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        script = f"""
import asyncio, json, time
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment

async def main():
    async with get_client() as client:
        for _ in range(360):
            names = sorted(d.name for d in await client.read_deployments())
            if names == ["manual", "nightly"]:
                break
            await asyncio.sleep(0.5)
        nightly = await client.read_deployment_by_name("benchmark/nightly")
        schedules = [s.schedule.cron for s in nightly.schedules]
    run = await run_deployment("benchmark/manual", timeout=600, parameters={{
        "spec_path": {str(spec)!r}, "stage": "embed", "providers": ["lexical"], "force": False}})
    print(json.dumps({{"names": names, "schedules": schedules, "state": run.state.type.value}}))

asyncio.run(main())
"""
        result = subprocess.run([sys.executable, "-c", script], env=server, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        outcome = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        stop_process(serving)
        log.close()
    assert outcome["names"] == ["manual", "nightly"]
    assert outcome["schedules"] == ["0 2 * * *"]
    assert outcome["state"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["run"]["stage"] == "embed"
    assert {e["provider"] for e in manifest["embedding"]} == {"lexical"}  # only the named provider ran
    assert manifest["texts"]["embedded"] > 0


def test_prefect_yaml_registers_both_deployments(server, tmp_path):
    env = {**server, "RETBENCH_ROOT": str(ROOT)}
    prefect = [sys.executable, "-m", "prefect", "--no-prompt"]
    subprocess.run([*prefect, "work-pool", "create", "retbench", "--type", "process"], env=env, check=True, capture_output=True, timeout=120)
    deployed = subprocess.run([*prefect, "deploy", "--all", "--prefect-file", "deployments/prefect.yaml"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    listed = subprocess.run([*prefect, "deployment", "ls"], env=env, capture_output=True, text=True, timeout=120)
    assert "benchmark/nightly" in listed.stdout and "benchmark/manual" in listed.stdout
    # Their flow runs start with the malloc settings `retbench run` gives itself (tasks/allocator.py).
    from retbench.tasks.allocator import SETTINGS

    for name in ("benchmark/nightly", "benchmark/manual"):
        shown = subprocess.run([*prefect, "deployment", "inspect", name, "--output", "json"], env=env,
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert json.loads(shown.stdout)["job_variables"]["env"] == {k: str(v) for k, v in SETTINGS.items()}
