"""Object storage for the archive: the S3 adapter (boto3) of ``ports.ObjectStore``, and where
it is configured.

Any S3-compatible endpoint works: AWS (no endpoint set), SeaweedFS (the embedded stack's), MinIO,
Ceph... ``S3Settings.load`` reads ``DUETIME_S3_*`` from the environment first, then from the
stack's ``stack.env``, like every other URL (``duetime.config``). boto3's errors are translated
to ``ArchiveError`` here, at the edge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duetime.config import STACK_ENV_FILE, default_data_dir, read_env_file
from duetime.errors import ArchiveError, ConfigError

from .keys import check_prefix

__all__ = ["S3ObjectStore", "S3Settings"]


@dataclass(frozen=True)
class S3Settings:
    endpoint: str  # "" = the client's default (AWS)
    bucket: str
    access_key_id: str
    secret_access_key: str = ""
    region: str = "us-east-1"
    prefix: str = ""

    def __repr__(self) -> str:  # the secret never reaches a log line or a traceback
        return (
            f"S3Settings(endpoint={self.endpoint!r}, bucket={self.bucket!r}, "
            f"prefix={self.prefix!r})"
        )

    @classmethod
    def load(
        cls, env: dict[str, str] | None = None, data_dir: Path | None = None
    ) -> S3Settings | None:
        """The configured storage, or None when no bucket is configured anywhere."""
        environ = dict(os.environ if env is None else env)
        directory = data_dir or (
            Path(environ["DUETIME_DATA_DIR"]).absolute()
            if environ.get("DUETIME_DATA_DIR")
            else default_data_dir()
        )
        from_file = read_env_file(directory / STACK_ENV_FILE)

        def pick(key: str, default: str = "") -> str:
            return environ.get(key) or from_file.get(key) or default

        bucket = pick("DUETIME_S3_BUCKET")
        if not bucket:
            return None
        return cls(
            endpoint=pick("DUETIME_S3_ENDPOINT"),
            bucket=bucket,
            access_key_id=pick("DUETIME_S3_ACCESS_KEY_ID"),
            secret_access_key=pick("DUETIME_S3_SECRET_ACCESS_KEY"),
            region=pick("DUETIME_S3_REGION", "us-east-1"),
            prefix=check_prefix(pick("DUETIME_S3_PREFIX")),
        )

    @classmethod
    def require(cls, env: dict[str, str] | None = None, data_dir: Path | None = None) -> S3Settings:
        settings = cls.load(env, data_dir)
        if settings is None:
            environ = os.environ if env is None else env
            directory = data_dir or Path(environ.get("DUETIME_DATA_DIR") or default_data_dir())
            env_file = directory.absolute() / STACK_ENV_FILE
            where = (
                f"{env_file} names none (a stack started before it had S3: run `duetime stack "
                "up` again)"
                if env_file.exists()
                else f"{env_file} does not exist (no stack started in {env_file.parent})"
            )
            raise ConfigError(
                f"no object storage: DUETIME_S3_BUCKET is not set and {where}; start the stack "
                "with `duetime up` (or `duetime stack up`), or set DUETIME_S3_BUCKET (with "
                "DUETIME_S3_ENDPOINT and the keys)"
            )
        return settings


class S3ObjectStore:
    """``ObjectStore`` on an S3 bucket through boto3."""

    def __init__(self, settings: S3Settings, *, timeout: float = 30.0) -> None:
        import boto3
        from botocore.config import Config

        self.settings = settings
        options: dict[str, Any] = {
            "region_name": settings.region,
            "config": Config(
                connect_timeout=min(timeout, 10.0),
                read_timeout=timeout,
                retries={"max_attempts": 3, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        }
        if settings.endpoint:
            options["endpoint_url"] = settings.endpoint
        if settings.access_key_id:
            options["aws_access_key_id"] = settings.access_key_id
            options["aws_secret_access_key"] = settings.secret_access_key
        self._client: Any = boto3.client("s3", **options)

    def _fail(self, what: str, key: str, exc: Exception) -> ArchiveError:
        return ArchiveError(
            f"object storage: {what} s3://{self.settings.bucket}/{key} failed: "
            f"{type(exc).__name__}: {exc}"
        )

    def put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_object(Bucket=self.settings.bucket, Key=key, Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("put", key, exc) from exc

    def get(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._client.get_object(Bucket=self.settings.bucket, Key=key)
            data: bytes = response["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("get", key, exc) from exc
        return data

    def list_keys(self, prefix: str) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        keys: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.settings.bucket, Prefix=prefix
            )
            for page in pages:
                keys.extend(str(item["Key"]) for item in page.get("Contents", ()))
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list", prefix, exc) from exc
        return sorted(keys)
