/* Canonical Value bytes -> compact JSON text, byte for byte what orjson.dumps writes for the
 * decoded object (execute frames carry job args as JSON; the job holds them as a Value).
 *
 * tay_value_scan() does every check first (same reasons and offsets as value_decode), then
 * the JSON is written from its node tape. Tag 07 (bytes) has no JSON form: once the whole
 * input is valid, the first bytes node is refused with TAY_J_UNSUPPORTED_TYPE at its tag.
 *
 * orjson's output, reproduced here: no whitespace; strings escape '"', '\\', \b \t \n \f \r
 * and other bytes < 0x20 as \u00xx (lowercase), everything else raw UTF-8; floats as the
 * shortest digits that round-trip, fixed notation ("0.00001", "1e15" as
 * "1000000000000000.0", always a fraction) when the decimal exponent E is in -5..15,
 * otherwise "d[.ddd]e+E" / "d[.ddd]e-E".
 */
#define _GNU_SOURCE
#include "tay_native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *data;
    const uint8_t *tags;
    const uint64_t *values;
    const uint32_t *offsets;
    size_t index;        /* next tape entry */
    uint8_t *out;
    size_t capacity, length;
} json_writer;

static int put(json_writer *w, const char *text, size_t n) {
    if (w->capacity - w->length < n) return -TAY_J_OUTPUT_FULL;
    memcpy(w->out + w->length, text, n);
    w->length += n;
    return 0;
}

static int put_string(json_writer *w, const uint8_t *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    /* worst case: every byte becomes \u00xx */
    if (w->capacity - w->length < 6 * n + 2) return -TAY_J_OUTPUT_FULL;
    uint8_t *o = w->out + w->length;
    *o++ = '"';
    for (size_t k = 0; k < n; k++) {
        uint8_t c = s[k];
        if (c >= 0x20 && c != '"' && c != '\\') { *o++ = c; continue; }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\t': *o++ = 't'; break;
        case '\n': *o++ = 'n'; break;
        case '\f': *o++ = 'f'; break;
        case '\r': *o++ = 'r'; break;
        default:
            *o++ = 'u'; *o++ = '0'; *o++ = '0';
            *o++ = (uint8_t)hex[c >> 4]; *o++ = (uint8_t)hex[c & 15];
        }
    }
    *o++ = '"';
    w->length = (size_t)(o - w->out);
    return 0;
}

static int put_unsigned(json_writer *w, int negative, uint64_t magnitude) {
    char digits[24];
    size_t n = sizeof digits;
    do { digits[--n] = (char)('0' + magnitude % 10); magnitude /= 10; } while (magnitude);
    if (negative) digits[--n] = '-';
    return put(w, digits + n, sizeof digits - n);
}

/* %.{p-1}e of |real| -> its p digits and decimal exponent (locale-proof: the decimal point,
 * whatever character it is, is skipped). */
static void scientific_digits(double real, int precision, char *digits, int *exponent) {
    char text[40];
    snprintf(text, sizeof text, "%.*e", precision - 1, real);
    size_t n = 0;
    const char *p = text;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[n++] = *p;
    digits[n] = 0;
    *exponent = (int)strtol(p + 1, NULL, 10);
}

static int round_trips(const char *digits, int exponent, double real) {
    char text[48];
    snprintf(text, sizeof text, "%c.%se%d", digits[0], digits + 1, exponent);
    return tay_strtod_c(text, NULL) == real;
}

/* digits += 1 ulp in the last place (carry may add a digit: then the exponent grows). */
static void increment_digits(char *digits, int *exponent) {
    size_t n = strlen(digits);
    size_t k = n;
    while (k > 0 && digits[k - 1] == '9') digits[--k] = '0';
    if (k > 0) { digits[k - 1]++; return; }
    digits[0] = '1';
    digits[n] = 0;  /* "99" -> "10": same length, one decade up */
    (*exponent)++;
}

/* The shortest digits that read back as `real` (> 0), nearest among equals (as ryu).
 * More correctly rounded digits only get closer, so the shortest length that round-trips
 * is found by bisection. At a power of two the rounding interval is lopsided: a shorter
 * decimal just above `real` may hit while the nearest one of that length misses. */
static void shortest_digits(double real, char *digits, int *exponent) {
    int low = 1, high = 17;  /* 17 significant digits always round-trip */
    while (low < high) {
        int middle = (low + high) / 2;
        scientific_digits(real, middle, digits, exponent);
        if (round_trips(digits, *exponent, real)) high = middle;
        else low = middle + 1;
    }
    uint64_t bits;
    memcpy(&bits, &real, sizeof bits);
    if ((bits & 0x000FFFFFFFFFFFFFull) == 0) {
        for (int precision = 1; precision < low; precision++) {
            scientific_digits(real, precision, digits, exponent);
            increment_digits(digits, exponent);
            if (round_trips(digits, *exponent, real)) return;
        }
    }
    scientific_digits(real, low, digits, exponent);
}

