"""``tw.flags`` (also ``tw.app.flags``): TF1's command-line flags, without absl.

A program defines flags at import time and reads them as attributes of ``FLAGS``::

    flags = tw.app.flags
    flags.DEFINE_float("learning_rate", 0.01, "step size")
    FLAGS = flags.FLAGS
    ...
    tw.app.run()            # parses sys.argv, then calls main(remaining_argv)
    FLAGS.learning_rate     # 0.01, or what --learning_rate=... said

The command line follows absl's rules, which TF1 uses: ``--name=value``, ``--name value``
(one dash works too), ``--flag``/``--noflag`` for booleans, comma-separated lists,
repeatable ``multi_string`` flags, ``--`` ends the flags. Tokens are matched by the standard
library's ``argparse`` (no abbreviations); values are converted and checked here, so a bad
value is an ``IllegalFlagValueError`` naming the flag and what it expects.

What this module owns: the flag registry (``FlagValues``, one global ``FLAGS``), the
``DEFINE_*`` functions, required flags, help text, and the flag errors (absl's names and
hierarchy: ``Error`` > ``UnrecognizedFlagError``, ``IllegalFlagValueError``,
``DuplicateFlagError``, ``UnparsedFlagAccessError``). It is pure Python and imports nothing
from the rest of tensorweave.

Departures from TF1 (each deliberate): reading a flag before any parse parses ``sys.argv``
as TF1's ``tf.flags`` wrapper does, but leaves unknown arguments alone instead of raising,
so notebooks and test runners (whose ``sys.argv`` is theirs) can read defaults.
"""

from __future__ import annotations

import argparse
import difflib
import sys

__all__ = [
    "FLAGS", "FlagValues", "Flag", "Error", "UnrecognizedFlagError", "IllegalFlagValueError",
    "DuplicateFlagError", "UnparsedFlagAccessError", "ValidationError",
    "DEFINE_string", "DEFINE_integer", "DEFINE_float", "DEFINE_boolean", "DEFINE_bool", "DEFINE_list",
    "DEFINE_enum", "DEFINE_multi_string", "DEFINE_multi_integer", "DEFINE_multi_float",
    "mark_flag_as_required", "mark_flags_as_required", "register_validator",
]


class Error(Exception):
    """Base class of the flag errors (absl's ``flags.Error``)."""


class UnrecognizedFlagError(Error):
    """A command-line flag that no ``DEFINE_*`` defined."""

    def __init__(self, flagname, flagvalue="", suggestions=()):
        self.flagname, self.flagvalue = flagname, flagvalue
        hint = f"; did you mean --{suggestions[0]}?" if suggestions else ""
        super().__init__(f"Unknown command line flag '{flagname}'{hint}")


class IllegalFlagValueError(Error):
    """A flag value that cannot be converted or fails a check (bounds, enum, required)."""


class ValidationError(IllegalFlagValueError):
    """A value rejected by a validator (``register_validator``, ``mark_flag_as_required``)."""


class DuplicateFlagError(Error):
    """The same flag name defined twice."""


class UnparsedFlagAccessError(Error):
    """A flag read before parsing where that is not allowed."""


# ---------------------------------------------------------------------------------------
# value parsers: str -> value, raising ValueError with what was expected
def _parse_bool(text):
    if isinstance(text, bool):
        return text
    low = str(text).strip().lower()
    if low in ("true", "t", "1", "yes", "y"):
        return True
    if low in ("false", "f", "0", "no", "n"):
        return False
    raise ValueError("expected a boolean (true/false, t/f, 1/0)")


def _number_parser(kind, lower, upper):
    def parse(text):
        if kind is int:
            if isinstance(text, bool):
                raise ValueError("expected an integer")
            if isinstance(text, int):
                v = text
            else:
                try:
                    v = int(str(text).strip(), 0)
                except ValueError:
                    raise ValueError("expected an integer") from None
        else:
            if isinstance(text, bool):
                raise ValueError("expected a float")
            try:
                v = float(text)
            except (TypeError, ValueError):
                raise ValueError("expected a float") from None
        if lower is not None and v < lower:
            raise ValueError(f"must be >= {lower}")
        if upper is not None and v > upper:
            raise ValueError(f"must be <= {upper}")
        return v
    return parse


