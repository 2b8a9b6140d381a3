"""Flower's gate: which Authorization headers pass, and where Engram's credentials come from."""

from __future__ import annotations

from base64 import b64encode
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from app.config import Settings
from workers.flower_auth import authorized, engram_credentials

ALLOWED = ["engram:s3cret", "ops:other"]


def basic(pair: str) -> str:
    return "Basic " + b64encode(pair.encode()).decode()


def test_a_listed_pair_passes_and_nothing_else_does() -> None:
    assert authorized(ALLOWED, basic("engram:s3cret"))
    assert authorized(ALLOWED, basic("ops:other"))
    assert authorized(ALLOWED, "basic  " + b64encode(b"ops:other").decode())
    for header in (
        "",
        "Basic",
        basic("engram:wrong"),
        basic("engram:s3cret "),
        basic("ops:s3cret"),
        "Bearer " + b64encode(b"engram:s3cret").decode(),
        "Basic not-base64!",
    ):
        assert not authorized(ALLOWED, header), header


def test_no_credentials_refuse_everyone() -> None:
    assert not authorized([], basic("engram:s3cret"))
    assert not authorized([], basic(":"))


@given(st.text(max_size=200))
def test_any_header_is_answered_without_error(header: str) -> None:
    assert authorized(ALLOWED, header) in (True, False)


def test_credentials_come_from_the_file_before_the_variable(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    settings = Settings(flower_user="ops", flower_password=SecretStr("from-env"))
    assert engram_credentials(settings) == "ops:from-env"
    with_file = settings.model_copy(update={"flower_password_file": secret})
    assert engram_credentials(with_file) == "ops:from-file"


def test_an_unreadable_file_or_an_empty_password_gives_no_credentials(tmp_path: Path) -> None:
    missing = Settings(flower_password_file=tmp_path / "missing")
    assert engram_credentials(missing) is None
    assert engram_credentials(Settings(flower_password=SecretStr(""))) is None
