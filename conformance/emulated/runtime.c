/* An emulated CUDA-shaped runtime over host memory, so anydev's CI runs the real moore and metax
 * backend code without their hardware.
 *
 * Build: gcc -shared -fPIC -O2 -pthread -DRT=musa [-DHAS_ERROR_NAME] [-DHAS_RUNTIME_VERSION] runtime.c mccl.c
 * (conformance/emulated.py does it).
 *
 * What it emulates (faithfully enough for the conformance suite):
 *  - N virtual devices (env ANYDEV_EMULATED_DEVICE_COUNT, default 4; 0 gives ErrorNoDevice), each with
 *    a memory capacity (env ANYDEV_EMULATED_DEVICE_MEMORY, bytes with an optional K/M/G suffix,
 *    default 4G); an allocation over it fails with ErrorMemoryAllocation (2). Allocations are host
 *    memory, aligned to 256 bytes. Freeing an unknown pointer gives ErrorInvalidValue.
 *  - a per-thread current device;
 *  - streams as real asynchronous queues: one worker thread per stream runs its work in order;
 *  - events with record generations: query is "not ready" while recorded work is pending, waits and
 *    elapsed times use the moment the worker reached the record;
 *  - errors with CUDA's numbers, named with the prefix (musaErrorNotReady); without HAS_ERROR_NAME
 *    (MACA) there is no GetErrorName and only the error strings say what happened.
 *
 * Destroyed streams keep their small control block (never reused or freed), so that a concurrent
 * DeviceSynchronize never reads freed memory; a process creates few streams.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "emulated.h"

#ifndef EMU_NOT_READY_CODE
#define EMU_NOT_READY_CODE ERR_NOT_READY
#endif

#define MAX_DEVICES 64
#define ALIGNMENT 256
#define EMU_VERSION 1000            /* reported as runtime and driver version "1.0" */
#define STREAM_NON_BLOCKING 1u
#define EVENT_DISABLE_TIMING 2u

typedef int rtError_t;

/* ---- configuration --------------------------------------------------------------------------- */
static int g_device_count;
static size_t g_capacity;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static size_t parse_size(const char *text, size_t fallback) {
    if (!text || !*text) return fallback;
    char *end;
    unsigned long long value = strtoull(text, &end, 10);
    switch (*end) {
        case 'G': case 'g': value <<= 30; break;
        case 'M': case 'm': value <<= 20; break;
        case 'K': case 'k': value <<= 10; break;
        default: break;
    }
    return (size_t)value;
}

/* ---- devices, handles and memory accounting -------------------------------------------------- */
typedef struct stream stream_t;

typedef struct {
    pthread_mutex_t lock;   /* guards streams and default_stream */
    stream_t *streams;      /* live streams, including the default one */
    stream_t *default_stream;
    size_t used;            /* bytes allocated; guarded by g_table_lock */
} device_t;

static device_t g_devices[MAX_DEVICES];
static __thread int current_device;

static void init_config(void) {
    g_device_count = (int)parse_size(getenv("ANYDEV_EMULATED_DEVICE_COUNT"), 4);
    if (g_device_count > MAX_DEVICES) g_device_count = MAX_DEVICES;
    g_capacity = parse_size(getenv("ANYDEV_EMULATED_DEVICE_MEMORY"), (size_t)4 << 30);
    for (int i = 0; i < MAX_DEVICES; i++) pthread_mutex_init(&g_devices[i].lock, NULL);
}
#define INIT() pthread_once(&g_once, init_config)

/* Every live allocation, stream and event, by address: validates handles and frees. */
enum kind { KIND_DEVICE_MEMORY, KIND_HOST_MEMORY, KIND_STREAM, KIND_EVENT };
typedef struct entry { uintptr_t key; enum kind kind; size_t size; int device; struct entry *next; } entry_t;
#define TABLE_BUCKETS 4096
static entry_t *g_table[TABLE_BUCKETS];
static pthread_mutex_t g_table_lock = PTHREAD_MUTEX_INITIALIZER;

static entry_t **bucket(uintptr_t key) { return &g_table[(key >> 8) % TABLE_BUCKETS]; }

