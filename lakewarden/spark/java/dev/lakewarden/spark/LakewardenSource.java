package dev.lakewarden.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.v2.parquet.ParquetTable;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The "lakewarden" format in the JVM: snapshot reads go to Spark's own Parquet reader, and
 * everything else to the Python data source of the same name.
 *
 * <p>Spark 4 resolves a format's short name to a JVM DataSourceRegister before it looks at
 * Python data sources, so with this class on the classpath every read, write and stream of
 * format("lakewarden") comes here. It is a PythonDataSourceV2 (the provider Spark itself
 * uses for a Python data source, told the short name by Spark before use), so whatever it
 * does not take itself is the Python source's, exactly as without this class: writes, streams,
 * incremental reads, merge-on-read snapshots with log blocks, S3 tables, and any read the read
 * manifest cannot vouch for (ReadManifest).
 *
 * <p>A read calls inferSchema, then getTable with that schema; a write calls getTable with the
 * DataFrame's schema and never inferSchema. So only an instance whose inferSchema planned a
 * manifest read returns the Parquet table, and only for that schema.
 */
public final class LakewardenSource extends PythonDataSourceV2 implements DataSourceRegister {
    private ReadManifest plan;

    @Override
    public String shortName() {
        return "lakewarden";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        plan = ReadManifest.plan(options.asCaseSensitiveMap());
        return plan != null ? plan.schema : super.inferSchema(options);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        ReadManifest planned = plan;
        plan = null; // one table per planned read: a later getTable (a write) is Python's
        if (planned == null || !planned.schema.equals(schema)) {
            return super.getTable(schema, partitioning, properties);
        }
        Map<String, String> options = new HashMap<>();
        // The manifest names files, not patterns: '[', '{' or '*' in a partition value is literal.
        options.put("globPaths", "false");
        return new ParquetTable(
                "lakewarden " + planned.root,
                SparkSession.active(),
                new CaseInsensitiveStringMap(options),
                scala.jdk.javaapi.CollectionConverters.asScala(planned.files).toList(),
                scala.Option.apply(schema),
                ParquetFileFormat.class);
    }
}
