"""A moto S3 server on 127.0.0.1 with one bucket, for the object-store tests and benchmark:
started in a fresh process, AWS test credentials set in this process and restored after."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from retbench.support.faulty_server import free_port, stop_process, wait_for_http

_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "RETBENCH_OBJECT_STORES")


@contextlib.contextmanager
def moto_s3(log_dir: Path, bucket: str) -> Iterator[str]:
    """Yields the server's `host:port`; the bucket exists; the server is stopped on exit."""
    port = free_port()
    log = open(Path(log_dir) / "moto.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        wait_for_http(f"http://127.0.0.1:{port}/moto-api/", 60)
        import pyarrow.fs as pafs

        pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                          allow_bucket_creation=True).create_dir(bucket)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(server)
        log.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
