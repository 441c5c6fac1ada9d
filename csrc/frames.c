/* Unix-socket framing: u32 big-endian payload length, then the payload. */
#include "tay_native.h"

/* Splits every complete frame of buf[0:size] into (starts[i], ends[i]) payload slices, up to
 * `capacity` frames; *consumed is the offset after the last complete frame.
 * Returns TAY_FRAME_OK (stopped at an incomplete frame or at the end), TAY_FRAME_TOO_LARGE
 * (a length prefix > max_frame, detected before its payload arrives), TAY_FRAME_EMPTY
 * (a zero length), or TAY_FRAME_FULL (capacity reached; call again from *consumed).
 * On an error *consumed is the offset of the offending length prefix. */
int tay_split_frames(const uint8_t *buf, size_t size, uint32_t max_frame, size_t capacity,
                     uint64_t *starts, uint64_t *ends, size_t *count, size_t *consumed) {
    size_t offset = 0, found = 0;
    int code = TAY_FRAME_OK;
    while (size - offset >= 4) {
        const uint8_t *p = buf + offset;
        uint32_t length = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                          ((uint32_t)p[2] << 8) | p[3];
        if (length == 0) { code = TAY_FRAME_EMPTY; break; }
        if (length > max_frame) { code = TAY_FRAME_TOO_LARGE; break; }
        if (size - offset - 4 < length) break;
        if (found == capacity) { code = TAY_FRAME_FULL; break; }
        starts[found] = offset + 4;
        ends[found] = offset + 4 + length;
        found++;
        offset += 4 + (size_t)length;
    }
    *count = found;
    *consumed = offset;
    return code;
}
