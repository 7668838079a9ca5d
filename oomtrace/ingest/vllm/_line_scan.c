/*
 * oomtrace.ingest.vllm._line_scan: a compiled reader of the lines that make up nearly all of a
 * busy vLLM server's log.
 *
 * A server under load writes three kinds of line for every request: "Received request" and
 * "Added request" records and uvicorn's access line. This reader walks a chunk's bytes once,
 * line by line, and reads each line's outer prefix (a `kubectl logs --timestamps` /
 * `docker logs -t` time and vLLM's and Ray's process prefixes, coloured or not), vLLM's own
 * header (level, printed date and time, `[file:line]`) and, for those three kinds, the request
 * id and a Received record's fields: in one pass, with no string made.
 *
 * It takes only the plain forms of those lines, each exactly as the table's patterns read them
 * (request_patterns.RECEIVED, "Added request <id>", log_parser's uvicorn test,
 * line_patterns.HEADER without fractions, oomtrace/ingest/text/outer_prefixes.py for the
 * timestamp and process prefixes); every other line is marked GENERAL and read by the
 * vectorised reader (line_records.py), which also reads every line where this module was not
 * built or the input is small. tests/unit/ingest/vllm/test_line_scanner.py holds the two
 * readers to the same result on generated lines of every shape.
 *
 * What it reads in a record's body: a "Received request" record's id, max_tokens and the other
 * SamplingParams that size a request's step, and its prompt token count (as request_lines.py
 * reads them); the checks that leave a record or an id to the vectorised reader (colour codes,
 * Ray's repeat suffix, a glued record, an id that is not one plain word); uvicorn's access line.
 *
 * Offsets are bytes into the chunk; a line that holds a non-ASCII byte where this reader looks
 * is left to the general reader (characters and bytes then differ). A log repeats its prefixes
 * from line to line: the last line's minute and process prefixes are kept, so most lines
 * compare bytes instead of parsing them. The same pass counts the lines and notes whether a
 * byte is not ASCII (only then does the caller check the chunk is UTF-8), so nothing else walks
 * a chunk's bytes before the scan.
 *
 * Why C: the same reader compiled by numba cost every run about half a CPU second before any
 * byte was read (importing numba, loading its cached machine code) and a first run on a machine
 * some ten seconds compiling it; this module loads in about a millisecond. Plain C99, the C
 * library and Python's headers only. Every output is bounds-checked (ValueError, never a write
 * out of bounds); the GIL is released while a chunk is scanned, so chunks are read side by side.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
/* AVX2 (32 bytes a step) where the processor has it, chosen when the module loads: the build
 * stays plain x86-64 (SSE2), and the two loops that read every byte of a line (its end, a
 * Received record's body) are compiled a second time for AVX2. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WIDE 1
#include <immintrin.h>
#define WIDE_FN __attribute__((target("avx2")))
static int wide; /* the processor has AVX2 (PyInit__line_scan) */
#else
#define WIDE 0
#endif

typedef int64_t i64;
typedef const unsigned char *text_t;

/* --- the layout of the outputs (exported to Python: scanned_chunk reads them by name) ------- */
enum { GENERAL = 0, ACCESS = 1, RECEIVED = 2, ADDED = 3, ABORTED = 4 };
/* The rows of `records`. */
enum {
    R_LINE, R_KIND,
    R_MONTH_DAY,  /* the printed date, month * 100 + day */
    R_SECOND,     /* the printed time, seconds of the day */
    R_OUTER,      /* the outer time, ns since the epoch */
    R_BRACKETED, R_ID_START, R_ID_STOP, R_MAX_TOKENS, R_PROMPT_TOKENS, R_PARAMS_FIRST,
    R_TOLD,       /* an "Added request" right after its "Received request" */
    R_RUN,
    /* the SamplingParams that size a request's step (request_lines.PARAMS), -1 for null */
    R_N, R_BEST_OF, R_LOGPROBS, R_PROMPT_LOGPROBS,
    RECORD_FIELDS
};
/* The rows of `general` and `access`: a line's number in the text, its start and stop. */
enum { L_LINE, L_START, L_STOP, LINE_FIELDS };
/* The rows of `runs`: a run's last record and how many it holds. */
enum { RUN_LAST, RUN_WEIGHT, RUN_FIELDS };
#define NO_TIME INT64_MIN
/* How many of the last Received records an "Added request" line is compared with. */
#define RECENT 16
/* Ids and header windows are read from the first this many characters (request_lines.ID_HEAD,
 * log_header.HEADER_SLICE): longer ones go to the general reader, which cuts them the same way. */
#define ID_HEAD 320
#define HEADER_SLICE 96
#define NS 1000000000LL

/* --- byte tests ------------------------------------------------------------------------------ */
#define DIGIT(c) ((c) >= 48 && (c) <= 57)
#define UPPER(c) ((c) >= 65 && (c) <= 90)
#define LOWER(c) ((c) >= 97 && (c) <= 122)
#define ALNUM(c) (DIGIT(c) || UPPER(c) || LOWER(c))

/* The offset of the first `byte` in [start, stop) of `b`: the C library's search (vector
 * instructions, several bytes a cycle); -1 when there is none. */
static i64 find_byte(text_t b, i64 start, i64 stop, int byte)
{
    if (stop <= start)
        return -1;
    const unsigned char *found = memchr(b + start, byte, (size_t)(stop - start));
    return found ? (i64)(found - b) : -1;
}

/* The offset of the newline that ends the line starting at `start` (-1 when the text ends
 * first), noting in `high` the high bits of the bytes read on the way: one pass finds the line
 * and whether the text holds a byte that is not ASCII. Sixteen bytes a step with SSE2 (every
 * x86-64); bytes of the next line read in the same step are noted too (they are the text's as
 * well, and read again with their line). Elsewhere: the C library's search, then the line's
 * bytes eight at a time. */