def _parse_list(text):
    if isinstance(text, list | tuple):
        return [str(x) for x in text]
    text = str(text)
    return [s.strip() for s in text.split(",")] if text.strip() else []


class Flag:
    """One defined flag: ``name``, ``default``, ``help``, ``value`` and whether the command
    line set it (``present``)."""

    def __init__(self, name, default, help_string, flag_type, parser, multi=False, enum_values=None):
        self.name, self.help, self.flag_type = name, help_string or "", flag_type
        self.parser, self.multi, self.enum_values = parser, multi, enum_values
        self.present = 0
        self.default = None if default is None else self._convert(default, "default value")
        self.value = self._copy(self.default)
        self.validators = []

    def _copy(self, v):
        return list(v) if isinstance(v, list) else v

    def _convert(self, raw, what="value"):
        try:
            if self.multi:
                items = raw if isinstance(raw, list | tuple) else [raw]
                return [self.parser(x) for x in items]
            return self.parser(raw)
        except ValueError as e:
            raise IllegalFlagValueError(f"flag --{self.name}: invalid {what} {raw!r}: {e}") from None

    @property
    def boolean(self):
        return self.flag_type == "bool"

    def parse(self, raw):
        """Set the value from the command line (a multi flag appends)."""
        v = self._convert(raw)
        if self.multi:
            self.value = (self.value if self.present else []) + v
        else:
            self.value = v
        self.present += 1

    def unparse(self):
        self.value, self.present = self._copy(self.default), 0

    def __repr__(self):
        return f"<Flag --{self.name}={self.value!r} ({self.flag_type})>"


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message):
        raise IllegalFlagValueError(message)


