"""This user's retbench cache folder (not the store): remembered file hashes, object-store scratch."""
from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """This user's retbench cache (not the store): RETBENCH_CACHE, default ~/.cache/retbench."""
    return Path(os.environ.get("RETBENCH_CACHE", Path.home() / ".cache" / "retbench"))