#if WIDE
/* line_end, 32 bytes a step (AVX2); the last 31 bytes of the text as line_end reads them. */
WIDE_FN static i64 line_end_wide(text_t b, i64 start, i64 size, uint64_t *high)
{
    const __m256i newline = _mm256_set1_epi8(10);
    __m256i seen = _mm256_setzero_si256();
    i64 k = start;
    for (; k + 32 <= size; k += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(b + k));
        seen = _mm256_or_si256(seen, v);
        unsigned mask = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, newline));
        if (mask) {
            *high |= (uint64_t)(unsigned)_mm256_movemask_epi8(seen);
            return k + __builtin_ctz(mask);
        }
    }
    *high |= (uint64_t)(unsigned)_mm256_movemask_epi8(seen);
    for (; k < size; k++) {
        if (b[k] == 10)
            return k;
        *high |= b[k] & 0x80;
    }
    return -1;
}
#endif

static i64 line_end(text_t b, i64 start, i64 size, uint64_t *high)
{
#if WIDE
    if (wide)
        return line_end_wide(b, start, size, high);
#endif
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
    const __m128i newline = _mm_set1_epi8(10);
    __m128i seen = _mm_setzero_si128();
    i64 k = start;
    for (; k + 16 <= size; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(b + k));
        seen = _mm_or_si128(seen, v);
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, newline));
        if (mask) {
            *high |= (uint64_t)_mm_movemask_epi8(seen);
            return k + __builtin_ctz(mask);
        }
    }
    *high |= (uint64_t)_mm_movemask_epi8(seen);
    for (; k < size; k++) {
        if (b[k] == 10)
            return k;
        *high |= b[k] & 0x80;
    }
    return -1;
#else
    i64 e = find_byte(b, start, size, 10);
    i64 stop = e < 0 ? size : e, r = start;
    uint64_t seen = 0;
    for (; r + 8 <= stop; r += 8) {
        uint64_t w;
        memcpy(&w, b + r, sizeof w);
        seen |= w;
    }
    for (; r < stop; r++)
        seen |= b[r];
    *high |= seen & 0x8080808080808080ULL;
    return e;
#endif
}

/* `word` (n bytes) is at b[p:] (the caller checked there is room). */
static int is_at(text_t b, i64 p, const char *word, i64 n)
{
    return memcmp(b + p, word, (size_t)n) == 0;
}
#define IS_AT(b, p, lit) is_at((b), (p), (lit), (i64)(sizeof(lit) - 1))

static i64 floor_div(i64 a, i64 d)
{
    i64 q = a / d;
    return (a % d != 0 && ((a < 0) != (d < 0))) ? q - 1 : q;
}

/* --- the outer prefixes ----------------------------------------------------------------------- */

/* What a line leaves the next: where the last outer time starts and its minute in ns, where
 * the last process prefixes start and their length; and the time the line's prefix stated. */
typedef struct {
    i64 ts, minute, proc, proc_len, time;
} prefix_cache;

/* Where an ANSI colour code (ESC [ digits ; m) at b[r] ends; r when none starts there, -1 when
 * one starts but is not a colour code. */
static i64 past_colour(text_t b, i64 r, i64 e)
{
    if (r >= e || b[r] != 27)
        return r;
    r++;
    if (r >= e || b[r] != 91)
        return -1;
    r++;
    while (r < e && (DIGIT(b[r]) || b[r] == 59))
        r++;
    if (r >= e || b[r] != 109)
        return -1;
    return r + 1;
}

/* Where the outer prefixes of the line b[p:e] end (p when it has none), with the time they
 * state in cache->time (ns since the epoch; NO_TIME when none); -1 when the line starts like a
 * prefix of a form this reader leaves to the vectorised one (another time form, a name with
 * parentheses, colons or non-ASCII bytes). The time: RFC 3339 in UTC, `Z`, up to nine fraction
 * digits; the process prefixes: `(name pid=N[, ip=A])`, coloured or not, one after another. */
static i64 outer_prefix(text_t b, i64 p, i64 e, prefix_cache *cache)
{
    cache->time = NO_TIME;
    i64 q = p;
    if (e - p >= 22 && b[p + 4] == 45 && b[p + 7] == 45 && b[p + 10] == 84) {
        int same = cache->ts >= 0 && memcmp(b + p, b + cache->ts, 17) == 0;
        if (!same) {
            static const int digits_at[] = {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15};
            int ok = b[p + 13] == 58 && b[p + 16] == 58;
            for (int k = 0; k < 12 && ok; k++)
                ok = DIGIT(b[p + digits_at[k]]);
            if (!ok)
                return -1;
            i64 year = (b[p] - 48) * 1000 + (b[p + 1] - 48) * 100 + (b[p + 2] - 48) * 10
                       + (b[p + 3] - 48);
            i64 month = (b[p + 5] - 48) * 10 + b[p + 6] - 48;
            i64 day = (b[p + 8] - 48) * 10 + b[p + 9] - 48;
            i64 hour = (b[p + 11] - 48) * 10 + b[p + 12] - 48;
            i64 minute = (b[p + 14] - 48) * 10 + b[p + 15] - 48;
            int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
            i64 days_in = (month == 4 || month == 6 || month == 9 || month == 11) ? 30 : 31;
            if (month == 2)
                days_in = leap ? 29 : 28;
            if (year < 1970 || month < 1 || month > 12 || day < 1 || day > days_in)
                return -1;
            if (hour > 23 || minute > 59)
                return -1;
            /* days since 1970-01-01 (H. Hinnant's days_from_civil) */
            i64 y = year - (month <= 2);
            i64 era = floor_div(y, 400);
            i64 yoe = y - era * 400;
            i64 doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
            i64 days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
            cache->minute = (days * 86400 + hour * 3600 + minute * 60) * NS;
            cache->ts = p;
        }
        int s1 = b[p + 17], s2 = b[p + 18];
        if (!(s1 >= 48 && s1 <= 53 && DIGIT(s2)))
            return -1;
        q = p + 19;
        i64 frac = 0;
        int digits = 0;
        if (b[q] == 46 || b[q] == 44) {
            q++;
            while (q < e && DIGIT(b[q]) && digits < 10) {
                frac = frac * 10 + b[q] - 48;
                digits++;
                q++;
            }
            if (digits == 0 || digits > 9)
                return -1;
        }
        for (int k = digits; k < 9; k++)
            frac *= 10;
        if (q + 1 >= e || b[q] != 90 || b[q + 1] != 32)
            return -1;
        cache->time = cache->minute + ((s1 - 48) * 10 + s2 - 48) * NS + frac;
        q += 2;
    } else if (e - p >= 11 && b[p + 4] == 45 && DIGIT(b[p])) {
        return -1; /* some other form of time: the general reader's */
    }
    /* process prefixes: (name pid=N[, ip=A]) with or without colour codes */
    i64 first = q;
    if (cache->proc_len && e - q > cache->proc_len
        && memcmp(b + q, b + cache->proc, (size_t)cache->proc_len) == 0)
        q += cache->proc_len;
    while (q < e) {
        i64 r = past_colour(b, q, e);
        if (r < 0 || r >= e || b[r] != 40)
            break;
        i64 pid = -1; /* the last "pid=" in the name */
        r++;
        i64 name = r;
        while (r < e && b[r] != 41) {
            int c = b[r];
            if (c == 40 || c == 27 || c == 58 || c >= 128) {
                r = e;
                break;
            }
            if (c == 61 && r - name >= 3 && b[r - 1] == 100 && b[r - 2] == 105 && b[r - 3] == 112)
                pid = r + 1;
            r++;
        }
        if (r >= e || pid < 0)
            break;
        i64 close = r;
        i64 d = pid;
        while (d < close && DIGIT(b[d]))
            d++;
        if (d == pid)
            break;
        if (d < close) { /* ", ip=" then [0-9A-Za-z.:-]+ up to the ")" */
            if (close - d < 7 || b[d] != 44 || b[d + 1] != 32 || b[d + 2] != 105)
                break;
            if (b[d + 3] != 112 || b[d + 4] != 61)
                break;
            int ok = 1;
            for (i64 k = d + 5; k < close && ok; k++) {
                int c = b[k];
                ok = ALNUM(c) || c == 45 || c == 46 || c == 58;
            }
            if (!ok)
                break;
        }
        r = past_colour(b, close + 1, e);
        if (r < 0 || r >= e || b[r] != 32)
            break;
        q = r + 1;
    }
    if (q > first) {
        cache->proc = first;
        cache->proc_len = q - first;
    }
    return q;
}

