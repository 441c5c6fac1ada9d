/* The plain run of a JSON string's bytes, shared by the JSON readers (json_value.c's
 * transcoder, frames_check.c's canonical check). Internal to csrc/.
 */
#ifndef TAY_JSON_SCAN_H
#define TAY_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__  /* every x86-64 CPU: the baseline, so no run-time choice is needed */
#include <emmintrin.h>
#endif

/* Word-at-a-time byte tests (each is nonzero iff some byte of v matches; the bit of the
 * first such byte is exact, later ones may be reported falsely). */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t has_zero_byte(uint64_t v) { return (v - ONES) & ~v & HIGHS; }
static inline uint64_t has_byte_below_0x20(uint64_t v) { return (v - 0x20 * ONES) & ~v & HIGHS; }

/* The offset of the first byte at or after pos that is '"', '\\' or a control byte (size
 * when none is), and in *high whether any byte before it is >= 0x80: only such a run needs
 * the UTF-8 check. With SSE2, sixteen bytes are tested at a time and the first block
 * holding a stop byte ends the run at that byte; the last 15 bytes of the input (and every
 * byte without SSE2) go eight at a time until a word holds a byte that stops the run, then
 * one at a time. */
static inline size_t json_plain_run(const uint8_t *in, size_t pos, size_t size, int *high) {
    uint64_t highs_seen = 0;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i control_max = _mm_set1_epi8(0x1F);
    while (size - pos >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(in + pos));
        __m128i stop = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
            _mm_cmpeq_epi8(_mm_min_epu8(v, control_max), v));  /* min(b, 0x1F) == b: b < 0x20 */
        unsigned stops = (unsigned)_mm_movemask_epi8(stop);
        unsigned highs = (unsigned)_mm_movemask_epi8(v);  /* bit k: byte k >= 0x80 */
        if (stops) {
            unsigned first = (unsigned)__builtin_ctz(stops);
            highs_seen |= highs & ((1u << first) - 1u);  /* only the bytes before the stop */
            *high = highs_seen != 0;
            return pos + first;
        }
        highs_seen |= highs;
        pos += 16;
    }
#endif
    while (size - pos >= 8) {
        uint64_t v;
        memcpy(&v, in + pos, 8);
        if (has_zero_byte(v ^ ('"' * ONES)) | has_zero_byte(v ^ ('\\' * ONES))
            | has_byte_below_0x20(v))
            break;
        highs_seen |= v & HIGHS;
        pos += 8;
    }
    while (pos < size) {
        uint8_t c = in[pos];
        if (c == '"' || c == '\\' || c < 0x20) break;
        highs_seen |= c & 0x80;
        pos++;
    }
    *high = highs_seen != 0;
    return pos;
}

#endif
