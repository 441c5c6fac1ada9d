/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78, init/xorout 0xFFFFFFFF).
 *
 * Three implementations behind one function pointer chosen once by tay_crc32c_select():
 * SSE4.2 (x86-64 crc32 instruction), ARMv8 CRC extension, and a portable slicing-by-8
 * table. Hardware paths use per-function target attributes, so the rest of the module is
 * built for the baseline CPU and runs anywhere.
 *
 * The x86-64 path runs three independent streams over a buffer's thirds: one crc32
 * instruction has a latency of three cycles and a throughput of one, so a single chain
 * of them leaves two thirds of the unit idle (a restart CRCs every byte of its segments
 * twice: each record's frame, and the running file CRC). The three registers are joined
 * with the CRC's linearity, reg(c, A || B) = shift_|B|(reg(c, A)) ^ reg(0, B), where
 * shift_n (n zero bytes fed to a register) is a fixed 32x32 bit matrix over GF(2),
 * applied as four byte tables built once at select time.
 */
#include "tay_native.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define TAY_HAVE_X86 1
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#define TAY_HAVE_ARM 1
#endif

typedef uint32_t (*crc_fn)(uint32_t register_value, const uint8_t *data, size_t length);

static uint32_t table[8][256];

/* Fills the slicing-by-8 tables. Idempotent; called by tay_crc32c_select(). */
static void build_tables(void) {
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
        table[0][byte] = crc;
    }
    for (uint32_t byte = 0; byte < 256; byte++)
        for (int slice = 1; slice < 8; slice++)
            table[slice][byte] = (table[slice - 1][byte] >> 8) ^ table[0][table[slice - 1][byte] & 0xFF];
}

/* Portable path. Takes and returns the unfinalized register. Reads 8 bytes at a time
 * little-endian (memcpy keeps it alignment-safe; the byte loop handles big-endian hosts). */
static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc;
        crc = table[7][word & 0xFF] ^ table[6][(word >> 8) & 0xFF] ^
              table[5][(word >> 16) & 0xFF] ^ table[4][(word >> 24) & 0xFF] ^
              table[3][(word >> 32) & 0xFF] ^ table[2][(word >> 40) & 0xFF] ^
              table[1][(word >> 48) & 0xFF] ^ table[0][word >> 56];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        crc = table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef TAY_HAVE_X86
/* One chain of crc32 instructions: same register contract as crc_software. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42_chain(uint32_t crc, const uint8_t *p,
                                                                  size_t n) {
#if defined(__x86_64__)
    uint64_t wide = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = _mm_crc32_u64(wide, word);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)wide;
#endif
    while (n--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}

#if defined(__x86_64__)
/* Stripe widths of the three-stream path (multiples of 8): a long stripe for file-sized
 * buffers, a short one so that a record of a few hundred bytes gains too. */
#define STRIPE_LONG 4096
#define STRIPE_SHORT 256

static const uint8_t zeros[STRIPE_LONG];
static uint32_t shift_long[4][256], shift_short[4][256];

/* The tables of shift_n: column b is the register 1 << b after n zero bytes (the map is
 * linear: no data, no constant term); table k holds every combination of columns 8k..8k+7. */
static void build_shift(uint32_t table[4][256], size_t n) {
    uint32_t column[32];
    for (int b = 0; b < 32; b++)
        column[b] = crc_sse42_chain(1u << b, zeros, n);
    for (int k = 0; k < 4; k++) {
        table[k][0] = 0;
        for (unsigned v = 1; v < 256; v++)
            table[k][v] = table[k][v & (v - 1)] ^ column[8 * k + __builtin_ctz(v)];
    }
}

static inline uint32_t shift_apply(const uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF]
           ^ table[3][crc >> 24];
}

/* 3 * width bytes from register crc: three chains over the thirds, joined. */
__attribute__((target("sse4.2"))) static inline uint32_t crc_stripe(
    uint32_t crc, const uint8_t *p, size_t width, const uint32_t table[4][256]) {
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    for (size_t i = 0; i < width; i += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p + width + i, 8);
        memcpy(&w2, p + 2 * width + i, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    crc = shift_apply(table, (uint32_t)c0) ^ (uint32_t)c1;
    return shift_apply(table, crc) ^ (uint32_t)c2;
}
#endif

/* SSE4.2 path: same register contract as crc_software. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
                                                            size_t n) {
#if defined(__x86_64__)
    while (n >= 3 * STRIPE_LONG) {
        crc = crc_stripe(crc, p, STRIPE_LONG, shift_long);
        p += 3 * STRIPE_LONG;
        n -= 3 * STRIPE_LONG;
    }
    while (n >= 3 * STRIPE_SHORT) {
        crc = crc_stripe(crc, p, STRIPE_SHORT, shift_short);
        p += 3 * STRIPE_SHORT;
        n -= 3 * STRIPE_SHORT;
    }
#endif
    return crc_sse42_chain(crc, p, n);
}
#endif

#ifdef TAY_HAVE_ARM
/* ARMv8 CRC extension path: same register contract as crc_software. */
__attribute__((target("+crc"))) static uint32_t crc_armv8(uint32_t crc, const uint8_t *p,
                                                         size_t n) {
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = __builtin_aarch64_crc32cx(crc, word);
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = __builtin_aarch64_crc32cb(crc, *p++);
    return crc;
}
#endif

static crc_fn active = crc_software;

/* Probes the CPU and picks the fastest path (software when force_software != 0).
 * Returns TAY_CRC_SOFTWARE, TAY_CRC_SSE42 or TAY_CRC_ARMV8. Call once at module load. */
int tay_crc32c_select(int force_software) {
    build_tables();
    active = crc_software;
    if (force_software)
        return TAY_CRC_SOFTWARE;
#ifdef TAY_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
#if defined(__x86_64__)
        build_shift(shift_long, STRIPE_LONG);
        build_shift(shift_short, STRIPE_SHORT);
#endif
        active = crc_sse42;
        return TAY_CRC_SSE42;
    }
#endif
#ifdef TAY_HAVE_ARM
    if (getauxval(AT_HWCAP) & HWCAP_CRC32) {
        active = crc_armv8;
        return TAY_CRC_ARMV8;
    }
#endif
    return TAY_CRC_SOFTWARE;
}

/* CRC32C of data continuing from the FINALIZED value crc (0 to start), zlib-style:
 * tay_crc32c(tay_crc32c(0, a), b) == tay_crc32c(0, a || b). Returns the finalized CRC. */
uint32_t tay_crc32c(uint32_t crc, const uint8_t *data, size_t length) {
    return active(crc ^ 0xFFFFFFFFu, data, length) ^ 0xFFFFFFFFu;
}

/* Same as tay_crc32c for callers that hold char data (cffi passes Python bytes to char *
 * without building a buffer object, which halves the cost of small CRCs). */
uint32_t tay_crc32c_chars(uint32_t crc, const char *data, size_t length) {
    return tay_crc32c(crc, (const uint8_t *)data, length);
}