/* --- a record's body -------------------------------------------------------------------------- */

/* A header's `LEVEL MM-DD HH:MM:SS ` has its first colon at c (starting at or after body). */
static int header_at_colon(text_t b, i64 body, i64 c)
{
    static const int digits_at[] = {-8, -7, -5, -4, -2, -1, 1, 2, 4, 5};
    static const char *levels[] = {"INFO", "DEBUG", "ERROR", "WARNING", "CRITICAL"};
    for (int k = 0; k < 10; k++)
        if (!DIGIT(b[c + digits_at[k]]))
            return 0;
    if (b[c - 9] != 32 || b[c - 6] != 45 || b[c - 3] != 32 || b[c + 3] != 58 || b[c + 6] != 32)
        return 0;
    i64 end = c - 9; /* the level word ends here */
    for (int k = 0; k < 5; k++) {
        i64 n = (i64)strlen(levels[k]);
        if (end - n >= body && is_at(b, end - n, levels[k], n))
            return 1;
    }
    return 0;
}

/* b[first:stop] is an id as the table's patterns take it whole, with nothing that could be
 * told apart another way: printable ASCII, no space or comma, no "ALLOC_FAILED". */
static int plain_id(text_t b, i64 first, i64 stop)
{
    if (stop <= first)
        return 0;
    i64 r = first;
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
    /* sixteen bytes a step: a byte under 33 or over 126 (negative as a signed byte) or a comma
     * ends it; an "A" is looked at one by one (ids are mostly lower-case hex) */
    const __m128i low = _mm_set1_epi8(33), del = _mm_set1_epi8(127), comma = _mm_set1_epi8(44);
    const __m128i a = _mm_set1_epi8(65);
    for (; r + 16 <= stop; r += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(b + r));
        __m128i bad = _mm_or_si128(_mm_cmplt_epi8(v, low),
                                   _mm_or_si128(_mm_cmpeq_epi8(v, del), _mm_cmpeq_epi8(v, comma)));
        if (_mm_movemask_epi8(bad))
            return 0;
        unsigned as = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, a));
        for (; as; as &= as - 1) {
            i64 at = r + __builtin_ctz(as);
            if (at + 12 <= stop && IS_AT(b, at, "ALLOC_FAILED"))
                return 0;
        }
    }
#endif
    for (; r < stop; r++) {
        int c = b[r];
        if (c <= 32 || c >= 127 || c == 44)
            return 0;
        if (c == 65 && r + 12 <= stop && IS_AT(b, r, "ALLOC_FAILED"))
            return 0;
    }
    return 1;
}

/* The decimal digits at p as a non-negative int64, as a cast reads them: -1 when they overflow
 * it, -2 when there are none. */
static i64 integer_at(text_t b, i64 p, i64 stop)
{
    if (p >= stop || !DIGIT(b[p]))
        return -2;
    i64 value = 0;
    int overflow = 0;
    while (p < stop && DIGIT(b[p])) {
        i64 d = b[p] - 48;
        if (value > (INT64_MAX - d) / 10)
            overflow = 1;
        else
            value = value * 10 + d;
        p++;
    }
    return overflow ? -1 : value;
}

/* The SamplingParams read (request_lines.PARAMS), and the row of `records` each goes to. */
static const char *const KEYS[] = {"max_tokens", "n", "best_of", "logprobs", "prompt_logprobs"};
static const i64 KEY_LENGTHS[] = {10, 1, 7, 8, 15};
static const int KEY_ROWS[] = {R_MAX_TOKENS, R_N, R_BEST_OF, R_LOGPROBS, R_PROMPT_LOGPROBS};
#define N_KEYS 5

/* The "=" at k in b[body:stop] (the body's "="s come in order): where it ends one of the KEYS
 * (`name=`, a word of its own, then digits or "None"), its value into the key's row of `row`:
 * the first where the params come first, else the last; -1 for null. `found` holds a bit per
 * key whose value was taken. */
