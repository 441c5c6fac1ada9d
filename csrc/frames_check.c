/* Frames of a read buffer, split and pre-checked against the protocol's value domain in one
 * call (the server's per-buffer fast path; see tay/protocol/values.py for the domain).
 *
 * A frame is marked clean when its payload, *if it is valid JSON*, is an object that the
 * Python decoder would accept as it is: nesting of at most max_depth containers, at most
 * max_nodes nodes (1 + every value inside a container), object keys of at most
 * max_key_bytes, no repeated key in any object, and no integer literal of 19 digits or more
 * (those may leave the 64-bit range). The scan never decides a refusal: anything it is not
 * sure of (an escaped key, an object of more than CHECK_KEYS keys, nesting past
 * CHECK_DEPTH, a byte that cannot start a JSON token) leaves the frame unclean, and the
 * caller checks it the slow way, which names the error. JSON syntax itself is orjson's
 * job: for text that is not valid JSON the mark means nothing. */
#include "tay_native.h"

#include <string.h>

#include "json_scan.h"

#define CHECK_DEPTH 255   /* containers tracked; deeper frames are left to the slow path */
#define CHECK_KEYS 64     /* keys compared pairwise per object */
#define CHECK_OPEN_KEYS 256 /* keys of all open objects together */

typedef struct { uint32_t start, length; } key_span;

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The offset after the string whose opening quote is at s[i]; sets *escaped when it holds
 * a backslash. Returns 0 when the string is not closed. */
static size_t string_end(const uint8_t *s, size_t n, size_t i, int *escaped) {
    i++;
    while (i < n) {
        const uint8_t *quote = memchr(s + i, '"', n - i);
        const uint8_t *slash = memchr(s + i, '\\', quote ? (size_t)(quote - (s + i)) : n - i);
        if (slash) {
            *escaped = 1;
            i = (size_t)(slash - s) + 2;  /* skip the escaped byte */
            continue;
        }
        return quote ? (size_t)(quote - s) + 1 : 0;
    }
    return 0;
}

static int keys_distinct(const uint8_t *s, const key_span *keys, size_t from, size_t to) {
    for (size_t a = from; a < to; a++)
        for (size_t b = a + 1; b < to; b++)
            if (keys[a].length == keys[b].length &&
                memcmp(s + keys[a].start, s + keys[b].start, keys[a].length) == 0)
                return 0;
    return 1;
}

/* The value-domain limits of a walk. */
typedef struct { uint32_t max_depth; uint64_t max_nodes; uint32_t max_key_bytes; } domain_limits;

/* tay_json_domain_clean's walk of the container opened at s[i] alone, `depth0` containers
 * deep, with `open0` keys of the enclosing objects open: *nodes counts on, the container
 * included. The offset after it when it is surely clean as a part of the whole text (what
 * tay_json_domain_clean would find of its bytes there), 0 when not sure. */
static size_t domain_walk(const uint8_t *s, size_t n, size_t i, size_t depth0, size_t open0,
                          const domain_limits *limits, uint64_t *nodes) {
    uint8_t is_object[CHECK_DEPTH + 1];
    size_t key_base[CHECK_DEPTH + 1];
    key_span keys[CHECK_OPEN_KEYS];
    size_t open_keys = open0, depth = depth0;
    int expect_key = 0;
    if (i == n || (s[i] != '{' && s[i] != '[')) return 0;
    while (i < n) {
        uint8_t c = s[i];
        if (is_space(c) || c == ':') { i++; continue; }
        if (c == '{' || c == '[') {
            if (++*nodes > limits->max_nodes) return 0;
            if (++depth > limits->max_depth || depth > CHECK_DEPTH) return 0;
            is_object[depth] = c == '{';
            key_base[depth] = open_keys;
            expect_key = c == '{';
            i++;
        } else if (c == '}' || c == ']') {
            if (is_object[depth] && !keys_distinct(s, keys, key_base[depth], open_keys)) return 0;
            open_keys = key_base[depth];
            depth--;
            expect_key = 0;
            i++;
            if (depth == depth0) return i;
        } else if (c == ',') {
            expect_key = is_object[depth];
            i++;
        } else if (c == '"') {
            int escaped = 0;
            size_t end = string_end(s, n, i, &escaped);
            if (end == 0) return 0;
            if (expect_key) {
                size_t length = end - i - 2;
                if (escaped || length > limits->max_key_bytes) return 0;
                if (open_keys == CHECK_OPEN_KEYS ||
                    open_keys - key_base[depth] == CHECK_KEYS) return 0;
                keys[open_keys].start = (uint32_t)(i + 1);
                keys[open_keys].length = (uint32_t)length;
                open_keys++;
                expect_key = 0;
            } else if (++*nodes > limits->max_nodes) {
                return 0;
            }
            i = end;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t run = 0;
            for (; i < n; i++) {
                uint8_t d = s[i];
                if (d >= '0' && d <= '9') {
                    if (++run >= 19) return 0;
                } else if (d == '-' || d == '+' || d == '.' || d == 'e' || d == 'E') {
                    run = 0;
                } else {
                    break;
                }
            }
            if (++*nodes > limits->max_nodes) return 0;
        } else if (c == 't' || c == 'f' || c == 'n') {
            while (i < n && s[i] >= 'a' && s[i] <= 'z') i++;
            if (++*nodes > limits->max_nodes) return 0;
        } else {
            return 0;
        }
    }
    return 0;
}

