/* An emulated MCCL (NCCL's API with the prefix mccl) over the emulated runtime's host memory.
 *
 * Built into the same shared object as runtime.c (see emulated.h and conformance/emulated.py).
 *
 * Groups of CommInitAll are threads of one process. Each collective is enqueued on the rank's stream;
 * when the worker reaches it, it publishes its buffers, waits at a barrier for every rank, computes
 * its own result into a scratch buffer from all ranks' inputs, waits at a second barrier (so in-place
 * operations never overwrite an input a peer still reads), and stores the result.
 *
 * Groups of CommInitRank may span processes (the rank processes of torchrun or the engine's "mp"
 * executor, each with its own emulated devices): their state lives in a POSIX shared-memory segment
 * named from the unique id (/anydev-mccl-<pid>-<counter>-<time> of the process that made the id),
 * with a process-shared mutex and condition variable. A collective stages its input through the
 * segment in chunks of SHM_CHUNK bytes per rank (copy in, barrier, each rank computes its part of the
 * result from every rank's chunk, barrier); a send puts its data in a segment of its own and its
 * header in the group's mailbox, where the recv takes the oldest message of its pair. The name is
 * unlinked once every rank has joined (the mapping stays), so a crashed run leaves nothing in
 * /dev/shm but unreceived messages. A barrier that waits longer than ANYDEV_EMULATED_COLLECTIVE_TIMEOUT seconds
 * (default 30) breaks the group: the stream reports ErrorLaunchTimeout, later collectives fail fast,
 * and nothing hangs. Reductions accumulate in double (floats) or 64-bit integers; float16 and
 * bfloat16 are converted in software.
 *
 * Send and Recv (contract 1.3's point-to-point calls): a send, when its stream reaches it, copies its
 * data into the group's mailbox (a FIFO list) and never waits; a recv waits on its stream (up to the
 * same timeout) for the oldest message from its peer and copies it out, so messages of a pair arrive
 * in order. GroupStart/GroupEnd collect the calling thread's sends and recvs and enqueue them at the
 * outermost GroupEnd, every send before any recv, so no call of a group waits for another.
 *
 * CommAbort (contract 1.4's comm_abort) marks the group aborted: every rank waiting at a barrier or
 * for a message returns ErrorLaunchFailure at once, as does every collective that runs later; it then
 * waits for the communicator's queued work to end and frees it, as ncclCommAbort does (so it is never
 * destroyed afterwards).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emulated.h"

#ifndef CCL_PREFIX
#define CCL_PREFIX mccl        /* -DCCL_PREFIX=xyzccl for another NCCL-shaped prefix */
#endif
#define CCL(name) CAT(CCL_PREFIX, name)
#define EMU_CCL_VERSION 10000  /* reported as "1.0.0" */
#define COMM_MAGIC 0x6d63636cu
#define ID_BYTES 128

typedef int cclResult_t;
enum { CCL_SUCCESS = 0, CCL_UNHANDLED_RUNTIME_ERROR = 1, CCL_SYSTEM_ERROR = 2, CCL_INTERNAL_ERROR = 3,
       CCL_INVALID_ARGUMENT = 4, CCL_INVALID_USAGE = 5 };
/* NCCL's data types and reduce ops. */
enum { T_INT8, T_UINT8, T_INT32, T_UINT32, T_INT64, T_UINT64, T_FLOAT16, T_FLOAT32, T_FLOAT64, T_BFLOAT16, T_COUNT };
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_COUNT };
enum { ALL_REDUCE, ALL_GATHER, BROADCAST };

typedef struct { char internal[ID_BYTES]; } cclUniqueId;

