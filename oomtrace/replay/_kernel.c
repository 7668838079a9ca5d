/*
 * oomtrace.replay._kernel: the replay's fast simulator and the grouping of a large requests
 * table into requests, in C.
 *
 * This is a line-for-line port of the plain Python/NumPy functions of oomtrace/replay/kernel/
 * (layout.py: the codes, columns and closed forms; heaps.py; level.py; admission.py; loop.py's
 * `simulate`; grouping.py's `group_ids` and `group_rows`), which stay the reference for it and
 * run where this module was not built; oomtrace/replay/reference.py simulates token by token.
 * The semantics and the reasoning behind each step are in those modules' docstrings; the tests
 * (tests/unit/replay/test_c_kernel.py, test_properties.py, test_grouping.py) hold the C and the
 * Python functions to identical arrays, and both to the token-by-token reference.
 *
 * Why C: the same functions compiled by numba cost every run about half a CPU second before a
 * request was simulated (importing numba, loading its cached machine code) and a first run on a
 * machine tens of seconds compiling; this module loads in about a millisecond, so it runs at
 * every size. Plain C99, the C library and Python's headers only; arrays come in through the
 * buffer protocol (NumPy's, any C-contiguous buffer of the stated item size), outputs are made by
 * the caller (oomtrace/replay/compiled.py), scratch (heaps, queue) is allocated here and freed.
 *
 * Arithmetic is Python's: integer division and remainder floor (`floordiv`, `floormod`), a float
 * turned to an integer truncates (`to_i64`, saturated at int64's ends: Python's int() does not
 * overflow). Heaps and the event log have fixed widths given by their
 * allocation: a push into a full heap compacts it first and raises RuntimeError if it is still
 * full (the Python kernel's proof says it never is); log rows past its width overwrite the last
 * and are only counted. Inputs are checked (ValueError naming the argument); the GIL is released
 * around the event loop and the grouping.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef uint64_t u64;

/* --- layout.py: shared with the Python kernel (exported; a test compares them) -------------- */
#define INF ((i64)1 << 61)
enum { ON_DEMAND = 0, RESERVE = 1 };
/* columns of the per-request state matrix */
enum {
    S_SEG, S_FIRST, S_G0, S_VER, S_STATUS, S_ADMIT, S_FINISH, S_NPRE, S_REASON, S_CHUNK, S_BLK,
    S_KNEXT, S_PREV, S_NEXT, S_FINAL, NCOL
};
/* scalar slots */
enum {
    C_NRUN, C_HEAD, C_TAIL, C_WHEAD, C_WLEN, C_USED, C_PF, C_PRE_TOTAL, C_FH, C_PH, C_XH,
    C_ACTIVE, C_TAU, C_RACC, C_COMMIT, C_MAXRUN, C_MAXPF, C_LOG, NSC
};
/* event log kinds */
enum { LOG_ADMIT = 1, LOG_PREEMPT = 2, LOG_FINISH = 3, LOG_REJECT = 4 };
/* the slots of `limits` (runner.limits_array) */
enum { L_BLOCK, L_POLICY, L_MAX_SEQS, L_BUDGET, L_MAX_WAIT, L_LOG_ROWS, L_PEAKS, NLIMITS };
/* grouping.py */
enum { E_OTHER = 0, E_ADMITTED = 1, E_FIRST_TOKEN = 2, E_END = 3, E_REJECTED = 4, E_EVENT = 7,
       E_PROMPT = 8, E_MAX = 16, E_OUTPUT = 32 };
enum { G_FIRST, G_PROMPT, G_MAX, G_OUTPUT, G_ADMITTED, G_FIRST_TOKEN, G_END, G_REJECTED,
       G_NCOL };
#define RECENT_SLOTS (1 << 14)
/* the columns of the series (one row per probe) and the slots of the totals */
#define SERIES_COLS 4
#define NTOTALS 5

