/* Shared by runtime.c and mccl.c: the symbol prefix, error codes, and the one internal entry point
 * the emulated MCCL uses to run work on the emulated runtime's streams.
 *
 * Both files are compiled into ONE shared object (-DRT=musa for Moore Threads, -DRT=mc for MetaX);
 * the MCCL library name is a link to it. So the MCCL always runs on its own runtime's streams, even
 * when two emulated builds are loaded in one process. */
#ifndef ANYDEV_EMULATED_H
#define ANYDEV_EMULATED_H

#include <stdint.h>
#include <time.h>

#ifndef RT
#error "define RT, the runtime symbol prefix: -DRT=musa or -DRT=mc"
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define API(name) CAT(RT, name)     /* API(Malloc) -> musaMalloc */
#define STR_(x) #x
#define STR(x) STR_(x)
#define PREFIX STR(RT)              /* "musa" */

/* Runtime error codes: CUDA's numbers (MUSA and MACA are assumed to mirror them). */
enum {
    ERR_SUCCESS = 0,
    ERR_INVALID_VALUE = 1,
    ERR_MEMORY_ALLOCATION = 2,
    ERR_INVALID_MEMCPY_DIRECTION = 21,
    ERR_NO_DEVICE = 100,
    ERR_INVALID_DEVICE = 101,
    ERR_INVALID_RESOURCE_HANDLE = 400,
    ERR_NOT_READY = 600,
    ERR_LAUNCH_TIMEOUT = 702,
    ERR_LAUNCH_FAILURE = 719,
    ERR_UNKNOWN = 999,
};

/* Work run by a stream's worker thread, in stream order; returns a runtime error code, which becomes
 * the stream's pending error (reported by the next synchronize). `release` (may be NULL) frees `arg`
 * after the work ran, or if it never runs. */
typedef int (*emu_work_fn)(void *arg);
typedef void (*emu_release_fn)(void *arg);

/* Enqueue work on `stream` (0: the current device's default stream). Returns a runtime error code.
 * Internal to the shared object (not exported). */
__attribute__((visibility("hidden"))) int API(AnydevEnqueue)(uintptr_t stream, emu_work_fn work, void *arg, emu_release_fn release);

/* The runtime's public device count, used by the MCCL to check device lists. */
int API(GetDeviceCount)(int *count);

/* Deadline `seconds` from now on CLOCK_REALTIME (for pthread_cond_timedwait). */
static inline struct timespec emu_deadline(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long long ns = t.tv_nsec + (long long)(seconds * 1e9);
    t.tv_sec += ns / 1000000000LL;
    t.tv_nsec = ns % 1000000000LL;
    return t;
}

#endif
