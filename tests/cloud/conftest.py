"""Fixtures of the cloud driver tests: one moto server for the session, AWS credentials that can
reach nothing but it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from corral.config import Ec2Config
from tests.cloud.ec2_support import REGION, moto_client, start_moto


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("aws")
    with pytest.MonkeyPatch.context() as env:
        # Dummy credentials; nothing of the machine's own AWS setup is read.
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", REGION)
        env.setenv("AWS_CONFIG_FILE", str(home / "config"))
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "credentials"))
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield from start_moto(home / "moto.log")


@pytest.fixture(scope="session")
def ec2(moto_url: str) -> Any:
    """A plain boto3 client of the moto server: what the tests check the driver's work with."""
    return moto_client(moto_url)


@pytest.fixture(scope="session")
def image_id(ec2: Any) -> str:
    return str(ec2.describe_images()["Images"][0]["ImageId"])


@pytest.fixture(scope="session")
def subnet_ids(ec2: Any) -> list[str]:
    subnets = sorted(ec2.describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"])
    return [str(s["SubnetId"]) for s in subnets[:2]]


@pytest.fixture
def cluster() -> str:
    """A cluster of the test's own: moto's state lasts the session, and listings go by cluster tag."""
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def settings(moto_url: str, image_id: str) -> Ec2Config:
    return Ec2Config(
        region=REGION,
        endpoint_url=moto_url,
        image_id=image_id,
        server_url="http://10.0.0.5:8642",
        tags={"team": "research"},
    )