int tay_json_domain_clean(const uint8_t *s, size_t n, uint32_t max_depth, uint64_t max_nodes,
                          uint32_t max_key_bytes) {
    /* the top-level object is a node that is never over the limit: counted from 0 with a
     * limit of at least 1, the first value inside is the first to be compared */
    const domain_limits limits = {max_depth, max_nodes ? max_nodes : 1, max_key_bytes};
    uint64_t nodes = 0;
    size_t i = 0;
    while (i < n && is_space(s[i])) i++;
    if (i == n || s[i] != '{') return 0;
    i = domain_walk(s, n, i, 0, 0, &limits, &nodes);
    if (!i) return 0;
    while (i < n && (is_space(s[i]) || s[i] == ':')) i++;  /* as the walk skips them */
    return i == n;
}

/* ---- the per-job reports, read without a JSON decoder ----------------------------------
 * A worker's `started` and `succeeded` reports are flat objects of a few identifiers. A
 * payload written in a strict subset of JSON is read here directly: one object whose
 * members are the six keys below, each at most once, and any other key but "v" with a
 * string value (tay-client sends job_id; the reports ignore it); string values of
 * printable ASCII without a backslash (so their text is their value); `version` exactly 1;
 * `result` exactly null. That subset is valid JSON by construction, so such a payload
 * decodes to {key: value} of those members, and what the fast path reads is what the
 * decoder would give (the caller has checked that no key repeats: a clean payload).
 * Anything else (an escape, "v", another value type, whitespace JSON does not allow,
 * another number) is left to the decoder: the mark is never a refusal. */

enum { F_VERSION, F_TYPE, F_REQUEST_ID, F_RESERVATION_ID, F_EXECUTION_ID, F_RESULT, F_KEYS,
       F_OTHER = F_KEYS };
static const char *const report_keys[F_KEYS] = {
    "version", "type", "request_id", "reservation_id", "execution_id", "result"};

#ifdef __SSE2__
/* Bit k set when byte k of the sixteen at p stops a plain string: a quote, a backslash, a
 * control byte, DEL or a byte >= 0x80 (signed, those and the control bytes are below 0x20). */
static unsigned plain_stops16(const uint8_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    __m128i below = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)), del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7F));
    __m128i stop = _mm_or_si128(_mm_or_si128(quote, backslash), _mm_or_si128(below, del));
    return (unsigned)_mm_movemask_epi8(stop);
}
#endif

/* The offset after the string opened at s[i] when it is printable ASCII without a
 * backslash; 0 otherwise: the first byte that can end the run (a quote, a backslash, a
 * control byte, DEL or a byte >= 0x80) decides. With SSE2 sixteen bytes are tested at a
 * time, and fewer than sixteen left before n as the last sixteen of s[0..n) with the bits
 * of the bytes before i shifted out (no byte loop, nothing read outside s[0..n)); without
 * SSE2, or when n < 16, eight bytes are taken at a time while none of them can end the
 * run and the byte loop decides the rest. */
static size_t plain_string_end(const uint8_t *s, size_t n, size_t i) {
    i++;
#ifdef __SSE2__
    if (n >= 16) {
        unsigned stops;
        for (;;) {
            if (n - i >= 16) {
                stops = plain_stops16(s + i);
                if (!stops) {
                    i += 16;
                    continue;
                }
            } else if (i < n) {
                stops = plain_stops16(s + n - 16) >> (16 - (n - i));
                if (!stops) return 0;
            } else {
                return 0;
            }
            size_t at = i + (size_t)__builtin_ctz(stops);
            return s[at] == '"' ? at + 1 : 0;
        }
    }
#endif
    while (n - i >= 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        if ((v & HIGHS) | has_zero_byte(v ^ ('"' * ONES)) | has_zero_byte(v ^ ('\\' * ONES))
            | has_zero_byte(v ^ (0x7F * ONES)) | ((v - 0x20 * ONES) & ~v & HIGHS))
            break;
        i += 8;
    }
    for (; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"') return i + 1;
        if (c < 0x20 || c > 0x7E || c == '\\') return 0;
    }
    return 0;
}

size_t tay_json_plain_string_end(const uint8_t *json, size_t size, size_t at) {
    return at < size ? plain_string_end(json, size, at) : 0;
}

static size_t skip_space(const uint8_t *s, size_t n, size_t i) {
    while (i < n && is_space(s[i])) i++;
    return i;
}

/* The report key of that name, or -1. The six keys' lengths differ (7, 4, 10, 14, 12, 6),
 * so the length alone names the one key to compare. */
static int report_key(const uint8_t *key, size_t length) {
    int f;
    switch (length) {
    case 7: f = F_VERSION; break;
    case 4: f = F_TYPE; break;
    case 10: f = F_REQUEST_ID; break;
    case 14: f = F_RESERVATION_ID; break;
    case 12: f = F_EXECUTION_ID; break;
    case 6: f = F_RESULT; break;
    default: return -1;
    }
    return memcmp(report_keys[f], key, length) == 0 ? f : -1;
}

