"""Where the checkout and the shared real collections are, for tests and benchmarks alike."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# RETBENCH_SHARED_DATA: where the real collections are when the checkout is elsewhere (a worktree).
SHARED_DATA = Path(os.environ.get("RETBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