static int table_insert(uintptr_t key, enum kind kind, size_t size, int device) {
    entry_t *e = malloc(sizeof *e);
    if (!e) return 0;
    e->key = key; e->kind = kind; e->size = size; e->device = device;
    pthread_mutex_lock(&g_table_lock);
    e->next = *bucket(key);
    *bucket(key) = e;
    pthread_mutex_unlock(&g_table_lock);
    return 1;
}

/* Finds (key, kind); fills size/device; removes it when `remove`. Returns 1 when found. */
static int table_find(uintptr_t key, enum kind kind, int remove, size_t *size, int *device) {
    int found = 0;
    pthread_mutex_lock(&g_table_lock);
    for (entry_t **link = bucket(key); *link; link = &(*link)->next) {
        entry_t *e = *link;
        if (e->key == key && e->kind == kind) {
            if (size) *size = e->size;
            if (device) *device = e->device;
            if (remove) {
                *link = e->next;
                if (kind == KIND_DEVICE_MEMORY) g_devices[e->device].used -= e->size;
                free(e);
            }
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&g_table_lock);
    return found;
}

static int reserve_device_memory(int device, size_t size) {
    int ok;
    pthread_mutex_lock(&g_table_lock);
    ok = size <= g_capacity - g_devices[device].used;
    if (ok) g_devices[device].used += size;
    pthread_mutex_unlock(&g_table_lock);
    return ok;
}

static void unreserve_device_memory(int device, size_t size) {
    pthread_mutex_lock(&g_table_lock);
    g_devices[device].used -= size;
    pthread_mutex_unlock(&g_table_lock);
}

/* ---- streams --------------------------------------------------------------------------------- */
typedef struct work_item {
    struct work_item *next;
    emu_work_fn work;
    void *arg;
    emu_release_fn release;
} work_item_t;

struct stream {
    pthread_mutex_t lock;
    pthread_cond_t has_work, progressed;
    work_item_t *head, *tail;
    uint64_t enqueued, completed;
    int error;      /* first error of async work since the last synchronize */
    int stopping;
    int device;
    pthread_t thread;
    stream_t *next; /* in its device's list */
};

static void *stream_worker(void *arg) {
    stream_t *s = arg;
    current_device = s->device;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stopping) pthread_cond_wait(&s->has_work, &s->lock);
        if (!s->head) break; /* stopping, and everything enqueued has run */
        work_item_t *item = s->head;
        s->head = item->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        int err = item->work(item->arg);
        if (item->release) item->release(item->arg);
        free(item);
        pthread_mutex_lock(&s->lock);
        s->completed++;
        if (err && !s->error) s->error = err;
        pthread_cond_broadcast(&s->progressed);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Starts a stream and links it into its device's list; the caller holds the device's lock. */
static stream_t *stream_start_locked(int device) {
    stream_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->has_work, NULL);
    pthread_cond_init(&s->progressed, NULL);
    s->device = device;
    if (pthread_create(&s->thread, NULL, stream_worker, s) != 0) {
        free(s);
        return NULL;
    }
    s->next = g_devices[device].streams;
    g_devices[device].streams = s;
    return s;
}

static stream_t *default_stream(int device) {
    device_t *d = &g_devices[device];
    pthread_mutex_lock(&d->lock);
    if (!d->default_stream) d->default_stream = stream_start_locked(device);
    stream_t *s = d->default_stream;
    pthread_mutex_unlock(&d->lock);
    return s;
}

static stream_t *resolve_stream(uintptr_t handle) {
    if (handle == 0) return default_stream(current_device);
    return table_find(handle, KIND_STREAM, 0, NULL, NULL) ? (stream_t *)handle : NULL;
}

