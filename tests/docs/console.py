r"""Runs the console examples of the docs and checks that each command's output still has the shape shown.

The format (also in docs/reference/console-blocks.md, for people writing pages):

* A fenced block whose info string is ``console`` (in README.md or any docs/**/*.md page) is an
  example that a test runs. A line starting with ``$ `` is a command; the lines after it, up to the
  next ``$ `` line or the end of the block, are its expected output.
* A command continues on the next line when its line ends with ``\`` (the next line may start with
  ``> ``), and a heredoc (``cat > groups.yaml <<'EOF'``) runs up to its terminator line.
* A command must exit 0, unless its first line ends with a comment ``# exit N`` (or ``# exits N``):
  then it must exit N.
* The output is compared by shape, line by line, after masking on both sides: UUIDs, times and dates,
  absolute paths, rates (``12,000 rows/s``), durations (``3.2s``, ``150 ms``), hex ids and every
  other number are replaced by placeholders, ANSI colours are dropped, runs of spaces collapse and
  blank lines are ignored. Every expected line must match an output line, in order and consecutively;
  a line that is exactly ``...`` skips any number of output lines, and ``...`` inside a line matches
  any text. Without a leading ``...`` the output must start with the first expected line; without a
  trailing one it must end with the last. A command shown with no output is not checked (only its
  exit status is).
* A page is one scenario: its blocks run in order, in one bash process (so ``cd`` and ``export``
  carry forward), in a fresh working folder with fresh ``HOME``, ``ICEGROUP_HOME`` and ``DAGSTER_HOME``;
  the caller chooses ``PATH``, so the same page can run against the checkout or an installed wheel.
* ``<!-- console: skip (reason) -->`` on the line before a block (blank lines between are allowed)
  keeps the block from running; the test reports each skipped block with its reason.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PROMPT = "$ "
ELLIPSIS = "..."
DEFAULT_TIMEOUT_S = 1800.0

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
_DIRECTIVE = re.compile(r"^\s*<!--\s*console:(?P<body>.*?)-->\s*$")
_SKIP = re.compile(r"^\s*skip\s*\((?P<reason>[^)]+)\)\s*$")
_STATUS = re.compile(r"#\s*exits?\s+(?P<code>\d+)\s*$")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(?P<dash>-?)\s*(?P<quote>['\"]?)(?P<word>[A-Za-z_][A-Za-z0-9_]*)(?P=quote)")
_CONSOLE_FENCE = re.compile(r"^ {0,3}(?:`{3,}|~{3,})\s*console(?:\s|$)", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Applied in order: the most specific shapes first, bare numbers last.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2}\b|\s?UTC\b)?"
            r"|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"
        ),
        "<time>",
    ),
    (re.compile(r"(?<![\w.~/])/+[\w.@+~-]+(?:/[\w.@+~-]*)*"), "<path>"),
    (re.compile(r"\b\d[\d,_]*(?:\.\d+)?\s?(?:[kKMGT]i?B|rows?|files?|commits?|snapshots?)?/s\b"), "<rate>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?)\b"), "<dur>"),
    (re.compile(r"<dur>(?:\s?<dur>)+"), "<dur>"),
    # A number's sign is part of its value, not its shape: a shard number or file reference has either.
    (re.compile(r"(?<![\w)\]])-(?=\d)"), ""),
    # A hex id (a shard, a lease) is a number too: one that happens to hold no letter must keep its shape.
    (re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b"), "<n>"),
    (re.compile(r"\d[\d,_]*(?:\.\d+)?(?:[eE][+-]?\d+)?"), "<n>"),
    (re.compile(r"([-=─━═_*#~.])\1{3,}"), r"\1\1\1"),
    (re.compile(r"\s+"), " "),
)


@dataclass(frozen=True)
class Command:
    """One ``$ `` command of a block, the output shown after it, and the exit status it must end with."""

    text: str
    expected: tuple[str, ...]
    line: int
    status: int = 0


@dataclass(frozen=True)
class Block:
    """One ``console`` fenced block: where it starts, its commands, and why it is skipped (None: it runs)."""

    line: int
    commands: tuple[Command, ...]
    skip: str | None = None


class ConsoleFormatError(ValueError):
    """A console block the runner cannot read: output before any command, a bad directive, an open heredoc."""


def parse_page(text: str, source: str = "<page>") -> list[Block]:
    """Every ``console`` block of a Markdown page, in order; other fenced blocks are passed over whole."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = _closing_fence(lines, index + 1, fence.group("fence"))
        if fence.group("info") == "console":
            body = lines[index + 1 : end]
            skip = _directive_before(lines, index, source)
            blocks.append(Block(index + 1, tuple(_commands(body, index + 2, source)), skip))
        index = end + 1
    return blocks