/* What a report needs besides its own rules to be clean for sure (what
 * tay_json_domain_clean would find of it): depth 1 within max_depth, 1 + its members
 * within max_nodes, at most CHECK_KEYS keys of at most max_key_bytes each, and no key
 * repeated (report keys are seen once each by the reader; the other keys, keys[0..others),
 * are compared here). Returns 1 when so; 0 when not sure (the caller then runs the domain
 * check). */
static int report_surely_clean(const uint8_t *s, const key_span *keys, size_t count,
                               size_t others, uint32_t max_depth, uint64_t max_nodes,
                               uint32_t max_key_bytes) {
    if (max_depth < 1 || count > CHECK_KEYS || 1 + (uint64_t)count > max_nodes) return 0;
    for (size_t k = 0; k < count; k++)
        if (keys[k].length > max_key_bytes) return 0;
    return keys_distinct(s, keys, 0, others);  /* a report key never equals another key */
}

/* The report a type names: TAY_REPORT_STARTED, TAY_REPORT_SUCCEEDED or TAY_REPORT_NONE. */
static int report_type(const uint8_t *type, size_t length) {
    if (length == 7 && memcmp(type, "started", 7) == 0) return TAY_REPORT_STARTED;
    if (length == 9 && memcmp(type, "succeeded", 9) == 0) return TAY_REPORT_SUCCEEDED;
    return TAY_REPORT_NONE;
}

/* tay_json_report, and the payload's keys in keys[0..*count) (the other keys, not report
 * keys, first: from index 0 to *others), for report_surely_clean; *count is left 0 when
 * there are more than CHECK_KEYS. */
static int read_report(const uint8_t *s, size_t n, uint64_t *fields, key_span *keys,
                       size_t *count, size_t *others) {
    size_t start[F_KEYS + 1] = {0}, end[F_KEYS + 1] = {0};
    key_span known[F_KEYS];
    size_t other_count = 0, known_count = 0;
    int overflow = 0;
    unsigned seen = 0;
    *count = *others = 0;
    size_t i = skip_space(s, n, 0);
    if (i == n || s[i] != '{') return TAY_REPORT_NONE;
    i++;
    for (;;) {
        i = skip_space(s, n, i);
        if (i == n || s[i] != '"') return TAY_REPORT_NONE;
        size_t key_end = plain_string_end(s, n, i);
        if (!key_end) return TAY_REPORT_NONE;
        size_t key_length = key_end - i - 2;
        int f = report_key(s + i + 1, key_length);
        key_span span = {(uint32_t)(i + 1), (uint32_t)key_length};
        if (f < 0) {  /* another key (job_id, say): ignored, but never the legacy "v" */
            if (key_length == 1 && s[i + 1] == 'v') return TAY_REPORT_NONE;
            f = F_OTHER;
            if (other_count < CHECK_KEYS) keys[other_count++] = span;
            else overflow = 1;
        } else if (seen & (1u << f)) {
            return TAY_REPORT_NONE;
        } else {
            known[known_count++] = span;
        }
        seen |= 1u << f;
        i = skip_space(s, n, key_end);
        if (i == n || s[i] != ':') return TAY_REPORT_NONE;
        i = skip_space(s, n, i + 1);
        if (i == n) return TAY_REPORT_NONE;
        if (f == F_VERSION) {
            if (s[i] != '1') return TAY_REPORT_NONE;
            i++;
        } else if (f == F_RESULT) {
            if (n - i < 4 || memcmp(s + i, "null", 4) != 0) return TAY_REPORT_NONE;
            i += 4;
        } else {
            if (s[i] != '"') return TAY_REPORT_NONE;
            size_t value_end = plain_string_end(s, n, i);
            if (!value_end) return TAY_REPORT_NONE;
            start[f] = i + 1;
            end[f] = value_end - 1;
            i = value_end;
            if (f == F_TYPE && !report_type(s + start[f], end[f] - start[f]))
                return TAY_REPORT_NONE;  /* an enqueue, say: the rest need not be read */
        }
        i = skip_space(s, n, i);
        if (i == n) return TAY_REPORT_NONE;
        if (s[i] == '}') break;
        if (s[i] != ',') return TAY_REPORT_NONE;
        i++;
    }
    if (skip_space(s, n, i + 1) != n) return TAY_REPORT_NONE;
    unsigned needed = (1u << F_VERSION) | (1u << F_TYPE) | (1u << F_REQUEST_ID) |
                      (1u << F_RESERVATION_ID) | (1u << F_EXECUTION_ID);
    if ((seen & needed) != needed) return TAY_REPORT_NONE;
    static const int ids[3] = {F_REQUEST_ID, F_RESERVATION_ID, F_EXECUTION_ID};
    for (int k = 0; k < 3; k++) {
        size_t length = end[ids[k]] - start[ids[k]];
        if (length < 1 || length > TAY_REPORT_MAX_ID) return TAY_REPORT_NONE;
        fields[2 * k] = start[ids[k]];
        fields[2 * k + 1] = end[ids[k]];
    }
    int mark = report_type(s + start[F_TYPE], end[F_TYPE] - start[F_TYPE]);
    if (mark != TAY_REPORT_NONE && !overflow && other_count + known_count <= CHECK_KEYS) {
        memcpy(keys + other_count, known, known_count * sizeof(key_span));
        *others = other_count;
        *count = other_count + known_count;
    }
    return mark;
}