static const size_t TYPE_SIZE[T_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

static double timeout_seconds(void) {
    const char *text = getenv("ANYDEV_EMULATED_COLLECTIVE_TIMEOUT");
    double value = text ? atof(text) : 0;
    return value > 0 ? value : 30.0;
}

/* ---- float16 / bfloat16 ---------------------------------------------------------------------- */
static float bits_to_float(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }
static uint32_t float_to_bits(float f) { uint32_t bits; memcpy(&bits, &f, 4); return bits; }

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) {
        float magnitude = (float)mantissa * (1.0f / 16777216.0f); /* zero or subnormal: mantissa * 2^-24 */
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

static uint16_t float_to_half(float f) { /* round to nearest even */
    uint32_t x = float_to_bits(f), sign = (x >> 16) & 0x8000, magnitude = x & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (magnitude > 0x7f800000u ? 0x200 : 0));
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to infinity */
    if (magnitude < 0x38800000u) {                                 /* below 2^-14: subnormal or zero */
        int exponent = (int)(magnitude >> 23);
        if (exponent < 102) return (uint16_t)sign;
        uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000, shift = (uint32_t)(126 - exponent);
        uint32_t h = mantissa >> shift, rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (magnitude >> 13) - (112u << 10), rest = magnitude & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t b) { return bits_to_float((uint32_t)b << 16); }

static uint16_t float_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- element access -------------------------------------------------------------------------- */
static int is_float(int type) { return type == T_FLOAT16 || type == T_FLOAT32 || type == T_FLOAT64 || type == T_BFLOAT16; }
static int is_unsigned(int type) { return type == T_UINT8 || type == T_UINT32 || type == T_UINT64; }

static double load_float(const void *p, size_t i, int type) {
    switch (type) {
        case T_FLOAT16: return half_to_float(((const uint16_t *)p)[i]);
        case T_BFLOAT16: return bf16_to_float(((const uint16_t *)p)[i]);
        case T_FLOAT32: return ((const float *)p)[i];
        default: return ((const double *)p)[i];
    }
}

static void store_float(void *p, size_t i, int type, double v) {
    switch (type) {
        case T_FLOAT16: ((uint16_t *)p)[i] = float_to_half((float)v); break;
        case T_BFLOAT16: ((uint16_t *)p)[i] = float_to_bf16((float)v); break;
        case T_FLOAT32: ((float *)p)[i] = (float)v; break;
        default: ((double *)p)[i] = v; break;
    }
}

static int64_t load_int(const void *p, size_t i, int type) {
    switch (type) {
        case T_INT8: return ((const int8_t *)p)[i];
        case T_UINT8: return ((const uint8_t *)p)[i];
        case T_INT32: return ((const int32_t *)p)[i];
        case T_UINT32: return ((const uint32_t *)p)[i];
        default: return ((const int64_t *)p)[i]; /* int64, uint64 (same bits) */
    }
}

static void store_int(void *p, size_t i, int type, int64_t v) {
    switch (type) {
        case T_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
        case T_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
        case T_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
        case T_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
        default: ((int64_t *)p)[i] = v; break;
    }
}

#define COMBINE(acc, v, op) \
    ((op) == OP_PROD ? (acc) * (v) : (op) == OP_MAX ? ((v) > (acc) ? (v) : (acc)) \
     : (op) == OP_MIN ? ((v) < (acc) ? (v) : (acc)) : (acc) + (v))

/* ---- groups and communicators ---------------------------------------------------------------- */
typedef struct {
    int kind, type, op, root;
    size_t count;
    const void *send;
    void *recv;
} slot_t;

typedef struct message {
    struct message *next;
    int src, dst, type;
    size_t count;
    unsigned char data[];
} message_t;

typedef struct group {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int nranks;
    int refs;         /* communicators alive */
    int arrived;      /* at the current barrier */
    uint64_t barrier_generation;
    int broken;       /* a barrier timed out: the group is unusable */
    int aborted;      /* a communicator of the group was aborted: every wait ends */
    slot_t *slots;    /* per rank, the collective it is running */
    message_t *mail;  /* sent and not yet received, oldest first (guarded by lock) */
    struct shm_group *shared; /* a CommInitRank group: the shared segment (this group_t is then one
                                 rank's, in its process, and only counts its pending work) */
    size_t shared_bytes;
    int shared_rank;
} group_t;

typedef struct {
    uint32_t magic;
    group_t *group;
    int rank;
    int pending; /* collectives enqueued and not finished; guarded by group->lock */
} comm_t;

static group_t *group_new(int nranks) {
    group_t *g = calloc(1, sizeof *g);
    slot_t *slots = calloc((size_t)nranks, sizeof *slots);
    if (!g || !slots) { free(g); free(slots); return NULL; }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    g->nranks = nranks;
    g->slots = slots;
    return g;
}

static void shm_leave(group_t *g);

static void group_free(group_t *g) {
    for (message_t *m = g->mail, *next; m; m = next) { next = m->next; free(m); }
    if (g->shared) shm_leave(g);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->changed);
    free(g->slots);
    free(g);
}

static comm_t *comm_new(group_t *g, int rank) {
    comm_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->magic = COMM_MAGIC; c->group = g; c->rank = rank;
    return c;
}

static comm_t *resolve_comm(uintptr_t handle) {
    comm_t *c = (comm_t *)handle;
    return c && c->magic == COMM_MAGIC ? c : NULL;
}

