/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78, init/xorout 0xFFFFFFFF).
 *
 * Three implementations behind one function pointer chosen once by tay_crc32c_select():
 * SSE4.2 (x86-64 crc32 instruction), ARMv8 CRC extension, and a portable slicing-by-8
 * table. Hardware paths use per-function target attributes, so the rest of the module is
 * built for the baseline CPU and runs anywhere.
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
/* SSE4.2 path: same register contract as crc_software. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
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