static void param_at(text_t b, i64 body, i64 stop, i64 k, int params_first, unsigned *found,
                     i64 *row)
{
    /* Only the keys that end in the two bytes before the "=" can be there (most words before
     * an "=" end in none of them: ns, bs, n, f). */
    int last = b[k - 1], first_key = 0, end_key = 0;
    if (last == 115 && k - 2 >= body) {
        if (b[k - 2] == 110) /* max_tokens */
            first_key = 0, end_key = 1;
        else if (b[k - 2] == 98) /* logprobs, prompt_logprobs */
            first_key = 3, end_key = 5;
    } else if (last == 110) { /* n */
        first_key = 1, end_key = 2;
    } else if (last == 102) { /* best_of */
        first_key = 2, end_key = 3;
    }
    for (int f = first_key; f < end_key; f++) {
        i64 start = k - KEY_LENGTHS[f];
        if (start < body || (params_first && (*found & (1u << f))))
            continue;
        /* the first byte before the call: most words before an "=" are none of these */
        if (b[start] != KEYS[f][0] || !is_at(b, start, KEYS[f], KEY_LENGTHS[f]))
            continue;
        int c = b[start - 1];
        if (start != body && (ALNUM(c) || c == 95))
            continue;
        i64 value = integer_at(b, k + 1, stop);
        if (value != -2 || (k + 5 <= stop && IS_AT(b, k + 1, "None"))) {
            row[KEY_ROWS[f]] = value != -2 ? value : -1;
            *found |= 1u << f;
        }
        return; /* the word before an "=" is one key at most */
    }
}

/* `<digits> token ids>` at v: the count (-1 when it overflows), -2 when not there. */
static i64 stated_count(text_t b, i64 v, i64 stop)
{
    i64 r = v;
    while (r < stop && DIGIT(b[r]))
        r++;
    if (r == v || r + 11 > stop || !IS_AT(b, r, " token ids>"))
        return -2;
    return integer_at(b, v, stop);
}

/* The bytes the body of a Received record is read at: "=" (a SamplingParams value), ":" (a
 * glued vLLM header, `prompt_token_ids: `), "]" (Ray's repeat suffix) and ESC (a colour code). */
#define INTERESTING(c) ((c) == 61 || (c) == 58 || (c) == 93 || (c) == 27)

typedef struct {
    i64 body, stop, listed, stated;
    int params_first, unusual;
    unsigned found;
} body_pass;

/* One byte of interest at k (see INTERESTING) in a Received record's body. What
 * line_records.UNUSUAL finds (an escape byte, Ray's `x across cluster]`, a vLLM header
 * `LEVEL MM-DD HH:MM:SS ` found at its first colon) sets `unusual`. */
static void body_byte(text_t b, i64 k, body_pass *s, i64 *row)
{
    static const char across[] = "x across cluster]";
    static const char key[] = "prompt_token_ids";
    const i64 n_across = (i64)sizeof(across) - 1, n_key = (i64)sizeof(key) - 1;
    const i64 body = s->body, stop = s->stop;
    switch (b[k]) {
    case 61:
        param_at(b, body, stop, k, s->params_first, &s->found, row);
        break;
    case 58:
        if (k - body >= 14 && k + 7 <= stop && header_at_colon(b, body, k)) {
            s->unusual = 1;
        } else if (k - body >= n_key && k + 2 < stop && b[k + 1] == 32
                   && is_at(b, k - n_key, key, n_key)) {
            /* "prompt_token_ids: " then "[" (a list: the last one counts) or "<" (a stated
             * count: the first one counts, where no list does) */
            i64 at = k - n_key;
            if (b[at + 18] == 91)
                s->listed = at;
            else if (b[at + 18] == 60 && s->stated < 0 && stated_count(b, at + 19, stop) != -2)
                s->stated = at;
        }
        break;
    case 93:
        if (k - body >= n_across - 1 && b[k - 1] == 114 && is_at(b, k - n_across + 1, across,
                                                                  n_across))
            s->unusual = 1;
        break;
    default: /* ESC */
        s->unusual = 1;
    }
}

/* A Received record's id, max_tokens and prompt token count into `row`, as request_lines.py
 * reads them: the id without one final "."; the first `max_tokens=` (a word of its own, then
 * digits or "None") where the params come first, else the last; the ids listed after the last
 * `prompt_token_ids: [` (to the first "]", digits, commas and spaces only), else the count a
 * collector stated (`prompt_token_ids: <N token ids>`). -1 stands for null. Returns 0 where the
 * body holds colour codes, Ray's repeat suffix or a record glued on (the vectorised reader's).
 *
 * One pass over the body finds every byte of interest (INTERESTING): sixteen bytes a step with
 * SSE2 where the compiler has it (every x86-64), a byte a step otherwise. */
#if WIDE
/* The bytes of interest of b[k:s->stop] read 32 at a time (AVX2) until fewer are left or one
 * makes the record unusual: where the reading stopped. */
WIDE_FN static i64 body_bytes_wide(text_t b, i64 k, body_pass *s, i64 *row)
{
    const __m256i eq = _mm256_set1_epi8(61), colon = _mm256_set1_epi8(58);
    const __m256i bracket = _mm256_set1_epi8(93), esc = _mm256_set1_epi8(27);
    /* the last letters of the KEYS (param_at): an "=" after any other byte is no key's */
    const __m256i s_ = _mm256_set1_epi8(115), n_ = _mm256_set1_epi8(110);
    const __m256i f_ = _mm256_set1_epi8(102);
    const i64 stop = s->stop;
    for (; k + 32 <= stop && !s->unusual; k += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(b + k));
        /* the byte before each (the record's header is before its body: k >= 1) */
        __m256i before = _mm256_loadu_si256((const __m256i *)(b + k - 1));
        __m256i key_end = _mm256_or_si256(
            _mm256_cmpeq_epi8(before, s_),
            _mm256_or_si256(_mm256_cmpeq_epi8(before, n_), _mm256_cmpeq_epi8(before, f_)));
        __m256i hit = _mm256_or_si256(
            _mm256_or_si256(_mm256_and_si256(_mm256_cmpeq_epi8(v, eq), key_end),
                            _mm256_cmpeq_epi8(v, colon)),
            _mm256_or_si256(_mm256_cmpeq_epi8(v, bracket), _mm256_cmpeq_epi8(v, esc)));
        unsigned mask = (unsigned)_mm256_movemask_epi8(hit);
        while (mask && !s->unusual) {
            body_byte(b, k + __builtin_ctz(mask), s, row);
            mask &= mask - 1;
        }
    }
    return k;
}
#endif

