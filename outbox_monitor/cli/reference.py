"""The references generated from the code, never written by hand: ``docs/reference/`` —
the configuration (the ``Settings`` model), the CLI (the click commands), alerts.yml, the
controls file and the fleet file (their models, ``cli.file_reference``) — the files'
JSON Schemas shipped in ``outbox_monitor/schemas/``, named on the shipped YAML files' first
line, and the docs' "When paged" page from the shipped rules' runbooks (``cli.when_paged``).

Run in a checkout: ``make reference`` (``python -m outbox_monitor.cli.reference``);
``--check`` changes nothing and exits 1 naming what is stale. The output depends on the code
only: no time, no environment, a stable order (``tests/unit/test_reference.py`` compares it
with the files).
"""

import inspect
import sys
import typing
from pathlib import Path
from typing import Any

import click
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from outbox_monitor.alerts.rules_file import RULES_ENV
from outbox_monitor.alerts.slack import API_URL_ENV, BOT_TOKEN_ENV, WEBHOOK_URL_ENV
from outbox_monitor.cli import main as root_command
from outbox_monitor.cli.file_reference import (
    FILES,
    MODELINE,
    SHIPPED_FILES,
    file_page,
    modeline,
    schema_text,
)
from outbox_monitor.cli.markdown import code, paragraph, paragraphs, table
from outbox_monitor.cli.when_paged import PAGE as WHEN_PAGED_PAGE
from outbox_monitor.cli.when_paged import SCHEDULER_PAGE, scheduler_page, when_paged_page
from outbox_monitor.config.fleet import FLEET_ENV
from outbox_monitor.config.settings import ENV_PREFIX, Settings
from outbox_monitor.config.values import CommaList, OptionalSeconds, Seconds, Share
from outbox_monitor.durations import duration_label
from outbox_monitor.logs import LEVEL_ENV
from outbox_monitor.shipped import CHECKOUT_FOLDER

REFERENCE_FOLDER = Path("docs") / "reference"
"""The pages' folder in a checkout."""
_UNSET = getattr(click.core, "UNSET", None)
"""click's "no default" (since click 8.3; ``None`` before)."""
NOTE = "<!-- Generated from the code by `make reference`; do not edit. -->"
OTHER_VARIABLES = (
    (
        RULES_ENV,
        "`./alerts.yml`, else the shipped one",
        "The alert rules ([alerts.yml](alerts-file.md)); when set, the file must exist.",
    ),
    (
        FLEET_ENV,
        "unset: the settings' one outbox",
        "A [fleet file](fleet-file.md) listing the outboxes to watch.",
    ),
    (
        LEVEL_ENV,
        "",  # the type and default of the CLI's --log-level, which reads it
        "The log level of the CLI, the services and the dashboard (the CLI's `--log-level`).",
    ),
    (
        WEBHOOK_URL_ENV,
        "–",
        "The incoming webhook of routes that name neither `webhook_url_env` nor `channel`.",
    ),
    (BOT_TOKEN_ENV, "–", "The bot token of routes with a `channel`."),
    (API_URL_ENV, "Slack's", "Slack's Web API base URL (a proxy, or the demo's local Slack)."),
)
"""Variables read outside ``Settings``: (name, default, meaning in Markdown); one that an
option of the ``outbox-monitor`` group reads (``--log-level``) takes that option's type and
default."""
VALUE_TYPES = (
    (Seconds, "duration"),
    (OptionalSeconds, "duration, or `off`"),
    (CommaList, "comma-separated list (or a JSON array)"),
    (Share, "share: `50%` or `0.5`"),
)
"""What the value types of ``config.values`` take, as the configuration page says it."""


# ----------------------------------------------------------------------- configuration


def _value_type(field: FieldInfo) -> str | None:
    for alias, words in VALUE_TYPES:
        if all(any(part is held for held in field.metadata) for part in typing.get_args(alias)[1:]):
            return words
    return None


def _setting_type(field: FieldInfo) -> str:
    """What one setting takes: its value type, its choices, or its Python type in words,
    with its bounds."""
    words = _value_type(field)
    annotation = field.annotation
    if words is None:
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        kind = options[0] if options else annotation
        if typing.get_origin(annotation) is typing.Literal:
            words = "one of " + ", ".join(code(value) for value in typing.get_args(annotation))
        else:
            names = {bool: "`true` or `false`", int: "whole number", str: "text"}
            words = names.get(kind, "secret text")  # pydantic's SecretStr
    bounds = [
        f"{symbol} {_setting_value(getattr(part, attribute), field, grouped=True)}"
        for part in field.metadata
        for attribute, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"))
        if getattr(part, attribute, None) is not None
    ]
    return ", ".join([words, *bounds])