/* Every rank waits here until all have arrived; 0, or ERR_LAUNCH_TIMEOUT when the group broke. */
static int barrier(group_t *g) {
    pthread_mutex_lock(&g->lock);
    if (g->aborted) { pthread_mutex_unlock(&g->lock); return ERR_LAUNCH_FAILURE; }
    if (g->broken) { pthread_mutex_unlock(&g->lock); return ERR_LAUNCH_TIMEOUT; }
    uint64_t generation = g->barrier_generation;
    if (++g->arrived == g->nranks) {
        g->arrived = 0;
        g->barrier_generation++;
        pthread_cond_broadcast(&g->changed);
        pthread_mutex_unlock(&g->lock);
        return 0;
    }
    struct timespec deadline = emu_deadline(timeout_seconds());
    while (generation == g->barrier_generation && !g->broken && !g->aborted) {
        if (pthread_cond_timedwait(&g->changed, &g->lock, &deadline) == ETIMEDOUT && generation == g->barrier_generation) {
            g->broken = 1;
            pthread_cond_broadcast(&g->changed);
        }
    }
    int passed = generation != g->barrier_generation, aborted = g->aborted;
    pthread_mutex_unlock(&g->lock);
    return passed ? 0 : aborted ? ERR_LAUNCH_FAILURE : ERR_LAUNCH_TIMEOUT;
}

/* ---- collectives ----------------------------------------------------------------------------- */
typedef struct { comm_t *comm; slot_t slot; } collective_t;

static void reduce(const slot_t *slots, int nranks, void *out) {
    const slot_t *mine = &slots[0];
    int type = mine->type, op = mine->op;
    for (size_t i = 0; i < mine->count; i++) {
        if (is_float(type)) {
            double acc = load_float(slots[0].send, i, type);
            for (int r = 1; r < nranks; r++) { double v = load_float(slots[r].send, i, type); acc = COMBINE(acc, v, op); }
            store_float(out, i, type, op == OP_AVG ? acc / nranks : acc);
        } else if (is_unsigned(type)) {
            uint64_t acc = (uint64_t)load_int(slots[0].send, i, type);
            for (int r = 1; r < nranks; r++) { uint64_t v = (uint64_t)load_int(slots[r].send, i, type); acc = COMBINE(acc, v, op); }
            store_int(out, i, type, (int64_t)(op == OP_AVG ? acc / (uint64_t)nranks : acc));
        } else {
            int64_t acc = load_int(slots[0].send, i, type);
            for (int r = 1; r < nranks; r++) { int64_t v = load_int(slots[r].send, i, type); acc = COMBINE(acc, v, op); }
            store_int(out, i, type, op == OP_AVG ? acc / nranks : acc);
        }
    }
}

static int same_collective(const slot_t *a, const slot_t *b) {
    return a->kind == b->kind && a->type == b->type && a->op == b->op && a->root == b->root && a->count == b->count;
}

static int shm_run_collective(group_t *g, const slot_t *mine);
static int shm_send(group_t *g, int dst, int type, size_t count, const void *data);
static int shm_recv(group_t *g, int src, int type, size_t count, void *data);

static int run_collective(void *arg) {
    collective_t *work = arg;
    group_t *g = work->comm->group;
    if (g->shared) return shm_run_collective(g, &work->slot);
    int rank = work->comm->rank, nranks = g->nranks;
    slot_t *slots = g->slots;
    slots[rank] = work->slot; /* safe: peers finished reading our previous slot before the last barrier */
    int err = barrier(g);
    if (err) return err;
    int matching = 1; /* every rank reaches the same verdict: some slot differs from each rank's own */
    for (int r = 0; r < nranks; r++) matching &= same_collective(&slots[r], &slots[rank]);
    size_t bytes = slots[rank].count * TYPE_SIZE[slots[rank].type];
    size_t out_bytes = slots[rank].kind == ALL_GATHER ? bytes * (size_t)nranks : bytes;
    unsigned char *scratch = matching ? malloc(out_bytes ? out_bytes : 1) : NULL;
    if (scratch) {
        switch (slots[rank].kind) {
            case ALL_REDUCE: reduce(slots, nranks, scratch); break;
            case ALL_GATHER:
                for (int r = 0; r < nranks; r++) memcpy(scratch + (size_t)r * bytes, slots[r].send, bytes);
                break;
            default: memcpy(scratch, slots[slots[rank].root].send, bytes); break;
        }
    }
    err = barrier(g); /* after it, no peer reads our inputs any more */
    if (!err && !matching) err = ERR_INVALID_VALUE;
    if (!err && !scratch) err = ERR_MEMORY_ALLOCATION;
    if (!err) memcpy(slots[rank].recv, scratch, out_bytes);
    free(scratch);
    return err;
}

/* Counts a call of ``c`` enqueued (+1) or ended (-1); CommAbort waits for the count to reach 0. */
static void add_pending(comm_t *c, int delta) {
    pthread_mutex_lock(&c->group->lock);
    c->pending += delta;
    pthread_cond_broadcast(&c->group->changed);
    pthread_mutex_unlock(&c->group->lock);
}

static void release_collective(void *arg) {
    collective_t *work = arg;
    add_pending(work->comm, -1);
    free(work);
}