int tay_json_report(const uint8_t *s, size_t n, uint64_t *fields) {
    key_span keys[CHECK_KEYS];
    size_t count, others;
    return read_report(s, n, fields, keys, &count, &others);
}

/* ---- the enqueue, read without a JSON decoder -------------------------------------------
 * A producer's enqueue in the same strict subset at its top level (tay_json_enqueue in
 * tay_native.h): "version" exactly 1, "type" "enqueue", request_id and task plain strings,
 * "args" and "options" objects, any other key but "v" with a plain string value. The two
 * objects are only delimited here (brackets counted outside strings, or walked for the
 * value domain when the frame scan reads them): the caller decodes each span (the options
 * unless read_plain_options read them) and takes the exact path when either is not valid
 * JSON. Since everything around them is valid JSON by construction, the payload is then
 * valid JSON that decodes to those members (no key repeats: the payload is clean too). */

enum { E_VERSION, E_TYPE, E_REQUEST_ID, E_TASK, E_ARGS, E_OPTIONS, E_KEYS };
static const char *const enqueue_keys[E_KEYS] = {
    "version", "type", "request_id", "task", "args", "options"};
static const size_t enqueue_key_lengths[E_KEYS] = {7, 4, 10, 4, 4, 7};

static int enqueue_key(const uint8_t *key, size_t length) {
    for (int f = 0; f < E_KEYS; f++)
        if (enqueue_key_lengths[f] == length && memcmp(enqueue_keys[f], key, length) == 0)
            return f;
    return -1;
}

/* The offset after the object or array opened at s[i], its brackets counted outside
 * strings; 0 when it does not close. Nothing of its syntax is checked. */
static size_t container_end(const uint8_t *s, size_t n, size_t i) {
    size_t depth = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c == '"') {
            int escaped = 0;
            i = string_end(s, n, i, &escaped);
            if (!i) return 0;
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
        i++;
    }
    return 0;
}

enum { O_QUEUE, O_RETRIES, O_BACKOFF, O_DURABILITY, O_KEYS };
static const char *const option_keys[O_KEYS] = {"queue", "retries", "backoff", "durability"};
static const size_t option_key_lengths[O_KEYS] = {5, 7, 7, 10};

static int is_plain_value(const uint8_t *s, size_t start, size_t end, const char *text) {
    size_t length = strlen(text);
    return end - start == length && memcmp(s + start, text, length) == 0;
}

/* The plain options object s[i..end) (s[i] is its '{', s[end - 1] where its '}' should be):
 * 1 with out[0..3] as tay_json_enqueue's fields[8..11] (payload offsets), 0 when they are
 * not plain (the caller then leaves them to the decoder and the engine's parse). */
static int read_plain_options(const uint8_t *s, size_t i, size_t end, uint64_t *out) {
    unsigned seen = 0;
    uint64_t retries = 0, durability = 0, queue_start = 0, queue_end = 0;
    i = skip_space(s, end, i + 1);
    if (i < end && s[i] == '}') {
        i++;
    } else {
        for (;;) {
            if (i == end || s[i] != '"') return 0;
            size_t key_end = plain_string_end(s, end, i);
            if (!key_end) return 0;
            int f = -1;
            for (int k = 0; k < O_KEYS; k++)
                if (option_key_lengths[k] == key_end - i - 2 &&
                    memcmp(option_keys[k], s + i + 1, option_key_lengths[k]) == 0)
                    f = k;
            if (f < 0 || (seen & (1u << f))) return 0;
            seen |= 1u << f;
            i = skip_space(s, end, key_end);
            if (i == end || s[i] != ':') return 0;
            i = skip_space(s, end, i + 1);
            if (i == end) return 0;
            if (end - i >= 4 && memcmp(s + i, "null", 4) == 0) {
                i += 4;  /* null: absent */
            } else if (f == O_RETRIES) {
                size_t digits = 0;
                retries = 0;
                while (i < end && s[i] >= '0' && s[i] <= '9' && digits < 6) {
                    retries = retries * 10 + (uint64_t)(s[i] - '0');
                    i++;
                    digits++;
                }
                /* JSON's integer: no leading zero; a fraction or exponent is not plain */
                if (!digits || (digits > 1 && s[i - digits] == '0') ||
                    retries > TAY_ENQUEUE_MAX_RETRIES)
                    return 0;
            } else {
                if (s[i] != '"') return 0;
                size_t value_end = plain_string_end(s, end, i);
                if (!value_end) return 0;
                if (f == O_QUEUE) {
                    if (value_end - i - 2 < 1 || value_end - i - 2 > TAY_ENQUEUE_MAX_TASK)
                        return 0;
                    queue_start = i + 1;
                    queue_end = value_end - 1;
                } else if (f == O_BACKOFF) {
                    if (!is_plain_value(s, i + 1, value_end - 1, "exponential")) return 0;
                } else if (is_plain_value(s, i + 1, value_end - 1, "persistent")) {
                    durability = 1;
                } else if (is_plain_value(s, i + 1, value_end - 1, "volatile")) {
                    durability = 2;
                } else {
                    return 0;
                }
                i = value_end;
            }
            i = skip_space(s, end, i);
            if (i == end) return 0;
            if (s[i] == '}') {
                i++;
                break;
            }
            if (s[i] != ',') return 0;
            i = skip_space(s, end, i + 1);
        }
    }
    if (i != end) return 0;
    out[0] = retries + 1;
    out[1] = durability;
    out[2] = queue_start;
    out[3] = queue_end;
    return 1;
}