static int received_body(text_t b, i64 body, i64 stop, i64 id_start, i64 colon,
                         int params_first, i64 *row)
{
    row[R_ID_START] = id_start;
    row[R_ID_STOP] = b[colon - 1] == 46 ? colon - 1 : colon;
    row[R_PARAMS_FIRST] = params_first ? 1 : 0;
    row[R_PROMPT_TOKENS] = -1;
    for (int f = 0; f < N_KEYS; f++)
        row[KEY_ROWS[f]] = -1;
    body_pass s = {body, stop, -1, -1, params_first, 0, 0};
    i64 k = body;
#if WIDE
    if (wide)
        k = body_bytes_wide(b, k, &s, row);
#endif
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
    const __m128i eq = _mm_set1_epi8(61), colon_ = _mm_set1_epi8(58);
    const __m128i bracket = _mm_set1_epi8(93), esc = _mm_set1_epi8(27);
    for (; k + 16 <= stop && !s.unusual; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(b + k));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, eq), _mm_cmpeq_epi8(v, colon_)),
                                   _mm_or_si128(_mm_cmpeq_epi8(v, bracket),
                                                _mm_cmpeq_epi8(v, esc)));
        unsigned mask = (unsigned)_mm_movemask_epi8(hit);
        while (mask && !s.unusual) {
            body_byte(b, k + __builtin_ctz(mask), &s, row);
            mask &= mask - 1;
        }
    }
#endif
    for (; k < stop && !s.unusual; k++)
        if (INTERESTING(b[k]))
            body_byte(b, k, &s, row);
    if (s.unusual)
        return 0;
    if (s.listed >= 0) {
        i64 commas = 0, chars = 0;
        int valid = 1;
        for (i64 r = s.listed + 19; r < stop; r++) {
            int c = b[r];
            if (c == 93)
                break;
            chars++;
            if (c == 44)
                commas++;
            else if (c != 32 && !DIGIT(c))
                valid = 0;
        }
        if (valid) {
            row[R_PROMPT_TOKENS] = chars ? commas + 1 : 0;
            return 1;
        }
    }
    if (s.stated >= 0)
        row[R_PROMPT_TOKENS] = stated_count(b, s.stated + 19, stop);
    return 1;
}

/* Uvicorn's access line, strictly, at p: `INFO:` (or `WARNING:`, `ERROR:`), spaces, the client,
 * ` - "METHOD target HTTP/1.1" 200` and letters of a reason phrase. In that form it holds no
 * vLLM header and no text a record is told by. */
static int access_line(text_t b, i64 p, i64 e)
{
    i64 q = p;
    if (e - q > 8 && b[q] == 73 && IS_AT(b, q, "INFO:"))
        q += 5;
    else if (e - q > 9 && b[q] == 69 && IS_AT(b, q, "ERROR:"))
        q += 6;
    else if (e - q > 11 && b[q] == 87 && IS_AT(b, q, "WARNING:"))
        q += 8;
    else
        return 0;
    if (b[q] != 32)
        return 0;
    while (q < e && b[q] == 32)
        q++;
    i64 client = q;
    while (q < e && b[q] > 32 && b[q] < 127)
        q++;
    if (q == client || q + 5 > e || b[q + 1] != 45 || b[q + 2] != 32 || b[q + 3] != 34)
        return 0;
    q += 4;
    i64 method = q;
    while (q < e && UPPER(b[q]))
        q++;
    if (q == method || q >= e || b[q] != 32)
        return 0;
    q++;
    i64 target = q;
    while (q < e && b[q] > 32 && b[q] < 127 && b[q] != 34)
        q++;
    if (q == target || q + 7 > e || !IS_AT(b, q, " HTTP/"))
        return 0;
    q += 6;
    while (q < e && (DIGIT(b[q]) || b[q] == 46))
        q++;
    if (q + 5 > e || b[q] != 34 || b[q + 1] != 32)
        return 0;
    q += 2;
    for (int k = 0; k < 3; k++)
        if (!DIGIT(b[q + k]))
            return 0;
    q += 3;
    if (q < e && b[q] != 32)
        return 0;
    for (i64 k = q; k < e; k++) {
        int c = b[k];
        if (!(UPPER(c) || LOWER(c) || c == 32 || c == 39 || c == 45))
            return 0;
    }
    return 1;
}

/* --- one line ----------------------------------------------------------------------------------- */

/* The level word at b[q] (INFO, DEBUG, WARNING, ERROR, CRITICAL): its width, 0 for none. */
static int level_width(text_t b, i64 q, i64 e)
{
    int c = q < e ? b[q] : 0;
    if (c == 73 && e - q > 4 && b[q + 1] == 78 && b[q + 2] == 70 && b[q + 3] == 79)
        return 4;
    if (c == 68 && e - q > 5 && b[q + 1] == 69 && b[q + 2] == 66 && b[q + 3] == 85)
        return b[q + 4] == 71 ? 5 : 0;
    if (c == 87 && e - q > 7 && b[q + 1] == 65 && b[q + 2] == 82 && b[q + 3] == 78)
        return (b[q + 4] == 73 && b[q + 5] == 78 && b[q + 6] == 71) ? 7 : 0;
    if (c == 69 && e - q > 5 && b[q + 1] == 82 && b[q + 2] == 82 && b[q + 3] == 79)
        return b[q + 4] == 82 ? 5 : 0;
    if (c == 67 && e - q > 8 && b[q + 1] == 82 && b[q + 2] == 73 && b[q + 3] == 84)
        return (b[q + 4] == 73 && b[q + 5] == 67 && b[q + 6] == 65 && b[q + 7] == 76) ? 8 : 0;
    return 0;
}

/* The kind of the line b[p:e] (GENERAL for any this reader does not take), with a record's
 * fields in `row`. */