static cclResult_t enqueue_collective(int kind, uintptr_t send, uintptr_t recv, size_t count, int type, int op,
                                      int root, uintptr_t handle, uintptr_t stream) {
    comm_t *c = resolve_comm(handle);
    if (!c || type < 0 || type >= T_COUNT || op < 0 || op >= OP_COUNT) return CCL_INVALID_ARGUMENT;
    if (root < 0 || root >= c->group->nranks) return CCL_INVALID_ARGUMENT;
    if (count && (!send || !recv)) return CCL_INVALID_ARGUMENT;
    collective_t *work = malloc(sizeof *work);
    if (!work) return CCL_SYSTEM_ERROR;
    work->comm = c;
    work->slot = (slot_t){kind, type, op, root, count, (const void *)send, (void *)recv};
    add_pending(c, 1);
    return API(AnydevEnqueue)(stream, run_collective, work, release_collective) ? CCL_UNHANDLED_RUNTIME_ERROR : CCL_SUCCESS;
}

cclResult_t CCL(AllReduce)(uintptr_t send, uintptr_t recv, size_t count, int type, int op, uintptr_t comm, uintptr_t stream) {
    return enqueue_collective(ALL_REDUCE, send, recv, count, type, op, 0, comm, stream);
}

cclResult_t CCL(AllGather)(uintptr_t send, uintptr_t recv, size_t count, int type, uintptr_t comm, uintptr_t stream) {
    return enqueue_collective(ALL_GATHER, send, recv, count, type, OP_SUM, 0, comm, stream);
}

cclResult_t CCL(Broadcast)(uintptr_t send, uintptr_t recv, size_t count, int type, int root, uintptr_t comm, uintptr_t stream) {
    return enqueue_collective(BROADCAST, send, recv, count, type, OP_SUM, root, comm, stream);
}

/* ---- point-to-point ---------------------------------------------------------------------------- */
typedef struct { comm_t *comm; int is_send, peer, type; size_t count; uintptr_t buf, stream; } p2p_t;

