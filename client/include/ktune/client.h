/* ktune runtime lookup client: the C API of libktune_client.
 *
 * A runtime asks for the tuned config of (kernel, shape, dtype, device) and always gets an answer
 * within the per-call timeout (default 5 ms), following the fallback ladder (docs/protocol.md
 * § lookup):
 *   1. the winner table ktuned publishes next to its socket (<socket without .sock>.table),
 *      mapped read-only: the same ladder and fields as ktuned's answer (exact, nearest,
 *      [default]), in well under a microsecond, no system call; also while ktuned is down (the
 *      last table it published). Source KTUNE_SOURCE_MAP. What the table cannot answer (a key,
 *      kernel or device it lacks, a dtype or shape ktuned would refuse) goes on to 2-5; with
 *      tune_on_miss (or ktuned's KTUNE_TUNE_ON_MISS=1) a non-exact answer is asked of ktuned, so
 *      that it queues the tune, and the table's answer stands when ktuned does not answer;
 *   2. the in-process cache of earlier answers from 3-5 (entries live cache_ttl_ms);
 *   3. ktuned over its Unix socket: exact winner, else the nearest tuned shape, else [default];
 *   4. when ktuned cannot be reached or does not answer in time: a read-only open of the SQLite
 *      database, exact winners only, as of the kernel's newest job recorded there;
 *   5. the kernel's [default] config, from the spec text stored in the database, else from
 *      <kernel dir>/<kernel>/kernel.toml.
 * A fresh connection's first request may take connect_timeout_us (default 100 ms) on top of the
 * lookup timeout, and a fresh connection that gets no answer is made once more before step 3.
 * A connect() that fails (no daemon) is retried with exponential backoff (10 ms doubling to 1 s),
 * so a stopped daemon costs one failed connect() per backoff period, not one per lookup; a daemon
 * that is up but answered late is asked again at the next lookup, never skipped by the backoff.
 *
 * Thread safety: one ktune_client handle is used by one thread at a time; open one per thread.
 * Strings in a ktune_answer stay valid until the next ktune_lookup, ktune_set_table or
 * ktune_close on the handle.
 */
#ifndef KTUNE_CLIENT_H
#define KTUNE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define KTUNE_API __attribute__((visibility("default")))
#else
#define KTUNE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ktune_client ktune_client;

typedef enum ktune_status {
  KTUNE_OK = 0,
  KTUNE_E_INVALID_ARGUMENT = 1, /* a NULL or empty required argument */
  KTUNE_E_REJECTED = 2,         /* ktuned refused the request (unknown kernel, bad shape, ...) */
  KTUNE_E_NO_ANSWER = 3,        /* no daemon, no database winner and no [default] found */
  KTUNE_E_NO_MEMORY = 4
} ktune_status;

typedef enum ktune_rung {
  KTUNE_RUNG_EXACT = 0,   /* the winner tuned for exactly this key */
  KTUNE_RUNG_NEAREST = 1, /* the winner of the nearest tuned shape (from_shape) */
  KTUNE_RUNG_DEFAULT = 2, /* the kernel's [default] config */
  KTUNE_RUNG_STALE = 3    /* this key's winner on this hardware under another environment
                             (compiler, driver, toolkit); ktuned revalidates it */
} ktune_rung;

typedef enum ktune_source {
  KTUNE_SOURCE_DAEMON = 0,
  KTUNE_SOURCE_CACHE = 1,
  KTUNE_SOURCE_DATABASE = 2,
  KTUNE_SOURCE_SPEC = 3,
  KTUNE_SOURCE_MAP = 4      /* the winner table ktuned published (step 1 above) */
} ktune_source;

typedef struct ktune_param {
  const char* name;
  int64_t value;
} ktune_param;

typedef struct ktune_answer {
  ktune_rung rung;
  int exact;                 /* 1 for KTUNE_RUNG_EXACT */
  ktune_source source;       /* where this answer came from */
  const char* config_json;   /* {"BM":64,...} */
  const ktune_param* params; /* the same config as name/value pairs, in the kernel's order */
  size_t param_count;
  const char* from_shape;    /* KTUNE_RUNG_NEAREST: the shape the config was tuned at; else "" */
  const char* reason;        /* why not exact (source_changed, device_never_tuned, daemon_unreachable...); "" when exact */
  double median_ms;          /* measured median of the winner; 0 when none */
  int64_t job;               /* the job that produced the winner; 0 when none */
  int64_t tune_job;          /* the tune-on-miss job ktuned queued; 0 when none */
} ktune_answer;

typedef struct ktune_options {
  const char* socket_path; /* NULL: $KTUNE_HOME/ktuned.sock, else $XDG_RUNTIME_DIR/ktune/ktuned.sock,
                              else /tmp/ktune-<uid>/ktuned.sock (as ktuned) */
  const char* db_path;     /* NULL: as ktuned ($KTUNE_HOME/ktune.db, $XDG_STATE_HOME/ktune/ktune.db,
                              ~/.local/state/ktune/ktune.db) */
  const char* kernel_dirs; /* ':'-separated; NULL: $KTUNE_KERNEL_DIRS; then always the shipped
                              families, <prefix>/share/ktune/kernels next to the library */
  int timeout_us;          /* per lookup on an open connection; <= 0: 5000 */
  int cache_ttl_ms;        /* 0: 1000; < 0: no cache */
  int tune_on_miss;        /* non-zero: ask ktuned to tune a key it has no exact winner for */
  int connect_timeout_us;  /* added to timeout_us for the first request on a new connection;
                              <= 0: 100000 */
} ktune_options;

/* Fills `options` with the defaults above. */
KTUNE_API void ktune_options_init(ktune_options* options);

/* Creates a handle. Never fails because ktuned is down: the connection is made on first use.
 * `options` may be NULL (defaults). */
KTUNE_API ktune_status ktune_connect(const ktune_options* options, struct ktune_client** out);

/* Looks up the config for (kernel, shape, dtype, device); dtype NULL = "f32", device NULL = "cpu".
 * On KTUNE_OK `out` holds the answer; otherwise ktune_last_error() says why. */
KTUNE_API ktune_status ktune_lookup(struct ktune_client* client, const char* kernel, const char* shape,
                          const char* dtype, const char* device, ktune_answer* out);

/* The winner table the handle answers from first: NULL = the one next to the socket (the
 * default), "" = none (every lookup takes steps 2-5), else that file. */
KTUNE_API ktune_status ktune_set_table(struct ktune_client* client, const char* path);

/* Drops the cached answers of this handle. */
KTUNE_API void ktune_clear_cache(struct ktune_client* client);

/* Closes the connection and frees the handle (NULL is ignored). */
KTUNE_API void ktune_close(struct ktune_client* client);

KTUNE_API const char* ktune_status_string(ktune_status status);
KTUNE_API const char* ktune_rung_string(ktune_rung rung);
KTUNE_API const char* ktune_source_string(ktune_source source);
/* The last error or fallback reason of this handle, for people ("" when none). */
KTUNE_API const char* ktune_last_error(const struct ktune_client* client);

#ifdef __cplusplus
}
#endif

#endif /* KTUNE_CLIENT_H */