class FlagValues:
    """A registry of flags whose values are read as attributes (``FLAGS.batch_size``).

    ``FLAGS(argv)`` parses ``argv`` (``argv[0]`` is the program) and returns
    ``[argv[0]] + the arguments that are not flags``; an undefined ``--flag`` raises
    ``UnrecognizedFlagError`` unless ``known_only=True``, which passes it on instead.
    """

    def __init__(self):
        object.__setattr__(self, "_flags", {})
        object.__setattr__(self, "_parsed", False)
        object.__setattr__(self, "_implicit_parse", False)

    # -- definition --------------------------------------------------------------------
    def _define(self, flag, module_globals=None):
        if not isinstance(flag.name, str) or not flag.name.isidentifier():
            raise Error(f"flag names must be Python identifiers, got {flag.name!r}")
        flag.module = (module_globals or {}).get("__name__")
        flag.module_globals = module_globals  # held, not its id: a freed dict's id is reused
        old = self._flags.get(flag.name)
        if old is not None:
            if old.module == flag.module and old.module_globals is not flag.module_globals:
                # absl's rule: the same module run again (reloaded, or a script executed
                # twice in one process) may define its flags again; the first stays.
                return old
            raise DuplicateFlagError(
                f"The flag '{flag.name}' is defined twice (first in module {old.module!r} with default "
                f"{old.default!r}, again in {flag.module!r})")
        self._flags[flag.name] = flag
        return flag

    # -- parsing -----------------------------------------------------------------------
    def __call__(self, argv, known_only=False):
        """Parse ``argv`` and return the non-flag arguments, ``argv[0]`` first."""
        if isinstance(argv, str) or not hasattr(argv, "__iter__"):
            raise TypeError(f"argv must be a list of strings (like sys.argv), got {argv!r}")
        argv = list(argv)
        if not argv:
            raise ValueError("argv must contain at least the program name (argv[0])")
        prog, args = argv[0], argv[1:]
        if any(a in ("--help", "-help", "-h", "--helpfull", "--helpshort", "-?") for a in self._flag_region(args)):
            print(self.help_text(prog))
            raise SystemExit(0)
        for f in self._flags.values():
            f.present = 0  # a multi flag given again on this command line starts over
        rest = self._parse_args(args, known_only)
        self._validate()
        object.__setattr__(self, "_parsed", True)
        return [prog] + rest

    @staticmethod
    def _flag_region(args):
        for a in args:
            if a == "--":
                return
            yield a

    def _normalize(self, args, known_only):
        """absl's spellings, made explicit for argparse: ``--flag``/``--noflag`` for
        booleans become ``--flag=true``/``--flag=false``, one dash becomes two, and a
        non-boolean flag without ``=`` takes the next argument as its value, whatever it
        looks like (``--lr -0.5``). An undefined flag raises, or with ``known_only`` is
        kept, in its place among the other arguments, as a placeholder."""
        out, passed, i = [], [], 0
        while i < len(args):
            a = args[i]
            if a == "--":
                out.extend(args[i:])
                break
            if not a.startswith("-") or a == "-" or _is_number(a):
                out.append(a)
                i += 1
                continue
            name, eq, value = a.lstrip("-").partition("=")
            flag = self._flags.get(name)
            if flag is None and name.startswith("no") and not eq:
                neg = self._flags.get(name[2:])
                if neg is not None and neg.boolean:
                    out.append(f"--{neg.name}=false")
                    i += 1
                    continue
            if flag is None:
                if not known_only:
                    raise UnrecognizedFlagError(name, value, self._suggest(name))
                out.append(f"{_PASSED}{len(passed)}")
                passed.append(a)
            elif eq:
                out.append(f"--{name}={value}")
            elif flag.boolean:
                out.append(f"--{name}=true")
            elif i + 1 < len(args):
                i += 1
                out.append(f"--{name}={args[i]}")
            else:
                raise IllegalFlagValueError(f"flag --{name} needs a value (--{name}=VALUE or --{name} VALUE)")
            i += 1
        return out, passed

    def _parse_args(self, args, known_only):
        normalized, passed = self._normalize(args, known_only)
        parser = _RaisingParser(add_help=False, allow_abbrev=False, prog="")
        for f in self._flags.values():
            parser.add_argument(f"--{f.name}", dest=f.name, action="append", metavar="VALUE",
                                default=argparse.SUPPRESS)
        parser.add_argument("_positional", nargs="*")
        ns, extra = parser.parse_known_intermixed_args(normalized)
        for f in self._flags.values():
            for raw in vars(ns).get(f.name, ()):
                f.parse(raw)
        rest = list(getattr(ns, "_positional", [])) + list(extra)
        return [passed[int(a[len(_PASSED):])] if a.startswith(_PASSED) else a for a in rest]

    def _validate(self):
        for f in self._flags.values():
            for check, message in f.validators:
                if not check(f.value):
                    raise ValidationError(f"flag --{f.name}={f.value!r}: {message}")

    def _suggest(self, name):
        return difflib.get_close_matches(name, list(self._flags), n=1)

    def is_parsed(self):
        return self._parsed

    def mark_as_parsed(self):
        """Treat the flags as parsed (their defaults, or values set in code)."""
        object.__setattr__(self, "_parsed", True)

    def unparse_flags(self):
        """Back to the defaults, as if never parsed."""
        for f in self._flags.values():
            f.unparse()
        object.__setattr__(self, "_parsed", False)

    # -- access ------------------------------------------------------------------------
    def __getattr__(self, name):
        flags = self.__dict__["_flags"]
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in flags:
            raise AttributeError(
                f"flag '{name}' is not defined (define it with tw.flags.DEFINE_string/integer/float/"
                f"boolean/list/enum('{name}', default, help) before reading it)")
        if not self.__dict__["_parsed"]:
            # TF1's tf.flags reads sys.argv on first access; unknown arguments are left to
            # the program (see the module docstring).
            self(sys.argv if sys.argv and sys.argv[0] is not None else ["program"], known_only=True)
        return flags[name].value

    def __setattr__(self, name, value):
        flag = self._flags.get(name)
        if flag is None:
            raise AttributeError(f"cannot set flag '{name}': it is not defined")
        flag.value = flag._convert(value) if value is not None else None

    def __delattr__(self, name):
        if name not in self._flags:
            raise AttributeError(name)
        del self._flags[name]

    def __contains__(self, name):
        return name in self._flags

    def __getitem__(self, name):
        try:
            return self._flags[name]
        except KeyError:
            raise KeyError(f"flag '{name}' is not defined") from None

    def __iter__(self):
        return iter(self._flags)

    def __len__(self):
        return len(self._flags)

    def __dir__(self):
        return sorted(self._flags)

    def get_flag_value(self, name, default):
        return self._flags[name].value if name in self._flags else default

    def flag_values_dict(self):
        """``{name: value}`` for every flag."""
        return {n: f.value for n, f in self._flags.items()}

    def help_text(self, prog="program"):
        lines = [f"usage: {prog} [flags] [args]", "", "flags:"]
        for f in sorted(self._flags.values(), key=lambda f: f.name):
            extra = f"; one of {f.enum_values}" if f.enum_values else ""
            kind = "repeat this option" if f.multi else f.flag_type
            lines.append(f"  --{f.name}: {f.help}")
            lines.append(f"    (default: {f.default!r}; {kind}{extra})")
        return "\n".join(lines)

    def __repr__(self):
        return f"<FlagValues {len(self._flags)} flags, parsed={self._parsed}>"


