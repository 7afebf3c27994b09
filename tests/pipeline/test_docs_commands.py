"""The docs stay true to the code: every `retbench ...` command line in README.md and docs/ parses
with the real command-line parser, every repository path they name in backticks exists, and the
spec reference has a section for every top-level key the spec accepts. (In tests/pipeline, not
tests/unit: it imports flows/cli.py, which unit tests may not import; tests/unit/test_architecture.py.)"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from retbench.flows.cli import build_parser
from retbench.support.paths import ROOT

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
PAGES = [p for p in PAGES if "_incoming" not in p.parts]

# Folders of this repository: a backticked path starting with one of them names a file of ours.
REPO_FOLDERS = ("tasks", "flows", "specs", "deployments", "docs", "tests", "support", "benchmarks", "examples",
                "data", "retbench", ".ci")

# Files the docs name by a path relative to the repository: these endings, or a REPO_FOLDERS start.
FILE_ENDINGS = re.compile(r"\.(py|ya?ml|md|toml|json|jsonl|tsv|txt|parquet|trec|csv|gz)$")

# Paths the docs name that are not in the repository, on purpose; each with why.
USER_EXAMPLES = {
    # BEIR's layout inside the reader's own collection folder, not paths of this repository.
    "qrels/train.tsv": "inside a BEIR collection (docs/guide/datasets.md)",
    "qrels/dev.tsv": "inside a BEIR collection (docs/guide/datasets.md)",
    "qrels/test.tsv": "inside a BEIR collection (docs/guide/datasets.md)",
    "specs/mine.yaml": "the spec `retbench init -o` writes in docs/reference/cli.md's example; made by the reader",
}

# A usage line (`retbench history SPEC [-m measure]`) is notation, not a command to parse.
NOTATION = re.compile(r"[\[\]|<>{}]|\.\.\.|…")
# Where a shell command line goes on after the retbench command: pipes, lists, redirections, background.
SHELL_ENDS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1"}


def _code_lines(text: str):
    """(line number, line) of fenced code blocks; continuation lines (ending in \\) joined."""
    inside, held, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside, held = not inside, ""
            continue
        if not inside:
            continue
        if not held:
            start = number
        if line.rstrip().endswith("\\"):
            held += line.rstrip()[:-1] + " "
            continue
        yield start, held + line
        held = ""


def _commands(page: Path):
    """(where, argv after `retbench`) of every retbench command line on the page: in code blocks a
    line that runs it (after a `$ ` prompt, a .venv/bin/ path or VAR=value assignments), and
    inline code spans that are a whole command."""
    text = page.read_text(encoding="utf-8")
    runs = re.compile(r"^\s*(?:\$\s+)?(?:[A-Z_]+=\S+\s+)*(?:\S*/)?retbench\s+(?P<rest>.*)$")
    for number, line in _code_lines(text):
        found = runs.match(line)
        if found and not line.lstrip().startswith("#"):
            yield f"{page.relative_to(ROOT)}:{number}", found["rest"], False
    for number, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"(?<!`)`retbench ([^`]+)`(?!`)", line):
            # Prose naming a command (`retbench run`, `retbench run SPEC`) is a synopsis: its command must exist.
            synopsis = all(re.fullmatch(r"[A-Z_]+", word) for word in span.split()[1:])
            yield f"{page.relative_to(ROOT)}:{number}", span, synopsis


def _argv(rest: str) -> list[str] | None:
    """The arguments of a command line, or None when it is usage notation."""
    words = shlex.split(rest, comments=True)
    for i, word in enumerate(words):
        if word in SHELL_ENDS or word.startswith(("2>", ">")):
            words = words[:i]
            break
    if not words or any(NOTATION.search(word) for word in words):
        return None
    return words


ALL = [(where, argv, synopsis) for page in PAGES for where, rest, synopsis in _commands(page)
       if (argv := _argv(rest)) is not None]
COMMANDS = [(where, argv) for where, argv, synopsis in ALL if not synopsis]
SYNOPSES = [(where, argv) for where, argv, synopsis in ALL if synopsis]


def _commands_of(parser) -> dict:
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices


def test_the_docs_have_command_lines_to_check():
    # A pattern that stopped matching would pass every test below by checking nothing.
    assert len(COMMANDS) >= 30 and len(SYNOPSES) >= 10
    assert {argv[0] for _, argv in COMMANDS} >= {"run", "check", "init", "eval", "history"}


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[f"{w} {' '.join(a)}" for w, a in COMMANDS])
def test_every_retbench_command_line_in_the_docs_parses(where, argv, capsys):
    parser = build_parser()
    if "-h" in argv or "--help" in argv or argv == ["--version"]:
        # These exit by design: the command before them must exist.
        assert argv[0] in _commands_of(parser) or argv[0].startswith("-"), f"{where}: no command {argv[0]!r}"
        return
    try:
        parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: `retbench {' '.join(argv)}` does not parse: {capsys.readouterr().err.strip()}")


@pytest.mark.parametrize("where, argv", SYNOPSES, ids=[f"{w} {' '.join(a)}" for w, a in SYNOPSES])
def test_every_command_the_docs_name_exists(where, argv):
    assert argv[0] in _commands_of(build_parser()) or argv == ["--version"], f"{where}: no command {argv[0]!r}"


def _named_paths(page: Path):
    """(where, path) of every backticked relative path on the page: a span without spaces, with a
    `/`, that starts with one of REPO_FOLDERS or ends like a file (FILE_ENDINGS); a line number or
    function after `:` is cut off. Absolute, home, parent, URL and pattern spans are not paths of ours."""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for span in re.findall(r"`([^`\s]+)`", line):
            path = re.sub(r":[\w.]+$", "", span).rstrip("/")
            if "/" not in path or path.startswith(("/", "~", "..", "./", "http", "s3:")):
                continue
            if re.search(r"[<>*{}$=@]|\.\.\.|…", path):  # a pattern (tasks/providers/<kind>.py), not a file
                continue
            if path.split("/")[0] in REPO_FOLDERS or FILE_ENDINGS.search(path):
                yield f"{page.relative_to(ROOT)}:{number}", path


PATHS = [(where, path) for page in PAGES for where, path in _named_paths(page)]


def test_the_docs_name_paths_to_check():
    assert len(PATHS) >= 50


@pytest.mark.parametrize("where, path", PATHS, ids=[f"{w} {p}" for w, p in PATHS])
def test_every_repository_path_the_docs_name_exists(where, path):
    if path in USER_EXAMPLES:
        return
    assert (ROOT / path).exists(), f"{where}: `{path}` is not in the repository"


ARGUMENT_PATHS = [(where, word) for where, argv in COMMANDS for word in argv
                  if "/" in word and word.split("/")[0] in REPO_FOLDERS]


@pytest.mark.parametrize("where, path", ARGUMENT_PATHS, ids=[f"{w} {p}" for w, p in ARGUMENT_PATHS])
def test_every_repository_path_a_command_line_names_exists(where, path):
    """`retbench history specs/nightly.yaml` parses, but the file does not ship."""
    if path in USER_EXAMPLES:
        return
    assert (ROOT / path).exists(), f"{where}: `{path}` is not in the repository"


def test_the_allowed_user_examples_are_named_by_the_docs_and_not_shipped():
    named = {path for _, path in PATHS + ARGUMENT_PATHS}
    for path in USER_EXAMPLES:
        assert path in named, f"{path}: allowed but no page names it any more; drop it from USER_EXAMPLES"
        assert not (ROOT / path).exists(), f"{path}: in the repository now; it needs no allowance"


def test_the_spec_reference_has_a_section_per_top_level_key():
    from retbench.tasks.config.spec import BenchmarkSpec

    page = (ROOT / "docs" / "reference" / "spec.md").read_text(encoding="utf-8")
    headed = set(re.findall(r"^### `([a-z_]+)`$", page, re.M))
    assert set(BenchmarkSpec.model_fields) <= headed, sorted(set(BenchmarkSpec.model_fields) - headed)


def test_the_cli_reference_has_a_section_per_command():
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    headed = set(re.findall(r"^## `retbench ([a-z-]+)", page, re.M))
    assert set(_commands_of(build_parser())) == headed
