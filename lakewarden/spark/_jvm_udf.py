"""The JVM side of the format: the ``lakewarden`` format's Parquet read path, and the bucket
and partition-path functions of ``lakewarden.table.bucket``.

``LakewardenSource`` (with ``ReadManifest``) registers the short name ``lakewarden`` in the JVM,
which Spark 4 resolves before Python data sources: it reads the snapshots a read manifest
vouches for with Spark's Parquet reader and hands everything else to the Python source
(see its class comment).

Spark has no FNV-1a, and its ANSI arithmetic refuses the 64-bit wrap-around the hash needs,
so a Spark SQL expression cannot compute a record key's bucket. A Python UDF can, but then
every row crosses into a Python worker and back, which costs more than Spark's whole Parquet
write. So two tiny Java UDFs (``lakewarden/spark/java/``, shipped with the package) compute
exactly what the Python functions compute:

- ``lakewarden_key_bucket(key_text, buckets)``: ``key_buckets`` (FNV-1a 64 of the UTF-8 text,
  folded, unsigned modulo);
- ``lakewarden_partition_value(text)``: ``escape_partition_value`` (Hive's ``%XX`` escaping,
  the default partition for null and empty).

The jar is compiled on first use with the JDK's ``javac`` and ``jar`` against pyspark's own
jars, cached under ``LAKEWARDEN_UDF_CACHE`` (default
``~/.cache/lakewarden``) by a digest of the sources and the pyspark version, and written by
rename, so concurrent builders never see half a jar (``make spark-udf`` builds it ahead:
``python -m lakewarden.spark._jvm_udf``). ``register(spark)`` adds it to the session
(``ADD JAR``, which also ships it to the executors) and registers both functions.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own idiom

from lakewarden.errors import NonRetryableError

KEY_BUCKET = "lakewarden_key_bucket"
PARTITION_VALUE = "lakewarden_partition_value"
_CLASSES = {
    KEY_BUCKET: ("dev.lakewarden.spark.KeyBucket", "int"),
    PARTITION_VALUE: ("dev.lakewarden.spark.PartitionValue", "string"),
}
_SOURCES = Path(__file__).parent / "java"
_REGISTERED_CONF = "spark.lakewarden.jvmUdf.jar"


class JvmUdfUnavailableError(NonRetryableError):
    """The Java UDFs could not be built (no JDK, or ``javac`` failed) or added to Spark."""


def jar_path() -> Path:
    """The jar of the UDFs, built if absent.

    Raises: JvmUdfUnavailableError."""
    import pyspark

    sources = sorted(_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    services = sorted(p for p in (_SOURCES / "META-INF").rglob("*") if p.is_file())
    for source in sources + services:
        digest.update(source.relative_to(_SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    cache = Path(os.environ.get("LAKEWARDEN_UDF_CACHE") or Path.home() / ".cache" / "lakewarden")
    jar = cache / f"lakewarden-udf-{digest.hexdigest()[:16]}.jar"
    if not jar.exists():
        _build(sources, jar, Path(pyspark.__file__).parent / "jars")
    return jar


def _build(sources: list[Path], jar: Path, spark_jars: Path) -> None:
    """Compile ``sources`` against pyspark's jars into ``jar`` (by rename), with the
    ``META-INF`` service file that registers the ``lakewarden`` format's JVM side.

    Raises: JvmUdfUnavailableError."""
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    api = sorted(spark_jars.glob("spark-sql_*.jar"))
    if javac is None or jar_tool is None:
        raise JvmUdfUnavailableError(
            "lakewarden's Java UDFs need a JDK (javac and jar on the PATH) to be built once. "
            "Help: install a JDK 17, or build the jar elsewhere and point LAKEWARDEN_UDF_CACHE "
            "at its folder."
        )
    if not api:
        raise JvmUdfUnavailableError(f"no spark-sql jar in {spark_jars} to compile against")
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakewarden-udf-", dir=jar.parent) as work:
        classes, staged = Path(work) / "classes", Path(work) / jar.name
        commands = [
            [javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", f"{spark_jars}/*"]
            + [str(s) for s in sources],
            [jar_tool, "cf", str(staged), "-C", str(classes), "."]
            + ["-C", str(_SOURCES), "META-INF"],
        ]
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise JvmUdfUnavailableError(
                    f"building lakewarden's Java UDFs failed ({Path(command[0]).name} exited "
                    f"{done.returncode}): {done.stderr.strip()[:2000]}"
                )
        os.replace(staged, jar)  # atomic: a concurrent builder's jar is the same bytes


def register(spark: Any) -> None:
    """Add the jar to ``spark`` and register both functions; once per session.

    Raises: JvmUdfUnavailableError."""
    jar = str(jar_path())
    if spark.conf.get(_REGISTERED_CONF, None) == jar:
        return
    from pyspark.sql.types import IntegerType, StringType

    types = {"int": IntegerType(), "string": StringType()}
    try:
        spark.sql(f"ADD JAR '{jar}'")
        for name, (class_name, result) in _CLASSES.items():
            spark.udf.registerJavaFunction(name, class_name, types[result])
    except Exception as err:  # Spark raises Py4J and analysis errors alike here
        raise JvmUdfUnavailableError(f"Spark could not load {jar}: {err}") from err
    spark.conf.set(_REGISTERED_CONF, jar)


def key_bucket(key_text: Column, buckets: int) -> Column:
    """The bucket of each record key (its text, as ``key_strings`` gives it)."""
    return F.call_function(KEY_BUCKET, key_text, F.lit(buckets))


def partition_value(text: Column) -> Column:
    """Hive's escaping of each partition value (its text)."""
    return F.call_function(PARTITION_VALUE, text)


__all__ = [
    "KEY_BUCKET",
    "PARTITION_VALUE",
    "JvmUdfUnavailableError",
    "jar_path",
    "key_bucket",
    "partition_value",
    "register",
]

if __name__ == "__main__":
    print(jar_path())
