package dev.lakewarden.spark;

import org.apache.spark.sql.api.java.UDF2;

/**
 * The bucket of a record key, exactly as lakewarden.table.bucket.key_buckets computes it:
 * fold(fnv1a64(utf8(key))) mod buckets, with fold(h) = h ^ (h >>> 32) and the modulo taken
 * on the unsigned 64-bit value. A null key hashes as the empty string (as in Python).
 *
 * The UTF-8 bytes are produced on the fly from the key's chars (no byte array per row);
 * an unpaired surrogate is encoded as '?', as String.getBytes(UTF_8) does, but a key that
 * reached Spark as text never holds one.
 */
public final class KeyBucket implements UDF2<String, Integer, Integer> {
    private static final long serialVersionUID = 1L;
    static final long OFFSET_BASIS = 0xcbf29ce484222325L;
    static final long PRIME = 0x100000001b3L;

    @Override
    public Integer call(String key, Integer buckets) {
        if (buckets == null || buckets < 1) {
            throw new IllegalArgumentException("buckets must be >= 1, got " + buckets);
        }
        long h = hash(key == null ? "" : key);
        long folded = h ^ (h >>> 32);
        return (int) Long.remainderUnsigned(folded, buckets.longValue());
    }

    static long hash(String key) {
        long h = OFFSET_BASIS;
        int n = key.length();
        for (int i = 0; i < n; i++) {
            int c = key.charAt(i);
            if (c < 0x80) {
                h = (h ^ c) * PRIME;
            } else if (c < 0x800) {
                h = (h ^ (0xc0 | (c >> 6))) * PRIME;
                h = (h ^ (0x80 | (c & 0x3f))) * PRIME;
            } else if (Character.isHighSurrogate((char) c)
                    && i + 1 < n
                    && Character.isLowSurrogate(key.charAt(i + 1))) {
                int cp = Character.toCodePoint((char) c, key.charAt(++i));
                h = (h ^ (0xf0 | (cp >> 18))) * PRIME;
                h = (h ^ (0x80 | ((cp >> 12) & 0x3f))) * PRIME;
                h = (h ^ (0x80 | ((cp >> 6) & 0x3f))) * PRIME;
                h = (h ^ (0x80 | (cp & 0x3f))) * PRIME;
            } else if (Character.isSurrogate((char) c)) {
                h = (h ^ '?') * PRIME;
            } else {
                h = (h ^ (0xe0 | (c >> 12))) * PRIME;
                h = (h ^ (0x80 | ((c >> 6) & 0x3f))) * PRIME;
                h = (h ^ (0x80 | (c & 0x3f))) * PRIME;
            }
        }
        return h;
    }
}
