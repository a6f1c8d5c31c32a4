"""The docstring contract of the public API, the source of the API reference.

For every public function and class of ``kernelkit``'s packages (their ``__all__``) and
every public method a ``kernelkit`` class defines (an inherited method is checked once,
at the class that defines it), the numpydoc docstring

- has well-formed section headers (a known name, underlined by dashes of its length):
  a misspelt or badly underlined header renders as plain text;
- documents every parameter of the signature, and no parameter the signature lacks;
- states the shape of every array parameter and of every array it returns;
- has a Returns (or Yields) section when the callable returns something;
- cross-references (``:func:`name```, ``[name][]``) only names that exist.

The sections are parsed here with a few regular expressions (no docs dependency). No
numerics: every check reads docstrings and signatures, so nothing has a tolerance.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
import textwrap

import pytest

# the public API includes kernelkit.attention, which needs torch (the torch extra)
pytest.importorskip("torch", reason="torch not installed (the torch extra)")

PACKAGES = (
    "kernelkit",
    "kernelkit.features",
    "kernelkit.kernels",
    "kernelkit.attention",
    "kernelkit.estimators",
    "kernelkit.distributions",
    "kernelkit.optim",
    "kernelkit.datasets",
)
#: numpydoc's section names, spelt and capitalized as numpydoc writes them
SECTIONS = frozenset(
    "Parameters, Other Parameters, Returns, Yields, Receives, Raises, Warns, Warnings, "
    "See Also, Notes, References, Examples, Attributes, Methods".split(", ")
)
#: justified exceptions: (qualified name, problem) -> reason
ALLOWED: dict[tuple[str, str], str] = {
    ("kernelkit.attention.LinearAttentionState", "'_owner' is not documented"): (
        "a private dataclass field (the in-place step bookkeeping), set only by the library"
    ),
    ("kernelkit.attention.LinearAttentionState", "'_steps' is not documented"): (
        "a private dataclass field (the in-place step bookkeeping), set only by the library"
    ),
    ("kernelkit.attention.LinearAttentionState", "'_module' is not documented"): (
        "a private dataclass field (the token of the module that made the state), set only "
        "by the library"
    ),
}

_DASHES = re.compile(r"^\s*-{3,}\s*$")
_ITEM = re.compile(r"^(?P<names>\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::\s*(?P<type>.*))?$")
#: a shape: a tuple such as (n, d), (d,), (..., L, d); or "same shape as ..."
_INNER = r"(?:[^()]|\([^()]*\))*"  # one level of nested parentheses: (p (p - 1) / 2,)
_SHAPE = re.compile(
    rf"\({_INNER},{_INNER}\)|\bsame shape\b|\bshape (?:of|as)\b|shaped like|any shape"
)
_ARRAY = re.compile(r"\b(array|ndarray|array_like|array-like|tensor|Tensor|matrix)\b")
_ROLE = re.compile(r":(class|func|meth|attr|mod|data|obj|exc):`~?\.?([\w.]+)`")
_AUTOREF = re.compile(r"\[`?([^\]\n`]*)`?\]\[([\w.]*)\]")  # [name][], [text][name]


# ------------------------------------------------------------------ the public API
def _public_objects():
    """(qualified name, object, owner class or None, module) of the public callables."""
    public = {}  # id -> (qualified name, object, package)
    for pkg in PACKAGES:
        module = importlib.import_module(pkg)
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) not in public:
                public[id(obj)] = (f"{pkg}.{name}", obj, module)
    seen: set[int] = set()
    out = []
    for qualname, obj, module in public.values():
        out.append((qualname, obj, None, module))
        if not inspect.isclass(obj):
            continue
        for klass in obj.__mro__:
            if not klass.__module__.startswith("kernelkit"):
                continue
            # a method is named after the class that defines it, public or private
            prefix = public.get(id(klass), (f"{klass.__module__}.{klass.__qualname__}",))[0]
            for attr, raw in vars(klass).items():
                func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
                if attr.startswith("_") or not inspect.isfunction(func) or id(func) in seen:
                    continue
                seen.add(id(func))
                out.append((f"{prefix}.{attr}", func, klass, module))
    return out


PUBLIC = _public_objects()


def _callables():
    return [pytest.param(*item, id=item[0]) for item in PUBLIC]


# ------------------------------------------------------------------ numpydoc parsing
def sections(doc: str) -> dict[str, list[str]]:
    """Section name -> its lines (the summary and extended summary under "")."""
    lines = doc.splitlines()
    out: dict[str, list[str]] = {"": []}
    current = ""
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _DASHES.match(lines[i + 1]):
            current = lines[i].strip()
            out[current] = []
            i += 2
            continue
        out[current].append(lines[i])
        i += 1
    return out


def header_problems(doc: str) -> list[str]:
    """Section headers that do not render as sections: unknown (misspelt) names, an
    underline of another length or indentation, a section name without underline."""
    problems = []
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        title = line.strip()
        underlined = i + 1 < len(lines) and _DASHES.match(lines[i + 1])
        if underlined and title:
            dashes = lines[i + 1].strip()
            if title not in SECTIONS:
                problems.append(f"unknown section header {title!r}")
            elif len(dashes) != len(title) or lines[i + 1].find("-") != line.find(title):
                problems.append(f"{title!r} underlined by {len(dashes)} dashes")
        elif title.rstrip(":").title() in SECTIONS and (i == 0 or not lines[i - 1].strip()):
            # a section name alone on a line after a blank line, without its underline
            problems.append(f"{title!r} is not underlined")
    return problems


def items(section: list[str]) -> list[tuple[list[str], str, str]]:
    """The entries of a Parameters-like section: (names, type, description)."""
    out: list[tuple[list[str], str, str]] = []
    for line in section:
        if line and not line[0].isspace():
            match = _ITEM.match(line.strip())
            if match is None:  # a prose line at the item level
                out.append(([], line.strip(), ""))
                continue
            names = [n.strip().lstrip("*") for n in match["names"].split(",")]
            out.append((names, match["type"] or "", ""))
        elif out and line.strip():
            names, type_, desc = out[-1]
            out[-1] = (names, type_, f"{desc} {line.strip()}")
    return out


def returns_items(section: list[str]) -> list[tuple[str, str]]:
    """(head line, description) of each entry of a Returns section."""
    out: list[tuple[str, str]] = []
    for line in section:
        if line and not line[0].isspace():
            out.append((line.strip(), ""))
        elif out and line.strip():
            out[-1] = (out[-1][0], f"{out[-1][1]} {line.strip()}")
    return out


# ------------------------------------------------------------------ helpers
def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def _signature_params(obj, owner) -> dict[str, inspect.Parameter]:
    if inspect.isclass(obj) and not _is_record(obj):
        # a class whose constructor is inherited from outside kernelkit (an exception)
        # has no parameters of its own to document
        defines = [k for k in obj.__mro__ if "__init__" in vars(k) or "__new__" in vars(k)]
        if not defines or not defines[0].__module__.startswith("kernelkit"):
            return {}
    params = dict(inspect.signature(obj).parameters)
    if owner is not None and not isinstance(vars(owner).get(obj.__name__), staticmethod):
        params.pop(next(iter(params)), None)  # self / cls
    return params


def _parameter_docs(obj) -> list[tuple[list[str], str, str]]:
    docs = []
    targets = [obj]
    if inspect.isclass(obj) and "__init__" in vars(obj) and obj.__init__.__doc__:
        targets.append(obj.__init__)  # merge_init_into_class: either docstring
    for target in targets:
        secs = sections(inspect.cleandoc(target.__doc__ or ""))
        for name in ("Parameters", "Other Parameters"):
            docs += items(secs.get(name, []))
        if inspect.isclass(obj) and _is_record(obj):
            docs += items(secs.get("Attributes", []))  # a record's fields
    return docs


def _is_record(cls) -> bool:
    """A dataclass or named tuple: its fields are its Attributes."""
    return hasattr(cls, "__dataclass_fields__") or hasattr(cls, "_fields")


def _returns_value(func) -> bool:
    """Whether ``func`` returns something other than None."""
    ann = inspect.signature(func).return_annotation
    if ann in (None, "None"):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError):
        return ann is not inspect.Signature.empty
    body = tree.body[0]
    nodes = [body]
    found = False
    while nodes:  # the function's own returns and yields, not those of nested functions
        node = nodes.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Yield, ast.YieldFrom)):
                found = True
            if isinstance(child, ast.Return) and child.value is not None:
                if not (isinstance(child.value, ast.Constant) and child.value.value is None):
                    found = True
            nodes.append(child)
    return found


def _check(qualname: str, problems: list[str], kinds: tuple[str, ...]) -> None:
    """No problem but the allow-listed ones, and each of those still present."""
    allowed = {p for q, p in ALLOWED if q == qualname and any(k in p for k in kinds)}
    stale = allowed - set(problems)
    assert not stale, f"{qualname}: allow-listed {sorted(stale)} no longer occur; drop them"
    left = [p for p in problems if p not in allowed]
    assert not left, f"{qualname}: " + "; ".join(left)


# ------------------------------------------------------------------ the checks
def test_the_public_api_is_enumerated():
    names = {q for q, *_ in PUBLIC}
    # a class, a method defined on a public base, one on a private base, a function
    assert "kernelkit.features.SDERF" in names
    assert "kernelkit.features.FeatureMap.approx_kernel" in names
    assert "kernelkit.optim.partition_bound" in names
    assert "kernelkit.estimators.RandomFeatures.fit" in names
    assert len(PUBLIC) > 200


@pytest.mark.parametrize(("qualname", "obj", "owner", "module"), _callables())
def test_docstring_exists_with_well_formed_headers(qualname, obj, owner, module):
    doc = _doc(obj)
    problems = [] if doc.strip() else ["no docstring"]
    problems += header_problems(doc)
    if inspect.isclass(obj) and "__init__" in vars(obj) and obj.__init__.__doc__:
        problems += header_problems(inspect.cleandoc(obj.__init__.__doc__))
    _check(qualname, problems, ("docstring", "header", "underlined"))


@pytest.mark.parametrize(("qualname", "obj", "owner", "module"), _callables())
def test_parameters_match_the_signature(qualname, obj, owner, module):
    params = _signature_params(obj, owner)
    documented = _parameter_docs(obj)
    names = {n for entry_names, _, _ in documented for n in entry_names}
    problems = [f"{p!r} is not documented" for p in params if p not in names]
    problems += [f"{n!r} is documented but not in the signature" for n in names - set(params)]
    for entry_names, type_, desc in documented:
        for n in entry_names:
            p = params.get(n)
            if p is not None and p.kind is p.KEYWORD_ONLY and "positional" in f"{type_} {desc}":
                problems.append(f"{n!r} is keyword-only but documented as positional")
    _check(qualname, problems, ("documented",))


_DEFAULT = re.compile(r"\bdefault\s*[=:]?\s*(``[^`]+``|[^\s,;]+)")


@pytest.mark.parametrize(("qualname", "obj", "owner", "module"), _callables())
def test_stated_defaults_match_the_signature(qualname, obj, owner, module):
    # numpydoc's "x : int, default=3" on the type line states the signature's default;
    # a description's "(default 500)" may name the value that a None default stands for
    params = _signature_params(obj, owner)
    problems = []
    for names, type_, _ in _parameter_docs(obj):
        for match in _DEFAULT.finditer(type_):
            try:
                stated = ast.literal_eval(match[1].strip("`"))
            except (ValueError, SyntaxError):
                continue  # not a literal (a name, an expression): nothing to compare
            for n in names:
                p = params.get(n)
                if p is not None and p.default is not p.empty and p.default != stated:
                    problems.append(f"{n!r}: default {stated!r} stated, {p.default!r} in signature")
    _check(qualname, problems, ("default",))


@pytest.mark.parametrize(("qualname", "obj", "owner", "module"), _callables())
def test_array_parameters_state_their_shapes(qualname, obj, owner, module):
    problems = [
        f"parameter {', '.join(names)} ({type_}) has no shape"
        for names, type_, desc in _parameter_docs(obj)
        if names and _ARRAY.search(type_) and not _SHAPE.search(f"{type_} {desc}")
    ]
    _check(qualname, problems, ("parameter ",))


@pytest.mark.parametrize(("qualname", "obj", "owner", "module"), _callables())
def test_returns_are_documented_with_shapes(qualname, obj, owner, module):
    if inspect.isclass(obj) or not _returns_value(obj):
        return
    secs = sections(_doc(obj))
    entries = returns_items(secs.get("Returns", []) + secs.get("Yields", []))
    problems = [] if entries else ["returns a value but has no Returns section"]
    problems += [
        f"returned {head!r} has no shape"
        for head, desc in entries
        if _ARRAY.search(head) and not _SHAPE.search(f"{head} {desc}")
    ]
    _check(qualname, problems, ("Returns section", "returned "))


def _resolves(target: str, obj, owner, module) -> bool:
    scopes = []
    if owner is not None:
        scopes.append(owner)
    if inspect.isclass(obj):
        scopes.append(obj)
    scopes += [
        importlib.import_module(obj.__module__),
        module,
        importlib.import_module("kernelkit"),
    ]
    first, *rest = target.split(".")
    for scope in scopes:
        found = getattr(scope, first, None)
        if found is None and inspect.isclass(scope):
            continue
        for part in rest:
            found = getattr(found, part, None)
        if found is not None:
            return True
    for prefix in range(target.count("."), 0, -1):  # an absolute dotted name
        head, *tail = target.rsplit(".", prefix)
        try:
            found = importlib.import_module(head)
        except ImportError:
            continue
        for part in tail:
            found = getattr(found, part, None)
        return found is not None
    try:
        importlib.import_module(target)
        return True
    except ImportError:
        pass
    # a builtin, or a public name of another kernelkit package (rendered as code)
    packages = [builtins] + [importlib.import_module(p) for p in PACKAGES]
    return any(first in getattr(p, "__all__", vars(p)) and not rest for p in packages)


@pytest.mark.parametrize(("qualname", "obj", "owner", "module"), _callables())
def test_cross_references_resolve(qualname, obj, owner, module):
    doc = _doc(obj)
    if inspect.isclass(obj) and "__init__" in vars(obj):
        doc += "\n" + inspect.cleandoc(obj.__init__.__doc__ or "")
    targets = [m.group(2) for m in _ROLE.finditer(doc)]
    targets += [m[2] or m[1] for m in _AUTOREF.finditer(doc)]
    problems = [f"{t!r} does not resolve" for t in targets if not _resolves(t, obj, owner, module)]
    _check(qualname, problems, ("resolve",))


# ------------------------------------------------------------------ the parser itself
def test_the_parser_sees_what_it_checks():
    doc = textwrap.dedent(
        """\
        Summary.

        Parameters
        ----------
        X : ndarray of shape (n, d)
            Data.
        a, b : float
            Two.
        Y : array-like
            No shape.

        Return
        ------
        Retruns
        -------
        Notes
        ---
        """
    )
    secs = sections(doc)
    assert [e[0] for e in items(secs["Parameters"])] == [["X"], ["a", "b"], ["Y"]]
    assert _SHAPE.search(items(secs["Parameters"])[0][1])
    assert not _SHAPE.search(" ".join(items(secs["Parameters"])[2][1:]))
    assert header_problems(doc) == [
        "unknown section header 'Return'",
        "unknown section header 'Retruns'",
        "'Notes' underlined by 3 dashes",
    ]
    assert header_problems("Summary.\n\nReturns:\n    x\n") == ["'Returns:' is not underlined"]
    assert header_problems("Summary.\n\nnotes\n-----\nText.\n") == [
        "unknown section header 'notes'"
    ]
    refs = "[`FeatureMap`][] and [the base][kernelkit.features.FeatureMap]"
    assert [m[2] or m[1] for m in _AUTOREF.finditer(refs)] == [
        "FeatureMap",
        "kernelkit.features.FeatureMap",
    ]
    assert [m[2] for m in _ROLE.finditer(":func:`~kernelkit.a_star` :meth:`.fit`")] == [
        "kernelkit.a_star",
        "fit",
    ]
