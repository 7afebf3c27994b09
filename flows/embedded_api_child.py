"""The embedded API server's process (see flows/prefect_server.py): imports Prefect's server
while the parent checks the spec and data, then serves only once the parent writes `start`.

    python -m retbench.flows.embedded_api_child LOG_PATH UVICORN_ARGS...

Until `start` it writes nothing anywhere (no port, no database, no log file), so inputs the
parent refuses leave nothing behind; end of input (the parent refused them, or died) ends it.
"""
import os
import sys
import traceback

failed = None
try:
    from uvicorn.main import main as uvicorn_main

    import prefect.server.api.server  # noqa: F401  (the slow part: seconds of imports)
except BaseException:  # reported in the log once started, where the parent points the user
    failed = traceback.format_exc()

if sys.stdin.readline().strip() != "start":
    sys.exit(0)
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
if failed:
    sys.stderr.write(failed)
    sys.exit(1)
sys.argv = ["uvicorn", *sys.argv[2:]]
uvicorn_main()
