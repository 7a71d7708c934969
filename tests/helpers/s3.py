"""A local S3-compatible server for the lake's object-store tests: moto's server on a loopback
port the OS picks, with one bucket, and the delta-rs storage options that reach it and nothing
else."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer

BUCKET = "rag-lake"
REGION = "us-east-1"
KEY = "testing"  # moto accepts any credentials; these only keep SDKs from looking for real ones

# What keeps the SDKs (boto3, delta-rs's object_store) from the network beyond loopback: no
# instance metadata lookups, no credential or config files, and every HTTP(S) request that does not go
# to loopback sent to a proxy on the discard port, where it is refused instead of leaving.
OFFLINE_ENV = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_ACCESS_KEY_ID": KEY,
    "AWS_SECRET_ACCESS_KEY": KEY,
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


@dataclass(frozen=True)
class S3:
    """A running server: its endpoint and bucket."""

    endpoint: str
    bucket: str = BUCKET

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options for the bucket: the explicit endpoint over plain HTTP, and commits
        by conditional put (PUT with `If-None-Match: *`, which moto's S3 honours: a second writer
        of the same log version gets 412 and retries on the next), so no unsafe rename is allowed."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": KEY,
                "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true",
                "conditional_put": "etag"}

    def client(self):
        """A boto3 S3 client of the server."""
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=KEY,
                            region_name=REGION)

    def keys(self, prefix: str = "") -> list[str]:
        """The bucket's object keys under `prefix`."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@contextmanager
def s3_server() -> Iterator[S3]:
    """moto's S3 on 127.0.0.1 (a free port), with the bucket made; the environment set so that
    nothing reaches beyond loopback while it runs (restored afterwards)."""
    saved = {name: os.environ.get(name) for name in OFFLINE_ENV}
    os.environ.update(OFFLINE_ENV)
    level = logging.getLogger("werkzeug").level
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no log record per request
    server = _quick_server()
    server.start()
    try:
        host, port = server.get_host_and_port()
        assert host == "127.0.0.1", host
        s3 = S3(f"http://{host}:{port}")
        s3.client().create_bucket(Bucket=s3.bucket)
        yield s3
    finally:
        server.stop()
        logging.getLogger("werkzeug").setLevel(level)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _quick_server() -> ThreadedMotoServer:
    """moto's ThreadedMotoServer (loopback, a free port), its serving loop checking for stop()
    every 10 ms instead of werkzeug's 0.5 s: a stop otherwise idles up to that long."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class Quick(ThreadedMotoServer):
        def _server_entry(self) -> None:  # moto's own, but for the poll interval
            self._server = make_server(self._ip_address, self._port, DomainDispatcherApplication(create_backend_app),
                                       True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever(poll_interval=0.01)

    return Quick(ip_address="127.0.0.1", port=0, verbose=False)