static int put_float(json_writer *w, double real) {
    char text[40], digits[24];
    size_t n = 0;
    if (real < 0 || (real == 0 && 1 / real < 0)) { text[n++] = '-'; real = -real; }
    if (real == 0) return put(w, "-0.0" + (n ? 0 : 1), n ? 4 : 3);
    int exponent;
    shortest_digits(real, digits, &exponent);
    size_t count = strlen(digits);
    while (count > 1 && digits[count - 1] == '0') digits[--count] = 0;
    if (exponent >= -5 && exponent < 16) {
        if (exponent < 0) {
            n += (size_t)sprintf(text + n, "0.%.*s%s", -exponent - 1, "0000", digits);
        } else if ((int)count <= exponent + 1) {
            n += (size_t)sprintf(text + n, "%s%.*s.0", digits, exponent + 1 - (int)count,
                                 "000000000000000");
        } else {
            n += (size_t)sprintf(text + n, "%.*s.%s", exponent + 1, digits, digits + exponent + 1);
        }
    } else if (count == 1) {
        n += (size_t)sprintf(text + n, "%se%+d", digits, exponent);
    } else {
        n += (size_t)sprintf(text + n, "%c.%se%+d", digits[0], digits + 1, exponent);
    }
    return put(w, text, n);
}

static int write_node(json_writer *w) {
    size_t i = w->index++;
    uint8_t tag = w->tags[i];
    uint64_t value = w->values[i];
    int rc;
    switch (tag) {
    case 0x00: return put(w, "null", 4);
    case 0x01: return put(w, "false", 5);
    case 0x02: return put(w, "true", 4);
    case 0x03: return put_unsigned(w, 1, (uint64_t)0 - value);
    case 0x04: return put_unsigned(w, 0, value);
    case 0x05: {
        double real;
        memcpy(&real, &value, sizeof real);
        return put_float(w, real);
    }
    case 0x06: return put_string(w, w->data + w->offsets[i], (size_t)value);
    case 0x08:
        if ((rc = put(w, "[", 1))) return rc;
        for (uint64_t k = 0; k < value; k++) {
            if (k && (rc = put(w, ",", 1))) return rc;
            if ((rc = write_node(w))) return rc;
        }
        return put(w, "]", 1);
    default:  /* 0x09: keys are tape entries too */
        if ((rc = put(w, "{", 1))) return rc;
        for (uint64_t k = 0; k < value; k++) {
            if (k && (rc = put(w, ",", 1))) return rc;
            if ((rc = write_node(w))) return rc;
            if ((rc = put(w, ":", 1))) return rc;
            if ((rc = write_node(w))) return rc;
        }
        return put(w, "}", 1);
    }
}

/* Checks the Value (tay_value_scan), refuses bytes, then writes the JSON from the tape. */
static int write_json(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                      uint64_t max_binary, size_t tape_capacity, uint8_t *tags, uint64_t *values,
                      uint32_t *offsets, double *reals, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset) {
    size_t count;
    *out_length = 0;
    int rc = tay_value_scan(data, size, max_depth, max_nodes, max_binary, tape_capacity, tags,
                            values, offsets, reals, &count, error_offset);
    if (rc < 0) return rc;
    for (size_t i = 0; i < count; i++)
        if (tags[i] == 0x07) {
            *error_offset = offsets[i] - 5;
            return -TAY_J_UNSUPPORTED_TYPE;
        }
    json_writer w = {data, tags, values, offsets, 0, out, out_capacity, 0};
    if ((rc = write_node(&w))) {
        *error_offset = 0;
        return rc;
    }
    *out_length = w.length;
    return 0;
}

/* The tape lives on the stack for small values and in one malloc'd block otherwise. */
#define SMALL_TAPE 128

int tay_value_to_json(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                      uint64_t max_binary, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset) {
    uint8_t small_tags[SMALL_TAPE];
    uint64_t small_values[SMALL_TAPE];
    uint32_t small_offsets[SMALL_TAPE];
    double small_reals[SMALL_TAPE];
    uint8_t *tags = small_tags;
    uint64_t *values = small_values;
    uint32_t *offsets = small_offsets;
    double *reals = small_reals;
    void *block = NULL;
    size_t capacity = size < max_nodes ? size : (size_t)max_nodes;  /* a node takes >= 1 byte */
    if (capacity < 1) capacity = 1;
    if (capacity > SMALL_TAPE) {
        block = malloc(capacity * (sizeof *values + sizeof *reals + sizeof *offsets + 1));
        if (!block) { *error_offset = 0; *out_length = 0; return -TAY_J_NO_MEMORY; }
        values = block;
        reals = (double *)(values + capacity);
        offsets = (uint32_t *)(reals + capacity);
        tags = (uint8_t *)(offsets + capacity);
    }
    int rc = write_json(data, size, max_depth, max_nodes, max_binary, capacity, tags, values,
                        offsets, reals, out, out_capacity, out_length, error_offset);
    free(block);
    return rc;
}
