"""The documentation holds to what it documents (no root; the examples themselves run in
tests/integration/test_docs_examples.py):

* README.md stays a page a newcomer reads: at most ``README_LINES`` lines;
* every command ``hostjob --help`` lists has its page, ``docs/commands/hostjob-<name>.md``
  (the global options: ``hostjob.md``), which the index links; no page documents a command
  that is not there;
* each page's Options section names exactly the options of ``hostjob CMD --help``: one the
  page lacks, or one the command lacks, fails, naming it;
* every shell block of a user's page is an example (so that a test runs it), each example's
  ``after=`` names another example, and an output block follows an example;
* every repository path, module and ``hostjob.*`` name the pages name exists;
* no comment, docstring or page cites a document a reader of this repository lacks (a
  section of a behaviour reference, an issue number): it states the rule instead.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import re
from pathlib import Path

import pytest

from hostjob.cli import main as cli
from tests import doc_blocks
from tests.helpers import REPO

README_LINES = 300
COMMANDS_DIR = REPO / "docs" / "commands"
ALSO_CHECKED = (REPO / "SECURITY.md", REPO / "bench" / "README.md")
"""Pages whose named paths are checked too, beside the user's pages and DEVELOPING.md."""


def help_text(*words: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main([*words, "--help"]) == 0
    return out.getvalue()


def help_section(text: str, title: str) -> list[str]:
    """The indented lines of a ``--help`` section (``options:``, ``commands:``)."""
    lines = text.splitlines()
    if f"{title}:" not in lines:
        return []
    section = []
    for line in lines[lines.index(f"{title}:") + 1 :]:
        if not line.startswith("  "):
            break
        section.append(line.strip())
    return section


def help_options(*words: str) -> set[str]:
    """Every spelling of every option ``hostjob WORDS --help`` prints (``--bundle``, ``-b``)."""
    names = set()
    for line in help_section(help_text(*words), "options"):
        # "--cwd, --workdir, -w value   help": the spellings, then one metavar
        forms = re.match(r"-{1,2}[\w.-]+(?:, -{1,2}[\w.-]+)*", line)
        assert forms, f"an option line of `hostjob {' '.join(words)} --help`: {line!r}"
        names.update(forms.group(0).split(", "))
    return names


def commands() -> list[str]:
    return [line.split()[0] for line in help_section(help_text(), "commands")]


def page_of(command: str | None) -> Path:
    return COMMANDS_DIR / ("hostjob.md" if command is None else f"hostjob-{command}.md")


def page_options(page: Path) -> set[str]:
    """The options a page's ``## Options`` section names: each entry's line starts with
    its bold spellings, ``**--bundle**|**-b** _dir_``."""
    text = page.read_text()
    match = re.search(r"^## Options\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, f"{page.name}: no '## Options' section"
    names = set()
    for line in match.group(1).splitlines():
        if line.startswith("**-"):
            names.update(re.findall(r"\*\*(-{1,2}[\w.-]+)\*\*", line))
    return names


def test_the_readme_is_short() -> None:
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines: move detail to docs/"


def test_every_command_has_its_page_and_the_index_links_it() -> None:
    names = commands()
    assert {"create", "run", "pull", "generate", "checkpoint"} <= set(names), names
    index = (COMMANDS_DIR / "README.md").read_text()
    for name in [None, *names]:
        page = page_of(name)
        assert page.is_file(), f"`hostjob {name or ''}` has no page: {page.relative_to(REPO)}"
        if name is not None:
            assert f"]({page.name}" in index, f"docs/commands/README.md does not link {page.name}"
    documented = {p.name for p in COMMANDS_DIR.glob("hostjob*.md")}
    expected = {page_of(name).name for name in [None, *names]}
    assert documented == expected, f"pages of no command: {sorted(documented - expected)}"


@pytest.mark.parametrize("command", [None, *commands()], ids=lambda c: c or "hostjob")
def test_each_page_lists_exactly_the_commands_options(command: str | None) -> None:
    page = page_of(command)
    listed = page_options(page)
    real = help_options() if command is None else help_options(command)
    missing = sorted(real - listed)
    extra = sorted(listed - real)
    assert not missing, f"{page.name} lacks {missing} (in `hostjob {command or ''} --help`)"
    assert not extra, f"{page.name} documents {extra}, which `hostjob {command or ''}` lacks"


def test_the_option_check_fails_on_a_page_that_lost_an_option(tmp_path: Path) -> None:
    """The comparison above can fail: a copy of a page without one option differs."""
    page = page_of("create")
    text = page.read_text()
    assert "**--pid-file** _path_\n" in text
    shorter = tmp_path / page.name
    shorter.write_text(text.replace("**--pid-file** _path_\n", ""))
    assert help_options("create") - page_options(shorter) == {"--pid-file"}


def test_every_shell_block_of_a_users_page_is_an_example() -> None:
    unmarked = [
        b.where
        for page in doc_blocks.RUN_PAGES
        for b in doc_blocks.blocks(page)
        if b.language in ("sh", "bash", "shell", "console", "python") and not b.is_example
    ]
    assert not unmarked, f"shell blocks no test runs (mark them `example`): {unmarked}"


def test_examples_name_examples_that_exist() -> None:
    named = doc_blocks.named_examples()
    for page in doc_blocks.RUN_PAGES:
        for block in doc_blocks.blocks(page):
            for name in block.after:
                assert name in named, f"{block.where}: after={name}: no such example"
            for need in block.needs:
                assert need in ("registry", "systemd"), f"{block.where}: needs={need}?"
            assert block.language != "text" or block.is_output or block.info != ["text"]


def test_what_an_example_leaves_to_ci_is_what_ci_runs() -> None:
    """The Quick start's ``scripts/test`` (the whole suite) is left out of the examples'
    run: CI runs it, as ``.ci/run`` shows."""
    ci = (REPO / ".ci" / "run").read_text()
    left = [
        (b.where, b.settings["ci"])
        for page in doc_blocks.RUN_PAGES
        for b in doc_blocks.examples(page)
        if "ci" in b.settings
    ]
    assert left, "the Quick start's scripts/test is marked ci=scripts/test"
    for where, command in left:
        assert re.search(rf"^exec {re.escape(command)}$", ci, re.M), (
            f"{where}: CI runs no {command}"
        )


def test_output_blocks_follow_examples() -> None:
    for page in doc_blocks.RUN_PAGES:
        found = doc_blocks.blocks(page)
        for before, block in itertools.pairwise(found):
            if block.is_output:
                assert before.is_example, f"{block.where}: an output block after no example"


# --- paths and names the pages give --------------------------------------------------------

CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH_ROOTS = ("src/", "tests/", "docs/", "bench/", "scripts/", "demo/", "bin/", ".ci/")
PACKAGE_DIRS = tuple(
    f"{p.name}/" for p in (REPO / "src" / "hostjob").iterdir() if (p / "__init__.py").is_file()
)


def prose(path: Path) -> str:
    """A page without its fenced blocks: what it says in its sentences."""
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            lines.append(line)
    return "\n".join(lines)


def named_paths(path: Path) -> list[str]:
    """Code spans that name a file or directory of this repository: from one of its top
    directories, from a package of ``src/hostjob``, or a ``.py`` file."""
    found = []
    for span in CODE_SPAN.findall(prose(path)):
        word = span.split("::")[0].rstrip(",.;:")
        if not re.fullmatch(r"[\w.*/-]+", word) or word.startswith(("/", "-")):
            continue
        if word.startswith(PATH_ROOTS + PACKAGE_DIRS) or word.endswith(".py"):
            found.append(word)
    return found


def exists(word: str, page: Path) -> bool:
    bases = (REPO, REPO / "src" / "hostjob", page.parent)
    if "/" not in word:  # a bare file name: somewhere in the code or its tests
        return (
            any(REPO.glob(f"src/**/{word}"))
            or any(REPO.glob(f"tests/**/{word}"))
            or any(REPO.glob(f"bench/**/{word}"))
        )
    return any(any(base.glob(word)) if "*" in word else (base / word).exists() for base in bases)


def module_names(path: Path) -> list[str]:
    return [
        span.rstrip(".,;:()")
        for span in CODE_SPAN.findall(prose(path))
        if re.fullmatch(r"hostjob(\.\w+)+(\(\))?", span.rstrip(".,;:"))
    ]


def resolves(dotted: str) -> bool:
    """``hostjob.a.b.c``: the longest importable module, then attributes of it."""
    parts = dotted.removesuffix("()").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


CHECKED_PAGES = (*doc_blocks.USER_PAGES, *ALSO_CHECKED)


@pytest.mark.parametrize("page", CHECKED_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_paths_a_page_names_exist(page: Path) -> None:
    missing = [w for w in named_paths(page) if not exists(w, page)]
    links = [
        target
        for target in LINK.findall(prose(page))
        if "://" not in target and not (page.parent / target).exists()
    ]
    modules = [m for m in module_names(page) if not resolves(m)]
    assert not missing, f"{page.relative_to(REPO)} names files that do not exist: {missing}"
    assert not links, f"{page.relative_to(REPO)} links to nothing: {links}"
    assert not modules, f"{page.relative_to(REPO)} names modules that do not exist: {modules}"


# --- citations -------------------------------------------------------------------------------

CITATION = re.compile(r"SPEC §|§ ?\d|\b[Ii]ssues? \d+|\b[Ff]inding \d+")
CITATION_TREES = ("src", "tests", "docs", "bench", "scripts", "demo", "bin", ".ci")


def test_no_text_cites_a_document_the_reader_lacks() -> None:
    files = [REPO / "README.md", REPO / "SECURITY.md"]
    for tree in CITATION_TREES:
        files += [
            p for p in (REPO / tree).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    found = []
    for path in files:
        if path == Path(__file__):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:80]}")
    assert not found, "state the rule, not where it was written down:\n" + "\n".join(found)