static inline i64 min2(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 max2(i64 a, i64 b) { return a > b ? a : b; }
/* Python's // and % (b > 0 everywhere they are used) */
static inline i64 floordiv(i64 a, i64 b)
{
    i64 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
static inline i64 floormod(i64 a, i64 b)
{
    i64 r = a % b;
    return (r != 0 && r < 0) ? r + b : r;
}
/* int(x) of a float: truncation, saturated at int64's ends (Python's int() does not overflow,
 * so a bound past them compares as Python's would) */
static inline i64 to_i64(double x)
{
    if (x >= 9223372036854775808.0)
        return INT64_MAX;
    return x < -9223372036854775808.0 ? INT64_MIN : (i64)x;
}

/* --- the simulation's state ------------------------------------------------------------------ */
/* A heap of (time, request, version) entries, three int64 a slot, `cap` slots. */
typedef struct {
    i64 *h;
    i64 cap;
} heap_t;

typedef struct {
    i64 n;
    const i64 *arr, *p, *o, *pre, *dl, *res, *limits, *probes;
    i64 nprobes, pool;
    i64 block;
    int block_shift; /* log2(block) where block is a power of two (always, in practice), else -1 */
    i64 *st; /* n x NCOL */
    i64 *sc; /* NSC */
    double rate;
    i64 *wq; /* max(n, 1) */
    heap_t fh, ph, xh;
    i64 *lg; /* 4 x lg_w (rows: time, request, kind, extra) */
    i64 lg_w;
    i64 *series; /* nprobes x SERIES_COLS */
    i64 *totals; /* NTOTALS */
    int overflow; /* a heap had no room after compaction: the run stops, RuntimeError */
} sim_t;

#define ST(s, i, c) ((s)->st[(i) * NCOL + (c)])
#define HT(hp, k) ((hp)->h[3 * (k)])
#define HI(hp, k) ((hp)->h[3 * (k) + 1])
#define HV(hp, k) ((hp)->h[3 * (k) + 2])

/* --- layout.py's closed forms ---------------------------------------------------------------- */
/* n // block and n % block (Python's: floor) by a shift and a mask where block is a power of two:
 * the division by the block size was the event loop's costliest instruction (`perf`: reading the
 * level at the day's 85,000 probes). GCC and Clang shift signed integers arithmetically, which
 * floors; the tests hold both forms to the Python kernel. */
static inline i64 div_block(const sim_t *s, i64 n)
{
    return s->block_shift >= 0 ? n >> s->block_shift : floordiv(n, s->block);
}
static inline i64 mod_block(const sim_t *s, i64 n)
{
    return s->block_shift >= 0 ? (n & (s->block - 1)) : floormod(n, s->block);
}
/* blocks holding n tokens */
static inline i64 blocks_of(const sim_t *s, i64 n) { return div_block(s, n + s->block - 1); }

/* Output tokens request i has produced by instant t (inclusive). */
static inline i64 produced(const sim_t *s, i64 i, i64 t)
{
    i64 first = ST(s, i, S_FIRST), g0 = ST(s, i, S_G0);
    return t < first ? g0 : min2(g0 + (t - first) / s->dl[i] + 1, s->o[i]); /* t - first >= 0 */
}

/* When request i starts its next block, or INF if it stores no further block. */
static inline i64 next_boundary(const sim_t *s, i64 i)
{
    i64 k = ST(s, i, S_KNEXT), g0 = ST(s, i, S_G0), first = ST(s, i, S_FIRST);
    return g0 + k > s->o[i] - 1 ? INF : first + (k - 1) * s->dl[i];
}

/* --- heaps.py -------------------------------------------------------------------------------- */
/* Place (t, i, v) at position k (free) and sift it down among the first `size`. */
static inline void heap_sift_down(heap_t *hp, i64 size, i64 k, i64 t, i64 i, i64 v)
{
    for (;;) {
        i64 child = 2 * k + 1;
        if (child >= size)
            break;
        i64 right = child + 1;
        if (right < size
            && (HT(hp, right) < HT(hp, child)
                || (HT(hp, right) == HT(hp, child) && HI(hp, right) < HI(hp, child))))
            child = right;
        if (!(HT(hp, child) < t || (HT(hp, child) == t && HI(hp, child) < i)))
            break;
        HT(hp, k) = HT(hp, child), HI(hp, k) = HI(hp, child), HV(hp, k) = HV(hp, child);
        k = child;
    }
    HT(hp, k) = t, HI(hp, k) = i, HV(hp, k) = v;
}

/* The size of the heap with room for one more entry: a full heap drops its stale entries and
 * heapifies the rest. Sets s->overflow where it is still full. */
static i64 heap_room(sim_t *s, heap_t *hp, i64 size)
{
    if (size < hp->cap)
        return size;
    i64 kept = 0;
    for (i64 k = 0; k < size; k++)
        if (HV(hp, k) == ST(s, HI(hp, k), S_VER)) {
            HT(hp, kept) = HT(hp, k), HI(hp, kept) = HI(hp, k), HV(hp, kept) = HV(hp, k);
            kept++;
        }
    for (i64 k = kept / 2 - 1; k >= 0; k--)
        heap_sift_down(hp, kept, k, HT(hp, k), HI(hp, k), HV(hp, k));
    if (kept >= hp->cap)
        s->overflow = 1;
    return kept;
}

/* Push (t, i, v) onto a heap with room; returns the new size (unchanged where it has none). */
static inline i64 heap_push(sim_t *s, heap_t *hp, i64 size, i64 t, i64 i, i64 v)
{
    if (size >= hp->cap) {
        s->overflow = 1;
        return size;
    }
    i64 k = size;
    while (k > 0) {
        i64 up = (k - 1) >> 1;
        if (!(HT(hp, up) > t || (HT(hp, up) == t && HI(hp, up) > i)))
            break;
        HT(hp, k) = HT(hp, up), HI(hp, k) = HI(hp, up), HV(hp, k) = HV(hp, up);
        k = up;
    }
    HT(hp, k) = t, HI(hp, k) = i, HV(hp, k) = v;
    return size + 1;
}

/* Remove the top entry; returns the new size. */
static inline i64 heap_pop(heap_t *hp, i64 size)
{
    size -= 1;
    heap_sift_down(hp, size, 0, HT(hp, size), HI(hp, size), HV(hp, size));
    return size;
}

/* Drop stale entries from the top of the heap whose size is in slot `slot`; the live top's time,
 * or INF. */
static inline i64 heap_top(sim_t *s, heap_t *hp, int slot)
{
    i64 size = s->sc[slot];
    while (size > 0 && HV(hp, 0) != ST(s, HI(hp, 0), S_VER))
        size = heap_pop(hp, size);
    s->sc[slot] = size;
    return size > 0 ? HT(hp, 0) : INF;
}

/* --- level.py -------------------------------------------------------------------------------- */
/* Make every running request's blocks (and the level) exact as of instant t; when active,
 * rebuild the heap of next block boundaries. */
static void sync_level(sim_t *s, i64 t)
{
    i64 *sc = s->sc, block = s->block, total = 0;
    s->rate = 0.0;
    sc[C_XH] = 0;
    for (i64 i = sc[C_HEAD]; i >= 0; i = ST(s, i, S_NEXT)) {
        i64 g0 = ST(s, i, S_G0);
        i64 done = produced(s, i, t) - g0;
        ST(s, i, S_BLK) = blocks_of(s, s->p[i] + g0 + min2(done, s->o[i] - 1 - g0));
        total += ST(s, i, S_BLK);
        i64 first = mod_block(s, -(s->p[i] + g0)) + 1;
        ST(s, i, S_KNEXT) = done < first ? first : first + block * (div_block(s, done - first) + 1);
        s->rate += 1.0 / (double)(block * s->dl[i]);
        if (sc[C_ACTIVE] == 1) {
            i64 boundary = next_boundary(s, i);
            if (boundary < INF)
                sc[C_XH] = heap_push(s, &s->xh, sc[C_XH], boundary, i, ST(s, i, S_VER));
        }
    }
    sc[C_USED] = total, sc[C_TAU] = t, sc[C_RACC] = sc[C_NRUN];
}

/* The level at instant t while dormant, changing nothing. */
static i64 level_at(const sim_t *s, i64 t)
{
    i64 total = 0;
    for (i64 i = s->sc[C_HEAD]; i >= 0; i = ST(s, i, S_NEXT)) {
        i64 g0 = ST(s, i, S_G0);
        i64 done = produced(s, i, t) - g0;
        total += blocks_of(s, s->p[i] + g0 + min2(done, s->o[i] - 1 - g0));
    }
    return total;
}

/* An upper bound of the level at t while dormant (the same float steps as level.py's). */
static inline i64 bound(const sim_t *s, i64 t)
{
    const i64 *sc = s->sc;
    if (sc[C_ACTIVE] == 1)
        return sc[C_USED];
    double grown = (double)(t - sc[C_TAU]) * s->rate;
    grown = grown * (1.0 + 1e-9);
    double sum = (double)(sc[C_USED] + sc[C_RACC]) + grown;
    sum = sum + 1.0;
    return to_i64(sum);
}

/* Stop tracking block boundaries. */
static void sleep_level(sim_t *s, i64 now)
{
    i64 *sc = s->sc, block = s->limits[L_BLOCK];
    sc[C_ACTIVE] = 0, sc[C_XH] = 0, sc[C_TAU] = now - 1, sc[C_RACC] = sc[C_NRUN];
    s->rate = 0.0;
    for (i64 i = sc[C_HEAD]; i >= 0; i = ST(s, i, S_NEXT))
        s->rate += 1.0 / (double)(block * s->dl[i]);
}

/* Apply block boundaries from instant t on up to `until` while the pool holds them; returns the
 * last instant applied. */
static i64 cross(sim_t *s, i64 t, i64 until)
{
    i64 *sc = s->sc, block = s->limits[L_BLOCK], pool = s->pool, last = t;
    heap_t *xh = &s->xh;
    while (sc[C_XH] > 0 && 2 * HT(xh, 0) < until) {
        i64 at = HT(xh, 0), i = HI(xh, 0), ver = HV(xh, 0);
        if (!(at <= last || sc[C_USED] <= pool))
            break; /* the pool ran dry at the last instant */
        if (ver != ST(s, i, S_VER)) {
            sc[C_XH] = heap_pop(xh, sc[C_XH]);
            continue;
        }
        last = at;
        ST(s, i, S_BLK) += 1;
        sc[C_USED] += 1;
        ST(s, i, S_KNEXT) += block;
        i64 boundary = next_boundary(s, i);
        if (boundary < INF)
            heap_sift_down(xh, sc[C_XH], 0, boundary, i, ver);
        else
            sc[C_XH] = heap_pop(xh, sc[C_XH]);
    }
    return last;
}

/* --- admission.py ---------------------------------------------------------------------------- */
/* Append (t, i, kind, extra) to the event log; rows past its width overwrite the last. */
static inline void log_event(sim_t *s, i64 t, i64 i, i64 kind, i64 extra)
{
    i64 row = min2(s->sc[C_LOG], s->lg_w - 1), w = s->lg_w;
    s->lg[row] = t, s->lg[w + row] = i, s->lg[2 * w + row] = kind, s->lg[3 * w + row] = extra;
    s->sc[C_LOG] += 1;
}

static inline void link_running(sim_t *s, i64 i)
{
    i64 *sc = s->sc, tail = sc[C_TAIL];
    if (tail >= 0)
        ST(s, tail, S_NEXT) = i;
    else
        sc[C_HEAD] = i;
    ST(s, i, S_PREV) = tail, ST(s, i, S_NEXT) = -1;
    sc[C_TAIL] = i;
    sc[C_NRUN] += 1;
}

/* Take running request i out of the running list and release all it holds. */
static inline void leave(sim_t *s, i64 i)
{
    i64 *sc = s->sc, before = ST(s, i, S_PREV), after = ST(s, i, S_NEXT);
    if (before >= 0)
        ST(s, before, S_NEXT) = after;
    else
        sc[C_HEAD] = after;
    if (after >= 0)
        ST(s, after, S_PREV) = before;
    else
        sc[C_TAIL] = before;
    sc[C_NRUN] -= 1;
    sc[C_USED] -= ST(s, i, S_BLK);
    sc[C_COMMIT] -= ST(s, i, S_FINAL);
    ST(s, i, S_BLK) = 0;
    ST(s, i, S_VER) += 1;
    sc[C_PF] -= ST(s, i, S_CHUNK);
    ST(s, i, S_CHUNK) = 0;
}

/* Make waiting request i resident at t; its finish, prefill end and next block boundary. */
static void start(sim_t *s, i64 i, i64 t, i64 *finish, i64 *prefill_end, i64 *boundary)
{
    i64 *sc = s->sc, block = s->limits[L_BLOCK], policy = s->limits[L_POLICY];
    i64 budget = s->limits[L_BUDGET];
    i64 p_i = s->p[i], pre_i = s->pre[i], res_i = s->res[i];
    double rate_i = 1.0 / (double)(block * s->dl[i]);
    i64 g0 = ST(s, i, S_G0);
    i64 seg_pre = g0 == 0 ? pre_i : max2(1, floordiv(pre_i * (p_i + g0), max2(p_i, 1)));
    ST(s, i, S_STATUS) = 2;
    ST(s, i, S_SEG) = t;
    ST(s, i, S_FIRST) = t + seg_pre;
    ST(s, i, S_VER) += 1;
    if (ST(s, i, S_ADMIT) < 0)
        ST(s, i, S_ADMIT) = t;
    *boundary = INF;
    if (policy == ON_DEMAND) {
        ST(s, i, S_KNEXT) = mod_block(s, -(p_i + g0)) + 1;
        if (sc[C_ACTIVE] == 1)
            *boundary = next_boundary(s, i);
    }
    *finish = t + seg_pre + (s->o[i] - g0 - 1) * s->dl[i];
    link_running(s, i);
    sc[C_MAXRUN] = max2(sc[C_MAXRUN], sc[C_NRUN]);
    i64 held = policy == RESERVE ? res_i : blocks_of(s, p_i + g0);
    ST(s, i, S_BLK) = held;
    sc[C_USED] += held;
    ST(s, i, S_FINAL) = res_i;
    sc[C_COMMIT] += res_i;
    if (sc[C_ACTIVE] == 0) {
        sc[C_RACC] += 1;
        s->rate += rate_i;
    }
    i64 chunk = budget > 0 ? min2(p_i + g0, budget) : 0;
    ST(s, i, S_CHUNK) = chunk;
    sc[C_PF] += chunk;
    sc[C_MAXPF] = max2(sc[C_MAXPF], sc[C_PF]);
    *prefill_end = t + seg_pre;
}

/* Admit from the head of the waiting queue, first come first served, while the head fits. */
static void admit_pass(sim_t *s, i64 t)
{
    i64 *sc = s->sc, n = s->n, pool = s->pool;
    i64 policy = s->limits[L_POLICY];
    i64 max_seqs = s->limits[L_MAX_SEQS], budget = s->limits[L_BUDGET];
    while (sc[C_WLEN] > 0 && !s->overflow) {
        i64 i = s->wq[sc[C_WHEAD]];
        i64 need = policy == RESERVE ? s->res[i] : blocks_of(s, s->p[i] + ST(s, i, S_G0));
        if (!(max_seqs <= 0 || sc[C_NRUN] < max_seqs))
            break;
        if (sc[C_ACTIVE] == 1 || sc[C_COMMIT] + need > pool) {
            /* dormant, the level is only known to be below the committed total: make it exact */
            if (sc[C_ACTIVE] == 0 && sc[C_TAU] != t)
                sync_level(s, t);
            if (!(sc[C_USED] + need <= pool))
                break;
        }
        if (budget > 0 && !(sc[C_PF] + min2(s->p[i] + ST(s, i, S_G0), budget) <= budget))
            break;
        sc[C_WHEAD] = (sc[C_WHEAD] + 1) % n;
        sc[C_WLEN] -= 1;
        i64 finish, prefill_end, boundary;
        start(s, i, t, &finish, &prefill_end, &boundary);
        i64 ver = ST(s, i, S_VER);
        if (s->limits[L_LOG_ROWS] > 0)
            log_event(s, t, i, LOG_ADMIT, prefill_end);
        sc[C_FH] = heap_push(s, &s->fh, heap_room(s, &s->fh, sc[C_FH]), finish, i, ver);
        if (budget > 0)
            sc[C_PH] = heap_push(s, &s->ph, heap_room(s, &s->ph, sc[C_PH]), prefill_end, i, ver);
        if (boundary < INF)
            sc[C_XH] = heap_push(s, &s->xh, heap_room(s, &s->xh, sc[C_XH]), boundary, i, ver);
    }
}

/* The pool ran dry at t: preempt (recompute) the newest running request until the tokens stored
 * at t fit. */
static void preempt_until_fits(sim_t *s, i64 t, int record)
{
    i64 *sc = s->sc, n = s->n;
    while (sc[C_USED] > s->pool) {
        i64 v = sc[C_TAIL];
        ST(s, v, S_G0) = produced(s, v, t);
        leave(s, v);
        ST(s, v, S_STATUS) = 1;
        ST(s, v, S_NPRE) += 1;
        sc[C_PRE_TOTAL] += 1;
        if (record)
            log_event(s, t, v, LOG_PREEMPT, ST(s, v, S_G0));
        sc[C_WHEAD] = (sc[C_WHEAD] - 1 + n) % n;
        s->wq[sc[C_WHEAD]] = v;
        sc[C_WLEN] += 1;
    }
}

/* Queue arrival i; 0 if it can never fit the pool (rejected). */
static inline int arrive(sim_t *s, i64 i)
{
    i64 *sc = s->sc;
    int fits = s->res[i] <= s->pool;
    ST(s, i, S_STATUS) = fits ? 1 : 4;
    ST(s, i, S_REASON) = fits ? 0 : 1;
    s->wq[(sc[C_WHEAD] + sc[C_WLEN]) % s->n] = i;
    sc[C_WLEN] += fits ? 1 : 0;
    return fits;
}

/* --- loop.py: simulate ----------------------------------------------------------------------- */
static void run_simulation(sim_t *s)
{
    i64 *sc = s->sc, *st = s->st, *totals = s->totals, *series = s->series;
    i64 n = s->n, pool = s->pool, np_ = s->nprobes;
    const i64 *arr = s->arr, *probes = s->probes;
    i64 policy = s->limits[L_POLICY], max_wait = s->limits[L_MAX_WAIT];
    i64 margin = floordiv(pool, 8); /* hysteresis: leave the active mode only well below */
    int record = s->limits[L_LOG_ROWS] > 0, peaks = s->limits[L_PEAKS] == 1;
    for (i64 i = 0; i < n; i++)
        st[i * NCOL + S_ADMIT] = -1, st[i * NCOL + S_FINISH] = -1;
    memset(sc, 0, NSC * sizeof(i64));
    sc[C_HEAD] = -1, sc[C_TAIL] = -1, sc[C_TAU] = -1;
    sc[C_ACTIVE] = policy == RESERVE ? 1 : 0;
    s->rate = 0.0;
    memset(series, 0, (size_t)np_ * SERIES_COLS * sizeof(i64));
    memset(totals, 0, NTOTALS * sizeof(i64));
    totals[1] = -1;
    i64 nxt = 0, j = 0, now = -1, left_at = -1, bin_max = 0, arriving = -1;
    int admit_due = 0;
    while (!s->overflow) {
        i64 tf = heap_top(s, &s->fh, C_FH);
        i64 tp = heap_top(s, &s->ph, C_PH);
        i64 tx = heap_top(s, &s->xh, C_XH);
        i64 ta = nxt < n ? arr[nxt] : INF;
        i64 t_evt = min2(min2(tf, tx), min2(tp, ta));
        if (admit_due && sc[C_WLEN] == 0)
            admit_due = 0, arriving = -1;
        if (admit_due && (t_evt > now || (tf != t_evt && tx != t_evt))) {
            /* one admission pass after an instant's finishes and block boundaries, and after
             * each prefill end and arrival */
            admit_due = 0;
            admit_pass(s, now);
            if (arriving >= 0 && max_wait >= 0 && sc[C_WLEN] > max_wait) {
                /* the arrival is still waiting (arrivals join the tail) and the queue is full */
                sc[C_WLEN] -= 1;
                st[arriving * NCOL + S_STATUS] = 4, st[arriving * NCOL + S_REASON] = 2;
                if (record)
                    log_event(s, now, arriving, LOG_REJECT, 2);
            }
            arriving = -1;
            continue;
        }
        i64 horizon = j < np_ ? min2(t_evt, probes[j]) : t_evt;
        if (policy == ON_DEMAND) {
            if (sc[C_ACTIVE] == 0 && sc[C_COMMIT] > pool && bound(s, horizon) > pool) {
                /* the pool could run dry before the next event: track boundaries one by one */
                sc[C_ACTIVE] = 1;
                sync_level(s, now);
                continue;
            }
            if (sc[C_ACTIVE] == 1 && sc[C_COMMIT] <= pool - margin) {
                sleep_level(s, now);
                continue;
            }
        }
        if (j < np_ && probes[j] <= t_evt) {
            i64 *row = series + j * SERIES_COLS;
            if (!peaks) {
                i64 level = sc[C_USED];
                if (sc[C_ACTIVE] == 0)
                    level = level_at(s, probes[j] - 1);
                row[0] = level, row[1] = sc[C_NRUN], row[2] = sc[C_WLEN], row[3] = level;
                j++;
                continue;
            }
            if (sc[C_ACTIVE] == 0)
                sync_level(s, probes[j] - 1);
            i64 level = sc[C_USED];
            row[0] = level, row[1] = sc[C_NRUN], row[2] = sc[C_WLEN];
            row[3] = max2(bin_max, level);
            bin_max = 0;
            j++;
            continue;
        }
        if (t_evt == INF)
            break;
        if (tf == t_evt) {
            if (t_evt > left_at) {
                /* between events the level only grows: just before a release is a candidate */
                left_at = t_evt;
                if (min2(sc[C_COMMIT], bound(s, t_evt - 1)) > bin_max) {
                    if (sc[C_ACTIVE] == 0)
                        sync_level(s, t_evt - 1);
                    bin_max = max2(bin_max, sc[C_USED]);
                    totals[0] = max2(totals[0], sc[C_USED]);
                }
            }
            i64 i = HI(&s->fh, 0);
            sc[C_FH] = heap_pop(&s->fh, sc[C_FH]);
            leave(s, i);
            st[i * NCOL + S_STATUS] = 3;
            st[i * NCOL + S_FINISH] = t_evt;
            if (record)
                log_event(s, t_evt, i, LOG_FINISH, 0);
            now = t_evt, admit_due = 1;
            continue;
        }
        now = t_evt;
        if (tx == t_evt) {
            /* boundaries only add blocks: take them in one run up to the next other event */
            i64 until = min2(min2(2 * tf, 2 * tp + 1), 2 * ta + 1);
            if (j < np_)
                until = min2(until, 2 * probes[j]);
            if (admit_due)
                until = min2(until, 2 * t_evt + 1); /* the admission pass due after this instant */
            t_evt = cross(s, t_evt, until);
            now = t_evt;
            if (sc[C_USED] > pool) {
                /* the pool ran dry: it was full, whatever the level before */
                if (totals[1] < 0)
                    totals[1] = t_evt;
                bin_max = pool, totals[0] = pool;
                preempt_until_fits(s, t_evt, record);
            }
            admit_due = 1;
            continue;
        }
        if (tp == t_evt) {
            i64 i = HI(&s->ph, 0);
            sc[C_PH] = heap_pop(&s->ph, sc[C_PH]);
            sc[C_PF] -= st[i * NCOL + S_CHUNK];
            st[i * NCOL + S_CHUNK] = 0;
            admit_due = 1;
            continue;
        }
        i64 i = nxt++;
        if (arrive(s, i))
            admit_due = 1, arriving = i;
        else if (record)
            log_event(s, t_evt, i, LOG_REJECT, 1);
    }
    totals[2] = sc[C_PRE_TOTAL], totals[3] = sc[C_MAXRUN], totals[4] = sc[C_MAXPF];
}

/* --- grouping.py ----------------------------------------------------------------------------- */
typedef struct {
    const u64 *key, *check;
    u64 *table; /* size x 2: key, request number + 1 */
    i64 size;
    u64 *recent; /* RECENT_SLOTS x 2 */
    u64 *checks; /* per request, its second hash */
    int32_t *out;
    i64 n, next, groups;
    int collided;
} grouping_t;

/* Number the rows from g->next on until the table is half full. */
static void fill(grouping_t *g)
{
    u64 mask = (u64)(g->size - 1), recent_mask = RECENT_SLOTS - 1;
    u64 *table = g->table, *recent = g->recent;
    i64 groups = g->groups, i = g->next, n = g->n;
    while (i < n && 2 * groups <= g->size) {
        u64 k = g->key[i];
        i64 r = (i64)(k & recent_mask);
        i64 number = (i64)recent[2 * r + 1];
        i64 found = number != 0 && recent[2 * r] == k ? number - 1 : -1;
        i64 slot = (i64)(k & mask);
        while (found < 0) {
            number = (i64)table[2 * slot + 1];
            if (number == 0) {
                table[2 * slot] = k;
                table[2 * slot + 1] = (u64)(groups + 1);
                g->checks[groups] = g->check[i];
                found = groups++;
            } else if (table[2 * slot] == k) {
                found = number - 1;
            } else {
                slot = (slot + 1) & (i64)mask;
            }
        }
        recent[2 * r] = k, recent[2 * r + 1] = (u64)(found + 1);
        if (g->checks[found] != g->check[i])
            g->collided = 1;
        g->out[i] = (int32_t)found;
        i++;
    }
    g->next = i, g->groups = groups;
}

/* The table's entries in a new table of `size` slots (NULL where memory ran out). */
static u64 *rehash(const u64 *table, i64 old, i64 size)
{
    u64 *new = calloc((size_t)size * 2, sizeof(u64));
    if (new == NULL)
        return NULL;
    u64 mask = (u64)(size - 1);
    for (i64 j = 0; j < old; j++)
        if (table[2 * j + 1] != 0) {
            i64 s = (i64)(table[2 * j] & mask);
            while (new[2 * s + 1] != 0)
                s = (s + 1) & (i64)mask;
            new[2 * s] = table[2 * j], new[2 * s + 1] = table[2 * j + 1];
        }
    return new;
}

/* group_ids' work: 0, or -1 where memory ran out. */
static int run_grouping(grouping_t *g)
{
    u64 *own = NULL; /* a table grown here */
    int status = 0;
    while (g->next < g->n) {
        fill(g);
        if (g->next < g->n) { /* the table is half full: twice as large, rehashed */
            u64 *grown = rehash(g->table, g->size, 2 * g->size);
            if (grown == NULL) {
                status = -1;
                break;
            }
            free(own);
            own = grown;
            g->table = grown;
            g->size *= 2;
        }
    }
    free(own);
    return status;
}

/* --- Python's side --------------------------------------------------------------------------- */

/* A buffer of `itemsize`-byte integers (`kinds`: the format characters allowed) in C order,
 * `ndim` dimensions, writable or not. Sets ValueError and returns -1 when it is not so. */
static int get_array(PyObject *obj, Py_buffer *view, const char *name, int ndim,
                     Py_ssize_t itemsize, const char *kinds, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous%s array", name,
                     writable ? " writable" : "");
        return -1;
    }
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@')
        format++;
    int ok = strlen(format) == 1 && strchr(kinds, *format) != NULL;
    if (view->ndim != ndim || view->itemsize != itemsize || !ok) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected a C-contiguous %d-dimensional array of %zd-byte integers", name,
                     ndim, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define SIGNED64 "lq"
#define UNSIGNED64 "LQ"
#define SIGNED32 "il" /* int32 is "l" on Windows */

static PyObject *py_simulate(PyObject *self, PyObject *args)
{
    (void)self;
    enum { A_ARR, A_P, A_O, A_PRE, A_DL, A_RES, A_LIMITS, A_PROBES, A_ST, A_SERIES, A_TOTALS,
           A_LOG, NARGS };
    PyObject *objs[NARGS];
    long long pool;
    if (!PyArg_ParseTuple(args, "OOOOOOLOOOOOO:simulate", &objs[A_ARR], &objs[A_P], &objs[A_O],
                          &objs[A_PRE], &objs[A_DL], &objs[A_RES], &pool, &objs[A_LIMITS],
                          &objs[A_PROBES], &objs[A_ST], &objs[A_SERIES], &objs[A_TOTALS],
                          &objs[A_LOG]))
        return NULL;
    static const char *names[] = {"arr", "p", "o", "pre", "dl", "res", "limits", "probes", "st",
                                  "series", "totals", "log"};
    const int ndims[] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 2};
    Py_buffer views[NARGS];
    int got = 0;
    for (; got < NARGS; got++)
        if (get_array(objs[got], &views[got], names[got], ndims[got], 8, SIGNED64,
                      got >= A_ST) < 0)
            break;
    PyObject *result = NULL;
    if (got < NARGS)
        goto done;
    i64 n = views[A_ARR].shape[0];
    for (int k = A_P; k <= A_RES; k++)
        if (views[k].shape[0] != n) {
            PyErr_Format(PyExc_ValueError, "simulate: %s has %zd rows, arr %zd", names[k],
                         views[k].shape[0], (Py_ssize_t)n);
            goto done;
        }
    const i64 *limits = views[A_LIMITS].buf;
    i64 nprobes = views[A_PROBES].shape[0];
    if (views[A_LIMITS].shape[0] != NLIMITS) {
        PyErr_Format(PyExc_ValueError, "simulate: limits must hold %d values", NLIMITS);
        goto done;
    }
    if (limits[L_BLOCK] < 1 || (limits[L_POLICY] != ON_DEMAND && limits[L_POLICY] != RESERVE)
        || limits[L_LOG_ROWS] < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "simulate: limits need a block size >= 1, a policy of 0 (on demand) or 1 "
                        "(reserve) and log rows >= 0");
        goto done;
    }
    if (views[A_ST].shape[0] != n || views[A_ST].shape[1] != NCOL
        || views[A_SERIES].shape[0] != nprobes || views[A_SERIES].shape[1] != SERIES_COLS
        || views[A_TOTALS].shape[0] != NTOTALS || views[A_LOG].shape[0] != 4
        || views[A_LOG].shape[1] != max2(limits[L_LOG_ROWS], 1)) {
        PyErr_Format(PyExc_ValueError,
                     "simulate: st must be (requests, %d), series (probes, %d), totals (%d,) and "
                     "log (4, max(log rows, 1))",
                     NCOL, SERIES_COLS, NTOTALS);
        goto done;
    }
    const i64 *o = views[A_O].buf, *pre = views[A_PRE].buf, *dl = views[A_DL].buf;
    for (i64 i = 0; i < n; i++)
        if (o[i] < 1 || pre[i] < 1 || dl[i] < 1) {
            PyErr_Format(PyExc_ValueError,
                         "simulate: request %lld has %s < 1 (output tokens, prefill ns and ns "
                         "per token must be >= 1)",
                         (long long)i, o[i] < 1 ? "o" : pre[i] < 1 ? "pre" : "dl");
            goto done;
        }
    sim_t s = {0};
    s.n = n;
    s.arr = views[A_ARR].buf, s.p = views[A_P].buf, s.o = o, s.pre = pre, s.dl = dl;
    s.res = views[A_RES].buf, s.limits = limits, s.probes = views[A_PROBES].buf;
    s.nprobes = nprobes, s.pool = (i64)pool, s.block = limits[L_BLOCK], s.block_shift = -1;
    for (int k = 0; k < 62; k++)
        if (((i64)1 << k) == s.block)
            s.block_shift = k;
    s.st = views[A_ST].buf, s.series = views[A_SERIES].buf, s.totals = views[A_TOTALS].buf;
    s.lg = views[A_LOG].buf, s.lg_w = views[A_LOG].shape[1];
    i64 width = max2(n, 1);
    i64 sc[NSC];
    s.sc = sc;
    s.wq = malloc((size_t)width * sizeof(i64));
    s.fh.h = malloc((size_t)width * 3 * sizeof(i64));
    s.ph.h = malloc((size_t)width * 3 * sizeof(i64));
    s.xh.h = malloc((size_t)width * 3 * sizeof(i64));
    s.fh.cap = s.ph.cap = s.xh.cap = width;
    if (s.wq == NULL || s.fh.h == NULL || s.ph.h == NULL || s.xh.h == NULL) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        run_simulation(&s);
        Py_END_ALLOW_THREADS
        if (s.overflow)
            PyErr_SetString(PyExc_RuntimeError,
                            "simulate: an event heap had no room after dropping its stale "
                            "entries (a bug: please report it with the workload)");
        else
            result = PyLong_FromLongLong(sc[C_LOG]);
    }
    free(s.wq), free(s.fh.h), free(s.ph.h), free(s.xh.h);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

