"""daemon/core/errors.py's tree lists every StorydError subclass in storyd, with its code."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import storyd
from storyd import detectors
from storyd.core import errors
from storyd.core.errors import StorydError


def _import_everything() -> None:
    for package in (storyd, detectors):  # storyd.detectors is a folder of its own
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)


def _subclasses(cls: type[StorydError]) -> list[type[StorydError]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def _storyd_errors() -> list[type[StorydError]]:
    _import_everything()
    return [
        c for c in _subclasses(StorydError) if c.__module__.split(".")[0] == "storyd"
    ]


def _tree() -> dict[str, int]:
    """`Name (code)` pairs of the docstring's tree, by the class's bare name."""
    doc = errors.__doc__ or ""
    tree = doc.split("The codes are")[0]
    return {
        name.rsplit(".", 1)[-1]: int(code)
        for name, code in re.findall(r"([A-Za-z_][\w.]*) \((\d+)", tree)
    }


def test_every_error_class_is_in_the_tree_with_its_code() -> None:
    tree = _tree()
    missing = {c.__name__: c.code for c in _storyd_errors() if tree.get(c.__name__) != c.code}
    assert missing == {}, f"daemon/core/errors.py's tree lacks or miscodes {missing}"


def test_the_tree_names_no_class_that_does_not_exist() -> None:
    known = {c.__name__ for c in _storyd_errors()} | {"StorydError"}
    assert set(_tree()) - known == set()


def _name_problem(cls: type[StorydError]) -> str | None:
    """Why `cls` has no protocol name of its own (None when it has one)."""
    if cls.name == StorydError.name:
        return f"{cls.__name__} (code {cls.code}) kept {StorydError.name}"
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*", cls.name):
        return f"{cls.__name__}'s name {cls.name!r} is not an UPPER_SNAKE protocol name"
    if not 0 < cls.code < 256:
        return f"{cls.__name__}'s code {cls.code} is not a failing exit status"
    return None


@pytest.mark.parametrize("cls", _storyd_errors(), ids=lambda c: c.__name__)
def test_every_error_has_a_name_of_its_own(cls: type[StorydError]) -> None:
    """A subclass that kept INTERNAL_ERROR would tell a client "bug" for a plain refusal;
    that holds for code 70 too (a GitError is git failing, not a bug in storyd)."""
    assert _name_problem(cls) is None, _name_problem(cls)


def test_a_class_that_kept_the_internal_name_is_caught() -> None:
    """The check above fails for a subclass that set only its code, whatever the code."""
    for code in (70, 65):
        bare = type("Bare", (StorydError,), {"code": code})
        assert _name_problem(bare) == f"Bare (code {code}) kept INTERNAL_ERROR"
    assert _name_problem(type("Lower", (StorydError,), {"name": "lower"})) is not None
    assert _name_problem(type("Zero", (StorydError,), {"name": "OK", "code": 0})) is not None


def test_a_name_always_comes_with_the_same_code() -> None:
    """Clients read `{code, name}` pairs: no name may stand for two exit codes."""
    codes: dict[str, set[int]] = {}
    for cls in [StorydError, *_storyd_errors()]:
        codes.setdefault(cls.name, set()).add(cls.code)
    assert {name: c for name, c in codes.items() if len(c) > 1} == {}