static void stream_wait_idle(stream_t *s) {
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->enqueued;
    while (s->completed < target) pthread_cond_wait(&s->progressed, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static int stream_take_error(stream_t *s) {
    pthread_mutex_lock(&s->lock);
    int err = s->error;
    s->error = 0;
    pthread_mutex_unlock(&s->lock);
    return err;
}

/* Waits for every stream of `device`; returns (and clears) their first pending error if `take_errors`. */
static int device_wait_idle(int device, int take_errors) {
    device_t *d = &g_devices[device];
    pthread_mutex_lock(&d->lock);
    size_t count = 0;
    for (stream_t *s = d->streams; s; s = s->next) count++;
    stream_t **snapshot = malloc((count ? count : 1) * sizeof *snapshot);
    if (!snapshot) {
        pthread_mutex_unlock(&d->lock);
        return ERR_MEMORY_ALLOCATION;
    }
    count = 0;
    for (stream_t *s = d->streams; s; s = s->next) snapshot[count++] = s;
    pthread_mutex_unlock(&d->lock);
    int err = 0;
    for (size_t i = 0; i < count; i++) {
        stream_wait_idle(snapshot[i]);
        if (take_errors) {
            int e = stream_take_error(snapshot[i]);
            if (e && !err) err = e;
        }
    }
    free(snapshot);
    return err;
}

int API(AnydevEnqueue)(uintptr_t handle, emu_work_fn work, void *arg, emu_release_fn release) {
    INIT();
    stream_t *s = resolve_stream(handle);
    work_item_t *item = s ? malloc(sizeof *item) : NULL;
    if (!item) {
        if (release) release(arg);
        return s ? ERR_MEMORY_ALLOCATION : ERR_INVALID_RESOURCE_HANDLE;
    }
    item->next = NULL; item->work = work; item->arg = arg; item->release = release;
    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        if (release) release(arg);
        free(item);
        return ERR_INVALID_RESOURCE_HANDLE;
    }
    if (s->tail) s->tail->next = item; else s->head = item;
    s->tail = item;
    s->enqueued++;
    pthread_cond_signal(&s->has_work);
    pthread_mutex_unlock(&s->lock);
    return ERR_SUCCESS;
}

rtError_t API(StreamCreateWithFlags)(uintptr_t *stream, unsigned int flags) {
    INIT();
    (void)flags; /* every emulated stream is independent of the default one, as NonBlocking asks */
    if (!stream) return ERR_INVALID_VALUE;
    device_t *d = &g_devices[current_device];
    pthread_mutex_lock(&d->lock);
    stream_t *s = stream_start_locked(current_device);
    pthread_mutex_unlock(&d->lock);
    if (!s || !table_insert((uintptr_t)s, KIND_STREAM, 0, current_device)) return ERR_MEMORY_ALLOCATION;
    *stream = (uintptr_t)s;
    return ERR_SUCCESS;
}

rtError_t API(StreamSynchronize)(uintptr_t handle) {
    INIT();
    stream_t *s = resolve_stream(handle);
    if (!s) return ERR_INVALID_RESOURCE_HANDLE;
    stream_wait_idle(s);
    return stream_take_error(s);
}

rtError_t API(StreamDestroy)(uintptr_t handle) {
    INIT();
    if (handle == 0 || !table_find(handle, KIND_STREAM, 1, NULL, NULL)) return ERR_INVALID_RESOURCE_HANDLE;
    stream_t *s = (stream_t *)handle;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->has_work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL); /* enqueued work completes first */
    device_t *d = &g_devices[s->device];
    pthread_mutex_lock(&d->lock);
    for (stream_t **link = &d->streams; *link; link = &(*link)->next) {
        if (*link == s) { *link = s->next; break; }
    }
    pthread_mutex_unlock(&d->lock);
    return ERR_SUCCESS;
}

/* ---- events ---------------------------------------------------------------------------------- */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t done;
    unsigned int flags;
    int refs;                   /* the user's handle + one per pending record or wait */
    uint64_t recorded, completed; /* record generations */
    struct timespec completed_at;
} event_t;

typedef struct { event_t *event; uint64_t generation; } event_work_t;

static void event_unref(event_t *e) {
    if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->done);
        free(e);
    }
}

static event_t *resolve_event(uintptr_t handle) {
    return handle && table_find(handle, KIND_EVENT, 0, NULL, NULL) ? (event_t *)handle : NULL;
}

static int record_work(void *arg) {
    event_work_t *w = arg;
    event_t *e = w->event;
    pthread_mutex_lock(&e->lock);
    if (w->generation > e->completed) {
        e->completed = w->generation;
        clock_gettime(CLOCK_MONOTONIC, &e->completed_at);
    }
    pthread_cond_broadcast(&e->done);
    pthread_mutex_unlock(&e->lock);
    return ERR_SUCCESS;
}

static int wait_work(void *arg) {
    event_work_t *w = arg;
    event_t *e = w->event;
    pthread_mutex_lock(&e->lock);
    while (e->completed < w->generation) pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return ERR_SUCCESS;
}