static int read_line(text_t b, i64 p, i64 e, i64 *row, prefix_cache *cache)
{
    row[R_MAX_TOKENS] = row[R_PROMPT_TOKENS] = -1;
    row[R_N] = row[R_BEST_OF] = row[R_LOGPROBS] = row[R_PROMPT_LOGPROBS] = -1;
    row[R_PARAMS_FIRST] = 0;
    /* the outer prefixes: a kubectl/docker time, vLLM's and Ray's process prefixes */
    i64 q = outer_prefix(b, p, e, cache);
    if (q < 0)
        return GENERAL;
    row[R_OUTER] = cache->time;
    /* vLLM's header: LEVEL MM-DD HH:MM:SS [file.py:N] (the opening bracket optional) */
    int width = level_width(b, q, e);
    i64 h = q + width + 1;
    int header = width > 0 && h + 16 <= e && b[h - 1] == 32;
    if (header) {
        static const int digits_at[] = {0, 1, 3, 4, 6, 7, 9, 10, 12, 13};
        for (int k = 0; k < 10 && header; k++)
            header = DIGIT(b[h + digits_at[k]]);
        header = header && b[h + 2] == 45 && b[h + 5] == 32 && b[h + 8] == 58;
        header = header && b[h + 11] == 58 && b[h + 14] == 32;
    }
    i64 end = -1;
    int bracketed = 0;
    if (header) {
        i64 r = h + 15;
        bracketed = b[r] == 91;
        if (bracketed)
            r++;
        i64 name = r;
        i64 limit = e < q + HEADER_SLICE ? e : q + HEADER_SLICE;
        while (r < limit) {
            int c = b[r];
            if (!(ALNUM(c) || c == 95 || c == 46 || c == 45))
                break;
            r++;
        }
        if (r > name && r < limit && b[r] == 58) {
            i64 colon = r++;
            while (r < limit && DIGIT(b[r]))
                r++;
            if (r > colon + 1 && r + 2 <= limit && b[r] == 93 && b[r + 1] == 32)
                end = r + 2;
        }
    }
    if (end < 0)
        return !header && access_line(b, q, e) ? ACCESS : GENERAL;
    row[R_MONTH_DAY] = ((b[h] - 48) * 10 + b[h + 1] - 48) * 100 + (b[h + 3] - 48) * 10
                       + b[h + 4] - 48;
    row[R_SECOND] = ((b[h + 6] - 48) * 10 + b[h + 7] - 48) * 3600
                    + ((b[h + 9] - 48) * 10 + b[h + 10] - 48) * 60
                    + (b[h + 12] - 48) * 10 + b[h + 13] - 48;
    row[R_BRACKETED] = bracketed;
    /* the request records: "Received request <id>: params|prompt: ", "Added request <id>" */
    if (e - end > 17 && b[end] == 82 && b[end + 8] == 32 && IS_AT(b, end, "Received request ")) {
        i64 r = end + 17;
        while (r < e && b[r] != 58 && b[r] > 32 && b[r] < 127)
            r++;
        /* The id runs to the first ":", then ": prompt: " or ": params: ", all in the head. */
        if (r == end + 17 || r + 10 > e || b[r] != 58 || r - end + 10 > ID_HEAD)
            return GENERAL;
        int params_first = IS_AT(b, r, ": params: ");
        if (!params_first && !IS_AT(b, r, ": prompt: "))
            return GENERAL;
        /* Colour codes, Ray's repeat suffix or a record glued on: the vectorised reader's. */
        if (!received_body(b, end, e, end + 17, r, params_first, row))
            return GENERAL;
        return RECEIVED;
    }
    if (e - end > 14 && b[end] == 65 && b[end + 5] == 32 && IS_AT(b, end, "Added request ")) {
        /* The id runs to the end of the line (no "." of its own): "Added request <id>". */
        i64 first = end + 14;
        if (e - end > ID_HEAD || !plain_id(b, first, e))
            return GENERAL;
        row[R_ID_START] = first;
        row[R_ID_STOP] = b[e - 1] == 46 ? e - 1 : e;
        return ADDED;
    }
    if (e - end > 16 && b[end] == 65 && b[end + 1] == 98 && IS_AT(b, end, "Aborted request")) {
        /* "Aborted request <id>." or "Aborted request(s) <id>." with one id. */
        i64 first = end + 15;
        if (e - first > 4 && b[first] == 40 && b[first + 1] == 115 && b[first + 2] == 41)
            first += 3;
        if (b[first] != 32)
            return GENERAL;
        first++;
        if (!plain_id(b, first, e))
            return GENERAL;
        row[R_ID_START] = first;
        row[R_ID_STOP] = b[e - 1] == 46 ? e - 1 : e;
        return ABORTED;
    }
    return GENERAL;
}

/* --- the whole chunk ------------------------------------------------------------------------ */

/* The outputs of scan_lines: int64 rows of `cap` columns each (C order), and the ids' bytes. */
typedef struct {
    i64 *general, *access, *records, *runs;
    i64 cap;
    unsigned char *ids;
    i64 ids_cap;
} outputs;

#define AT(array, field, k, cap) (array)[(i64)(field) * (cap) + (k)]

/* The "Added request" record k (its id b[start:stop]) follows, within RECENT records, the
 * "Received request" of the same id: that tells the arrival already (request_table). */
static int told(text_t b, const outputs *out, i64 k, i64 start, i64 stop)
{
    const i64 cap = out->cap;
    i64 n = stop - start;
    i64 last = k - 1 - RECENT > -1 ? k - 1 - RECENT : -1;
    for (i64 j = k - 1; j > last; j--) {
        i64 first = AT(out->records, R_ID_START, j, cap);
        if (AT(out->records, R_KIND, j, cap) != RECEIVED
            || AT(out->records, R_ID_STOP, j, cap) - first != n)
            continue;
        if (memcmp(out->ids + first, b + start, (size_t)n) == 0)
            return 1;
    }
    return 0;
}

typedef struct {
    i64 general, access, records, runs, lines;
    int non_ascii;
    i64 widest; /* the longest line's bytes (its newline and one CR before it left out) */
} counts;

/* Every line of b, counted, and whether b holds a byte that is not ASCII (then the caller
 * checks it is UTF-8 before it trusts a line); returns 0, or -1 when an output has no room
 * (nothing is written past it). */