def _closing_fence(lines: Sequence[str], start: int, fence: str) -> int:
    """The index of the line closing a fence opened with ``fence`` (same character, at least as long)."""
    for index in range(start, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith(fence) and set(stripped) == {fence[0]}:
            return index
    return len(lines)


def _directive_before(lines: Sequence[str], fence_index: int, source: str) -> str | None:
    """The skip reason of a ``<!-- console: skip (reason) -->`` just above a block (blank lines between allowed)."""
    index = fence_index - 1
    while index >= 0 and not lines[index].strip():
        index -= 1
    found = _DIRECTIVE.match(lines[index]) if index >= 0 else None
    if found is None:
        return None
    skip = _SKIP.match(found.group("body"))
    if skip is None:
        raise ConsoleFormatError(
            f"{source}:{index + 1}: {lines[index].strip()!r} is not a console directive; "
            "write <!-- console: skip (the reason) -->"
        )
    return skip.group("reason").strip()


def _commands(body: Sequence[str], first_line: int, source: str) -> Iterator[Command]:
    """The commands of one block's lines; ``first_line`` is the page line number of ``body[0]``."""
    index = 0
    while index < len(body) and not body[index].strip():
        index += 1
    while index < len(body):
        if not body[index].startswith(PROMPT):
            raise ConsoleFormatError(
                f"{source}:{first_line + index}: output {body[index]!r} before any command; "
                f"start the block with a '{PROMPT}' line"
            )
        line = first_line + index
        text, index = _command_text(body, index, source, first_line)
        expected: list[str] = []
        while index < len(body) and not body[index].startswith(PROMPT):
            expected.append(body[index])
            index += 1
        while expected and not expected[-1].strip():
            expected.pop()
        status = _STATUS.search(text.splitlines()[0])
        yield Command(text, tuple(expected), line, int(status.group("code")) if status else 0)


def _command_text(body: Sequence[str], index: int, source: str, first_line: int) -> tuple[str, int]:
    """A command's full text (continuations and heredoc bodies included) and the index after it."""
    parts = [body[index][len(PROMPT) :]]
    index += 1
    while parts[-1].endswith("\\") and index < len(body):
        parts.append(body[index].removeprefix("> "))
        index += 1
    for heredoc in _HEREDOC.finditer("\n".join(parts)):
        word = heredoc.group("word")
        while True:
            if index >= len(body):
                raise ConsoleFormatError(
                    f"{source}:{first_line + index - 1}: heredoc <<{word} is not closed; end it with a line {word}"
                )
            parts.append(body[index])
            index += 1
            terminator = parts[-1].lstrip("\t") if heredoc.group("dash") else parts[-1]
            if terminator == word:
                break
    return "\n".join(parts), index


def mask(line: str) -> str:
    """A line's shape: ids, times, paths, rates, durations and numbers replaced by placeholders; spaces collapsed."""
    shaped = _ANSI.sub("", line)
    for pattern, placeholder in _MASKS:
        shaped = pattern.sub(placeholder, shaped)
    return shaped.strip()


def match_output(expected: Sequence[str], actual: Sequence[str]) -> str | None:
    """None when the output has the expected shape, else a sentence saying which expected line is missing."""
    wanted = [line for line in expected if line.strip()]
    if not wanted:
        return None
    got = [mask(line) for line in actual if line.strip()]
    segments: list[list[str]] = [[]]
    for line in wanted:
        if line.strip() == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    anchored_start, anchored_end = bool(segments[0]), bool(segments[-1])
    position = 0
    for number, segment in enumerate(segments):
        if not segment:
            continue
        start_fixed = number == 0 and anchored_start
        end_fixed = number == len(segments) - 1 and anchored_end
        tail = len(got) - len(segment)
        if start_fixed:
            candidates: Sequence[int] = [0] if not end_fixed or tail == 0 else []
        elif end_fixed:
            candidates = [tail] if tail >= position else []
        else:
            candidates = range(position, tail + 1)
        found = next(
            (start for start in candidates if _segment_matches(segment, got[start : start + len(segment)])), None
        )
        if found is None:
            where = {(True, True): " as the whole output", (True, False): " at the start", (False, True): " at the end"}
            return f"expected lines {segment!r} not found in order{where.get((start_fixed, end_fixed), '')}"
        position = found + len(segment)
    return None


def _segment_matches(segment: Sequence[str], got: Sequence[str]) -> bool:
    """Whether consecutive output lines (masked) have the shapes of the segment's expected lines."""
    return len(segment) == len(got) and all(_line_matches(want, have) for want, have in zip(segment, got, strict=True))


def _line_matches(expected: str, masked_actual: str) -> bool:
    """One expected line against one masked output line; ``...`` inside the expected line matches any text."""
    pieces = [mask(piece) for piece in expected.split(ELLIPSIS)]
    if len(pieces) == 1:
        return pieces[0] == masked_actual
    pattern = r"\s*.*\s*".join(re.escape(piece) for piece in pieces)
    return re.fullmatch(pattern, masked_actual) is not None


def script(commands: Sequence[Command], marker: str) -> str:
    """One bash script running every command in turn; after each, a marker line carries its index and status."""
    lines = ["exec 2>&1", "exec </dev/null"]
    for number, command in enumerate(commands):
        lines.append(command.text)
        lines.append(f"printf '\\n{marker} %s %s\\n' {number} $?")
    return "\n".join(lines) + "\n"


def split_output(output: str, marker: str) -> dict[int, tuple[list[str], int]]:
    """Each command's output lines and exit status, by index, from a script's combined output."""
    results: dict[int, tuple[list[str], int]] = {}
    current: list[str] = []
    for line in output.splitlines():
        if line.startswith(marker):
            number, status = line[len(marker) :].split()
            while current and not current[-1].strip():
                current.pop()
            results[int(number)] = (current, int(status))
            current = []
        else:
            current.append(line)
    return results


def run_page(page: Path, workdir: Path, env: Mapping[str, str], timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Run a page's console blocks as one scenario in ``workdir`` with exactly ``env``; the mismatches found.

    Skipped blocks do not run. Every command runs, even after a mismatch, so one run reports them all.
    """
    blocks = [block for block in parse_page(page.read_text(), source=str(page)) if block.skip is None]
    commands = [command for block in blocks for command in block.commands]
    if not commands:
        return []
    marker = f"@@console-{uuid.uuid4().hex}@@"
    output, timed_out = _run_script(script(commands, marker), workdir, {**env, "PYTHONUNBUFFERED": "1"}, timeout_s)
    results = split_output(output, marker)
    mismatches = []
    for number, command in enumerate(commands):
        where = f"{page}:{command.line}: $ {command.text.splitlines()[0]}"
        if number not in results:
            cause = f"timed out after {timeout_s:.0f}s" if timed_out else "did not finish (the shell exited)"
            tail = "\n".join(output.splitlines()[-40:])
            mismatches.append(f"{where}\n  {cause}; the last output:\n{tail}")
            break
        actual, status = results[number]
        problems = []
        if status != command.status:
            problems.append(f"exit status {status}, expected {command.status}")
        difference = match_output(command.expected, actual)
        if difference is not None:
            problems.append(difference)
        if problems:
            shown = "\n".join(f"    {line}" for line in actual[-60:])
            mismatches.append(f"{where}\n  {'; '.join(problems)}\n  actual output:\n{shown}")
    return mismatches


def _run_script(text: str, workdir: Path, env: Mapping[str, str], timeout_s: float) -> tuple[str, bool]:
    """The combined output of a bash script, and whether it was killed for running past the timeout."""
    with subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", text],
        cwd=workdir,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout_s)
            return output, False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return output, True


def scenario_env(root: Path, path: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A fresh environment under ``root`` for one page: new HOME, ICEGROUP_HOME and DAGSTER_HOME, the given PATH.

    Settings a developer's shell or the Makefile exports (``ICEGROUP_*``, ``DAGSTER_HOME``, a virtualenv,
    pyiceberg's) are dropped, so the page sees what a new user's shell would.
    """
    base = os.environ if base is None else base
    dropped = ("ICEGROUP_", "PYICEBERG_", "DAGSTER_", "VIRTUAL_ENV", "SPARK_", "PYSPARK_", "PYTHONPATH")
    env = {key: value for key, value in base.items() if not key.startswith(dropped)}
    for name in ("home", "icegroup_home", "dagster_home"):
        (root / name).mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(root / "home"),
            "ICEGROUP_HOME": str(root / "icegroup_home"),
            "DAGSTER_HOME": str(root / "dagster_home"),
            "PATH": path,
            "NO_COLOR": "1",
            "TERM": "dumb",
        }
    )
    return env


def console_pages(repo: Path) -> list[Path]:
    """README.md and every docs page with a console fence (found by its opening line; parsing is the run's job)."""
    candidates = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    return [page for page in candidates if page.is_file() and _CONSOLE_FENCE.search(page.read_text())]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.docs.console PAGE...``: run pages as the test does and print what differs; 1 if anything."""
    cli = argparse.ArgumentParser(prog="python -m tests.docs.console", description=main.__doc__)
    cli.add_argument("pages", nargs="+", type=Path, help="Markdown pages to run, each as its own scenario")
    cli.add_argument(
        "--path",
        default=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        help="PATH the commands run with (default: this Python's bin folder first), e.g. an installed wheel's",
    )
    args = cli.parse_args(argv)
    failed = False
    for page in args.pages:
        with tempfile.TemporaryDirectory(prefix="console-") as scratch:
            work = Path(scratch) / "work"
            work.mkdir()
            mismatches = run_page(page.resolve(), work, scenario_env(Path(scratch) / "env", args.path))
        print(f"{page}: {'ok' if not mismatches else f'{len(mismatches)} mismatch(es)'}")
        for mismatch in mismatches:
            print(mismatch, end="\n\n")
        failed = failed or bool(mismatches)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
