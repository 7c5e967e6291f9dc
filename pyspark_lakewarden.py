"""Lets Spark find the ``lakewarden`` format without ``lakewarden.spark.register(spark)``.

Spark 4 discovers Python data sources from installed top-level modules named ``pyspark_*``
that expose ``DefaultSource``.
"""

from lakewarden.spark import LakewardenDataSource as DefaultSource

__all__ = ["DefaultSource"]