static void release_event_work(void *arg) {
    event_work_t *w = arg;
    event_unref(w->event);
    free(w);
}

/* Enqueue `work` for generation `generation` of `e` on `stream`, holding a reference to `e`. */
static rtError_t enqueue_event_work(uintptr_t stream, emu_work_fn work, event_t *e, uint64_t generation) {
    event_work_t *w = malloc(sizeof *w);
    if (!w) return ERR_MEMORY_ALLOCATION;
    __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
    w->event = e;
    w->generation = generation;
    return API(AnydevEnqueue)(stream, work, w, release_event_work);
}

rtError_t API(EventCreateWithFlags)(uintptr_t *event, unsigned int flags) {
    INIT();
    if (!event) return ERR_INVALID_VALUE;
    event_t *e = calloc(1, sizeof *e);
    if (!e) return ERR_MEMORY_ALLOCATION;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->done, NULL);
    e->flags = flags;
    e->refs = 1;
    if (!table_insert((uintptr_t)e, KIND_EVENT, 0, current_device)) {
        event_unref(e);
        return ERR_MEMORY_ALLOCATION;
    }
    *event = (uintptr_t)e;
    return ERR_SUCCESS;
}

rtError_t API(EventRecord)(uintptr_t handle, uintptr_t stream) {
    INIT();
    event_t *e = resolve_event(handle);
    if (!e) return ERR_INVALID_RESOURCE_HANDLE;
    pthread_mutex_lock(&e->lock);
    uint64_t generation = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    rtError_t err = enqueue_event_work(stream, record_work, e, generation);
    if (err) { /* the record never runs: mark it complete so waiters do not hang */
        event_work_t w = {e, generation};
        record_work(&w);
    }
    return err;
}

rtError_t API(EventQuery)(uintptr_t handle) {
    INIT();
    event_t *e = resolve_event(handle);
    if (!e) return ERR_INVALID_RESOURCE_HANDLE;
    pthread_mutex_lock(&e->lock);
    int done = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->lock);
    return done ? ERR_SUCCESS : EMU_NOT_READY_CODE;
}

rtError_t API(EventSynchronize)(uintptr_t handle) {
    INIT();
    event_t *e = resolve_event(handle);
    if (!e) return ERR_INVALID_RESOURCE_HANDLE;
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    while (e->completed < target) pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return ERR_SUCCESS;
}

rtError_t API(StreamWaitEvent)(uintptr_t stream, uintptr_t handle, unsigned int flags) {
    INIT();
    (void)flags;
    event_t *e = resolve_event(handle);
    if (!e) return ERR_INVALID_RESOURCE_HANDLE;
    if (!resolve_stream(stream)) return ERR_INVALID_RESOURCE_HANDLE;
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (target == 0) return ERR_SUCCESS; /* never recorded: nothing to wait for */
    return enqueue_event_work(stream, wait_work, e, target);
}

rtError_t API(EventElapsedTime)(float *ms, uintptr_t start, uintptr_t end) {
    INIT();
    event_t *a = resolve_event(start), *b = resolve_event(end);
    if (!ms) return ERR_INVALID_VALUE;
    if (!a || !b || ((a->flags | b->flags) & EVENT_DISABLE_TIMING)) return ERR_INVALID_RESOURCE_HANDLE;
    event_t *events[2] = {a, b};
    struct timespec at[2];
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&events[i]->lock);
        uint64_t recorded = events[i]->recorded, completed = events[i]->completed;
        at[i] = events[i]->completed_at;
        pthread_mutex_unlock(&events[i]->lock);
        if (recorded == 0) return ERR_INVALID_RESOURCE_HANDLE;
        if (completed < recorded) return EMU_NOT_READY_CODE;
    }
    *ms = (float)((at[1].tv_sec - at[0].tv_sec) * 1e3 + (at[1].tv_nsec - at[0].tv_nsec) / 1e6);
    return ERR_SUCCESS;
}

rtError_t API(EventDestroy)(uintptr_t handle) {
    INIT();
    if (!handle || !table_find(handle, KIND_EVENT, 1, NULL, NULL)) return ERR_INVALID_RESOURCE_HANDLE;
    event_unref((event_t *)handle); /* freed once pending records and waits have run */
    return ERR_SUCCESS;
}