static int run_send(void *arg) {
    p2p_t *op = arg;
    group_t *g = op->comm->group;
    if (g->shared) return shm_send(g, op->peer, op->type, op->count, (const void *)op->buf);
    size_t bytes = op->count * TYPE_SIZE[op->type];
    message_t *m = malloc(sizeof *m + bytes);
    if (!m) return ERR_MEMORY_ALLOCATION;
    *m = (message_t){NULL, op->comm->rank, op->peer, op->type, op->count};
    if (bytes) memcpy(m->data, (const void *)op->buf, bytes);
    pthread_mutex_lock(&g->lock);
    if (g->aborted) { pthread_mutex_unlock(&g->lock); free(m); return ERR_LAUNCH_FAILURE; }
    message_t **tail = &g->mail;
    while (*tail) tail = &(*tail)->next;
    *tail = m;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

static message_t *take_message(group_t *g, int src, int dst) { /* with g->lock held */
    for (message_t **link = &g->mail; *link; link = &(*link)->next)
        if ((*link)->src == src && (*link)->dst == dst) {
            message_t *m = *link;
            *link = m->next;
            return m;
        }
    return NULL;
}

static int run_recv(void *arg) {
    p2p_t *op = arg;
    group_t *g = op->comm->group;
    if (g->shared) return shm_recv(g, op->peer, op->type, op->count, (void *)op->buf);
    struct timespec deadline = emu_deadline(timeout_seconds());
    pthread_mutex_lock(&g->lock);
    message_t *m = NULL;
    while (!g->aborted && !(m = take_message(g, op->peer, op->comm->rank)))
        if (pthread_cond_timedwait(&g->changed, &g->lock, &deadline) == ETIMEDOUT) break;
    int aborted = g->aborted;
    pthread_mutex_unlock(&g->lock);
    if (aborted) { free(m); return ERR_LAUNCH_FAILURE; }
    if (!m) return ERR_LAUNCH_TIMEOUT;
    int err = m->type != op->type || m->count != op->count ? ERR_INVALID_VALUE : 0;
    if (!err && m->count) memcpy((void *)op->buf, m->data, m->count * TYPE_SIZE[m->type]);
    free(m);
    return err;
}

static void release_p2p(void *arg) {
    p2p_t *op = arg;
    add_pending(op->comm, -1);
    free(op);
}

static cclResult_t enqueue_p2p(p2p_t *op) {
    return API(AnydevEnqueue)(op->stream, op->is_send ? run_send : run_recv, op, release_p2p)
        ? CCL_UNHANDLED_RUNTIME_ERROR : CCL_SUCCESS;
}

static __thread int t_group_depth;   /* GroupStart nesting of the calling thread */
static __thread p2p_t **t_group_ops; /* its sends and recvs, until the outermost GroupEnd */
static __thread int t_group_count, t_group_capacity;

static cclResult_t point_to_point(int is_send, uintptr_t buf, size_t count, int type, int peer, uintptr_t handle,
                                  uintptr_t stream) {
    comm_t *c = resolve_comm(handle);
    if (!c || type < 0 || type >= T_COUNT || peer < 0 || peer >= c->group->nranks || peer == c->rank) return CCL_INVALID_ARGUMENT;
    if (count && !buf) return CCL_INVALID_ARGUMENT;
    p2p_t *op = malloc(sizeof *op);
    if (!op) return CCL_SYSTEM_ERROR;
    *op = (p2p_t){c, is_send, peer, type, count, buf, stream};
    add_pending(c, 1);
    if (t_group_depth == 0) return enqueue_p2p(op);
    if (t_group_count == t_group_capacity) {
        int capacity = t_group_capacity ? 2 * t_group_capacity : 16;
        p2p_t **grown = realloc(t_group_ops, (size_t)capacity * sizeof *grown);
        if (!grown) { release_p2p(op); return CCL_SYSTEM_ERROR; }
        t_group_ops = grown;
        t_group_capacity = capacity;
    }
    t_group_ops[t_group_count++] = op;
    return CCL_SUCCESS;
}

cclResult_t CCL(Send)(uintptr_t send, size_t count, int type, int peer, uintptr_t comm, uintptr_t stream) {
    return point_to_point(1, send, count, type, peer, comm, stream);
}

cclResult_t CCL(Recv)(uintptr_t recv, size_t count, int type, int peer, uintptr_t comm, uintptr_t stream) {
    return point_to_point(0, recv, count, type, peer, comm, stream);
}

cclResult_t CCL(GroupStart)(void) {
    t_group_depth++;
    return CCL_SUCCESS;
}

cclResult_t CCL(GroupEnd)(void) {
    if (t_group_depth == 0) return CCL_INVALID_USAGE;
    if (--t_group_depth > 0) return CCL_SUCCESS;
    cclResult_t result = CCL_SUCCESS;
    for (int sends = 1; sends >= 0; sends--)  /* every send first: they never wait */
        for (int i = 0; i < t_group_count; i++)
            if (t_group_ops[i]->is_send == sends) {
                cclResult_t r = enqueue_p2p(t_group_ops[i]);
                if (r && !result) result = r;
            }
    t_group_count = 0;
    return result;
}

/* ---- communicator setup ---------------------------------------------------------------------- */
cclResult_t CCL(CommInitAll)(uintptr_t *comms, int ndev, const int *devlist) {
    int count;
    if (!comms || ndev < 1 || API(GetDeviceCount)(&count) != 0) return CCL_INVALID_ARGUMENT;
    for (int i = 0; i < ndev; i++)
        if (devlist && (devlist[i] < 0 || devlist[i] >= count)) return CCL_INVALID_ARGUMENT;
    group_t *g = group_new(ndev);
    if (!g) return CCL_SYSTEM_ERROR;
    for (int rank = 0; rank < ndev; rank++) {
        comm_t *c = comm_new(g, rank);
        if (!c) { /* undo */
            for (int r = 0; r < rank; r++) free((comm_t *)comms[r]);
            group_free(g);
            return CCL_SYSTEM_ERROR;
        }
        comms[rank] = (uintptr_t)c;
    }
    g->refs = ndev;
    return CCL_SUCCESS;
}

cclResult_t CCL(GetUniqueId)(cclUniqueId *id) {
    static uint64_t counter;
    if (!id) return CCL_INVALID_ARGUMENT;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t fields[4] = {0x79646e61u /* "anyd" */, (uint64_t)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED),
                          (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec};
    memset(id, 0, sizeof *id);
    memcpy(id->internal, fields, sizeof fields);
    return CCL_SUCCESS;
}

/* ---- cross-process groups (CommInitRank): POSIX shared memory ---------------------------------- */
#define SHM_CHUNK ((size_t)256 << 10)  /* bytes per rank staged per step of a collective */
#define SHM_MAX_RANKS 64
#define SHM_MAILBOX 512                 /* messages sent and not yet received */
#define SHM_READY 2u

typedef struct { int kind, type, op, root; size_t count; } shm_meta_t;
typedef struct { int used, src, dst, type; size_t count; uint64_t seq; } shm_message_t;

typedef struct shm_group {
    uint32_t state;             /* 0 new, 1 being initialised, SHM_READY */
    int nranks;
    pthread_mutex_t lock;       /* process-shared, as is `changed` */
    pthread_cond_t changed;
    int joined, refs;           /* ranks that joined; communicators alive */
    unsigned char has_joined[SHM_MAX_RANKS];
    int arrived, broken, aborted;
    uint64_t barrier_generation, next_seq;
    char name[64];              /* the segment's name; messages are name-m<seq> */
    shm_meta_t meta[SHM_MAX_RANKS];
    shm_message_t mail[SHM_MAILBOX];
    unsigned char data[];       /* nranks * SHM_CHUNK */
} shm_group_t;

static void shm_name_of(char *out, size_t size, const cclUniqueId *id) {
    uint64_t fields[4];
    memcpy(fields, id->internal, sizeof fields);
    snprintf(out, size, "/anydev-mccl-%llx-%llx-%llx", (unsigned long long)fields[1], (unsigned long long)fields[2],
             (unsigned long long)fields[3]);
}

static void message_name(char *out, size_t size, const shm_group_t *s, uint64_t seq) {
    snprintf(out, size, "%s-m%llu", s->name, (unsigned long long)seq);
}

/* The group's lock; a timed wait on its condition: 0, or ETIMEDOUT. */
static int shm_wait(shm_group_t *s, const struct timespec *deadline) {
    return pthread_cond_timedwait(&s->changed, &s->lock, deadline);
}

static int shm_barrier(shm_group_t *s) {
    pthread_mutex_lock(&s->lock);
    if (s->aborted || s->broken) { int e = s->aborted ? ERR_LAUNCH_FAILURE : ERR_LAUNCH_TIMEOUT; pthread_mutex_unlock(&s->lock); return e; }
    uint64_t generation = s->barrier_generation;
    if (++s->arrived == s->nranks) {
        s->arrived = 0;
        s->barrier_generation++;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    struct timespec deadline = emu_deadline(timeout_seconds());
    while (generation == s->barrier_generation && !s->broken && !s->aborted) {
        if (shm_wait(s, &deadline) == ETIMEDOUT && generation == s->barrier_generation) {
            s->broken = 1;
            pthread_cond_broadcast(&s->changed);
        }
    }
    int passed = generation != s->barrier_generation, aborted = s->aborted;
    pthread_mutex_unlock(&s->lock);
    return passed ? 0 : aborted ? ERR_LAUNCH_FAILURE : ERR_LAUNCH_TIMEOUT;
}

static int same_meta(const shm_meta_t *a, const shm_meta_t *b) {
    return a->kind == b->kind && a->type == b->type && a->op == b->op && a->root == b->root && a->count == b->count;
}

/* One rank's part of a collective of a shared group, chunk by chunk: its input chunk into its slot of
 * the segment, a barrier, its output chunk computed from every rank's slot straight into recv (the
 * chunk of recv it writes is the chunk of send already staged, so in place is safe), a barrier. */
static int shm_run_collective(group_t *g, const slot_t *mine) {
    shm_group_t *s = g->shared;
    int rank = g->shared_rank, n = s->nranks;
    size_t esize = TYPE_SIZE[mine->type], per = SHM_CHUNK / esize, done = 0;
    slot_t views[SHM_MAX_RANKS];
    do {
        size_t m = mine->count - done < per ? mine->count - done : per;
        s->meta[rank] = (shm_meta_t){mine->kind, mine->type, mine->op, mine->root, mine->count};
        unsigned char *slot = s->data + (size_t)rank * SHM_CHUNK;
        if (m && (mine->kind != BROADCAST || rank == mine->root))   /* broadcast reads send on root only */
            memcpy(slot, (const unsigned char *)mine->send + done * esize, m * esize);
        int err = shm_barrier(s);
        if (err) return err;
        int matching = 1;
        for (int r = 0; r < n; r++) matching &= same_meta(&s->meta[r], &s->meta[rank]);
        if (matching && m) {
            unsigned char *out = (unsigned char *)mine->recv;
            switch (mine->kind) {
                case ALL_REDUCE:
                    for (int r = 0; r < n; r++)
                        views[r] = (slot_t){ALL_REDUCE, mine->type, mine->op, 0, m, s->data + (size_t)r * SHM_CHUNK, NULL};
                    reduce(views, n, out + done * esize);
                    break;
                case ALL_GATHER:
                    for (int r = 0; r < n; r++)
                        memcpy(out + ((size_t)r * mine->count + done) * esize, s->data + (size_t)r * SHM_CHUNK, m * esize);
                    break;
                default: memcpy(out + done * esize, s->data + (size_t)mine->root * SHM_CHUNK, m * esize); break;
            }
        }
        err = shm_barrier(s);   /* after it, no peer reads our slot any more */
        if (err) return err;
        if (!matching) return ERR_INVALID_VALUE;
        done += m;
    } while (done < mine->count);
    return 0;
}

static int shm_send(group_t *g, int dst, int type, size_t count, const void *data) {
    shm_group_t *s = g->shared;
    size_t bytes = count * TYPE_SIZE[type];
    pthread_mutex_lock(&s->lock);
    uint64_t seq = s->next_seq++;
    pthread_mutex_unlock(&s->lock);
    if (bytes) {   /* the data in a segment of its own: a send never waits for its recv */
        char name[96];
        message_name(name, sizeof name, s, seq);
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) return ERR_MEMORY_ALLOCATION;
        void *map = ftruncate(fd, (off_t)bytes) == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        close(fd);
        if (map == MAP_FAILED) { shm_unlink(name); return ERR_MEMORY_ALLOCATION; }
        memcpy(map, data, bytes);
        munmap(map, bytes);
    }
    struct timespec deadline = emu_deadline(timeout_seconds());
    pthread_mutex_lock(&s->lock);
    int err = 0;
    for (;;) {
        if (s->aborted) { err = ERR_LAUNCH_FAILURE; break; }
        int free_slot = -1;
        for (int i = 0; i < SHM_MAILBOX && free_slot < 0; i++) if (!s->mail[i].used) free_slot = i;
        if (free_slot >= 0) {
            s->mail[free_slot] = (shm_message_t){1, g->shared_rank, dst, type, count, seq};
            pthread_cond_broadcast(&s->changed);
            break;
        }
        if (shm_wait(s, &deadline) == ETIMEDOUT) { err = ERR_LAUNCH_TIMEOUT; break; }
    }
    pthread_mutex_unlock(&s->lock);
    if (err && bytes) { char name[96]; message_name(name, sizeof name, s, seq); shm_unlink(name); }
    return err;
}

static int shm_recv(group_t *g, int src, int type, size_t count, void *data) {
    shm_group_t *s = g->shared;
    struct timespec deadline = emu_deadline(timeout_seconds());
    pthread_mutex_lock(&s->lock);
    int found = -1, err = 0;
    for (;;) {
        if (s->aborted) { err = ERR_LAUNCH_FAILURE; break; }
        for (int i = 0; i < SHM_MAILBOX; i++) {
            const shm_message_t *m = &s->mail[i];
            if (m->used && m->src == src && m->dst == g->shared_rank && (found < 0 || m->seq < s->mail[found].seq)) found = i;
        }
        if (found >= 0) break;
        if (shm_wait(s, &deadline) == ETIMEDOUT) { err = ERR_LAUNCH_TIMEOUT; break; }
    }
    shm_message_t message = found >= 0 ? s->mail[found] : (shm_message_t){0};
    if (found >= 0) { s->mail[found].used = 0; pthread_cond_broadcast(&s->changed); }
    pthread_mutex_unlock(&s->lock);
    if (found < 0) return err;
    size_t bytes = message.count * TYPE_SIZE[message.type];
    if (message.type != type || message.count != count) err = ERR_INVALID_VALUE;
    if (bytes) {
        char name[96];
        message_name(name, sizeof name, s, message.seq);
        int fd = shm_open(name, O_RDONLY, 0);
        void *map = fd >= 0 ? mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0) close(fd);
        shm_unlink(name);
        if (map == MAP_FAILED) return err ? err : ERR_UNKNOWN;
        if (!err) memcpy(data, map, bytes);
        munmap(map, bytes);
    }
    return err;
}