def _setting_value(value: Any, field: FieldInfo, *, grouped: bool = False) -> str:
    if _value_type(field) in ("duration", "duration, or `off`"):
        label = duration_label(value)
        return label if "e" not in label else f"{value:,.0f}s"  # not 2.14748e+06s
    return f"{value:,}" if grouped and isinstance(value, int) else str(value)


def _setting_default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, tuple):
        return code(",".join(value)) if value else "empty"
    return code(_setting_value(value, field))


def _variable(name: str, field: FieldInfo) -> str:
    variable = code(ENV_PREFIX + name.upper())
    aliases = getattr(field.validation_alias, "choices", [])
    others = [alias for alias in aliases if alias.isupper() and not alias.startswith(ENV_PREFIX)]
    return variable + "".join(f", else {code(other)}" for other in others)


def configuration_page(settings: type[BaseSettings] = Settings) -> str:
    """docs/reference/configuration.md: every ``OUTBOX_MONITOR_*`` setting (name, type,
    default, meaning from the field's docstring) and the variables read elsewhere."""
    rows = [
        [
            _variable(name, field),
            _setting_type(field),
            _setting_default(field),
            paragraph(field.description or ""),
        ]
        for name, field in settings.model_fields.items()
    ]
    context = click.Context(root_command)
    options = {param.envvar: param for param in root_command.params if param.envvar}
    others = [
        [code(name), "text", default, text]
        if name not in options
        else [
            code(name),
            _param_type(options[name], context),
            _param_default(options[name], context),
            text,
        ]
        for name, default, text in OTHER_VARIABLES
    ]
    return "\n".join(
        [
            "# Configuration",
            "",
            NOTE,
            "",
            "Every setting comes from the environment and is validated at start: an invalid "
            "one stops every command and service with exit 2, naming the variable (or the "
            "option, when given on the command line). Durations are seconds (`45`, `2.5`) or "
            "a number and a unit: `90s`, `15m`, `1h`, `30d`, `2w`.",
            "",
            *table(["variable", "takes", "default", "meaning"], rows),
            "",
            "## Read elsewhere",
            "",
            "Not settings of one outbox, but read by the process too.",
            "",
            *table(["variable", "takes", "default", "meaning"], others),
            "",
        ]
    )


# ------------------------------------------------------------------------------ the CLI


def _commands(
    command: click.Command, context: click.Context
) -> list[tuple[click.Command, click.Context]]:
    """The command and every command below it (a group's in name order), each with its
    context (lazy subcommands loaded)."""
    found = [(command, context)]
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                found += _commands(sub, click.Context(sub, info_name=name, parent=context))
    return found


def _help(command: click.Command) -> str:
    return inspect.cleandoc((command.help or "").split("\f", 1)[0])


def _param_type(param: click.Parameter, context: click.Context) -> str:
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        words = "flag"
    elif isinstance(kind, click.Choice):
        words = "one of " + ", ".join(code(choice) for choice in kind.choices)
    elif isinstance(kind, click.IntRange | click.FloatRange):
        low = f"{kind.min:g} {'<' if kind.min_open else '≤'} " if kind.min is not None else ""
        high = f" {'<' if kind.max_open else '≤'} {kind.max:g}" if kind.max is not None else ""
        words = f"{kind.name.removesuffix(' range')}, {low}x{high}"
    else:
        words = kind.name
    return words + (", repeatable" if getattr(param, "multiple", False) else "")


def _param_default(param: click.Parameter, context: click.Context) -> str:
    if isinstance(param, click.Option) and isinstance(param.show_default, str):
        return paragraph(param.show_default)
    value = param.get_default(context, call=False)
    if callable(value) or value in (None, (), _UNSET):
        return "–"
    if isinstance(param, click.Option) and param.is_flag and not param.secondary_opts:
        return "off" if not value else "on"
    if isinstance(value, bool) and isinstance(param, click.Option):
        return code(param.opts[0] if value else param.secondary_opts[0])
    return code(value)


def _option_row(param: click.Option, context: click.Context) -> list[str]:
    names = ", ".join(code(name) for name in [*param.opts, *param.secondary_opts])
    envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or [])
    return [
        names,
        _param_type(param, context),
        "**required**" if param.required else _param_default(param, context),
        code(envvar) if envvar else "–",
        paragraph(param.help or ""),
    ]


