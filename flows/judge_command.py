"""`retbench judge ...`: the judging commands, one module each (judge_export.py: the pool to judge)."""
from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    from retbench.flows import judge_export

    parser = subparsers.add_parser("judge", help="judge the documents a run's settings ranked that nobody judged",
                                   description=__doc__)
    commands = parser.add_subparsers(dest="judge_command", required=True)
    judge_export.add_parser(commands)
    return parser
