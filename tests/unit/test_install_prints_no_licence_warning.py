"""`make install` builds the project with setuptools, which warns on every build step (three
times per install) when `project.license` is the deprecated TOML table. The SPDX string it
wants needs setuptools 77, so the build requirement says so."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from app.config import PROJECT_ROOT


def test_licence_is_an_spdx_string_and_the_build_backend_reads_it() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    (setuptools,) = [
        Requirement(r)
        for r in project["build-system"]["requires"]
        if Requirement(r).name == "setuptools"
    ]
    assert not setuptools.specifier.contains(Version("76.9"))
    assert setuptools.specifier.contains(Version("77.0"))
