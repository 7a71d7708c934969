"""A write to the trace lake killed half way (tests/store/test_lake_crash.py kills it at every
point): Spark reads the previous version through the version's file list, beside the killed
write's files. Here, not there, so that it runs in the Spark modules' JVM (tests/conftest.py
groups them on one worker) instead of starting a second one on the other worker."""

from functools import partial

import pytest

from tests.engines.conftest import needs_spark
from tests.store.test_lake_crash import (
    CHILD,
    OLD,
    kill_when,
    listed,
    make_table,
    on_disk,
    progressed,
    start_server,
    start_write,
)

pytestmark = [pytest.mark.slow, needs_spark]


def test_spark_reads_the_previous_version_by_its_files(spark, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    lake = make_table(tmp_path / "lake")
    server = start_server(script)
    try:
        kill_when(start_write(server, lake.path()), partial(progressed, lake, len(on_disk(lake)) + 6))
        assert server.stdout.readline() == "ended\n"  # gone, not only signalled
    finally:
        server.stdin.close()
        server.wait()
    orphans = on_disk(lake) - listed(lake)  # the killed write's files, beside the version's
    assert lake.delta("t").version() == 0 and len(orphans) >= 6
    frame = spark.read.option("basePath", str(lake.path("t"))).parquet(*lake.files("t"))
    frame.createOrReplaceTempView("killed")
    got = spark.sql("SELECT count(*), count(DISTINCT day), count_if(trace_id LIKE 'old-%'), sum(n), "
                    "min(day), max(day) FROM killed").collect()[0]
    assert tuple(got) == OLD