def _is_number(s):
    try:
        float(s)
    except ValueError:
        return False
    return True


FLAGS = FlagValues()

# Stands for an unknown flag passed through (known_only) while argparse orders the rest.
_PASSED = "\x00passed:"


# ---------------------------------------------------------------------------------------
# DEFINE_*: TF1/absl signatures (name, default, help, ...), keyword flag_values for tests
def _def(flag_values, *args, **kw):
    caller = sys._getframe(2).f_globals  # the module calling DEFINE_*
    return (flag_values if flag_values is not None else FLAGS)._define(Flag(*args, **kw), caller)


def DEFINE_string(name, default, help, flag_values=None, **_):  # noqa: N802,A002 - TF names
    """A string flag."""
    return _def(flag_values, name, default, help, "string", str)


def DEFINE_integer(name, default, help, lower_bound=None, upper_bound=None, flag_values=None, **_):  # noqa: N802,A002
    """An integer flag, optionally bounded (inclusive)."""
    return _def(flag_values, name, default, help, "int", _number_parser(int, lower_bound, upper_bound))


def DEFINE_float(name, default, help, lower_bound=None, upper_bound=None, flag_values=None, **_):  # noqa: N802,A002
    """A float flag, optionally bounded (inclusive)."""
    return _def(flag_values, name, default, help, "float", _number_parser(float, lower_bound, upper_bound))


def DEFINE_boolean(name, default, help, flag_values=None, **_):  # noqa: N802,A002
    """A boolean flag: ``--name``, ``--noname`` or ``--name=true|false``."""
    return _def(flag_values, name, default, help, "bool", _parse_bool)


DEFINE_bool = DEFINE_boolean


def DEFINE_list(name, default, help, flag_values=None, **_):  # noqa: N802,A002
    """A comma-separated list of strings (``--layers=64,32``); the default may be a list or
    a comma-separated string."""
    return _def(flag_values, name, default, help, "list", _parse_list)


def DEFINE_enum(name, default, enum_values, help, flag_values=None, **_):  # noqa: N802,A002
    """A string flag whose value must be one of ``enum_values``."""
    values = list(enum_values)
    if not values:
        raise ValueError(f"DEFINE_enum('{name}'): enum_values must not be empty")

    def parse(text):
        if text not in values:
            raise ValueError(f"expected one of {values}")
        return text
    return _def(flag_values, name, default, help, "enum", parse, enum_values=values)


def DEFINE_multi_string(name, default, help, flag_values=None, **_):  # noqa: N802,A002
    """A string flag that may be repeated; its value is the list of all occurrences."""
    return _def(flag_values, name, default, help, "string", str, multi=True)


def DEFINE_multi_integer(name, default, help, lower_bound=None, upper_bound=None, flag_values=None, **_):  # noqa: N802,A002
    return _def(flag_values, name, default, help, "int", _number_parser(int, lower_bound, upper_bound), multi=True)


def DEFINE_multi_float(name, default, help, lower_bound=None, upper_bound=None, flag_values=None, **_):  # noqa: N802,A002
    return _def(flag_values, name, default, help, "float", _number_parser(float, lower_bound, upper_bound),
                multi=True)


def register_validator(flag_name, checker, message="Flag validation failed", flag_values=None):
    """Check ``checker(value)`` after each parse; False raises ``ValidationError``."""
    fv = flag_values if flag_values is not None else FLAGS
    fv[flag_name].validators.append((checker, message))


def mark_flag_as_required(flag_name, flag_values=None):
    """Parsing fails unless the flag has a value other than None (give it default None)."""
    register_validator(flag_name, lambda v: v is not None,
                       "flag is required: it must have a value other than None", flag_values)


def mark_flags_as_required(flag_names, flag_values=None):
    for name in flag_names:
        mark_flag_as_required(name, flag_values)
