package dev.lakewarden.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A snapshot read that Spark's own Parquet reader can do exactly, planned from a read manifest
 * (lakewarden/table/read_manifest.py), or null when it cannot be trusted; then the read goes
 * through the Python source, which plans from the timeline itself.
 *
 * <p>The manifest of seq S lists the files of the latest snapshot after timeline entries 0..S.
 * It is trusted only when all of this holds:
 *
 * <ol>
 *   <li>the read's options are only the path, as_of and columns (since, filters, settings and
 *       anything else: Python);
 *   <li>the table is local (a plain path or file:// URI) and has a table.json whose SHA-256 is
 *       the manifest's (the schema has not changed since);
 *   <li>the timeline entries after S are all present (no gap, as the listing shows) and each one
 *       leaves the snapshot unchanged: for the latest snapshot, every one is a requested or
 *       inflight transition; for as_of X (the manifest whose as_of is X), every one is
 *       requested, inflight, or the completion of an instant that is not a clean or a rollback
 *       (snapshots are built in completion order, so a later completion does not change the
 *       snapshot as of X, but a clean may have deleted its files);
 *   <li>every column asked for exists.
 * </ol>
 */
final class ReadManifest {
    static final String PREFIX = ".lakewarden";
    static final int FORMAT_VERSION = 1;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Pattern MANIFEST = Pattern.compile("(\\d{20})_(\\d{17})\\.json");
    private static final Pattern ENTRY = Pattern.compile("(\\d{20})\\.json");
    private static final Pattern SCHEME = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*:");
    private static final Set<String> OPTIONS = Set.of("path", "as_of", "columns");
    private static final Set<String> LATEST_OK = Set.of("requested", "inflight");
    private static final Set<String> DESTRUCTIVE = Set.of("clean", "rollback");

    final StructType schema;
    final List<String> files;
    final String root;

    private ReadManifest(StructType schema, List<String> files, String root) {
        this.schema = schema;
        this.files = files;
        this.root = root;
    }

    /** The plan, or null when the read must go through the Python source. */
    static ReadManifest plan(Map<String, String> options) {
        try {
            return planOrNull(options);
        } catch (IOException | RuntimeException e) {
            return null; // the Python source plans it, and names what is wrong
        }
    }

    private static ReadManifest planOrNull(Map<String, String> options) throws IOException {
        for (String key : options.keySet()) {
            if (!OPTIONS.contains(key.toLowerCase(java.util.Locale.ROOT))) {
                return null;
            }
        }
        Path root = localRoot(get(options, "path"));
        if (root == null) {
            return null;
        }
        Path meta = root.resolve(PREFIX);
        String asOf = get(options, "as_of");
        Path manifestPath = newestManifest(meta.resolve("read"), asOf);
        if (manifestPath == null) {
            return null;
        }
        JsonNode manifest = JSON.readTree(Files.readAllBytes(manifestPath));
        if (manifest.path("format_version").asInt() != FORMAT_VERSION) {
            return null;
        }
        byte[] config = Files.readAllBytes(meta.resolve("table.json"));
        if (!sha256(config).equals(manifest.path("config_sha256").asText())) {
            return null;
        }
        if (!unchangedSince(meta.resolve("timeline"), manifest.path("seq").asLong(), asOf)) {
            return null;
        }
        StructType schema = narrowed(
                (StructType) DataType.fromJson(manifest.path("schema").asText()),
                get(options, "columns"));
        if (schema == null || manifest.path("files").size() == 0) {
            return null;
        }
        String rootText = "file://" + root.toString();
        List<String> files = new ArrayList<>();
        for (JsonNode file : manifest.path("files")) {
            files.add(rootText + "/" + file.path("path").asText());
        }
        return new ReadManifest(schema, files, rootText);
    }

    private static String get(Map<String, String> options, String name) {
        for (Map.Entry<String, String> e : options.entrySet()) {
            if (e.getKey().equalsIgnoreCase(name)) {
                return e.getValue();
            }
        }
        return null;
    }

    /** A plain path or file:// URI as the Python side opens it (lakewarden.storage._uri). */
    static Path localRoot(String uri) {
        if (uri == null || uri.isEmpty()) {
            return null;
        }
        if (uri.startsWith("file:")) {
            try {
                URI parsed = new URI(uri);
                String host = parsed.getHost();
                if (host != null && !host.isEmpty() && !host.equals("localhost")) {
                    return null;
                }
                return Paths.get(parsed.getPath()).toAbsolutePath().normalize();
            } catch (URISyntaxException | IllegalArgumentException e) {
                return null;
            }
        }
        if (SCHEME.matcher(uri).find()) {
            return null; // s3:// and others: Python (S3A settings are its business)
        }
        return Paths.get(uri).toAbsolutePath().normalize();
    }

    /** The manifest with the highest seq (of as_of, when given), or null. */
    private static Path newestManifest(Path dir, String asOf) throws IOException {
        String best = null;
        try (DirectoryStream<Path> names = Files.newDirectoryStream(dir)) {
            for (Path p : names) {
                String name = p.getFileName().toString();
                Matcher m = MANIFEST.matcher(name);
                if (!m.matches() || (asOf != null && !m.group(2).equals(asOf))) {
                    continue;
                }
                if (best == null || name.compareTo(best) > 0) {
                    best = name;
                }
            }
        } catch (NoSuchFileException e) {
            return null;
        }
        return best == null ? null : dir.resolve(best);
    }

    /** Rule 3 of the class comment. */
    private static boolean unchangedSince(Path timeline, long seq, String asOf) throws IOException {
        TreeSet<Long> after = new TreeSet<>();
        boolean hasSeq = false;
        try (DirectoryStream<Path> names = Files.newDirectoryStream(timeline)) {
            for (Path p : names) {
                Matcher m = ENTRY.matcher(p.getFileName().toString());
                if (!m.matches()) {
                    continue;
                }
                long s = Long.parseLong(m.group(1));
                hasSeq |= s == seq;
                if (s > seq) {
                    after.add(s);
                }
            }
        }
        if (!hasSeq || (!after.isEmpty() && after.last() - seq != after.size())) {
            return false; // the manifest's entry is gone, or a gap: Python says what is wrong
        }
        for (long s : after) {
            JsonNode entry = JSON.readTree(Files.readAllBytes(timeline.resolve(String.format("%020d.json", s))));
            String transition = entry.path("transition").asText();
            if (LATEST_OK.contains(transition)) {
                continue;
            }
            boolean laterCompletion = asOf != null
                    && transition.equals("completed")
                    && !DESTRUCTIVE.contains(entry.path("action").asText())
                    && entry.path("instant").asText().compareTo(asOf) > 0;
            if (!laterCompletion) {
                return false;
            }
        }
        return true;
    }

    /** The schema narrowed to ``columns`` (comma-separated), or null if one is unknown. */
    private static StructType narrowed(StructType schema, String columns) {
        if (columns == null) {
            return schema;
        }
        List<StructField> fields = new ArrayList<>();
        for (String name : columns.split(",")) {
            String wanted = name.trim();
            if (wanted.isEmpty()) {
                continue;
            }
            StructField found = null;
            for (StructField f : schema.fields()) {
                if (f.name().equals(wanted)) {
                    found = f;
                }
            }
            if (found == null) {
                return null;
            }
            fields.add(found);
        }
        return fields.isEmpty() ? null : new StructType(fields.toArray(new StructField[0]));
    }

    private static String sha256(byte[] data) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