/* tay_json_enqueue; with `limits`, also whether the payload is surely clean under them
 * (what tay_json_domain_clean would say of it), the objects walked as that check walks
 * them instead of only delimited: TAY_REPORT_NONE then means "not sure", never "not
 * clean". */
static int read_enqueue(const uint8_t *s, size_t n, uint64_t *fields,
                        const domain_limits *limits) {
    size_t start[E_KEYS] = {0}, end[E_KEYS] = {0};
    unsigned seen = 0;
    key_span others[CHECK_KEYS];
    size_t top_keys = 0, other_count = 0;
    uint64_t nodes = 1;  /* the top-level object, as tay_json_domain_clean counts */
    if (limits && limits->max_depth < 1) return TAY_REPORT_NONE;
    size_t i = skip_space(s, n, 0);
    if (i == n || s[i] != '{') return TAY_REPORT_NONE;
    i++;
    for (;;) {
        i = skip_space(s, n, i);
        if (i == n || s[i] != '"') return TAY_REPORT_NONE;
        size_t key_end = plain_string_end(s, n, i);
        if (!key_end) return TAY_REPORT_NONE;
        size_t key_length = key_end - i - 2;
        int f = enqueue_key(s + i + 1, key_length);
        if (limits) {  /* the top-level object's keys, as the domain walk takes them */
            if (key_length > limits->max_key_bytes || top_keys == CHECK_KEYS)
                return TAY_REPORT_NONE;
            top_keys++;
            if (f < 0) {
                others[other_count].start = (uint32_t)(i + 1);
                others[other_count].length = (uint32_t)key_length;
                other_count++;
            }
        }
        if (f < 0) {  /* another key: ignored with a plain string value, but never "v" */
            if (key_length == 1 && s[i + 1] == 'v') return TAY_REPORT_NONE;
        } else if (seen & (1u << f)) {
            return TAY_REPORT_NONE;
        } else {
            seen |= 1u << f;
        }
        i = skip_space(s, n, key_end);
        if (i == n || s[i] != ':') return TAY_REPORT_NONE;
        i = skip_space(s, n, i + 1);
        if (i == n) return TAY_REPORT_NONE;
        if (f != E_ARGS && f != E_OPTIONS && limits && ++nodes > limits->max_nodes)
            return TAY_REPORT_NONE;  /* a scalar value: one node */
        if (f == E_VERSION) {
            if (s[i] != '1') return TAY_REPORT_NONE;
            i++;
        } else if (f == E_ARGS || f == E_OPTIONS) {
            if (s[i] != '{') return TAY_REPORT_NONE;
            size_t value_end = limits ? domain_walk(s, n, i, 1, top_keys, limits, &nodes)
                                      : container_end(s, n, i);
            if (!value_end) return TAY_REPORT_NONE;
            start[f] = i;
            end[f] = value_end;
            i = value_end;
        } else {
            if (s[i] != '"') return TAY_REPORT_NONE;
            size_t value_end = plain_string_end(s, n, i);
            if (!value_end) return TAY_REPORT_NONE;
            if (f == E_TYPE && !(value_end - i == 9 && memcmp(s + i + 1, "enqueue", 7) == 0))
                return TAY_REPORT_NONE;  /* a report, say: the rest need not be read */
            if (f >= 0) {
                start[f] = i + 1;
                end[f] = value_end - 1;
            }
            i = value_end;
        }
        i = skip_space(s, n, i);
        if (i == n) return TAY_REPORT_NONE;
        if (s[i] == '}') break;
        if (s[i] != ',') return TAY_REPORT_NONE;
        i++;
    }
    if (skip_space(s, n, i + 1) != n) return TAY_REPORT_NONE;
    unsigned needed = (1u << E_VERSION) | (1u << E_TYPE) | (1u << E_REQUEST_ID) |
                      (1u << E_TASK) | (1u << E_ARGS);
    if ((seen & needed) != needed) return TAY_REPORT_NONE;
    /* the known keys differ by name from each other and from the others */
    if (limits && !keys_distinct(s, others, 0, other_count)) return TAY_REPORT_NONE;
    size_t id_length = end[E_REQUEST_ID] - start[E_REQUEST_ID];
    size_t task_length = end[E_TASK] - start[E_TASK];
    if (id_length < 1 || id_length > TAY_REPORT_MAX_ID || task_length < 1 ||
        task_length > TAY_ENQUEUE_MAX_TASK)
        return TAY_REPORT_NONE;
    static const int spans[4] = {E_REQUEST_ID, E_TASK, E_ARGS, E_OPTIONS};
    for (int k = 0; k < 4; k++) {  /* options absent: 0, 0 */
        fields[2 * k] = start[spans[k]];
        fields[2 * k + 1] = end[spans[k]];
    }
    if (!(seen & (1u << E_OPTIONS))) {  /* absent: plain, every default */
        fields[8] = 1;
        fields[9] = fields[10] = fields[11] = 0;
    } else if (!read_plain_options(s, start[E_OPTIONS], end[E_OPTIONS], fields + 8)) {
        fields[8] = fields[9] = fields[10] = fields[11] = 0;
    }
    return TAY_ENQUEUE;
}

