package dev.lakewarden.spark;

import org.apache.spark.sql.api.java.UDF1;

/**
 * Hive's escaping of one partition value, exactly as
 * lakewarden.table.bucket.escape_partition_value: the characters " # % ' * / : = ? \ { [ ] ^,
 * DEL and the control characters below 0x20 become %XX (upper-case hex); null and the empty
 * string are __HIVE_DEFAULT_PARTITION__.
 */
public final class PartitionValue implements UDF1<String, String> {
    private static final long serialVersionUID = 1L;
    static final String DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__";
    private static final String UNSAFE = "\"#%'*/:=?\\{[]^\u007f";
    private static final char[] HEX = "0123456789ABCDEF".toCharArray();

    @Override
    public String call(String value) {
        if (value == null || value.isEmpty()) {
            return DEFAULT_PARTITION;
        }
        StringBuilder out = null;
        int n = value.length();
        for (int i = 0; i < n; i++) {
            char c = value.charAt(i);
            boolean unsafe = c < 0x20 || UNSAFE.indexOf(c) >= 0;
            if (unsafe && out == null) {
                out = new StringBuilder(n + 8).append(value, 0, i);
            }
            if (unsafe) {
                out.append('%').append(HEX[(c >> 4) & 0xf]).append(HEX[c & 0xf]);
            } else if (out != null) {
                out.append(c);
            }
        }
        return out == null ? value : out.toString();
    }
}
