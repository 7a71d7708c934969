import importlib.util
import shutil
import socket
import sys

import pytest

SPARK_MISSING = ("Spark tests need Java and the [spark] extra (.ci/run installs both): "
                 + ", ".join(m for m, ok in (("java", shutil.which("java")),
                                             ("pyspark", importlib.util.find_spec("pyspark"))) if not ok))
HAS_SPARK = bool(shutil.which("java")) and importlib.util.find_spec("pyspark") is not None
needs_spark = pytest.mark.skipif(not HAS_SPARK, reason=SPARK_MISSING)


@pytest.fixture(scope="session")
def spark():
    """One local Spark session (local[2]) for the engine tests, as rag-loop builds it, tuned for
    many small queries: the JVM's quick compiler only and no whole-stage code generation
    (a quarter less time here; long jobs want neither). The quick compiler alone gets a 48 MB
    code cache, which these tests fill half way through: the JVM then stops compiling and runs
    the rest interpreted (the Spark tests took 121 s instead of 104 s), hence the larger cache.
    One compiler thread and the serial collector leave the other test worker its core (the
    Spark modules alone: 142 instead of 151 CPU-seconds). Adaptive query execution off: it
    re-plans each of these small queries' stages for nothing (it changes plans, never rows;
    test_spark.py's Spark work took 41 instead of 44 JVM CPU-seconds). No code generation for
    expressions either (Spark's interpreted projections and predicates, which its own tests hold
    to the generated ones' results): each task compiled its projections with Janino, whose class
    lookups scan every jar; on these few rows a quarter to a third of the JVM's time (the OTLP
    fixtures' retrieval figures: 4 instead of 6 CPU-s warm, 12 instead of 17.5 cold; the same
    rows to the last bit)."""
    from rag_loop.engines.engine import spark_session
    java = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC -XX:CICompilerCount=1"
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                                         "spark.driver.extraJavaOptions": java,
                                         "spark.sql.codegen.wholeStage": "false",
                                         "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                                         "spark.sql.adaptive.enabled": "false", **_connect_server()})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def session(spark):
    """The Spark session for ingestion, whose tasks import rag_loop and DuckDB: this interpreter's."""
    assert spark.sparkContext.pythonExec == sys.executable
    return spark


def _connect_server() -> dict[str, str]:
    """The same JVM also serves Spark Connect on a free loopback port (the plugin ships with
    pyspark): the stand-in for a Spark Connect cluster, `spark_connect_url`. The port was free a
    moment ago; if something took it since, the server tries the next ones."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {"spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
            "spark.connect.grpc.port.maxRetries": "16"}


@pytest.fixture(scope="session")
def spark_connect_url(spark) -> str:
    """The port the server bound (the one asked for, or a later one)."""
    service = getattr(spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
    return f"sc://127.0.0.1:{service.__getattr__('MODULE$').localPort()}"