int tay_json_enqueue(const uint8_t *s, size_t n, uint64_t *fields) {
    return read_enqueue(s, n, fields, NULL);
}

int tay_split_frames_marked(const uint8_t *buf, size_t size, uint32_t max_frame,
                            size_t capacity, uint32_t max_depth, uint64_t max_nodes,
                            uint32_t max_key_bytes, uint64_t *starts, uint64_t *ends,
                            uint8_t *marks, uint64_t *fields, size_t *count, size_t *consumed) {
    int code = tay_split_frames(buf, size, max_frame, capacity, starts, ends, count, consumed);
    const domain_limits limits = {max_depth, max_nodes, max_key_bytes};
    for (size_t k = 0; k < *count; k++) {
        const uint8_t *payload = buf + starts[k];
        size_t length = ends[k] - starts[k];
        uint64_t *spans = fields + TAY_FRAME_FIELDS * k;
        key_span keys[CHECK_KEYS];
        size_t key_count, others;
        int used = 6;
        /* a report first: when it is surely clean, the domain check has nothing to add */
        int report = read_report(payload, length, spans, keys, &key_count, &others);
        uint8_t mark;
        if (report != TAY_REPORT_NONE && key_count &&
            report_surely_clean(payload, keys, key_count, others, max_depth, max_nodes,
                                max_key_bytes)) {
            mark = (uint8_t)report;
        } else if (report == TAY_REPORT_NONE &&
                   read_enqueue(payload, length, spans, &limits) == TAY_ENQUEUE) {
            mark = TAY_ENQUEUE;  /* surely clean: read and walked at once */
            used = 8;
        } else {
            mark = (uint8_t)tay_json_domain_clean(payload, length, max_depth, max_nodes,
                                                  max_key_bytes);
            if (mark && report != TAY_REPORT_NONE) {
                mark = (uint8_t)report;
            } else if (mark && tay_json_enqueue(payload, length, spans) == TAY_ENQUEUE) {
                mark = TAY_ENQUEUE;
                used = 8;
            }
        }
        if (mark > 1) {
            if (mark == TAY_ENQUEUE && spans[8] &&
                tay_json_canonical(payload + spans[4], (size_t)(spans[5] - spans[4])))
                spans[9] += TAY_ENQUEUE_CANONICAL;  /* plain, and args as orjson writes them */
            for (int j = 0; j < used; j++) spans[j] += starts[k];
            if (mark == TAY_ENQUEUE) {  /* retries + 1 and durability, then the queue's span */
                spans[10] += starts[k];
                spans[11] += starts[k];
            } else {
                for (int j = used; j < TAY_FRAME_FIELDS; j++) spans[j] = 0;
            }
        }
        marks[k] = mark;
    }
    return code;
}

/* Returns tay_split_frames_marked's code; scan->head summarises the call (tay_native.h). */
int tay_frame_scan_split(tay_frame_scan *scan, const uint8_t *buf, size_t size) {
    int code = tay_split_frames_marked(buf, size, scan->max_frame, TAY_FRAME_SCAN_ROWS,
                                       scan->max_depth, scan->max_nodes, scan->max_key_bytes,
                                       scan->starts, scan->ends, scan->marks, scan->fields,
                                       &scan->count, &scan->consumed);
    uint64_t *head = scan->head;
    head[0] = (uint64_t)code;
    head[1] = scan->count;
    head[2] = scan->consumed;
    if (scan->count) {
        head[3] = scan->starts[0];
        head[4] = scan->ends[0];
        head[5] = scan->marks[0];
        memcpy(head + 6, scan->fields, TAY_FRAME_FIELDS * sizeof(uint64_t));
    } else {
        memset(head + 3, 0, (3 + TAY_FRAME_FIELDS) * sizeof(uint64_t));
    }
    return code;
}

/* ---- args text as orjson writes it (tay_json_canonical) ---- */

/* The offset after the string whose opening quote is at s[i], when it has no escape and
 * no control byte and is strict UTF-8 (tay_utf8_valid, the Value codec's check): what
 * orjson writes of its str as it is; 0 otherwise. One pass (json_plain_run) to the first
 * quote, backslash or control byte: the string is canonical when that byte is its closing
 * quote, and its bytes go to the UTF-8 check only when one of them has its high bit set. */
static size_t canonical_string_end(const uint8_t *s, size_t n, size_t i) {
    int high;
    size_t start = i + 1, end = json_plain_run(s, start, n, &high);
    if (end == n || s[end] != '"')
        return 0;
    if (high && !tay_utf8_valid(s + start, end - start))
        return 0;
    return end + 1;
}

/* The offset after the integer literal at s[i] when it is written as orjson writes an int
 * (no -0, no leading zero, within -2^63..2^64-1, not followed by a fraction or exponent);
 * 0 otherwise (a float, or an int orjson reads as a float). */