static PyObject *py_group_ids(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO:group_ids", &objs[0], &objs[1], &objs[2], &objs[3]))
        return NULL;
    static const char *names[] = {"key", "check", "table", "out"};
    const int ndims[] = {1, 1, 2, 1};
    const Py_ssize_t itemsizes[] = {8, 8, 8, 4};
    const char *kinds[] = {UNSIGNED64, UNSIGNED64, UNSIGNED64, SIGNED32};
    Py_buffer views[4];
    int got = 0;
    for (; got < 4; got++)
        if (get_array(objs[got], &views[got], names[got], ndims[got], itemsizes[got], kinds[got],
                      got >= 2) < 0)
            break;
    PyObject *result = NULL;
    if (got < 4)
        goto done;
    i64 n = views[0].shape[0], size = views[2].shape[0];
    if (views[1].shape[0] != n || views[3].shape[0] != n || views[2].shape[1] != 2 || size < 1
        || (size & (size - 1)) != 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "group_ids: key, check and out need as many rows (under 2**31), table "
                        "a power of two of rows of 2 columns");
        goto done;
    }
    grouping_t g = {views[0].buf, views[1].buf, views[2].buf, size, NULL, NULL, views[3].buf,
                    n, 0, 0, 0};
    g.recent = calloc((size_t)RECENT_SLOTS * 2, sizeof(u64));
    g.checks = calloc((size_t)max2(n, 1), sizeof(u64));
    int status = -1;
    if (g.recent != NULL && g.checks != NULL) {
        Py_BEGIN_ALLOW_THREADS
        status = run_grouping(&g);
        Py_END_ALLOW_THREADS
    }
    free(g.recent), free(g.checks);
    if (status < 0)
        PyErr_NoMemory();
    else
        result = PyLong_FromLongLong(g.collided ? -1 : g.groups);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