def cli_page(command: click.Command = root_command, name: str = "outbox-monitor") -> str:
    """docs/reference/cli.md: every command and subcommand (its usage, help, arguments and
    options with their types, defaults, environment variables and help), walked through
    click's objects."""
    commands = _commands(command, click.Context(command, info_name=name))
    lines = [
        "# CLI",
        "",
        NOTE,
        "",
        "Every command takes `-h`/`--help`. Commands:",
        "",
        *(
            f"- {code(context.command_path)}: {paragraph(sub.get_short_help_str(limit=1000))}"
            for sub, context in commands[1:]
        ),
        "",
    ]
    for sub, context in commands:
        usage = " ".join([context.command_path, *sub.collect_usage_pieces(context)])
        lines += [f"## {context.command_path}", "", "```", usage, "```", ""]
        lines += [line for text in paragraphs(_help(sub)) for line in (text, "")]
        arguments = [p for p in sub.params if isinstance(p, click.Argument)]
        if arguments:
            rows = [
                [
                    code(argument.human_readable_name),
                    _param_type(argument, context)
                    + (", any number" if argument.nargs == -1 else ""),
                    "**required**" if argument.required else "optional",
                ]
                for argument in arguments
            ]
            lines += [*table(["argument", "takes", ""], rows), ""]
        options = [
            p
            for p in sub.params
            if isinstance(p, click.Option) and not p.hidden and p.name != "help"
        ]
        if options:
            header = ["option", "takes", "default", "environment", "meaning"]
            lines += [*table(header, [_option_row(o, context) for o in options]), ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the output


def generated() -> dict[Path, str]:
    """Everything generated, by path relative to the checkout's root: the pages and the
    schemas."""
    pages = {
        "configuration.md": configuration_page(),
        "cli.md": cli_page(),
        **{kind.page_name: file_page(kind) for kind in FILES},
    }
    output = {REFERENCE_FOLDER / name: text for name, text in pages.items()}
    for kind in FILES:
        output[kind.schema_path.relative_to(CHECKOUT_FOLDER)] = schema_text(kind)
    return output


def with_modeline(text: str, line: str) -> str:
    """A YAML file's ``text`` whose first line is ``line``: it replaces a first line that
    names a schema, or goes before the rest."""
    rest = text.split("\n", 1)[1] if text.startswith(MODELINE) else text
    return f"{line}\n{rest}"


def shipped_files(root: Path) -> dict[Path, str]:
    """The shipped YAML files as they should be under ``root``: each with the line naming
    its schema first (``file_reference.modeline``)."""
    kinds = {kind.name: kind for kind in FILES}
    output = {}
    for name, path in SHIPPED_FILES.items():
        relative = path.relative_to(CHECKOUT_FOLDER)
        line = modeline(path, kinds[name])
        output[relative] = with_modeline((root / relative).read_text(), line)
    return output


def wanted(root: Path) -> dict[Path, str]:
    """What the files under ``root`` (a checkout) should hold, by path relative to it:
    ``generated``, ``shipped_files``, the docs' "When paged" page from the checkout's
    alerts.yml and "When the scheduler pages" from the scheduler's own alerts
    (``cli.when_paged``)."""
    rules = root / SHIPPED_FILES["alerts"].relative_to(CHECKOUT_FOLDER)
    return {
        **generated(),
        **shipped_files(root),
        WHEN_PAGED_PAGE: when_paged_page(rules),
        SCHEDULER_PAGE: scheduler_page(),
    }


def stale(root: Path = CHECKOUT_FOLDER, files: dict[Path, str] | None = None) -> list[Path]:
    """What under ``root`` differs from ``files`` (default: ``wanted(root)``): a page or
    schema missing or different, a shipped YAML file whose first line does not name its
    schema, a file in ``docs/reference/`` the generator does not write; sorted."""
    files = wanted(root) if files is None else files
    found = [path for path, text in files.items() if _read(root / path) != text]
    extra = {
        path.relative_to(root)
        for path in (root / REFERENCE_FOLDER).glob("*")
        if path.relative_to(root) not in files
    }
    return sorted([*found, *extra])


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def write(root: Path = CHECKOUT_FOLDER) -> list[Path]:
    """Write what is stale under ``root`` (``stale``), removing files of ``docs/reference/``
    the generator does not write.

    Returns:
        The paths written or removed, relative to ``root``.
    """
    files = wanted(root)
    changed = stale(root, files)
    for relative in changed:
        target = root / relative
        if relative in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[relative])
        else:
            target.unlink()
    return changed


@click.command()
@click.option("--check", is_flag=True, help="Change nothing; exit 1 naming what is stale.")
@click.option(
    "--root",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=CHECKOUT_FOLDER,
    help="The checkout to write into (default: this one).",
)
def regenerate(check: bool, root: Path) -> None:
    """Write docs/reference/, outbox_monitor/schemas/, the shipped YAML files' first line
    and docs/when-paged.md from the code and the shipped rules, in a checkout; with --check,
    say what is stale (exit 1) instead."""
    if not (root / "pyproject.toml").is_file():
        raise click.UsageError(f"{root} is no checkout of outbox-monitor (no pyproject.toml)")
    changed = stale(root) if check else write(root)
    for path in changed:
        state = "stale" if check else "written" if (root / path).exists() else "removed"
        click.echo(f"{state}: {path}")
    if check and changed:
        click.echo("run `make reference`", err=True)
        sys.exit(1)


if __name__ == "__main__":
    regenerate()
