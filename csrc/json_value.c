/* JSON text -> canonical Value bytes (storage.md §5), without building any object.
 *
 * The server receives args as JSON; encoding them through Python objects costs a walk per
 * node. tay_json_to_value() parses RFC 8259 JSON and writes the canonical Value directly:
 * object members are written in input order and, only when the keys were not already
 * ascending by UTF-8 bytes, sorted afterwards by permuting their encoded spans.
 *
 * Refusals (return -code, *error_offset = input offset):
 *   TAY_J_MALFORMED          the first byte that cannot continue the grammar (size at EOF)
 *   TAY_V_INVALID_UTF8       the opening quote of a string with bad UTF-8 or a lone surrogate
 *   TAY_J_INTEGER_RANGE      the first byte of an integer outside -2^63..2^64-1
 *   TAY_V_NON_FINITE_FLOAT   the first byte of a number that overflows binary64
 *   TAY_V_DEPTH_LIMIT        a '[' or '{' at depth >= TAY_VALUE_DEPTH_CEILING (root = 1)
 *   TAY_J_DUPLICATE_KEY      the opening quote of the later of two equal keys
 *   TAY_J_OUTPUT_FULL        out_capacity too small (9 * size + 16 always suffices)
 *   TAY_J_NO_MEMORY          malloc failed (member index or sort scratch)
 * Errors are reported in input order: the first fault met while reading wins.
 * tay_json_to_value_measured() also counts the Value's nodes and depth as
 * tay.engine.values.measure does (an enqueue's args are measured on their way to bytes).
 */
#define _GNU_SOURCE
#include "tay_native.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "json_scan.h"

