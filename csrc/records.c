/* Record v1 frames (storage.md §1): batch encoder and the replay scanner.
 *
 * Frame: "TAY\0" | u8 version=1 | u8 type | u8 flags=0 | u8 schema | u64 seq | u32 N |
 *        u32 CRC32C(h[0:20]) | N payload bytes | u32 CRC32C(h[0:20] || payload), big-endian.
 */
#include "tay_native.h"

#include <string.h>

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static uint32_t get_u32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get_u64(const uint8_t *p) {
    return ((uint64_t)get_u32(p) << 32) | get_u32(p + 4);
}

/* Writes one frame whose fields are already checked (type 1..254, schema 1..255, sequence
 * nonzero, n <= TAY_RECORD_MAX_PAYLOAD) at out. Returns its length, 28 + n. */
size_t tay_encode_frame(uint8_t *out, uint8_t type, uint8_t schema, uint64_t sequence,
                        const uint8_t *payload, size_t n) {
    memcpy(out, "TAY\0", 4);
    out[4] = 1;
    out[5] = type;
    out[6] = 0;
    out[7] = schema;
    put_u64(out + 8, sequence);
    put_u32(out + 16, (uint32_t)n);
    uint32_t header_crc = tay_crc32c(0, out, 20);
    put_u32(out + 20, header_crc);
    memcpy(out + 24, payload, n);
    put_u32(out + 24 + n, tay_crc32c(header_crc, payload, n));
    return 28 + n;
}

/* Encodes count frames into out. payloads is every payload concatenated in order;
 * lengths[i] is record i's payload length. out_length must equal the sum of 28 + lengths[i].
 * Returns 0, or TAY_E_RECORD_{TYPE,SCHEMA,SEQUENCE,LENGTH} with *error_index set to the first
 * bad record (nothing useful is in out then), or TAY_E_OUTPUT_SIZE. Checks every record
 * before writing any byte. */
int tay_encode_records(size_t count, const int64_t *types, const int64_t *schemas,
                       const uint64_t *sequences, const uint64_t *lengths,
                       const uint8_t *payloads, uint8_t *out, size_t out_length,
                       size_t *error_index) {
    size_t needed = 0;
    for (size_t i = 0; i < count; i++) {
        *error_index = i;
        if (types[i] < 1 || types[i] > 254) return TAY_E_RECORD_TYPE;
        if (schemas[i] < 1 || schemas[i] > 255) return TAY_E_RECORD_SCHEMA;
        if (sequences[i] == 0) return TAY_E_RECORD_SEQUENCE;
        if (lengths[i] > TAY_RECORD_MAX_PAYLOAD) return TAY_E_RECORD_LENGTH;
        needed += 28 + (size_t)lengths[i];
    }
    if (needed != out_length) return TAY_E_OUTPUT_SIZE;
    for (size_t i = 0; i < count; i++) {
        size_t n = (size_t)lengths[i];
        out += tay_encode_frame(out, (uint8_t)types[i], (uint8_t)schemas[i], sequences[i],
                                payloads, n);
        payloads += n;
    }
    return 0;
}

/* Returns the total length (28 + N) of the frame at p when it passes every step of §1.2
 * with decode budget `budget`, given `available` bytes from p; 0 when any step fails.
 * The caller has already matched the 4-byte magic. */
static size_t valid_frame_length(const uint8_t *p, size_t available, uint32_t budget) {
    if (available < 24 || p[4] != 1) return 0;
    uint32_t header_crc = tay_crc32c(0, p, 20);
    if (header_crc != get_u32(p + 20)) return 0;
    if (p[6] != 0 || p[5] == 0 || p[5] == 255 || p[7] == 0 || get_u64(p + 8) == 0) return 0;
    uint32_t n = get_u32(p + 16);
    if (n > TAY_RECORD_MAX_PAYLOAD || n > budget || available < 28 || available - 28 < n) return 0;
    if (tay_crc32c(header_crc, p + 24, n) != get_u32(p + 24 + n)) return 0;
    return 28 + (size_t)n;
}

/* Walks frames in buf[start:end] while each passes §1.2 and carries sequence
 * first_sequence + index. Fills up to `capacity` entries of the five parallel arrays and sets
 * *count and *stop_offset (the offset of the first byte not consumed).
 * Returns TAY_SCAN_END (stop_offset == end), TAY_SCAN_NOT_RECORD (fewer than 4 bytes or no
 * magic), TAY_SCAN_BAD_RECORD (magic present, §1.2 failed), TAY_SCAN_SEQUENCE, or
 * TAY_SCAN_FULL (capacity reached; call again from stop_offset). Requires start <= end. */
int tay_scan_records(const uint8_t *buf, size_t start, size_t end, uint32_t budget,
                     uint64_t first_sequence, size_t capacity, uint64_t *offsets,
                     uint8_t *types, uint8_t *schemas, uint64_t *sequences,
                     uint32_t *lengths, size_t *count, size_t *stop_offset) {
    size_t offset = start, found = 0;
    int code = TAY_SCAN_END;
    while (offset < end) {
        const uint8_t *p = buf + offset;
        size_t available = end - offset;
        if (found == capacity) { code = TAY_SCAN_FULL; break; }
        if (available < 4 || memcmp(p, "TAY\0", 4) != 0) { code = TAY_SCAN_NOT_RECORD; break; }
        size_t frame = valid_frame_length(p, available, budget);
        if (frame == 0) { code = TAY_SCAN_BAD_RECORD; break; }
        uint64_t sequence = get_u64(p + 8);
        if (sequence != first_sequence + found || sequence < first_sequence) {
            code = TAY_SCAN_SEQUENCE;
            break;
        }
        offsets[found] = offset;
        types[found] = p[5];
        schemas[found] = p[7];
        sequences[found] = sequence;
        lengths[found] = get_u32(p + 16);
        found++;
        offset += frame;
    }
    *count = found;
    *stop_offset = offset;
    return code;
}
