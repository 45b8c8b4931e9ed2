"""The local stack the tests run against: test/integration's TestPythonSDK starts it and
passes the connection in EXECPLANE_* variables (the same execctl reads)."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from execplane import Client, Owner


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run these tests through test/integration's TestPythonSDK")
    return value


def connect(**kwargs) -> Client:  # type: ignore[no-untyped-def]
    return Client(_env("EXECPLANE_ADDRESS"), ca_file=_env("EXECPLANE_CA"), cert_file=_env("EXECPLANE_CERT"),
                  key_file=_env("EXECPLANE_KEY"), server_name=os.environ.get("EXECPLANE_SERVER_NAME", ""), **kwargs)


@pytest.fixture
def client() -> Iterator[Client]:
    with connect() as c:
        yield c


@pytest.fixture
def owner() -> Owner:
    return Owner(_env("EXECPLANE_ISSUER"), _env("EXECPLANE_OWNER"))


@pytest.fixture
def profile() -> str:
    return _env("EXECPLANE_PROFILE")