/* strtod must not follow LC_NUMERIC (a ',' decimal point would stop it at the '.'). */
static locale_t c_numeric_locale;
__attribute__((constructor)) static void make_c_locale(void) {
    c_numeric_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

double tay_strtod_c(const char *text, char **end) {
    return c_numeric_locale ? strtod_l(text, end, c_numeric_locale) : strtod(text, end);
}

typedef struct {
    const uint8_t *key;  /* key bytes inside the output buffer */
    uint32_t key_length;
    size_t key_input;    /* input offset of the key's opening quote */
    size_t start, end;   /* the member's encoded span (key tag .. end of value) */
} member;

typedef struct {
    const uint8_t *in;
    size_t size, pos;
    uint8_t *out;
    size_t capacity, length;
    member *members;
    size_t member_count, member_capacity;
    size_t error_offset;
    uint64_t nodes;    /* every value and object key (tay.engine.values.measure's count) */
    uint32_t deepest;  /* the root at 1, a member's key and value one below its object */
} json_reader;

static int fail_at(json_reader *j, int reason, size_t offset) {
    j->error_offset = offset;
    return -reason;
}

static int reserve_out(json_reader *j, size_t n) {
    if (j->capacity - j->length < n) return fail_at(j, TAY_J_OUTPUT_FULL, j->pos);
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static void skip_space(json_reader *j) {
    while (j->pos < j->size) {
        uint8_t c = j->in[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
        j->pos++;
    }
}

static int hex4(const uint8_t *p, uint32_t *value) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *value = v;
    return 1;
}

static size_t put_utf8(uint8_t *p, uint32_t cp) {
    if (cp < 0x80) { p[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { p[0] = (uint8_t)(0xC0 | cp >> 6); p[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        p[0] = (uint8_t)(0xE0 | cp >> 12); p[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        p[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    p[0] = (uint8_t)(0xF0 | cp >> 18); p[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    p[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); p[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* One \uXXXX escape (pos at the backslash) -> a code point; pairs surrogates.
 * Returns 0, or -reason (malformed escape; lone surrogate = invalid_utf8 at `quote`). */
static int read_unicode_escape(json_reader *j, size_t quote, uint32_t *cp) {
    if (j->size - j->pos < 6 || !hex4(j->in + j->pos + 2, cp))
        return fail_at(j, TAY_J_MALFORMED, j->pos);
    j->pos += 6;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return fail_at(j, TAY_V_INVALID_UTF8, quote);
    if (*cp < 0xD800 || *cp > 0xDBFF) return 0;
    uint32_t low;
    if (j->size - j->pos < 6 || j->in[j->pos] != '\\' || j->in[j->pos + 1] != 'u' ||
        !hex4(j->in + j->pos + 2, &low) || low < 0xDC00 || low > 0xDFFF)
        return fail_at(j, TAY_V_INVALID_UTF8, quote);
    j->pos += 6;
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
    return 0;
}

/* Advance pos over plain string bytes (anything but '"', '\\' and controls) and say
 * whether any of them is >= 0x80 (json_plain_run, json_scan.h). */
static int scan_plain(json_reader *j) {
    int high;
    j->pos = json_plain_run(j->in, j->pos, j->size, &high);
    return high;
}

/* The string at pos (its opening quote) -> tag 06 + u32 length + UTF-8 body. */
static int read_string(json_reader *j) {
    size_t quote = j->pos++;
    int rc = reserve_out(j, 5);
    if (rc) return rc;
    size_t head = j->length;
    j->out[head] = 0x06;
    j->length += 5;
    for (;;) {
        size_t run = j->pos;
        int high = scan_plain(j);
        size_t n = j->pos - run;
        if (high && !tay_utf8_valid(j->in + run, n)) return fail_at(j, TAY_V_INVALID_UTF8, quote);
        if ((rc = reserve_out(j, n + 4))) return rc;
        memcpy(j->out + j->length, j->in + run, n);
        j->length += n;
        if (j->pos >= j->size || j->in[j->pos] < 0x20) return fail_at(j, TAY_J_MALFORMED, j->pos);
        if (j->in[j->pos] == '"') break;
        if (j->size - j->pos < 2) return fail_at(j, TAY_J_MALFORMED, j->size);
        uint8_t e = j->in[j->pos + 1];
        uint32_t cp;
        switch (e) {
        case '"': case '\\': case '/': cp = e; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if ((rc = read_unicode_escape(j, quote, &cp))) return rc;
            j->length += put_utf8(j->out + j->length, cp);
            continue;
        default: return fail_at(j, TAY_J_MALFORMED, j->pos + 1);
        }
        j->pos += 2;
        j->out[j->length++] = (uint8_t)cp;
    }
    j->pos++;  /* the closing quote */
    size_t body = j->length - head - 5;
    if (body > 0xFFFFFFFFu) return fail_at(j, TAY_J_MALFORMED, quote);
    put_u32(j->out + head + 1, (uint32_t)body);
    return 0;
}

static size_t skip_digits(json_reader *j) {
    size_t start = j->pos;
    while (j->pos < j->size && j->in[j->pos] >= '0' && j->in[j->pos] <= '9') j->pos++;
    return j->pos - start;
}

static int write_integer(json_reader *j, size_t start, int negative, size_t first_digit) {
    uint64_t magnitude = 0;
    for (size_t k = first_digit; k < j->pos; k++) {
        uint64_t digit = (uint64_t)(j->in[k] - '0');
        if (magnitude > (UINT64_MAX - digit) / 10) return fail_at(j, TAY_J_INTEGER_RANGE, start);
        magnitude = magnitude * 10 + digit;
    }
    if (negative && magnitude > ((uint64_t)1 << 63)) return fail_at(j, TAY_J_INTEGER_RANGE, start);
    int rc = reserve_out(j, 9);
    if (rc) return rc;
    if (negative && magnitude) {
        j->out[j->length] = 0x03;
        put_u64(j->out + j->length + 1, (uint64_t)0 - magnitude);  /* two's complement */
    } else {
        j->out[j->length] = 0x04;  /* "-0" is the integer 0 */
        put_u64(j->out + j->length + 1, magnitude);
    }
    j->length += 9;
    return 0;
}

static int write_float(json_reader *j, size_t start) {
    size_t n = j->pos - start;
    char small[64];
    char *text = n < sizeof small ? small : malloc(n + 1);
    if (!text) return fail_at(j, TAY_J_NO_MEMORY, start);
    memcpy(text, j->in + start, n);
    text[n] = 0;
    double real = tay_strtod_c(text, NULL);
    if (text != small) free(text);
    uint64_t bits;
    memcpy(&bits, &real, sizeof bits);
    if ((bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull)
        return fail_at(j, TAY_V_NON_FINITE_FLOAT, start);
    int rc = reserve_out(j, 9);
    if (rc) return rc;
    j->out[j->length] = 0x05;
    put_u64(j->out + j->length + 1, bits);
    j->length += 9;
    return 0;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?  integers -> tag 03/04, others -> 05. */
static int read_number(json_reader *j) {
    size_t start = j->pos;
    int negative = j->in[j->pos] == '-';
    if (negative) j->pos++;
    size_t first_digit = j->pos;
    if (j->pos < j->size && j->in[j->pos] == '0') j->pos++;
    else if (!skip_digits(j)) return fail_at(j, TAY_J_MALFORMED, j->pos);
    int is_float = 0;
    if (j->pos < j->size && j->in[j->pos] == '.') {
        j->pos++;
        if (!skip_digits(j)) return fail_at(j, TAY_J_MALFORMED, j->pos);
        is_float = 1;
    }
    if (j->pos < j->size && (j->in[j->pos] == 'e' || j->in[j->pos] == 'E')) {
        j->pos++;
        if (j->pos < j->size && (j->in[j->pos] == '+' || j->in[j->pos] == '-')) j->pos++;
        if (!skip_digits(j)) return fail_at(j, TAY_J_MALFORMED, j->pos);
        is_float = 1;
    }
    return is_float ? write_float(j, start) : write_integer(j, start, negative, first_digit);
}

static int read_literal(json_reader *j, const char *word, uint8_t tag) {
    size_t n = strlen(word);
    if (j->size - j->pos < n || memcmp(j->in + j->pos, word, n) != 0)
        return fail_at(j, TAY_J_MALFORMED, j->pos);
    int rc = reserve_out(j, 1);
    if (rc) return rc;
    j->out[j->length++] = tag;
    j->pos += n;
    return 0;
}

static int read_value(json_reader *j, uint32_t depth);

/* After an item: ',' (another follows) -> 1, the closer -> 0, else -malformed. */
static int next_item(json_reader *j, uint8_t closer) {
    skip_space(j);
    if (j->pos < j->size && j->in[j->pos] == ',') { j->pos++; return 1; }
    if (j->pos < j->size && j->in[j->pos] == closer) { j->pos++; return 0; }
    return fail_at(j, TAY_J_MALFORMED, j->pos);
}

static int read_array(json_reader *j, uint32_t depth) {
    int rc = reserve_out(j, 5);
    if (rc) return rc;
    size_t head = j->length;
    j->out[head] = 0x08;
    j->length += 5;
    j->pos++;
    uint64_t count = 0;
    skip_space(j);
    if (j->pos < j->size && j->in[j->pos] == ']') j->pos++;
    else {
        do {
            if ((rc = read_value(j, depth + 1))) return rc;
            count++;
        } while ((rc = next_item(j, ']')) == 1);
        if (rc < 0) return rc;
    }
    put_u32(j->out + head + 1, (uint32_t)count);  /* count < size < 2^32 */
    return 0;
}

static int push_member(json_reader *j, member m) {
    if (j->member_count == j->member_capacity) {
        size_t capacity = j->member_capacity ? 2 * j->member_capacity : 64;
        member *grown = realloc(j->members, capacity * sizeof *grown);
        if (!grown) return fail_at(j, TAY_J_NO_MEMORY, m.key_input);
        j->members = grown;
        j->member_capacity = capacity;
    }
    j->members[j->member_count++] = m;
    return 0;
}

static int compare_keys(const member *a, const member *b) {
    uint32_t common = a->key_length < b->key_length ? a->key_length : b->key_length;
    int order = memcmp(a->key, b->key, common);
    if (order) return order;
    return (a->key_length > b->key_length) - (a->key_length < b->key_length);
}

static int compare_members(const void *a, const void *b) {
    return compare_keys(a, b);
}

/* Members [base, member_count) were written in input order; write them back sorted. */
static int sort_members(json_reader *j, size_t base, size_t body_start) {
    member *m = j->members + base;
    size_t n = j->member_count - base;
    qsort(m, n, sizeof *m, compare_members);
    size_t duplicate = SIZE_MAX;
    for (size_t k = 1; k < n; k++)
        if (compare_keys(&m[k - 1], &m[k]) == 0) {
            size_t later = m[k].key_input > m[k - 1].key_input ? m[k].key_input : m[k - 1].key_input;
            if (later < duplicate) duplicate = later;
        }
    if (duplicate != SIZE_MAX) return fail_at(j, TAY_J_DUPLICATE_KEY, duplicate);
    size_t span = j->length - body_start;
    uint8_t *copy = malloc(span ? span : 1);
    if (!copy) return fail_at(j, TAY_J_NO_MEMORY, j->pos);
    memcpy(copy, j->out + body_start, span);
    size_t cursor = body_start;
    for (size_t k = 0; k < n; k++) {
        size_t length = m[k].end - m[k].start;
        memcpy(j->out + cursor, copy + (m[k].start - body_start), length);
        cursor += length;
    }
    free(copy);
    return 0;
}

static int read_object(json_reader *j, uint32_t depth) {
    int rc = reserve_out(j, 5);
    if (rc) return rc;
    size_t head = j->length, base = j->member_count;
    j->out[head] = 0x09;
    j->length += 5;
    j->pos++;
    int ascending = 1;
    skip_space(j);
    if (j->pos < j->size && j->in[j->pos] == '}') j->pos++;
    else {
        do {
            skip_space(j);
            if (j->pos >= j->size || j->in[j->pos] != '"') return fail_at(j, TAY_J_MALFORMED, j->pos);
            member m = {0, 0, j->pos, j->length, 0};
            if ((rc = read_string(j))) return rc;
            j->nodes++;  /* the key, one below its object, like its value */
            m.key = j->out + m.start + 5;
            m.key_length = (uint32_t)(j->length - m.start - 5);
            if (j->member_count > base) {
                int order = compare_keys(&j->members[j->member_count - 1], &m);
                if (order == 0) return fail_at(j, TAY_J_DUPLICATE_KEY, m.key_input);
                if (order > 0) ascending = 0;
            }
            skip_space(j);
            if (j->pos >= j->size || j->in[j->pos] != ':') return fail_at(j, TAY_J_MALFORMED, j->pos);
            j->pos++;
            if ((rc = read_value(j, depth + 1))) return rc;
            m.end = j->length;
            if ((rc = push_member(j, m))) return rc;
        } while ((rc = next_item(j, '}')) == 1);
        if (rc < 0) return rc;
    }
    size_t count = j->member_count - base;
    if (!ascending && (rc = sort_members(j, base, head + 5))) return rc;
    j->member_count = base;
    put_u32(j->out + head + 1, (uint32_t)count);
    return 0;
}

static int read_value(json_reader *j, uint32_t depth) {
    j->nodes++;
    if (depth > j->deepest) j->deepest = depth;
    skip_space(j);
    if (j->pos >= j->size) return fail_at(j, TAY_J_MALFORMED, j->pos);
    uint8_t c = j->in[j->pos];
    switch (c) {
    case '{': case '[':
        if (depth >= TAY_VALUE_DEPTH_CEILING) return fail_at(j, TAY_V_DEPTH_LIMIT, j->pos);
        return c == '{' ? read_object(j, depth) : read_array(j, depth);
    case '"': return read_string(j);
    case 't': return read_literal(j, "true", 0x02);
    case 'f': return read_literal(j, "false", 0x01);
    case 'n': return read_literal(j, "null", 0x00);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return read_number(j);
        return fail_at(j, TAY_J_MALFORMED, j->pos);
    }
}

static int transcode(json_reader *j) {
    int rc;
    if (j->size > 0xFFFFFFFFu) rc = fail_at(j, TAY_J_INPUT_SIZE, 0);
    else {
        rc = read_value(j, 1);
        if (rc == 0) {
            skip_space(j);
            if (j->pos != j->size) rc = fail_at(j, TAY_J_MALFORMED, j->pos);
        }
    }
    free(j->members);
    return rc;
}

int tay_json_to_value(const uint8_t *json, size_t size, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset) {
    json_reader j = {json, size, 0, out, out_capacity, 0, NULL, 0, 0, 0, 0, 0};
    int rc = transcode(&j);
    *out_length = rc == 0 ? j.length : 0;
    *error_offset = j.error_offset;
    return rc;
}

int tay_json_to_value_measured(const uint8_t *json, size_t size, uint8_t *out,
                               size_t out_capacity, size_t *results) {
    json_reader j = {json, size, 0, out, out_capacity, 0, NULL, 0, 0, 0, 0, 0};
    int rc = transcode(&j);
    results[0] = rc == 0 ? j.length : 0;
    results[1] = j.error_offset;
    results[2] = (size_t)j.nodes;
    results[3] = j.deepest;
    return rc;
}
