"""daemon/errors.py's tree lists every StorydError subclass in storyd, with its code."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import daemon
import detectors
from daemon import errors
from daemon.errors import StorydError


def _import_everything() -> None:
    for package in (daemon, detectors):
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
        c for c in _subclasses(StorydError) if c.__module__.split(".")[0] in ("daemon", "detectors")
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
    assert missing == {}, f"daemon/errors.py's tree lacks or miscodes {missing}"


def test_the_tree_names_no_class_that_does_not_exist() -> None:
    known = {c.__name__ for c in _storyd_errors()} | {"StorydError"}
    assert set(_tree()) - known == set()


@pytest.mark.parametrize("cls", _storyd_errors(), ids=lambda c: c.__name__)
def test_every_error_has_a_name_of_its_own(cls: type[StorydError]) -> None:
    """A subclass that kept INTERNAL_ERROR would tell a client "bug" for a plain refusal."""
    if cls.code != 70:
        assert cls.name != "INTERNAL_ERROR", f"{cls.__name__} (code {cls.code}) has no name"