/* ---- devices --------------------------------------------------------------------------------- */
rtError_t API(GetDeviceCount)(int *count) {
    INIT();
    if (!count) return ERR_INVALID_VALUE;
    *count = g_device_count;
    return g_device_count ? ERR_SUCCESS : ERR_NO_DEVICE;
}

rtError_t API(SetDevice)(int device) {
    INIT();
    if (device < 0 || device >= g_device_count) return ERR_INVALID_DEVICE;
    current_device = device;
    return ERR_SUCCESS;
}

rtError_t API(GetDevice)(int *device) {
    INIT();
    if (!device) return ERR_INVALID_VALUE;
    *device = current_device;
    return ERR_SUCCESS;
}

rtError_t API(DeviceSynchronize)(void) {
    INIT();
    return device_wait_idle(current_device, 1);
}

rtError_t API(DeviceGetAttribute)(int *value, int attribute, int device) {
    INIT();
    if (!value) return ERR_INVALID_VALUE;
    if (device < 0 || device >= g_device_count) return ERR_INVALID_DEVICE;
    switch (attribute) {
        case 16: *value = 4; return ERR_SUCCESS;  /* multiprocessor count */
        case 75: *value = 1; return ERR_SUCCESS;  /* compute capability major */
        case 76: *value = 0; return ERR_SUCCESS;  /* compute capability minor */
        default: return ERR_INVALID_VALUE;
    }
}

rtError_t API(MemGetInfo)(size_t *free_bytes, size_t *total_bytes) {
    INIT();
    if (!free_bytes || !total_bytes) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&g_table_lock);
    *free_bytes = g_capacity - g_devices[current_device].used;
    pthread_mutex_unlock(&g_table_lock);
    *total_bytes = g_capacity;
    return ERR_SUCCESS;
}

rtError_t API(DriverGetVersion)(int *version) {
    if (!version) return ERR_INVALID_VALUE;
    *version = EMU_VERSION;
    return ERR_SUCCESS;
}

#ifdef HAS_RUNTIME_VERSION
rtError_t API(RuntimeGetVersion)(int *version) {
    if (!version) return ERR_INVALID_VALUE;
    *version = EMU_VERSION;
    return ERR_SUCCESS;
}
#endif

/* ---- memory ---------------------------------------------------------------------------------- */
rtError_t API(Malloc)(uintptr_t *ptr, size_t size) {
    INIT();
    if (!ptr) return ERR_INVALID_VALUE;
    *ptr = 0;
    if (size == 0) return ERR_SUCCESS;
    int device = current_device;
    if (!reserve_device_memory(device, size)) return ERR_MEMORY_ALLOCATION;
    void *memory = NULL;
    if (posix_memalign(&memory, ALIGNMENT, size) != 0 || !table_insert((uintptr_t)memory, KIND_DEVICE_MEMORY, size, device)) {
        free(memory);
        unreserve_device_memory(device, size);
        return ERR_MEMORY_ALLOCATION;
    }
    *ptr = (uintptr_t)memory;
    return ERR_SUCCESS;
}

rtError_t API(Free)(uintptr_t ptr) {
    INIT();
    int device;
    if (ptr == 0) return ERR_SUCCESS;
    if (!table_find(ptr, KIND_DEVICE_MEMORY, 0, NULL, &device)) return ERR_INVALID_VALUE;
    device_wait_idle(device, 0); /* like cudaFree: no queued work may still touch it */
    if (!table_find(ptr, KIND_DEVICE_MEMORY, 1, NULL, NULL)) return ERR_INVALID_VALUE;
    free((void *)ptr);
    return ERR_SUCCESS;
}

rtError_t API(MallocHost)(uintptr_t *ptr, size_t size) {
    INIT();
    if (!ptr) return ERR_INVALID_VALUE;
    void *memory = NULL;
    if (posix_memalign(&memory, 4096, size ? size : 1) != 0 || !table_insert((uintptr_t)memory, KIND_HOST_MEMORY, size, current_device)) {
        free(memory);
        return ERR_MEMORY_ALLOCATION;
    }
    *ptr = (uintptr_t)memory;
    return ERR_SUCCESS;
}