static int scan(text_t b, i64 size, const outputs *out, counts *n)
{
    const i64 cap = out->cap;
    i64 row[RECORD_FIELDS] = {0};
    prefix_cache cache = {-1, -1, -1, 0, NO_TIME};
    i64 copied = 0;
    int broken = 1; /* a line of the other reader since the last record: the next starts a run */
    i64 start = 0, line = 0;
    uint64_t high = 0; /* the high bits of the bytes read: a byte that is not ASCII */
    memset(n, 0, sizeof *n);
    while (start < size) {
        i64 p = start;
        i64 e = line_end(b, start, size, &high);
        if (e < 0)
            e = size;
        start = e + 1;
        if (e > p && b[e - 1] == 13)
            e--;
        if (e - p > n->widest)
            n->widest = e - p;
        int kind = read_line(b, p, e, row, &cache);
        if (kind == GENERAL || kind == ACCESS) {
            i64 *lines = kind == GENERAL ? out->general : out->access;
            i64 *k = kind == GENERAL ? &n->general : &n->access;
            if (*k >= cap)
                return -1;
            AT(lines, L_LINE, *k, cap) = line;
            AT(lines, L_START, *k, cap) = p;
            AT(lines, L_STOP, *k, cap) = e;
            ++*k;
            if (kind == GENERAL)
                broken = 1;
        } else {
            i64 k = n->records;
            if (k >= cap)
                return -1;
            i64 *rec = out->records;
            AT(rec, R_LINE, k, cap) = line;
            AT(rec, R_KIND, k, cap) = kind;
            for (int field = R_MONTH_DAY; field < R_TOLD; field++)
                AT(rec, field, k, cap) = row[field];
            for (int field = R_N; field <= R_PROMPT_LOGPROBS; field++)
                AT(rec, field, k, cap) = row[field];
            /* Told only with a full time: one whose printed time places nothing is counted so. */
            int is_told = kind == ADDED && row[R_OUTER] != NO_TIME
                          && told(b, out, k, row[R_ID_START], row[R_ID_STOP]);
            AT(rec, R_TOLD, k, cap) = is_told;
            if (is_told) {
                AT(rec, R_ID_START, k, cap) = AT(rec, R_ID_STOP, k, cap) = -1;
            } else {
                i64 length = row[R_ID_STOP] - row[R_ID_START];
                if (copied + length > out->ids_cap)
                    return -1;
                memcpy(out->ids + copied, b + row[R_ID_START], (size_t)length);
                AT(rec, R_ID_START, k, cap) = copied;
                copied += length;
                AT(rec, R_ID_STOP, k, cap) = copied;
            }
            /* A run: the same printed second and full second as the record before it. */
            i64 second = row[R_OUTER] == NO_TIME ? -1 : floor_div(row[R_OUTER], NS);
            int same = !broken && AT(rec, R_MONTH_DAY, k - 1, cap) == row[R_MONTH_DAY]
                       && AT(rec, R_SECOND, k - 1, cap) == row[R_SECOND];
            if (same) {
                i64 previous = AT(rec, R_OUTER, k - 1, cap);
                same = (previous == NO_TIME ? -1 : floor_div(previous, NS)) == second;
            }
            if (!same) {
                if (n->runs >= cap)
                    return -1;
                n->runs++;
            }
            i64 run = n->runs - 1;
            AT(rec, R_RUN, k, cap) = run;
            AT(out->runs, RUN_LAST, run, cap) = k;
            AT(out->runs, RUN_WEIGHT, run, cap) = same ? AT(out->runs, RUN_WEIGHT, run, cap) + 1 : 1;
            n->records++;
            broken = 0;
        }
        line++;
    }
    n->lines = line;
    n->non_ascii = high != 0;
    return 0;
}

/* --- Python's side ---------------------------------------------------------------------------- */

/* A buffer of `itemsize`-byte integers in C order, `ndim` dimensions, writable or not; `rows`
 * (when > 0) the size of the first of two dimensions. Sets ValueError and returns -1 when it is
 * not so (the buffer released). */