static size_t canonical_int_end(const uint8_t *s, size_t n, size_t i) {
    static const char max_pos[] = "18446744073709551615", max_neg[] = "9223372036854775808";
    int negative = s[i] == '-';
    if (negative)
        i++;
    size_t start = i;
    if (i >= n || s[i] < '0' || s[i] > '9')
        return 0;
    if (s[i] == '0') {
        if (negative)
            return 0;
        i++;
    } else {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E'))
        return 0;
    size_t digits = i - start;
    const char *limit = negative ? max_neg : max_pos;
    size_t limit_digits = negative ? sizeof max_neg - 1 : sizeof max_pos - 1;
    if (digits > limit_digits)
        return 0;
    if (digits == limit_digits && memcmp(s + start, limit, digits) > 0)
        return 0;
    return i;
}

int tay_json_canonical(const uint8_t *s, size_t n) {
    uint8_t is_object[TAY_CANONICAL_DEPTH];
    size_t key_start[TAY_CANONICAL_DEPTH], key_length[TAY_CANONICAL_DEPTH];
    int has_key[TAY_CANONICAL_DEPTH];
    size_t depth = 0, i = 0, end;
    if (n < 2 || s[0] != '{')
        return 0;
value:
    if (i >= n)
        return 0;
    switch (s[i]) {
    case '{':
    case '[':
        if (depth == TAY_CANONICAL_DEPTH)
            return 0;
        is_object[depth] = s[i] == '{';
        has_key[depth] = 0;
        depth++;
        i++;
        if (i < n && s[i] == (is_object[depth - 1] ? '}' : ']')) {
            i++;
            depth--;
            goto after;
        }
        if (is_object[depth - 1])
            goto key;
        goto value;
    case '"':
        end = canonical_string_end(s, n, i);
        if (!end)
            return 0;
        i = end;
        goto after;
    case 't':
        if (n - i < 4 || memcmp(s + i, "true", 4) != 0)
            return 0;
        i += 4;
        goto after;
    case 'f':
        if (n - i < 5 || memcmp(s + i, "false", 5) != 0)
            return 0;
        i += 5;
        goto after;
    case 'n':
        if (n - i < 4 || memcmp(s + i, "null", 4) != 0)
            return 0;
        i += 4;
        goto after;
    default:
        if (s[i] != '-' && (s[i] < '0' || s[i] > '9'))
            return 0;
        end = canonical_int_end(s, n, i);
        if (!end)
            return 0;
        i = end;
        goto after;
    }
key:
    if (i >= n || s[i] != '"')
        return 0;
    end = canonical_string_end(s, n, i);
    if (!end)
        return 0;
    {
        size_t level = depth - 1, start = i + 1, length = end - 1 - start;
        if (has_key[level]) {  /* strictly after the previous key, in byte order */
            size_t previous = key_length[level];
            int order = memcmp(s + key_start[level], s + start,
                               previous < length ? previous : length);
            if (order > 0 || (order == 0 && previous >= length))
                return 0;
        }
        has_key[level] = 1;
        key_start[level] = start;
        key_length[level] = length;
    }
    i = end;
    if (i >= n || s[i] != ':')
        return 0;
    i++;
    goto value;
after:
    if (depth == 0)
        return i == n;
    if (i >= n)
        return 0;
    if (s[i] == ',') {
        i++;
        if (is_object[depth - 1])
            goto key;
        goto value;
    }
    if (s[i] != (is_object[depth - 1] ? '}' : ']'))
        return 0;
    i++;
    depth--;
    goto after;
}

/* ---- an `enqueued` reply, read without a JSON decoder (the SDK's producer) ------------
 * tay serve answers an enqueue with {"version":1,"type":"enqueued","request_id":"R",
 * "job_id":"J","job":{...}}, compact. The SDK returns only J and the job's durability, so a
 * reply written exactly so, in a strict subset of JSON, is read here: R and J plain strings
 * (printable ASCII without a backslash; R 1..TAY_REPORT_MAX_ID bytes, J not empty), then
 * the job object, nothing after it but the closing brace, and everything inside the job in
 * the subset: no whitespace, plain strings and keys, numbers -?(0|[1-9][0-9]*)(.[0-9]+)?
 * without a run of 19 digits, true, false, null, no object repeating a key, at most
 * CHECK_DEPTH containers deep and CHECK_KEYS keys per object. Such a payload is valid JSON
 * that orjson reads exactly (and the SDK's envelope checks pass), so what is read here is
 * what the decoder would give. Anything else is TAY_ENQUEUED_NONE: the SDK decodes it in
 * full, which names any error (the mark is never a refusal). */

/* A number of the subset at s[i]: the offset after it, 0 when it is not one. What follows
 * is the caller's to check (a ',', '}' or ']'; an exponent is not in the subset). */
static size_t plain_number_end(const uint8_t *s, size_t n, size_t i) {
    if (s[i] == '-') i++;
    if (i == n || s[i] < '0' || s[i] > '9') return 0;
    size_t start = i;
    if (s[i] == '0') {
        i++;
    } else {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i - start >= 19) return 0;
    if (i < n && s[i] == '.') {
        size_t fraction = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == fraction || i - fraction >= 19) return 0;
    }
    return i;
}

