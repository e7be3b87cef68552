"""Command-line options made from an estimator's constructor and its docstring.

Each keyword of ``Estimator.__init__`` (scikit-learn's ``get_params`` names)
becomes ``--name-with-dashes``: its type comes from the default value, its
choices from a ``{"a", "b"}`` type spec in the numpydoc ``Parameters`` section,
its help from the first sentence of that section's description.  So a new
hyper-parameter reaches ``consensuskit fit`` without touching the CLI.

Options are left unset unless given (``argparse.SUPPRESS``), so the estimator's
own default applies; the help shows that default.
"""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import dataclass

__all__ = ["ParameterDoc", "parameter_docs", "add_estimator_options", "parse_value",
           "EXCLUDED"]

#: Parameters the CLI sets itself (seed, progress) or that cannot come from a command line.
EXCLUDED = frozenset({"random_state", "verbose", "progress", "callback"})


@dataclass
class ParameterDoc:
    """One entry of a numpydoc ``Parameters`` section."""

    spec: str  # the text after ``name :``
    summary: str  # first sentence of the description ("" if none)
    choices: tuple | None  # from a ``{...}`` spec


_ENTRY = re.compile(r"^(?P<names>[A-Za-z_][\w, ]*?)\s*:\s*(?P<spec>.*)$")


def parameter_docs(cls) -> dict[str, ParameterDoc]:
    """Name -> :class:`ParameterDoc` from the ``Parameters`` sections of ``cls`` and its bases.

    A subclass's entry wins; a parameter it inherits without documenting again
    (GBCE's ``n_init``, from BCE) keeps the base class's description.
    """
    docs = {}
    for klass in reversed(cls.__mro__):
        docs.update(_own_parameter_docs(klass))
    return docs


def _own_parameter_docs(cls) -> dict[str, ParameterDoc]:
    lines = inspect.cleandoc(cls.__dict__.get("__doc__") or "").splitlines()
    try:
        start = next(i for i in range(len(lines) - 1)
                     if lines[i].strip() == "Parameters" and set(lines[i + 1].strip()) == {"-"})
    except StopIteration:
        return {}
    docs, current, body = {}, None, []

    def flush():
        if current is None:
            return
        names, spec = current
        text = re.sub(r":\w+:`~?([^`]*)`", r"\1", " ".join(body).strip()).replace("``", "")
        summary = re.split(r"(?<=\.)\s+(?=[A-Z(])", text, maxsplit=1)[0] if text else ""
        braces = re.match(r"\s*\{([^}]*)\}", spec)
        choices = None
        if braces:
            choices = tuple(c.strip().strip("\"'") for c in braces.group(1).split(","))
        if not summary:  # the spec alone, without the default that the help adds anyway
            summary = re.split(r",?\s*default\b", spec)[0].strip()
        if len(names) > 1 and summary:
            summary = f"[{', '.join(names)}] {summary}"
        for name in names:
            docs[name] = ParameterDoc(spec=spec, summary=summary, choices=choices)

    for line in lines[start + 2:]:
        if line.strip() and not line.startswith(" "):
            if set(line.strip()) == {"-"}:  # the next section's underline
                body = body[:-1]
                break
            flush()
            match = _ENTRY.match(line)
            current = None
            if match:
                names = [n.strip() for n in match.group("names").split(",")]
                current, body = (names, match.group("spec")), []
        elif current is not None:
            body.append(line.strip())
    flush()
    return docs


def parse_value(text: str):
    """A value for a parameter whose default gives no type: None, bool, int, float, list or str."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if "," in text:
        return [parse_value(part) for part in text.split(",")]
    return text


def add_estimator_options(parser, cls, *, taken=()) -> dict[str, str]:
    """Add an option per hyper-parameter of ``cls`` to ``parser`` (an argparse group).

    ``taken`` holds option names the command already uses; a parameter whose
    option would clash gets the prefix ``--param-``.  Returns parameter name ->
    argparse ``dest``.
    """
    docs = parameter_docs(cls)
    dests = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or name in EXCLUDED or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = p.default
        doc = docs.get(name, ParameterDoc("", "", None))
        flag = "--" + name.replace("_", "-")
        if flag in taken:
            flag = "--param-" + name.replace("_", "-")
        dest = "param__" + name
        help_text = doc.summary or doc.spec or name
        kwargs = {"dest": dest, "default": argparse.SUPPRESS}
        if default is inspect.Parameter.empty:
            kwargs.update(required=True, type=parse_value, metavar="VALUE")
        elif isinstance(default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(default, int):
            kwargs.update(type=int, metavar="INT")
        elif isinstance(default, float):
            kwargs.update(type=float, metavar="FLOAT")
        elif isinstance(default, str):
            kwargs["type"] = str
            if doc.choices and default in doc.choices:
                kwargs["choices"] = doc.choices
            else:
                kwargs["metavar"] = "TEXT"
        else:
            kwargs.update(type=parse_value, metavar="VALUE")
        if default is not inspect.Parameter.empty:
            help_text += f" (default: {default!r})"
        kwargs["help"] = help_text.replace("%", "%%")
        parser.add_argument(flag, **kwargs)
        dests[name] = dest
    return dests
