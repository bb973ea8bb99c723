"""The reference generators (docs/hooks/): the CLI page from an argparse parser, the configuration page from models."""

from __future__ import annotations

import argparse
import importlib
import re
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Literal

import markdown
import pytest
from pydantic import BaseModel, Field

from icegroup.dagster_project.cli.commands import parser
from icegroup.dagster_project.cli.exits import MEANING
from icegroup.iceberg.config.lakehouse import ENV_OVERRIDES, LakehouseConfig
from icegroup.iceberg.protocol.group import GroupConfig

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The hook modules, imported as MkDocs imports them: with their own folder on ``sys.path``."""
    monkeypatch.syspath_prepend(str(HOOKS))
    return {name: importlib.import_module(name) for name in ("markdown_cells", "cli_reference", "config_reference")}


class Inner(BaseModel):
    """An inner section."""

    depth: int = Field(default=3, ge=1, le=9, description="How deep.")


class Outer(BaseModel):
    """The outer file."""

    name: str = Field(description="The name.")
    inner: Inner = Field(default_factory=Inner, description="The inner section.")
    maybe: Inner | None = Field(default=None, description="Another inner, optional.")
    mode: Literal["fast", "safe"] = Field(default="safe", description="Which mode.")
    keep: timedelta = Field(default=timedelta(days=7), description="How long to keep.")
    tags: dict[str, str] = Field(default_factory=dict, description="Free tags.")


class Undocumented(BaseModel):
    """A model with a hole."""

    size: int = 1


def toy_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tool", description="A tool.")
    top.add_argument("--config", help="the config file")
    sub = top.add_subparsers(metavar="COMMAND")
    run = sub.add_parser("run", help="run it", aliases=["go"], description="Runs it, twice if asked.")
    run.add_argument("target", help="what to run")
    run.add_argument("--times", type=int, default=2, help="how often (default %(default)s)")
    run.add_argument("--tag", action="append", help="a tag")
    run.add_argument("--level", choices=["low", "high"], default="low", help="the level")
    which = run.add_mutually_exclusive_group(required=True)
    which.add_argument("--now", action="store_true", help="at once")
    which.add_argument("--later", action="store_true", help="when idle")
    nested = sub.add_parser("db", help="the database").add_subparsers(metavar="ACTION")
    nested.add_parser("vacuum", help="reclaim space")
    return top


def test_cli_reference_walks_nested_commands_once_each_alias_included(hooks: dict[str, ModuleType]) -> None:
    paths = [path for path, _, _ in hooks["cli_reference"].walk_commands(toy_parser(), "tool")]
    assert paths == ["tool run", "tool db", "tool db vacuum"]


def test_cli_reference_documents_every_argument_with_its_help_default_and_choices(
    hooks: dict[str, ModuleType],
) -> None:
    page = hooks["cli_reference"].render_cli(toy_parser(), {0: "fine", 2: "a named error"})
    assert "## tool run\n\nRun it.\n\nRuns it, twice if asked." in page
    assert "| `--times TIMES` | how often (default 2) | `2` |" in page
    assert "| `target` | what to run |" in page
    assert "a tag (repeatable)" in page
    assert "One of `low`, `high`." in page
    assert "Exactly one of `--now`, `--later`." in page
    assert "## tool db vacuum\n\nReclaim space." in page
    assert "| `--config CONFIG` | the config file |" in page
    assert "| `2` | a named error |" in page


def test_cli_reference_of_the_real_parser_has_every_command_option_and_exit_code(
    hooks: dict[str, ModuleType],
) -> None:
    top = parser()
    page = hooks["cli_reference"].render_cli(top, {int(code): text for code, text in MEANING.items()})
    commands = list(hooks["cli_reference"].walk_commands(top, "icegroup"))
    assert {"icegroup list", "icegroup consume", "icegroup reset"} <= {path for path, _, _ in commands}
    for path, command, _ in commands:
        assert f"\n## {path}\n" in page
        for action in command._actions:
            for option in action.option_strings:
                assert option in page or option in ("-h", "--help"), (path, option)
    for code in MEANING:
        assert f"| `{int(code)}` |" in page


def test_markdown_escaping_renders_the_same_characters_in_a_table(hooks: dict[str, ModuleType]) -> None:
    cells = hooks["markdown_cells"]
    text = "PYICEBERG_CATALOG__<NAME>__* a|b [x] #1 ~/.icegroup & `a_b|c`\n  and more"
    html = markdown.markdown(cells.table(["h"], [[cells.escape(text)]]), extensions=["tables"])
    found = re.search(r"<td>(.*)</td>", html)
    assert found is not None, html
    assert found.group(1) == (
        "PYICEBERG_CATALOG__&lt;NAME&gt;__* a|b [x] #1 ~/.icegroup &amp; <code>a_b|c</code> and more"
    )


def test_configuration_reference_gives_every_field_and_a_section_per_nested_model(
    hooks: dict[str, ModuleType],
) -> None:
    module = hooks["config_reference"]
    page = module.render_config([module.Root("The file", Outer, "Intro.", env={"TOOL_NAME": "name"})])
    assert page.startswith("## The file\n\nIntro.\n\nThe outer file.")
    assert "| `name` | string | yes |   | The name. |" in page
    assert "| `inner` | [Inner](#inner) | no | the [Inner](#inner) defaults | The inner section. |" in page
    assert "| `maybe` | [Inner](#inner) | no | unset | Another inner, optional. |" in page
    assert "| `mode` | one of `fast`, `safe` | no | `safe` | Which mode. |" in page
    assert "| `keep` | duration" in page
    assert "| `7d` |" in page
    assert "| `tags` | mapping of string to string | no | `{}` | Free tags. |" in page
    assert "| `TOOL_NAME` | `name` |" in page
    assert page.count("\n## Inner\n") == 1
    assert "| `depth` | integer, ≥ 1, ≤ 9 | no | `3` | How deep. |" in page


def test_a_field_without_a_description_fails_the_reference_naming_it(hooks: dict[str, ModuleType]) -> None:
    module = hooks["config_reference"]
    with pytest.raises(module.MissingDescription, match=r"test_reference.Undocumented.size: no description"):
        module.render_config([module.Root("Holes", Undocumented, "")])


def test_configuration_reference_of_the_real_models_has_every_field(hooks: dict[str, ModuleType]) -> None:
    reference = importlib.import_module("reference")
    page = reference.render("configuration")
    for model in (LakehouseConfig, GroupConfig):
        for name in model.model_fields:
            assert f"| `{name}` |" in page, (model.__name__, name)
    for section in ("RestCatalogSettings", "SparkSettings", "S3Settings", "OpenLineageSettings", "ShardCaps"):
        assert f"\n## {section}\n" in page
    for variable in ENV_OVERRIDES:
        assert f"`{variable}`" in page


def test_the_component_is_documented_when_its_module_exists(hooks: dict[str, ModuleType]) -> None:
    reference = importlib.import_module("reference")
    if importlib.util.find_spec(reference.COMPONENTS_MODULE) is None:
        assert reference.component_roots() == []
    else:
        roots = reference.component_roots()
        assert roots, f"{reference.COMPONENTS_MODULE} exists but no Component subclass with attributes was found"
        assert all(root.title.startswith("Dagster component ") for root in roots)


def test_an_unknown_marker_fails_the_build_naming_the_choices(hooks: dict[str, ModuleType]) -> None:
    reference = importlib.import_module("reference")
    with pytest.raises(reference.UnknownMarker, match=r"generated: clli .*\['cli', 'configuration'\]"):
        reference.on_page_markdown("# X\n\n<!-- generated: clli -->\n")


def test_the_cli_page_says_each_command_once_and_names_the_shared_options_once_per_command(
    hooks: dict[str, ModuleType],
) -> None:
    page = hooks["cli_reference"].render_cli(parser(), {int(code): text for code, text in MEANING.items()})
    sections = re.findall(r"^## (icegroup \S+)\n\n([^\n]+)\n\n([^\n]+)", page, flags=re.MULTILINE)
    assert sections, "the commands are there"
    repeated = [name for name, first, second in sections if first.lower().rstrip(".") == second.lower().rstrip(".")]
    assert repeated == [], "a command's description repeats its one-line help"
    assert page.count("| `--groups GROUPS` |") == 1, "the shared options are described once, on the top level"
    assert page.count("It also takes `--groups`, `--lakehouse`, `--verbose`, as the top level does.") == len(
        [line for line in page.splitlines() if re.match(r"^## icegroup \S+$", line)]
    )


def test_the_shared_options_mean_the_same_before_and_after_the_command() -> None:
    cli = parser()
    assert cli.parse_args(["list", "--groups", "g.yaml", "--lakehouse", "l.yaml"]).groups == "g.yaml"
    assert cli.parse_args(["--groups", "g.yaml", "list"]).groups == "g.yaml"
    assert cli.parse_args(["--groups", "a.yaml", "list", "--groups", "b.yaml"]).groups == "b.yaml"
    plain = cli.parse_args(["list"])
    assert (plain.groups, plain.lakehouse, plain.verbose) == (None, None, False)
    assert cli.parse_args(["describe", "g", "--verbose"]).verbose