/* The offset after the object opened at s[i] when all of it is in the subset, 0 otherwise;
 * durability[0..1] is the span of its own "durability" member's value when that is a
 * plain string, (0, 0) when it has none or another value. */
static size_t plain_object_end(const uint8_t *s, size_t n, size_t i, uint64_t *durability) {
    enum { WANT_VALUE, WANT_VALUE_OR_CLOSE, WANT_KEY, WANT_KEY_OR_CLOSE, AFTER_VALUE };
    uint8_t is_object[CHECK_DEPTH + 1];
    size_t key_base[CHECK_DEPTH + 1];
    key_span keys[CHECK_OPEN_KEYS];
    size_t depth = 0, open_keys = 0;
    int state = WANT_VALUE, is_durability = 0;
    durability[0] = durability[1] = 0;
    if (i >= n || s[i] != '{') return 0;
    while (i < n) {
        uint8_t c = s[i];
        if (state == AFTER_VALUE) {
            if (c == ',') {
                state = is_object[depth] ? WANT_KEY : WANT_VALUE;
                i++;
                continue;
            }
            if (c != (is_object[depth] ? '}' : ']')) return 0;
        } else if (state == WANT_KEY || state == WANT_KEY_OR_CLOSE) {
            if (c != '}' || state != WANT_KEY_OR_CLOSE) {
                if (c != '"') return 0;
                size_t end = plain_string_end(s, n, i);
                if (!end || end == n || s[end] != ':') return 0;
                if (open_keys == CHECK_OPEN_KEYS || open_keys - key_base[depth] == CHECK_KEYS) return 0;
                keys[open_keys].start = (uint32_t)(i + 1);
                keys[open_keys].length = (uint32_t)(end - i - 2);
                open_keys++;
                is_durability = depth == 1 && end - i - 2 == 10 && memcmp(s + i + 1, "durability", 10) == 0;
                i = end + 1;
                state = WANT_VALUE;
                continue;
            }
        } else if (c != ']' || state != WANT_VALUE_OR_CLOSE) {
            if (c == '{' || c == '[') {
                if (depth == CHECK_DEPTH) return 0;
                depth++;
                is_object[depth] = c == '{';
                key_base[depth] = open_keys;
                state = c == '{' ? WANT_KEY_OR_CLOSE : WANT_VALUE_OR_CLOSE;
                is_durability = 0;
                i++;
                continue;
            }
            if (c == '"') {
                size_t end = plain_string_end(s, n, i);
                if (!end) return 0;
                if (is_durability) {
                    durability[0] = i + 1;
                    durability[1] = end - 1;
                }
                i = end;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                i = plain_number_end(s, n, i);
                if (!i) return 0;
            } else if (c == 't' && n - i >= 4 && memcmp(s + i, "true", 4) == 0) {
                i += 4;
            } else if (c == 'f' && n - i >= 5 && memcmp(s + i, "false", 5) == 0) {
                i += 5;
            } else if (c == 'n' && n - i >= 4 && memcmp(s + i, "null", 4) == 0) {
                i += 4;
            } else {
                return 0;
            }
            is_durability = 0;
            state = AFTER_VALUE;
            continue;
        }
        /* c closes the container at this depth */
        if (is_object[depth] && !keys_distinct(s, keys, key_base[depth], open_keys)) return 0;
        open_keys = key_base[depth];
        depth--;
        i++;
        if (depth == 0) return i;
        state = AFTER_VALUE;
    }
    return 0;
}

int tay_json_enqueued(const uint8_t *s, size_t n, uint64_t *fields) {
    static const char head[] = "{\"version\":1,\"type\":\"enqueued\",\"request_id\":\"";
    static const char job_id_key[] = ",\"job_id\":\"";
    static const char job_key[] = ",\"job\":";
    size_t i = sizeof head - 2, end;  /* the request id's opening quote */
    if (n < sizeof head - 1 || memcmp(s, head, sizeof head - 1) != 0) return TAY_ENQUEUED_NONE;
    end = plain_string_end(s, n, i);
    if (!end || end - i - 2 < 1 || end - i - 2 > TAY_REPORT_MAX_ID) return TAY_ENQUEUED_NONE;
    fields[0] = i + 1;
    fields[1] = end - 1;
    i = end;
    if (n - i < sizeof job_id_key - 1 || memcmp(s + i, job_id_key, sizeof job_id_key - 1) != 0)
        return TAY_ENQUEUED_NONE;
    i += sizeof job_id_key - 2;  /* the job id's opening quote */
    end = plain_string_end(s, n, i);
    if (!end || end - i - 2 < 1) return TAY_ENQUEUED_NONE;
    fields[2] = i + 1;
    fields[3] = end - 1;
    i = end;
    if (n - i < sizeof job_key - 1 || memcmp(s + i, job_key, sizeof job_key - 1) != 0)
        return TAY_ENQUEUED_NONE;
    end = plain_object_end(s, n, i + sizeof job_key - 1, fields + 4);
    if (!end || n - end != 1 || s[end] != '}') return TAY_ENQUEUED_NONE;
    return TAY_ENQUEUED;
}