/* Maps (creating it if this rank is first) the segment of `id`; NULL when it cannot. */
static shm_group_t *shm_open_group(const cclUniqueId *id, int nranks, size_t *bytes) {
    char name[64];
    shm_name_of(name, sizeof name, id);
    *bytes = sizeof(shm_group_t) + (size_t)nranks * SHM_CHUNK;
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) return NULL;
    struct stat st;
    int sized = fstat(fd, &st) == 0 && (st.st_size >= (off_t)*bytes || ftruncate(fd, (off_t)*bytes) == 0);
    shm_group_t *s = sized ? mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (s == MAP_FAILED) return NULL;
    uint32_t fresh = 0;
    if (__atomic_compare_exchange_n(&s->state, &fresh, 1u, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        pthread_mutexattr_t ma;
        pthread_condattr_t ca;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_condattr_init(&ca);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(&s->lock, &ma);
        pthread_cond_init(&s->changed, &ca);
        s->nranks = nranks;
        snprintf(s->name, sizeof s->name, "%s", name);
        __atomic_store_n(&s->state, SHM_READY, __ATOMIC_RELEASE);
    }
    struct timespec pause = {0, 1000000}, start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SHM_READY) {   /* another rank is initialising it */
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > timeout_seconds()) { munmap(s, *bytes); return NULL; }
        nanosleep(&pause, NULL);
    }
    return s;
}