rtError_t API(FreeHost)(uintptr_t ptr) {
    INIT();
    if (!table_find(ptr, KIND_HOST_MEMORY, 1, NULL, NULL)) return ERR_INVALID_VALUE;
    for (int device = 0; device < g_device_count; device++) device_wait_idle(device, 0);
    free((void *)ptr);
    return ERR_SUCCESS;
}

typedef struct { uintptr_t dst, src; size_t count; int value; } copy_work_t;

static int memset_work(void *arg) {
    copy_work_t *w = arg;
    memset((void *)w->dst, w->value, w->count);
    return ERR_SUCCESS;
}

static int memcpy_work(void *arg) {
    copy_work_t *w = arg;
    memmove((void *)w->dst, (const void *)w->src, w->count);
    return ERR_SUCCESS;
}

static rtError_t enqueue_copy(uintptr_t stream, emu_work_fn work, uintptr_t dst, uintptr_t src, size_t count, int value) {
    copy_work_t *w = malloc(sizeof *w);
    if (!w) return ERR_MEMORY_ALLOCATION;
    w->dst = dst; w->src = src; w->count = count; w->value = value;
    return API(AnydevEnqueue)(stream, work, w, free);
}

rtError_t API(MemsetAsync)(uintptr_t ptr, int value, size_t count, uintptr_t stream) {
    INIT();
    if (count && !ptr) return ERR_INVALID_VALUE;
    return enqueue_copy(stream, memset_work, ptr, 0, count, value);
}

rtError_t API(MemcpyAsync)(uintptr_t dst, uintptr_t src, size_t count, int kind, uintptr_t stream) {
    INIT();
    if (kind < 0 || kind > 4) return ERR_INVALID_MEMCPY_DIRECTION;
    if (count && (!dst || !src)) return ERR_INVALID_VALUE;
    return enqueue_copy(stream, memcpy_work, dst, src, count, 0);
}

/* ---- errors ---------------------------------------------------------------------------------- */
static const struct { int code; const char *name; const char *text; } ERRORS[] = {
    {ERR_SUCCESS, PREFIX "Success", "no error"},
    {ERR_INVALID_VALUE, PREFIX "ErrorInvalidValue", "invalid argument"},
    {ERR_MEMORY_ALLOCATION, PREFIX "ErrorMemoryAllocation", "out of memory"},
    {ERR_INVALID_MEMCPY_DIRECTION, PREFIX "ErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {ERR_NO_DEVICE, PREFIX "ErrorNoDevice", "no emulated device (ANYDEV_EMULATED_DEVICE_COUNT is 0)"},
    {ERR_INVALID_DEVICE, PREFIX "ErrorInvalidDevice", "invalid device ordinal"},
    {ERR_INVALID_RESOURCE_HANDLE, PREFIX "ErrorInvalidResourceHandle", "invalid resource handle"},
    {EMU_NOT_READY_CODE, PREFIX "ErrorNotReady", "device not ready"},
    {ERR_LAUNCH_TIMEOUT, PREFIX "ErrorLaunchTimeout",
     "the launch timed out and was terminated (emulated MCCL: a peer rank did not arrive in time)"},
    {ERR_LAUNCH_FAILURE, PREFIX "ErrorLaunchFailure",
     "unspecified launch failure (emulated MCCL: the collective's communicator was aborted)"},
    {ERR_UNKNOWN, PREFIX "ErrorUnknown", "unknown error"},
};

static int error_index(rtError_t error) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == error) return (int)i;
    return -1;
}

const char *API(GetErrorString)(rtError_t error) {
    int i = error_index(error);
    return i < 0 ? "unrecognized error code" : ERRORS[i].text;
}

#ifdef HAS_ERROR_NAME
const char *API(GetErrorName)(rtError_t error) {
    int i = error_index(error);
    return i < 0 ? "unrecognized error code" : ERRORS[i].name;
}
#endif

/* Marker: anydev labels a runtime exporting this "emulated runtime" and gives it the CPU-tensor torch
 * bridge. No vendor library has it. -DEMU_NO_MARKER builds a library that looks like a vendor's (for
 * the test that such a library gets the vendor's torch bridge, never the emulated one). */
#ifndef EMU_NO_MARKER
const char *anydevEmulatedRuntime(void) {
    return "anydev emulated " PREFIX " runtime over host memory";
}
#endif
