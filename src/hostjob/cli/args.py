"""Command-line parsing with runc's (Go ``flag``/urfave-cli) conventions.

Why not argparse: it costs ~5 ms of imports on every runtime command, and runc's
clients rely on Go's flag syntax, which argparse does not speak: long flags with
one or two dashes (``-bundle`` = ``--bundle``), ``--flag=value``, boolean flags
that accept ``=true``/``=false``, and, for commands that take a trailing command
line (``exec ID CMD...``), option parsing that stops at the first positional.

A command is described declaratively (``Command`` with ``Option`` entries and
positional names) and parsed into an ``Args`` object; ``usage()`` renders help.
"""

from __future__ import annotations

from hostjob.errors import InvalidArgument

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FLAG = "flag"  # boolean: present -> True, or --flag=true|false
VALUE = "value"  # one string value
INT = "int"  # one integer value
LIST = "list"  # repeatable string value


class Option:
    __slots__ = ("default", "dest", "help", "kind", "metavar", "names")

    def __init__(
        self,
        names: str,
        kind: str = FLAG,
        help: str = "",
        default: Any = None,
        dest: str | None = None,
        metavar: str = "value",
    ) -> None:
        # names: "bundle,b" -> accepted as --bundle, -bundle, -b, --b
        self.names = tuple(names.split(","))
        self.kind = kind
        self.help = help
        self.metavar = metavar
        if default is None:
            default = False if kind == FLAG else [] if kind == LIST else None
        self.default = default
        self.dest = dest or self.names[0].replace("-", "_")


class Command:
    """A command's interface: options, required positionals, and an optional rest."""

    __slots__ = ("allow_unknown", "help", "name", "optional", "options", "positionals", "rest")

    def __init__(
        self,
        name: str,
        help: str,
        options: tuple[Option, ...] = (),
        positionals: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
        rest: str | None = None,
        allow_unknown: bool = False,
    ) -> None:
        self.name = name
        self.help = help
        self.options = options
        self.positionals = positionals  # required, in order
        self.optional = optional  # optional, after the required ones
        self.rest = rest  # name of a trailing list (everything after the positionals)
        self.allow_unknown = allow_unknown


class Args:
    """Parsed arguments: one attribute per option ``dest`` and positional name."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # only called for missing attributes
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"Args({self.__dict__!r})"


_TRUE = ("1", "t", "true", "T", "TRUE", "True")
_FALSE = ("0", "f", "false", "F", "FALSE", "False")


def _parse_bool(text: str, flag: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgument(f'invalid boolean value "{text}" for -{flag}')


class HelpRequested(Exception):
    """``--help``/``-h`` was given; the caller prints usage and exits 0."""


def parse(command: Command, argv: list[str], *, stop_at_positional: bool = False) -> Args:
    """Parse ``argv`` (the words after the command name) for ``command``."""
    by_name: dict[str, Option] = {}
    for opt in command.options:
        for name in opt.names:
            by_name[name] = opt
    values: dict[str, Any] = {opt.dest: _copy(opt.default) for opt in command.options}
    positional: list[str] = []
    stop = stop_at_positional or command.rest is not None
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            positional.extend(argv[i:])
            break
        if len(word) < 2 or word[0] != "-" or word[1:].isdigit():
            # plain word, or a negative number such as "-9"
            positional.append(word)
            if stop and len(positional) >= len(command.positionals):
                positional.extend(argv[i:])
                break
            continue
        name, has_value, inline = word.lstrip("-").partition("=")
        if name in ("help", "h") and "help" not in by_name:
            raise HelpRequested
        found = by_name.get(name)
        if found is None:
            if command.allow_unknown:
                continue
            raise InvalidArgument(f"flag provided but not defined: -{name}")
        opt = found
        if opt.kind == FLAG:
            values[opt.dest] = _parse_bool(inline, name) if has_value else True
            continue
        if has_value:
            text = inline
        elif i < len(argv):
            text = argv[i]
            i += 1
        else:
            raise InvalidArgument(f"flag needs an argument: -{name}")
        if opt.kind == INT:
            try:
                values[opt.dest] = int(text, 10)
            except ValueError as err:
                raise InvalidArgument(f'invalid value "{text}" for flag -{name}') from err
        elif opt.kind == LIST:
            values[opt.dest].append(text)
        else:
            values[opt.dest] = text
    return _assign_positionals(command, positional, values)


def _assign_positionals(command: Command, words: list[str], values: dict[str, Any]) -> Args:
    need = len(command.positionals)
    if len(words) < need:
        missing = " ".join(f"<{p}>" for p in command.positionals[len(words) :])
        raise InvalidArgument(f'"{command.name}" requires {missing}')
    for name, word in zip(command.positionals, words, strict=False):
        values[name] = word
    extra = words[need:]
    for name in command.optional:
        values[name] = extra.pop(0) if extra else None
    if command.rest is not None:
        values[command.rest] = extra
    elif extra:
        raise InvalidArgument(f'"{command.name}" got unexpected argument(s): {" ".join(extra)}')
    return Args(values)


def _copy(value: Any) -> Any:
    return list(value) if type(value) is list else value


def usage(prog: str, command: Command) -> str:
    words = [prog, command.name]
    if command.options:
        words.append("[options]")
    words += [f"<{p}>" for p in command.positionals]
    words += [f"[{p}]" for p in command.optional]
    if command.rest:
        words.append(f"[{command.rest}...]")
    lines = [f"usage: {' '.join(words)}", "", command.help]
    if command.options:
        lines += ["", "options:"]
        for opt in command.options:
            forms = ", ".join(("--" if len(n) > 1 else "-") + n for n in opt.names)
            if opt.kind != FLAG:
                forms += f" {opt.metavar}"
            lines.append(f"  {forms:<32} {opt.help}")
    return "\n".join(lines)