static PyObject *py_group_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO:group_rows", &objs[0], &objs[1], &objs[2]))
        return NULL;
    static const char *names[] = {"ids", "code", "out"};
    const int ndims[] = {1, 1, 2};
    const Py_ssize_t itemsizes[] = {4, 1, 4};
    const char *kinds[] = {SIGNED32, "bB", SIGNED32};
    Py_buffer views[3];
    int got = 0;
    for (; got < 3; got++)
        if (get_array(objs[got], &views[got], names[got], ndims[got], itemsizes[got], kinds[got],
                      got == 2) < 0)
            break;
    PyObject *result = NULL;
    if (got < 3)
        goto done;
    i64 n = views[0].shape[0], groups = views[2].shape[0];
    const int32_t *ids = views[0].buf;
    const signed char *code = views[1].buf;
    int32_t *out = views[2].buf;
    int ok = views[1].shape[0] == n && views[2].shape[1] == G_NCOL;
    for (i64 i = 0; i < n && ok; i++)
        ok = ids[i] >= 0 && ids[i] < groups;
    if (!ok) {
        PyErr_Format(PyExc_ValueError,
                     "group_rows: ids and code need as many rows, each id in [0, groups), out "
                     "(groups, %d)",
                     G_NCOL);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (i64 k = 0; k < groups * G_NCOL; k++)
        out[k] = -1;
    for (i64 i = 0; i < n; i++) {
        int32_t *row = out + (i64)ids[i] * G_NCOL;
        int c = code[i], event = c & E_EVENT;
        if (row[G_FIRST] < 0)
            row[G_FIRST] = (int32_t)i;
        if ((c & E_PROMPT) && row[G_PROMPT] < 0)
            row[G_PROMPT] = (int32_t)i;
        if ((c & E_MAX) && row[G_MAX] < 0)
            row[G_MAX] = (int32_t)i;
        if (event == E_ADMITTED && row[G_ADMITTED] < 0) {
            row[G_ADMITTED] = (int32_t)i;
        } else if (event == E_FIRST_TOKEN && row[G_FIRST_TOKEN] < 0) {
            row[G_FIRST_TOKEN] = (int32_t)i;
        } else if (event == E_END) {
            row[G_END] = (int32_t)i;
            if (c & E_OUTPUT)
                row[G_OUTPUT] = (int32_t)i;
        } else if (event == E_REJECTED) {
            row[G_REJECTED] = (int32_t)i;
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"simulate", py_simulate, METH_VARARGS,
     "simulate(arr, p, o, pre, dl, res, pool, limits, probes, st, series, totals, log) -> int: "
     "kernel.simulate into the caller's st, series (probes x 4), totals (5) and log "
     "(4 x max(limits[5], 1)); returns the event log's rows (those past its width dropped)."},
    {"group_ids", py_group_ids, METH_VARARGS,
     "group_ids(key, check, table, out) -> int: grouping.group_ids, the row numbers into out "
     "(int32); returns the number of requests, -1 where two ids share key but not check."},
    {"group_rows", py_group_rows, METH_VARARGS,
     "group_rows(ids, code, out) -> None: grouping.group_rows into out (groups x 8, int32)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel",
    "The replay kernel in C (see the header comment of _kernel.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
#define K(name) {#name, name}
    static const struct {
        const char *name;
        long long value;
    } constants[] = {
        K(INF), K(ON_DEMAND), K(RESERVE),
        K(S_SEG), K(S_FIRST), K(S_G0), K(S_VER), K(S_STATUS), K(S_ADMIT), K(S_FINISH), K(S_NPRE),
        K(S_REASON), K(S_CHUNK), K(S_BLK), K(S_KNEXT), K(S_PREV), K(S_NEXT), K(S_FINAL), K(NCOL),
        K(C_NRUN), K(C_HEAD), K(C_TAIL), K(C_WHEAD), K(C_WLEN), K(C_USED), K(C_PF),
        K(C_PRE_TOTAL), K(C_FH), K(C_PH), K(C_XH), K(C_ACTIVE), K(C_TAU), K(C_RACC), K(C_COMMIT),
        K(C_MAXRUN), K(C_MAXPF), K(C_LOG), K(NSC),
        K(LOG_ADMIT), K(LOG_PREEMPT), K(LOG_FINISH), K(LOG_REJECT),
        K(E_OTHER), K(E_ADMITTED), K(E_FIRST_TOKEN), K(E_END), K(E_REJECTED), K(E_EVENT),
        K(E_PROMPT), K(E_MAX), K(E_OUTPUT),
        K(G_FIRST), K(G_PROMPT), K(G_MAX), K(G_OUTPUT), K(G_ADMITTED), K(G_FIRST_TOKEN), K(G_END),
        K(G_REJECTED), K(G_NCOL), K(RECENT_SLOTS), K(NLIMITS),
    };
#undef K
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