/* This rank leaves the shared group: the last one removes the messages nobody received. */
static void shm_leave(group_t *g) {
    shm_group_t *s = g->shared;
    pthread_mutex_lock(&s->lock);
    int last = --s->refs == 0;
    if (last)
        for (int i = 0; i < SHM_MAILBOX; i++)
            if (s->mail[i].used && s->mail[i].count) {
                char name[96];
                message_name(name, sizeof name, s, s->mail[i].seq);
                shm_unlink(name);
            }
    pthread_mutex_unlock(&s->lock);
    munmap(s, g->shared_bytes);
    g->shared = NULL;
}

/* Join the group `id` as `rank`; blocks until all `nranks` ranks joined (in any processes), or the timeout. */
cclResult_t CCL(CommInitRank)(uintptr_t *comm, int nranks, cclUniqueId id, int rank) {
    if (!comm || nranks < 1 || nranks > SHM_MAX_RANKS || rank < 0 || rank >= nranks) return CCL_INVALID_ARGUMENT;
    size_t bytes;
    shm_group_t *s = shm_open_group(&id, nranks, &bytes);
    if (!s) return CCL_SYSTEM_ERROR;
    pthread_mutex_lock(&s->lock);
    if (s->nranks != nranks || s->has_joined[rank]) {
        pthread_mutex_unlock(&s->lock);
        munmap(s, bytes);
        return CCL_INVALID_USAGE;
    }
    s->has_joined[rank] = 1;
    s->joined++;
    s->refs++;
    pthread_cond_broadcast(&s->changed);
    struct timespec deadline = emu_deadline(timeout_seconds());
    while (s->joined < nranks)
        if (shm_wait(s, &deadline) == ETIMEDOUT) break;
    int complete = s->joined == nranks;
    if (!complete) { s->has_joined[rank] = 0; s->joined--; s->refs--; }
    int last_out = !complete && s->joined == 0;
    char name[64];
    snprintf(name, sizeof name, "%s", s->name);
    pthread_mutex_unlock(&s->lock);
    if (complete || last_out) shm_unlink(name);   /* every rank has it mapped, or nobody will */
    group_t *g = complete ? group_new(nranks) : NULL;
    comm_t *c = g ? comm_new(g, rank) : NULL;
    if (!c) {
        if (g) group_free(g);
        munmap(s, bytes);
        return CCL_SYSTEM_ERROR;
    }
    g->shared = s;
    g->shared_bytes = bytes;
    g->shared_rank = rank;
    g->refs = 1;
    *comm = (uintptr_t)c;
    return CCL_SUCCESS;
}

