"""Prefect entry points. Importing this package sets Prefect's environment defaults
before Prefect itself is imported: telemetry off, PREFECT_HOME inside the project,
and time for the embedded (ephemeral) API server to start on a busy machine."""
import os
from pathlib import Path

_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_HOME": str(Path.cwd() / ".prefect"),
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # The pipeline's stage functions log to the standard "retbench" logger; inside a flow
    # run Prefect picks those records up as the task run's logs.
    "PREFECT_LOGGING_EXTRA_LOGGERS": "retbench",
}
# Whether PREFECT_HOME is ours (./.prefect) rather than the user's: only ours may move to the
# per-user cache folder when the working directory cannot be written (flows/environment.py).
PREFECT_HOME_DEFAULTED = "PREFECT_HOME" not in os.environ
for _name, _value in _DEFAULTS.items():
    os.environ.setdefault(_name, _value)
