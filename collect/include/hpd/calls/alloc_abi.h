/* The allocation log of hpd's preloaded runtime (libhpdcalls.so, `hpctl record --alloc -- CMD`): a
 * file under /dev/shm the runtime maps shared and appends sampled allocations and their frees to; hpd
 * reads it when the recording ends. Plain C: the runtime and hpd (C++) both include it. */
#ifndef HPD_CALLS_ALLOC_ABI_H
#define HPD_CALLS_ALLOC_ABI_H

#include <stdint.h>

/* The environment variable that names the log for the runtime. */
#define HPD_ALLOC_ENV_LOG "HPD_ALLOC_LOG"

#define HPD_ALLOC_MAGIC 0x31434f4c4c414448ull /* "HDALLOC1" */
/* 2: records carry their time (CLOCK_MONOTONIC), frees their thread. */
#define HPD_ALLOC_VERSION 2u

/* The file: the header, then records up to the file's end (sparse: only what is written takes memory). */
#define HPD_ALLOC_FILE_SIZE (256ull << 20)
/* Return addresses kept per sampled allocation (the outermost ones are dropped beyond). */
#define HPD_ALLOC_MAX_FRAMES 128u
/* The default mean of the exponential distance, in bytes, between two samples. */
#define HPD_ALLOC_DEFAULT_MEAN 524288ull

struct hpd_alloc_header {
  uint64_t magic; /* written last by hpd: the runtime uses the log only with it */
  uint32_t version;
  uint32_t header_size;
  uint64_t file_size;
  uint64_t mean_bytes;   /* the sampling's mean, set by hpd */
  uint64_t cursor;       /* bytes of records reserved after the header (atomic add) */
  uint64_t dropped;      /* records that did not fit in the file */
  uint64_t processes;    /* process starts of the runtime with the log (exec, fork) */
  uint64_t untracked;    /* sampled allocations whose free cannot be matched (the live set was full) */
  uint64_t slow_unwinds; /* samples unwound by libgcc, a frame beyond the runtime's cached rules */
  uint64_t reserved[7];
};

#define HPD_ALLOC_RECORD_ALLOC 1u
#define HPD_ALLOC_RECORD_FREE 2u
/* An allocation whose free will not be logged (the set of sampled addresses was full). */
#define HPD_ALLOC_RECORD_ALLOC_UNTRACKED 3u

/* A record: this fixed part, then `frames` return addresses (innermost first) for an allocation.
 * `kind` is written last (release): a reader takes a record with kind 0 as not written (yet). */
struct hpd_alloc_record {
  uint32_t kind;
  uint32_t frames;
  int32_t pid;
  int32_t tid; /* the thread that allocated, or freed */
  uint64_t address;
  uint64_t size;    /* bytes asked for; 0 in a free */
  uint64_t time_ns; /* CLOCK_MONOTONIC, the clock of the recording's samples */
};

static inline uint64_t hpd_alloc_record_size(uint32_t frames) {
  return sizeof(struct hpd_alloc_record) + 8ull * frames;
}

#endif
