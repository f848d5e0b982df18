"""Command-line flags derived from a typed config's fields, so that each is declared once.

A field declared with :func:`distrain.train.config.setting` becomes ``--field-name`` (or its
declared ``name``) with the field's type, default, choices and help text; a ``bool`` field
becomes ``--name`` / ``--no-name``.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing


def flag_name(f: dataclasses.Field) -> str:
    """The flag of a config field: its declared name, else ``--`` and the name with dashes."""
    return f.metadata.get("flag", {}).get("name") or "--" + f.name.replace("_", "-")


def field_types(cls) -> dict:
    """A dataclass's field types, resolved (its annotations may be strings)."""
    return typing.get_type_hints(cls)


def add_flags(
    parser: argparse.ArgumentParser,
    fields: typing.Iterable[dataclasses.Field],
    types: dict,
    *,
    defaults: dict | None = None,
    notes: dict | None = None,
) -> None:
    """Adds one flag per field, its destination the field's name.

    Args:
        parser: The (sub)command's parser.
        fields: The config's fields to offer (``dataclasses.fields(cls)`` or some of them).
        types: The config's field types (:func:`field_types`).
        defaults: Flags whose default is not the field's: field name -> the flag's default,
            and how the help names it (``(value, text)``). A default of ``None`` means "not
            given"; the caller then leaves the setting to someone else's default.
        notes: Field name -> text added to the flag's help.
    """
    defaults = defaults or {}
    notes = notes or {}
    for f in fields:
        meta = dict(f.metadata.get("flag", {}))
        meta.pop("name", None)
        kind = types[f.name]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if kind not in (bool, int, float, str):
            default = str(default)  # parsed by the config (a run spec)
        shown = "off" if default is False else "on" if default is True else default
        if f.name in defaults:
            default, shown = defaults[f.name]
        kwargs = {"dest": f.name, "default": None if required else default}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = kind if kind in (int, float) else str
        choices = f.metadata.get("choices")
        if isinstance(choices, tuple):
            kwargs["choices"] = choices
        help_text = f.metadata.get("help", "").replace("%", "%%")
        if f.name in notes:
            help_text += f"; {notes[f.name]}"
        if not required and shown not in ("", None):
            help_text += f" (default: {str(shown).replace('%', '%%')})"
        parser.add_argument(flag_name(f), required=required, help=help_text, **{**kwargs, **meta})


def given(args: argparse.Namespace, fields: typing.Iterable[dataclasses.Field]) -> dict:
    """The fields' values on the command line, leaving out flags not given (``None``)."""
    values = {f.name: getattr(args, f.name) for f in fields}
    return {name: value for name, value in values.items() if value is not None}
