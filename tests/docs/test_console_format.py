"""The console-block runner's own pieces: the page parser, the shape matcher and one small page run end to end."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.docs.console import (
    Command,
    ConsoleFormatError,
    main,
    mask,
    match_output,
    parse_page,
    run_page,
    scenario_env,
    script,
    split_output,
)

PAGE = textwrap.dedent(
    """\
    # A page

    ```console
    $ icegroup list
    GROUP  LAG
    demo   3
    $ cd lake
    ```

    ```yaml
    ```console
    $ not a block: inside a yaml fence
    ```

    <!-- console: skip (needs the Dagster UI) -->

    ```console
    $ make ui
    ```

    ~~~console
    $ cat > groups.yaml <<'EOF'
    groups:
    $ not a command: heredoc body
    EOF
    $ icegroup describe nope  # exit 2
    icegroup: error: no group 'nope'
    $ echo one \\
    > two
    one two
    ~~~
    """
)


def test_parse_finds_console_blocks_only_with_their_line_numbers() -> None:
    blocks = parse_page(PAGE)
    assert [block.line for block in blocks] == [3, 17, 21]
    assert [command.text for command in blocks[0].commands] == ["icegroup list", "cd lake"]
    assert blocks[0].commands[0].expected == ("GROUP  LAG", "demo   3")
    assert blocks[0].commands[0].line == 4
    assert blocks[0].commands[1].expected == ()


def test_parse_reads_a_skip_directive_with_its_reason() -> None:
    blocks = parse_page(PAGE)
    assert [block.skip for block in blocks] == [None, "needs the Dagster UI", None]


def test_parse_keeps_a_heredoc_body_and_a_continuation_in_the_command() -> None:
    heredoc, _, continued = parse_page(PAGE)[2].commands
    assert heredoc.text == "cat > groups.yaml <<'EOF'\ngroups:\n$ not a command: heredoc body\nEOF"
    assert heredoc.expected == ()
    assert continued.text == "echo one \\\ntwo"
    assert continued.expected == ("one two",)


def test_parse_reads_an_expected_exit_status_from_the_comment() -> None:
    heredoc, failing, continued = parse_page(PAGE)[2].commands
    assert (heredoc.status, failing.status, continued.status) == (0, 2, 0)


def test_output_before_the_first_command_is_an_error_naming_the_line() -> None:
    with pytest.raises(ConsoleFormatError, match=r"page.md:2: output 'GROUP' before any command"):
        parse_page("```console\nGROUP\n$ icegroup list\n```\n", source="page.md")


def test_a_misspelt_directive_is_an_error_not_a_silent_run() -> None:
    with pytest.raises(ConsoleFormatError, match=r"page.md:1: .* is not a console directive"):
        parse_page("<!-- console: skipp -->\n```console\n$ true\n```\n", source="page.md")


def test_an_unclosed_heredoc_is_an_error() -> None:
    with pytest.raises(ConsoleFormatError, match="heredoc <<EOF is not closed"):
        parse_page("```console\n$ cat > f <<EOF\nx: 1\n```\n")


def test_a_here_string_is_not_a_heredoc() -> None:
    (block,) = parse_page("```console\n$ cat <<<word\nword\n```\n")
    assert block.commands[0].expected == ("word",)


@pytest.mark.parametrize(
    ("line", "shape"),
    [
        ("snapshot 7493870213526589361 at 2026-11-26T11:02:03.123Z", "snapshot <n> at <time>"),
        ("run 3f2b1c9a-1111-4e0d-9a4b-0123456789ab started", "run <uuid> started"),
        ("wrote /tmp/pytest-7/x/.lake/catalog.db", "wrote <path>"),
        ("uri file:///tmp/a/b.parquet", "uri file:<path>"),
        ("kept ./lakehouse.yaml and ~/.icegroup/groups.yaml", "kept ./lakehouse.yaml and ~/.icegroup/groups.yaml"),
        ("12,000 rows/s in 3.2s", "<rate> in <dur>"),
        ("took 1m 5s, then 150 ms", "took <dur>, then <dur>"),
        ("shard a1b2c3d4e5f6a7b8 and 2158310094725513", "shard <n> and <n>"),
        ("_ig_shard IN (-4718204113245151150, 24372703) and x-1", "_ig_shard IN (<n> <n>) and x-<n>"),
        ("GROUP    LAG     ROWS", "GROUP LAG ROWS"),
        ("-----  --------", "--- ---"),
        ("\x1b[31mred\x1b[0m", "red"),
        ('{"snapshot_id": "7493870213526589361"}', '{"snapshot_id": "<n>"}'),
    ],
)
def test_mask_keeps_the_shape_and_drops_the_values(line: str, shape: str) -> None:
    assert mask(line) == shape


def test_match_accepts_the_same_shape_with_other_values() -> None:
    expected = ["GROUP  LAG", "demo   3 snapshots"]
    assert match_output(expected, ["GROUP   LAG", "", "demo   12 snapshots"]) is None


def test_match_refuses_a_changed_word_naming_the_missing_lines() -> None:
    problem = match_output(["GROUP  LAG", "demo   3"], ["NAME  LAG", "demo   3"])
    assert problem is not None
    assert "GROUP  LAG" in problem
    assert "as the whole output" in problem


def test_match_without_ellipsis_refuses_extra_lines_at_either_end() -> None:
    assert match_output(["a"], ["warning: x", "a"]) is not None
    assert match_output(["a"], ["a", "Traceback"]) is not None


def test_an_ellipsis_line_skips_any_number_of_lines() -> None:
    assert match_output(["...", "done"], ["noise", "more noise", "done"]) is None
    assert match_output(["start", "...", "done"], ["start", "x", "y", "done"]) is None
    assert match_output(["start", "..."], ["start", "anything"]) is None
    assert match_output(["start", "...", "done"], ["start", "x"]) is not None


def test_lines_between_ellipses_must_stay_consecutive_and_in_order() -> None:
    assert match_output(["...", "a", "b", "..."], ["x", "a", "b", "y"]) is None
    assert match_output(["...", "a", "b", "..."], ["x", "a", "z", "b", "y"]) is not None
    assert match_output(["...", "b", "...", "a", "..."], ["a", "b"]) is not None


def test_an_ellipsis_inside_a_line_matches_any_text() -> None:
    assert (
        match_output(
            ["icegroup: error: ... ICEGROUP_LAKEHOUSE ..."],
            ["icegroup: error: looked in ./x; set ICEGROUP_LAKEHOUSE or run init"],
        )
        is None
    )
    assert match_output(["icegroup: error: ... ICEGROUP_LAKEHOUSE"], ["icegroup: error: no config"]) is not None


def test_no_expected_output_means_the_output_is_not_checked() -> None:
    assert match_output([], ["whatever it printed"]) is None


def test_script_output_splits_back_into_each_commands_output_and_status() -> None:
    commands = [Command("echo a; echo b >&2", (), 1), Command("printf 'no newline'", (), 2), Command("false", (), 3)]
    marker = "@@m@@"
    output = subprocess.run(["bash", "-c", script(commands, marker)], capture_output=True, text=True, check=True).stdout
    assert split_output(output, marker) == {0: (["a", "b"], 0), 1: (["no newline"], 0), 2: ([], 1)}


def test_run_page_carries_cd_and_export_forward_and_reports_each_mismatch(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            ```console
            $ mkdir -p lake && cd lake
            $ export GREETING=hello
            $ cat > note.txt <<'EOF'
            written 3 times
            EOF
            $ cat note.txt; echo "$GREETING from $(basename "$PWD")"
            written 12 times
            hello from lake
            $ echo changed
            unchanged
            $ exit_with() { return "$1"; }; exit_with 3  # exit 3
            $ false
            ```

            <!-- console: skip (never runs) -->
            ```console
            $ echo skipped > ../skipped.txt
            ```
            """
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    mismatches = run_page(page, work, scenario_env(tmp_path / "env", os.environ["PATH"]))
    assert len(mismatches) == 2, mismatches
    assert "page.md:10: $ echo changed" in mismatches[0]
    assert "['unchanged']" in mismatches[0]
    assert "page.md:13: $ false" in mismatches[1]
    assert "exit status 1, expected 0" in mismatches[1]
    assert (work / "lake" / "note.txt").read_text() == "written 3 times\n"
    assert not (tmp_path / "skipped.txt").exists()


def test_run_page_reports_a_shell_that_exits_early(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```console\n$ exit 0\n$ echo never\nnever\n```\n")
    mismatches = run_page(page, tmp_path, scenario_env(tmp_path / "env", os.environ["PATH"]))
    assert len(mismatches) == 1
    assert "did not finish" in mismatches[0]


def test_run_page_kills_a_page_past_its_timeout(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```console\n$ sleep 30\n```\n")
    mismatches = run_page(page, tmp_path, scenario_env(tmp_path / "env", os.environ["PATH"]), timeout_s=1)
    assert len(mismatches) == 1
    assert "timed out after 1s" in mismatches[0]


def test_scenario_env_drops_the_developers_settings_and_gives_fresh_homes(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "ICEGROUP_GROUPS": "/x/groups.yaml", "DAGSTER_HOME": "/x", "LANG": "C.UTF-8"}
    env = scenario_env(tmp_path, "/opt/wheel/bin:/usr/bin", base=base)
    assert "ICEGROUP_GROUPS" not in env
    assert env["PATH"] == "/opt/wheel/bin:/usr/bin"
    assert env["LANG"] == "C.UTF-8"
    assert env["DAGSTER_HOME"] == str(tmp_path / "dagster_home")
    assert env["HOME"] == str(tmp_path / "home")
    assert (tmp_path / "icegroup_home").is_dir()


def test_main_runs_pages_and_says_which_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text("```console\n$ echo 42 rows\n7 rows\n```\n")
    bad.write_text("```console\n$ echo 42 rows\n7 files\n```\n")
    assert main([str(good)]) == 0
    assert main([str(good), str(bad)]) == 1
    printed = capsys.readouterr().out
    assert f"{good}: ok" in printed
    assert f"{bad}: 1 mismatch(es)" in printed
    assert "['7 files']" in printed