static int get_array(PyObject *obj, Py_buffer *view, const char *name, int ndim, Py_ssize_t rows,
                     Py_ssize_t itemsize, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@')
        format++;
    int integer = strlen(format) == 1 && strchr(itemsize == 1 ? "Bbc" : "lqLQ", *format) != NULL;
    if (view->ndim != ndim || view->itemsize != itemsize || !integer
        || (rows > 0 && view->shape[0] != rows)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a C-contiguous %d-dimensional array of %zd-byte integers%s",
                     name, ndim, itemsize, rows > 0 ? " with the documented rows" : "");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *py_count_lines(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer text;
    if (get_array(arg, &text, "text", 1, 0, 1, 0) < 0)
        return NULL;
    text_t b = text.buf;
    i64 size = (i64)text.len, count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (i64 start = 0; start < size; count++) {
        i64 end = find_byte(b, start, size, 10);
        if (end < 0) {
            count++;
            break;
        }
        start = end + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    return PyLong_FromLongLong(count);
}

static PyObject *py_scan_lines(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:scan_lines", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5]))
        return NULL;
    static const char *names[] = {"b", "general", "access", "records", "runs", "ids"};
    const int ndims[] = {1, 2, 2, 2, 2, 1};
    const Py_ssize_t rows[] = {0, LINE_FIELDS, LINE_FIELDS, RECORD_FIELDS, RUN_FIELDS, 0};
    const Py_ssize_t itemsizes[] = {1, 8, 8, 8, 8, 1};
    Py_buffer views[6];
    int got = 0;
    for (; got < 6; got++)
        if (get_array(objs[got], &views[got], names[got], ndims[got], rows[got], itemsizes[got],
                      got > 0) < 0)
            break;
    PyObject *result = NULL;
    if (got == 6) {
        Py_ssize_t cap = views[1].shape[1];
        int same = 1;
        for (int k = 2; k < 5; k++)
            same = same && views[k].shape[1] == cap;
        if (!same) {
            PyErr_SetString(PyExc_ValueError,
                            "scan_lines: general, access, records and runs need as many columns");
        } else {
            outputs out = {views[1].buf, views[2].buf, views[3].buf, views[4].buf, (i64)cap,
                           views[5].buf, (i64)views[5].len};
            counts n;
            int status;
            Py_BEGIN_ALLOW_THREADS
            status = scan(views[0].buf, (i64)views[0].len, &out, &n);
            Py_END_ALLOW_THREADS
            if (status < 0) {
                Py_INCREF(Py_None); /* no room: the caller counts the lines and gives more */
                result = Py_None;
            } else {
                result = Py_BuildValue("(LLLLLOL)", (long long)n.general, (long long)n.access,
                                       (long long)n.records, (long long)n.runs,
                                       (long long)n.lines, n.non_ascii ? Py_True : Py_False,
                                       (long long)n.widest);
            }
        }
    }
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

static PyObject *py_write_views(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO:write_views", &objs[0], &objs[1], &objs[2], &objs[3]))
        return NULL;
    static const char *names[] = {"b", "starts", "stops", "views"};
    const int ndims[] = {1, 1, 1, 2};
    const Py_ssize_t itemsizes[] = {1, 8, 8, 1};
    Py_buffer views[4];
    int got = 0;
    for (; got < 4; got++)
        if (get_array(objs[got], &views[got], names[got], ndims[got], 0, itemsizes[got],
                      got == 3) < 0)
            break;
    PyObject *result = NULL;
    if (got == 4) {
        text_t b = views[0].buf;
        i64 size = (i64)views[0].len;
        const i64 *starts = views[1].buf, *stops = views[2].buf;
        unsigned char *out = views[3].buf;
        Py_ssize_t count = views[1].shape[0];
        int ok = views[2].shape[0] == count && views[3].shape[0] == count
                 && views[3].shape[1] == 16;
        for (Py_ssize_t k = 0; k < count && ok; k++)
            ok = starts[k] >= 0 && starts[k] <= stops[k] && stops[k] <= size
                 && starts[k] <= INT32_MAX && stops[k] - starts[k] <= INT32_MAX;
        if (!ok) {
            PyErr_SetString(PyExc_ValueError,
                            "write_views: starts and stops must be as many as the views' rows "
                            "(16 bytes each) and lie within b, under 2 GiB");
        } else {
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t k = 0; k < count; k++) {
                /* An Arrow string view: length, then the string itself (up to 12 bytes) or its
                 * first 4 bytes, buffer 0 and its offset; all little-endian. */
                unsigned char *view = out + 16 * k;
                i64 s = starts[k];
                uint32_t n = (uint32_t)(stops[k] - s);
                memset(view, 0, 16);
                for (int j = 0; j < 4; j++)
                    view[j] = (unsigned char)(n >> (8 * j));
                if (n <= 12) {
                    memcpy(view + 4, b + s, n);
                } else {
                    memcpy(view + 4, b + s, 4);
                    for (int j = 0; j < 4; j++)
                        view[12 + j] = (unsigned char)((uint32_t)s >> (8 * j));
                }
            }
            Py_END_ALLOW_THREADS
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

/* The tests' way to read the same text both ways: AVX2 on (where the processor has it) or off.
 * Not to be called while a scan runs. */
static PyObject *py_set_wide(PyObject *self, PyObject *arg)
{
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
#if WIDE
    wide = on && __builtin_cpu_supports("avx2");
    return PyBool_FromLong(wide);
#else
    return PyBool_FromLong(0);
#endif
}

static PyMethodDef methods[] = {
    {"set_wide", py_set_wide, METH_O,
     "set_wide(on) -> bool: read 32 bytes a step (AVX2) where the processor can, or 16 (SSE2); "
     "returns whether 32 are now read."},
    {"count_lines", py_count_lines, METH_O,
     "count_lines(text) -> int: how many lines text holds (a last line without a newline "
     "counts)."},
    {"scan_lines", py_scan_lines, METH_VARARGS,
     "scan_lines(b, general, access, records, runs, ids) -> (n_general, n_access, n_records, "
     "n_runs, n_lines, non_ascii, widest), or None where the outputs have no room: every line of b "
     "read, the outputs written column by column."},
    {"write_views", py_write_views, METH_VARARGS,
     "write_views(b, starts, stops, views) -> None: Arrow string views of b[starts[k]:stops[k]] "
     "into views (16 bytes each)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_line_scan",
    "The vLLM line scanner (see the header comment of _line_scan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__line_scan(void)
{
#if WIDE
    __builtin_cpu_init();
    wide = __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    static const struct {
        const char *name;
        long long value;
    } constants[] = {
        {"GENERAL", GENERAL}, {"ACCESS", ACCESS}, {"RECEIVED", RECEIVED}, {"ADDED", ADDED},
        {"ABORTED", ABORTED}, {"RECENT", RECENT}, {"ID_HEAD", ID_HEAD},
        {"HEADER_SLICE", HEADER_SLICE}, {"NO_TIME", NO_TIME},
        {"R_LINE", R_LINE}, {"R_KIND", R_KIND}, {"R_MONTH_DAY", R_MONTH_DAY},
        {"R_SECOND", R_SECOND}, {"R_OUTER", R_OUTER}, {"R_BRACKETED", R_BRACKETED},
        {"R_ID_START", R_ID_START}, {"R_ID_STOP", R_ID_STOP}, {"R_MAX_TOKENS", R_MAX_TOKENS},
        {"R_PROMPT_TOKENS", R_PROMPT_TOKENS}, {"R_PARAMS_FIRST", R_PARAMS_FIRST},
        {"R_TOLD", R_TOLD}, {"R_RUN", R_RUN}, {"R_N", R_N}, {"R_BEST_OF", R_BEST_OF},
        {"R_LOGPROBS", R_LOGPROBS}, {"R_PROMPT_LOGPROBS", R_PROMPT_LOGPROBS},
        {"RECORD_FIELDS", RECORD_FIELDS}, {"L_LINE", L_LINE}, {"L_START", L_START},
        {"L_STOP", L_STOP}, {"LINE_FIELDS", LINE_FIELDS}, {"RUN_LAST", RUN_LAST},
        {"RUN_WEIGHT", RUN_WEIGHT}, {"RUN_FIELDS", RUN_FIELDS},
    };
    for (size_t k = 0; k < sizeof constants / sizeof constants[0]; k++) {
        PyObject *value = PyLong_FromLongLong(constants[k].value);
        if (value == NULL || PyModule_AddObject(m, constants[k].name, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