/* Waits for this communicator's queued collectives, then frees it (and the group with the last). */
cclResult_t CCL(CommDestroy)(uintptr_t handle) {
    comm_t *c = resolve_comm(handle);
    if (!c) return CCL_INVALID_ARGUMENT;
    group_t *g = c->group;
    pthread_mutex_lock(&g->lock);
    while (c->pending > 0) pthread_cond_wait(&g->changed, &g->lock);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    c->magic = 0;
    free(c);
    if (last) group_free(g);
    return CCL_SUCCESS;
}

/* Ends every wait of the group now, waits for this communicator's queued work (which then fails
 * at once), then frees it, as ncclCommAbort does: CommDestroy must not follow. */
cclResult_t CCL(CommAbort)(uintptr_t handle) {
    comm_t *c = resolve_comm(handle);
    if (!c) return CCL_INVALID_ARGUMENT;
    group_t *g = c->group;
    if (g->shared) {   /* every rank's waits end, in every process */
        pthread_mutex_lock(&g->shared->lock);
        g->shared->aborted = 1;
        pthread_cond_broadcast(&g->shared->changed);
        pthread_mutex_unlock(&g->shared->lock);
    }
    pthread_mutex_lock(&g->lock);
    g->aborted = 1;
    pthread_cond_broadcast(&g->changed);
    while (c->pending > 0) pthread_cond_wait(&g->changed, &g->lock);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    c->magic = 0;
    free(c);
    if (last) group_free(g);
    return CCL_SUCCESS;
}

cclResult_t CCL(GetVersion)(int *version) {
    if (!version) return CCL_INVALID_ARGUMENT;
    *version = EMU_CCL_VERSION;
    return CCL_SUCCESS;
}

const char *CCL(GetErrorString)(cclResult_t result) {
    switch (result) {
        case CCL_SUCCESS: return "no error";
        case CCL_UNHANDLED_RUNTIME_ERROR: return "unhandled runtime error (the emulated runtime refused the work)";
        case CCL_SYSTEM_ERROR: return "unhandled system error (emulated MCCL: out of memory, no POSIX shared memory "
                                      "(/dev/shm), or peer ranks did not join in time)";
        case CCL_INTERNAL_ERROR: return "internal error";
        case CCL_INVALID_ARGUMENT: return "invalid argument";
        case CCL_INVALID_USAGE: return "invalid usage";
        default: return "unknown result code";
    }
}
