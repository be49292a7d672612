/*
 * mkcache.h -- the one public header of libmkcache.
 *
 * libmkcache runs deep-learning operators on the CPU through oneDNN and keeps
 * every oneDNN object it creates in a thread-safe, memory-bounded blob cache,
 * so a model pays the primitive-creation cost once instead of on every call.
 *
 * Conventions (the same for every function):
 *   - Every name starts with `mkc_`; functions are named prefix + object + verb.
 *   - Every function returns an `mkc_status`, except mkc_status_string() and
 *     mkc_last_error(). Out-parameters come last.
 *   - On failure the function changes none of its out-parameters and
 *     mkc_last_error() explains what went wrong, on the calling thread.
 *   - Objects are opaque handles with create/destroy pairs; destroy accepts
 *     NULL. A handle that is not live (destroyed, foreign, never made) is
 *     reported as MKC_STATUS_INVALID_HANDLE and never dereferenced, with one
 *     exception no pointer-valued handle can see: memory freed by a destroy
 *     may hold the next object made, at the same address, and a stale copy
 *     of the old handle then names that new object (a second destroy
 *     destroys it). Destroy each handle once and drop it.
 *   - No bad input ever ends the process: no exception, abort or assert
 *     crosses this boundary.
 *   - Every struct passed by pointer starts with `size_t struct_size`, the
 *     size of the struct the caller built against (see "Struct sizes"), so
 *     later versions can append fields without breaking older callers.
 *   - fork() from any thread is safe, also while other threads are inside
 *     the library, and the child may use the library (with Intel's OpenMP
 *     runtime, which the packaged oneDNN uses). The child keeps the cache
 *     entries of the forking thread and of clearing-mode sessions; the
 *     default-mode entries of the other threads are dropped, as if those
 *     threads had exited. Tensors other threads were writing at the fork
 *     hold unspecified values in the child.
 *
 * Compiles as C99 and as C++.
 */
#ifndef MKCACHE_MKCACHE_H
#define MKCACHE_MKCACHE_H

#include <stddef.h>
#include <stdint.h>

#define MKC_VERSION_MAJOR 0
#define MKC_VERSION_MINOR 1
#define MKC_VERSION_PATCH 0
#define MKC_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, like ZSTD_VERSION_NUMBER. */
#define MKC_VERSION_NUMBER \
    (MKC_VERSION_MAJOR * 10000 + MKC_VERSION_MINOR * 100 + MKC_VERSION_PATCH)

/* Largest tensor rank the library handles. */
#define MKC_MAX_NDIMS 6

#if defined(_WIN32)
#  if defined(MKC_BUILDING_LIBRARY)
#    define MKC_API __declspec(dllexport)
#  else
#    define MKC_API __declspec(dllimport)
#  endif
#else
#  define MKC_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status and errors                                                        */
/* ------------------------------------------------------------------------ */

typedef enum mkc_status {
    MKC_STATUS_OK = 0,
    MKC_STATUS_INVALID_ARGUMENT = 1,  /* a value is out of range or inconsistent */
    MKC_STATUS_INVALID_HANDLE = 2,    /* NULL, destroyed or foreign handle       */
    MKC_STATUS_UNSUPPORTED = 3,       /* valid request this build cannot do      */
    MKC_STATUS_OUT_OF_MEMORY = 4,
    MKC_STATUS_BUFFER_TOO_SMALL = 5,  /* a caller buffer cannot hold the result  */
    MKC_STATUS_ONEDNN_ERROR = 6,      /* oneDNN rejected the request             */
    MKC_STATUS_INTERNAL_ERROR = 7,    /* a bug in libmkcache; please report it   */
    /* Every enum ends with a 32-bit sentinel (as Vulkan's do): any int value
     * a caller passes is then a valid value of the type, and rejected with a
     * status instead of being undefined behaviour inside the library. */
    MKC_STATUS_MAX_ENUM = 0x7fffffff
} mkc_status;

/* A static, never-NULL name for a status ("MKC_STATUS_OK", ...). */
MKC_API const char *mkc_status_string(mkc_status status);

/* The message of the last failed call on this thread ("" if none). The
 * pointer stays valid until the next failing call on the same thread. */
MKC_API const char *mkc_last_error(void);

/* ------------------------------------------------------------------------ */
/* Version and build information                                            */
/* ------------------------------------------------------------------------ */

/* The run-time version; compare with the MKC_VERSION_* macros you built with. */
MKC_API mkc_status mkc_get_version(int *major, int *minor, int *patch);

/* A JSON object describing this build and machine: {"version",
 * "onednn_version", "onednn_cpu_runtime", "isa", "bf16" ("native": the CPU
 * computes bfloat16, "emulated": oneDNN has bfloat16 kernels that convert
 * through float32, "none": no bfloat16 kernels, as on AVX2), "max_threads",
 * "l2_cache_bytes" (one core's, as the system reports it; 1 MiB where it does
 * not), "onednn_cache_capacity", ...}. The string belongs to the library and stays
 * valid until the next call of this function on the same thread. */
MKC_API mkc_status mkc_get_build_info(const char **json);

/* The number of OpenMP threads the calling thread's operator calls, program
 * runs and compiles use (omp_set_num_threads of the OpenMP runtime oneDNN
 * loaded). OpenMP keeps it per thread: it applies to the calling thread, and
 * a thread started later begins with the process default (OMP_NUM_THREADS,
 * else one per core). Cache entries and program plans are made per thread
 * count (oneDNN fixes how some kernels split their work when it creates
 * them), so after a change the next call builds, once, what the new count
 * needs. `threads` >= 1 (INVALID_ARGUMENT otherwise); UNSUPPORTED where
 * oneDNN runs without OpenMP. Any thread, at any time. */
MKC_API mkc_status mkc_set_num_threads(int threads);
MKC_API mkc_status mkc_get_num_threads(int *threads);

/* What one thread's arithmetic can reach on this CPU, in floating-point
 * operations per second (a multiply-add counted as two): fused
 * multiply-adds on the widest vectors of the ISA oneDNN runs on
 * (ONEDNN_MAX_CPU_ISA lowers it), measured once per process on the first
 * caller's thread (about 20 ms), then returned as it is. A step's GFLOP/s
 * (mkc_program_profile_text) over this, times the threads it ran on, is its
 * share of the machine's peak. Any thread, at any time. */
MKC_API mkc_status mkc_get_peak_flops(double *flops_per_thread);

/* How many layout conversions (reorders) the library has executed in this
 * process, exports included: a debugging aid to check that a chain of
 * operators converts nothing between them. */
MKC_API mkc_status mkc_get_reorder_count(uint64_t *count);

/* ------------------------------------------------------------------------ */
/* Struct sizes                                                             */
/* ------------------------------------------------------------------------ */

/* Every struct passed to the library by pointer (the params structs,
 * mkc_cache_stats, mkc_program_options, mkc_program_memory,
 * mkc_activation_call) starts with
 *
 *     size_t struct_size;
 *
 * the struct's size as the caller's mkcache.h declares it. Its _init
 * function sets it to sizeof; a caller filling a struct without _init sets
 * it to sizeof itself. A later version of the library only ever appends
 * fields, so it tells from struct_size which fields a caller's struct has.
 * A call taking such a struct accepts as struct_size:
 *   - the library's own size (mkc_get_struct_size): the struct is used as
 *     it is;
 *   - a smaller size that ends exactly at the end of one of its fields
 *     after struct_size (the struct of an older mkcache.h): the fields up
 *     to there are read, every later one takes the value its _init
 *     function gives it;
 *   - nothing else: 0, a size that is not the end of a field (inside one,
 *     or in the padding before one), or a size larger than the library's
 *     (a struct from a newer mkcache.h than the library) is
 *     MKC_STATUS_INVALID_ARGUMENT, with a message naming the struct, the
 *     size given and the size expected.
 * mkc_cache_stats and mkc_program_memory are written by the library: they
 * are checked the same way
 * and only the fields within struct_size are written (struct_size itself
 * is left as it is). mkc_activation_call, a binding helper, accepts its
 * exact size only. The _init functions write only the caller's struct and
 * may be called from any thread at any time, as may mkc_get_struct_size. */

typedef enum mkc_struct_id {
    MKC_STRUCT_CONV_PARAMS = 1,
    MKC_STRUCT_POOL_PARAMS = 2,
    MKC_STRUCT_LINEAR_PARAMS = 3,
    MKC_STRUCT_MATMUL_PARAMS = 4,
    MKC_STRUCT_LAYER_NORM_PARAMS = 5,
    MKC_STRUCT_BATCH_NORM_PARAMS = 6,
    MKC_STRUCT_LRN_PARAMS = 7,
    MKC_STRUCT_CACHE_STATS = 8,
    MKC_STRUCT_ACTIVATION_CALL = 9, /* for language bindings (end of header) */
    MKC_STRUCT_ACTIVATION_PARAMS = 10,
    MKC_STRUCT_SOFTMAX_PARAMS = 11,
    MKC_STRUCT_BINARY_PARAMS = 12,
    MKC_STRUCT_CONCAT_PARAMS = 13,
    MKC_STRUCT_TRANSPOSE_PARAMS = 14,
    MKC_STRUCT_RESHAPE_PARAMS = 15,
    MKC_STRUCT_PROGRAM_OPTIONS = 16,
    MKC_STRUCT_PROGRAM_MEMORY = 17,
    MKC_STRUCT_REDUCE_PARAMS = 18,
    MKC_STRUCT_GATHER_PARAMS = 19,
    MKC_STRUCT_CAST_PARAMS = 20,
    MKC_STRUCT_SLICE_PARAMS = 21,
    MKC_STRUCT_EXPAND_PARAMS = 22,
    MKC_STRUCT_COMPARE_PARAMS = 23,
    MKC_STRUCT_PAD_PARAMS = 24,
    MKC_STRUCT_RESIZE_PARAMS = 25,
    MKC_STRUCT_LOGICAL_PARAMS = 26,
    MKC_STRUCT_RANGE_PARAMS = 27,
    MKC_STRUCT_GATHER_ND_PARAMS = 28,
    MKC_STRUCT_QUANTIZE_PARAMS = 29,
    MKC_STRUCT_QUANTIZED_CONV_PARAMS = 30,
    MKC_STRUCT_QUANTIZED_LINEAR_PARAMS = 31,
    MKC_STRUCT_QUANTIZED_MATMUL_PARAMS = 32,
    MKC_STRUCT_CALIBRATE_OPTIONS = 33,
    MKC_STRUCT_MAX_ENUM = 0x7fffffff
} mkc_struct_id;

/* The library's size of a struct: the struct_size with which a struct is
 * used as it is (a binding checks its own declarations of the structs
 * against these). An unknown id is MKC_STATUS_INVALID_ARGUMENT. May be
 * called from any thread at any time: the sizes are constants. */
MKC_API mkc_status mkc_get_struct_size(mkc_struct_id id, size_t *size);

/* ------------------------------------------------------------------------ */
/* Enum values by name                                                      */
/* ------------------------------------------------------------------------ */

/* The value of one of this header's enumerators, looked up by name, and
 * the name of a value: a binding reads the ids from the library it loaded
 * instead of keeping copies of this header's numbers.
 *
 * `enum_name` is the enum's type name: "mkc_status", "mkc_struct_id",
 * "mkc_dtype", "mkc_layout", "mkc_activation_kind", "mkc_binary_kind",
 * "mkc_pool_kind", "mkc_reduce_kind", "mkc_compare_kind", "mkc_logical_kind", "mkc_pad_mode",
 * "mkc_resize_mode", "mkc_resize_coordinates", "mkc_resize_nearest" or
 * "mkc_op". A value's name is its enumerator's name after the enum's
 * prefix, in lowercase:
 *   MKC_STATUS_INVALID_ARGUMENT   "invalid_argument"
 *   MKC_STRUCT_CONV_PARAMS        "conv_params"
 *   MKC_REDUCE_MEAN               "mean"
 *   MKC_DTYPE_F32                 "f32"
 *   MKC_LAYOUT_CHANNELS_LAST      "channels_last"
 *   MKC_ACTIVATION_GELU_ERF       "gelu_erf"
 *   MKC_BINARY_MAX                "max"
 *   MKC_POOL_AVG_INCLUDE_PAD      "avg_include_pad"
 *   MKC_OP_CONV2D_TRANSPOSE       "conv2d_transpose" (mkc_op's names are
 *                                 also the operators' names in plans,
 *                                 messages and mkc_program_options.impl)
 * Names match exactly (lowercase only). mkc_layout's aliases ("nchw",
 * "nhwc", "ncdhw", "ndhwc") are found by mkc_enum_value; mkc_enum_name
 * gives each value its first name ("channels_first"). The *_MAX_ENUM
 * sentinels are not values.
 *
 * An unknown enum, name or value, or a NULL pointer, is
 * MKC_STATUS_INVALID_ARGUMENT with a message naming it; `*value` and
 * `*name` are then left as they are. `*name` is a static string. Both may
 * be called from any thread at any time: the tables are constants. */
MKC_API mkc_status mkc_enum_value(const char *enum_name, const char *value_name,
                                  int32_t *value);
MKC_API mkc_status mkc_enum_name(const char *enum_name, int32_t value, const char **name);

/* ------------------------------------------------------------------------ */
/* Data types and layouts                                                   */
/* ------------------------------------------------------------------------ */

/* The data types a tensor or a graph value may hold. The arithmetic
 * operators compute on F32 and refuse the others naming the input and its
 * dtype; S32, S64 and BOOL (one byte, 0 or 1) tensors and graph values hold
 * indices and masks for the operators that take them. S8, U8 (quantized
 * data), BF16 (bfloat16: float32's sign, exponent and top 7 mantissa bits)
 * and F16 (IEEE half) are held, moved (reshape, slice, pad, expand,
 * exported in any plain layout) and converted (cast) on every CPU, whether
 * or not its oneDNN kernels compute in them. S64 data is never rearranged
 * (oneDNN has no 64-bit integer type): it is exported in its own layout
 * only. */
typedef enum mkc_dtype {
    MKC_DTYPE_F32 = 1,
    MKC_DTYPE_S32 = 2,
    MKC_DTYPE_S64 = 3,
    MKC_DTYPE_BOOL = 4,
    MKC_DTYPE_S8 = 5,
    MKC_DTYPE_U8 = 6,
    MKC_DTYPE_BF16 = 7,
    MKC_DTYPE_F16 = 8,
    MKC_DTYPE_MAX_ENUM = 0x7fffffff
} mkc_dtype;

/* What one thread's arithmetic can reach, per arithmetic a step computes
 * in (mkc_program_profile_text names it), in operations per second: F32 as
 * mkc_get_peak_flops; BF16 bfloat16 dot products where oneDNN runs them
 * natively (else float32's rate); S8 or U8 8-bit dot products as oneDNN
 * computes them (VNNI's, else pairs summed in 16 bits), a multiply-add
 * counted as two operations. Each measured once per process. Another dtype
 * is MKC_STATUS_INVALID_ARGUMENT. Any thread, at any time. */
MKC_API mkc_status mkc_get_peak_ops(mkc_dtype dtype, double *ops_per_thread);

/* Plain layouts a caller's data can be in. The library keeps its own results
 * in whatever layout oneDNN prefers (e.g. nChw16c) and converts only when the
 * data leaves it (mkc_tensor_export).
 *
 * CHANNELS_FIRST is plain row-major: NCHW for 4-D, NCDHW for 5-D, NC for 2-D.
 * CHANNELS_LAST moves the channel dimension to the end: NHWC for 4-D, NDHWC
 * for 5-D, NWC for 3-D (rank >= 3 only). The dims a caller passes and reads
 * are always in the order of the tensor's layout: an NHWC tensor of oneDNN
 * dims [2,3,4,5] reports the shape [2,4,5,3].
 *
 * MKC_LAYOUT_TARGET means "the calling thread's target layout" (see
 * mkc_set_target_layout). */
typedef enum mkc_layout {
    MKC_LAYOUT_TARGET = 0,
    MKC_LAYOUT_CHANNELS_FIRST = 1,
    MKC_LAYOUT_CHANNELS_LAST = 2,
    MKC_LAYOUT_NCHW = MKC_LAYOUT_CHANNELS_FIRST,
    MKC_LAYOUT_NHWC = MKC_LAYOUT_CHANNELS_LAST,
    MKC_LAYOUT_NCDHW = MKC_LAYOUT_CHANNELS_FIRST,
    MKC_LAYOUT_NDHWC = MKC_LAYOUT_CHANNELS_LAST,
    MKC_LAYOUT_MAX_ENUM = 0x7fffffff
} mkc_layout;

/* The thread-local target layout: the plain layout data
 * is converted to when it leaves the library and the default layout of
 * wrapped caller data. Starts as CHANNELS_FIRST on every thread. Operators
 * with a data_format attribute (conv2d, ...) set it to their data_format, so
 * a model run in NHWC exports NHWC even after a last op without data_format.
 * `layout` must be CHANNELS_FIRST or CHANNELS_LAST. */
MKC_API mkc_status mkc_set_target_layout(mkc_layout layout);
MKC_API mkc_status mkc_get_target_layout(mkc_layout *layout);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

/* A tensor either wraps caller memory (plain layout, no copy) or owns memory
 * in the layout oneDNN chose. Thread safety: a tensor may be read (used as
 * an operator input, queried, exported) from many threads at once; writing it
 * (as an operator output, set_constant, destroy) needs exclusive access. */
typedef struct mkc_tensor mkc_tensor;

/* Wraps `data` (dense, in `layout`, dims in that layout's order) without
 * copying. The caller keeps `data` alive and unmoved until the tensor is
 * destroyed. Every dim must be >= 1 and the byte size must fit in memory. */
MKC_API mkc_status mkc_tensor_wrap(mkc_dtype dtype, int ndims,
                                   const int64_t *dims, mkc_layout layout,
                                   void *data, mkc_tensor **tensor);

/* Creates a tensor owning zero-filled memory in a plain layout. */
MKC_API mkc_status mkc_tensor_create(mkc_dtype dtype, int ndims,
                                     const int64_t *dims, mkc_layout layout,
                                     mkc_tensor **tensor);

/* Destroys a tensor (NULL is accepted). Owned memory is freed; wrapped caller
 * memory is left alone. */
MKC_API mkc_status mkc_tensor_destroy(mkc_tensor *tensor);

/* The shape in the tensor's own layout order. `dims` must have room for
 * MKC_MAX_NDIMS values. */
MKC_API mkc_status mkc_tensor_get_shape(const mkc_tensor *tensor, int *ndims,
                                        int64_t *dims);
MKC_API mkc_status mkc_tensor_get_dtype(const mkc_tensor *tensor,
                                        mkc_dtype *dtype);

/* The plain layout the tensor's shape is expressed in (CHANNELS_FIRST or
 * CHANNELS_LAST; always CHANNELS_FIRST below rank 3). */
MKC_API mkc_status mkc_tensor_get_layout(const mkc_tensor *tensor,
                                         mkc_layout *layout);

/* How the bytes are arranged, in oneDNN's notation: "abcd" (NCHW), "acdb"
 * (NHWC), "aBcd16b" (nChw16c), ... Valid while the tensor lives unchanged. */
MKC_API mkc_status mkc_tensor_get_format(const mkc_tensor *tensor,
                                         const char **format);

/* Bytes of the tensor's storage (blocked layouts may pad). */
MKC_API mkc_status mkc_tensor_get_nbytes(const mkc_tensor *tensor,
                                         size_t *nbytes);

/* Bytes export needs for a dense plain copy (product of dims * dtype size). */
MKC_API mkc_status mkc_tensor_get_plain_nbytes(const mkc_tensor *tensor,
                                               size_t *nbytes);

/* Promises (constant != 0) that the tensor's data will not change while it
 * lives. Operators may then keep converted copies of it (e.g. conv weights
 * reordered to oneDNN's blocked layout) inside the tensor and reuse them on
 * every call; they are freed with the tensor. Default: not constant. */
MKC_API mkc_status mkc_tensor_set_constant(mkc_tensor *tensor, int constant);

/* Copies the tensor into `dst` (dense, `dst_bytes` long) in plain `layout`,
 * converting with a oneDNN reorder. MKC_LAYOUT_TARGET uses the calling
 * thread's target layout. */
MKC_API mkc_status mkc_tensor_export(const mkc_tensor *tensor,
                                     mkc_layout layout, void *dst,
                                     size_t dst_bytes);

/* ------------------------------------------------------------------------ */
/* Cache context (all thread-local)                                          */
/* ------------------------------------------------------------------------ */

/* The executor id is part of every cache key, so two models interleaved on
 * one thread never share primitives. Default 0. */
MKC_API mkc_status mkc_set_executor(uint64_t executor_id);
MKC_API mkc_status mkc_get_executor(uint64_t *executor_id);

/* The session is the top level of the cache. Default 0. */
MKC_API mkc_status mkc_cache_set_session(int64_t session_id);
MKC_API mkc_status mkc_cache_get_session(int64_t *session_id);

/* The input-shape group (second level) new entries go to, e.g. "1x3x224x224"
 * for a model's current input. NULL or "" is the default group. Copied. */
MKC_API mkc_status mkc_cache_set_input_shape(const char *shape);
/* The pointer stays valid until the next set on this thread. */
MKC_API mkc_status mkc_cache_get_input_shape(const char **shape);

/* Cache mode of the calling thread.
 *   capacity == 0: default mode. Keys carry a hash of the thread id, so
 *                  many threads may run the same model; nothing is evicted
 *                  (entries of a thread are dropped when it exits).
 *   capacity  > 0: clearing mode (for one thread per session). Keys carry no
 *                  thread id; when a new input-shape group is added to a
 *                  session that already holds `capacity` groups, the oldest
 *                  group (by insertion) is evicted. */
MKC_API mkc_status mkc_cache_set_capacity(int64_t capacity);
MKC_API mkc_status mkc_cache_get_capacity(int64_t *capacity);

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

/* Builds the cache key an operator on this thread would use:
 *   <name>|<suffix>|<d0>x<d1>x...|e<executor hex>[|t<thread hash hex>]
 * '|' and '\' inside name and suffix are escaped with '\'. The thread field
 * is present only in default mode. `suffix` is the in-place suffix (softmax
 * axis, activation algorithm, "M" for elementwise mul) and may be NULL.
 * Writes at most `size` bytes including the terminating NUL into `key` (which
 * may be NULL when size is 0); `*needed` receives the full length + 1. If the
 * buffer is too small, MKC_STATUS_BUFFER_TOO_SMALL is returned and `*needed`
 * is still set. */
MKC_API mkc_status mkc_key_make(const char *name, const char *suffix,
                                int ndims, const int64_t *dims, char *key,
                                size_t size, size_t *needed);

/* ------------------------------------------------------------------------ */
/* The blob cache                                                           */
/* ------------------------------------------------------------------------ */

/* Thread safety: every cache function may be called from any thread at any
 * time. A blob obtained with mkc_cache_get_blob stays alive until released,
 * even if the cache drops it meanwhile (shared ownership). */
typedef struct mkc_blob mkc_blob;

/* Called exactly once when the last owner of a blob lets go. */
typedef void (*mkc_deleter)(void *data);

/* Stores `data` under `key` in the calling thread's session and input-shape
 * group, replacing (and releasing) any blob under the same key. `nbytes` is
 * what the blob counts towards the cache's memory figures. `deleter` may be
 * NULL (the cache then never frees `data`). On failure `data` is NOT adopted.
 * In clearing mode this may evict the oldest group. */
MKC_API mkc_status mkc_cache_set_blob(const char *key, void *data,
                                      size_t nbytes, mkc_deleter deleter);

/* Looks `key` up in the calling thread's session and input-shape group.
 * On a hit `*blob` is a new reference (release it with mkc_blob_release);
 * on a miss `*blob` is NULL and MKC_STATUS_OK is returned. */
MKC_API mkc_status mkc_cache_get_blob(const char *key, mkc_blob **blob);

MKC_API mkc_status mkc_blob_get_data(const mkc_blob *blob, void **data);
MKC_API mkc_status mkc_blob_release(mkc_blob *blob); /* NULL accepted */

/* Drops every entry of every session. Objects in use stay alive until their
 * users let go. */
MKC_API mkc_status mkc_cache_reset(void);
/* Drops every entry created under `executor_id`, in all sessions. */
MKC_API mkc_status mkc_cache_reset_executor(uint64_t executor_id);

/* Every operator call looks its primitive up once (a call whose arguments
 * the thread remembers counts a hit without the lookup): a hit finds an
 * entry built for exactly its arguments, a miss builds one and inserts it
 * (replacing an entry under the same key built for other arguments). A
 * backward call also looks up the transfer its training forward left: a hit
 * if there is one for its arguments, else a miss (it then recomputes;
 * nothing is inserted). Training forwards count transfers, not insertions;
 * mkc_cache_get_blob / mkc_cache_set_blob count hits, misses and
 * insertions as above. */
typedef struct mkc_cache_stats {
    size_t struct_size;       /* set by the caller (mkc_cache_stats_init)    */
    uint64_t hits;            /* lookups that found a usable entry           */
    uint64_t misses;          /* lookups that did not (nothing under the key,
                                 or an entry built for other arguments)      */
    uint64_t insertions;      /* entries stored: after a miss, or by
                                 mkc_cache_set_blob (replacements included)  */
    uint64_t evictions;       /* groups evicted in clearing mode, and plans
                                 a program with a capacity dropped (the one
                                 used least recently; in session 0)          */
    uint64_t evicted_entries; /* entries those evictions dropped             */
    uint64_t entries;         /* entries held now                            */
    uint64_t groups;          /* input-shape groups held now                 */
    uint64_t sessions;        /* sessions held now                           */
    uint64_t bytes;           /* bytes entries declare: blob nbytes, primitive
                                 scratchpads (oneDNN does not report the size of
                                 JIT code, so primitives weigh more than this) */
    uint64_t transfers;       /* forward->backward transfers left by training
                                 forwards (each replaces the one before under
                                 its key; counted in `entries` while held)   */
} mkc_cache_stats;

/* Zeroes `stats` and sets its struct_size to sizeof(mkc_cache_stats): call
 * it (or zero the struct and set struct_size yourself) before passing the
 * struct to the two functions below, which write only the fields within
 * its struct_size. */
MKC_API mkc_status mkc_cache_stats_init(mkc_cache_stats *stats);

/* Counters for the whole cache. */
MKC_API mkc_status mkc_cache_get_stats(mkc_cache_stats *stats);
/* Counters for one session (zeros if it holds nothing and never did). */
MKC_API mkc_status mkc_cache_get_session_stats(int64_t session_id,
                                               mkc_cache_stats *stats);

/* The keys held by `session_id`, one per line, each line
 * "<group>\t<key>\n", groups oldest first. Within group and key, a
 * backslash, tab or newline is written as \\, \t or \n (two characters), so
 * lines and fields split unambiguously whatever the names hold. Buffer rules
 * as mkc_key_make. */
MKC_API mkc_status mkc_cache_get_keys(int64_t session_id, char *buf,
                                      size_t size, size_t *needed);

/* ------------------------------------------------------------------------ */
/* Operators                                                                */
/* ------------------------------------------------------------------------ */

/* Output convention of every operator: `*dst` NULL on entry -> a new tensor
 * is created (in oneDNN's preferred layout) and returned in `*dst`;
 * `*dst` non-NULL -> the result is written into that tensor, whose shape
 * must match. Inputs may be wrapped or library-owned tensors in any layout;
 * they are converted only when the primitive needs another layout. `*dst`
 * may share memory with any input: an element-wise operator given its own
 * input's bytes in the same layout runs in place; any other overlap is
 * computed into new memory that then replaces dst's contents (an owned dst
 * takes the result's layout; a wrapped one keeps its own). Each result's
 * size is checked (at most 2^56 bytes) before anything is built.
 *
 * `name` identifies the operator instance in the cache key (a model's
 * layer or output name); NULL or "" derives one from the operator and its
 * arguments. Whatever the name, an entry is reused only for the exact
 * attributes, dtypes, shapes and layouts it was built for. */

typedef enum mkc_activation_kind {
    /* f(x) with the oneDNN eltwise parameters alpha and beta:          */
    MKC_ACTIVATION_NONE = 0,
    MKC_ACTIVATION_RELU = 1,      /* x > 0 ? x : alpha * x (alpha 0: relu)  */
    MKC_ACTIVATION_ELU = 2,       /* x > 0 ? x : alpha * (exp(x) - 1)       */
    MKC_ACTIVATION_GELU_ERF = 3,  /* 0.5 x (1 + erf(x / sqrt 2))            */
    MKC_ACTIVATION_GELU_TANH = 4, /* tanh approximation of gelu             */
    MKC_ACTIVATION_TANH = 5,
    MKC_ACTIVATION_SIGMOID = 6,   /* 1 / (1 + exp(-x))                      */
    MKC_ACTIVATION_SWISH = 7,     /* x * sigmoid(alpha * x) (alpha 1: silu) */
    MKC_ACTIVATION_HARDSWISH = 8, /* x * clip(alpha * x + beta, 0, 1)       */
    MKC_ACTIVATION_MISH = 9,      /* x * tanh(log(1 + exp(x)))              */
    MKC_ACTIVATION_CLIP = 10,     /* min(max(x, alpha), beta) (relu6: 0, 6) */
    MKC_ACTIVATION_SQRT = 11,
    MKC_ACTIVATION_ABS = 12,
    MKC_ACTIVATION_EXP = 13,
    MKC_ACTIVATION_LOG = 14,
    MKC_ACTIVATION_SQUARE = 15,
    MKC_ACTIVATION_SOFTPLUS = 16, /* log(1 + exp(alpha * x)) / alpha (alpha 1:  */
                                  /* softplus; alpha > 0)                    */
    MKC_ACTIVATION_MAX_ENUM = 0x7fffffff
} mkc_activation_kind;

/* Convolution parameters, shared by conv2d, conv3d and conv2d_transpose.
 * Spatial fields: index 0..1 for 2-D (h, w), 0..2 for 3-D (d, h, w).
 *
 * Window bounds (convolutions, their gradients and pooling, eager calls and
 * program nodes alike): oneDNN's kernels index a window's geometry with
 * 32-bit offsets, so along each spatial dim of the side the window slides
 * over (src; dst for conv2d_transpose) the stride, dilation, each padding,
 * the dilated kernel extent and the padded size must be at most 2^24, and
 * the bytes one step spans - the largest of stride, dilation and dilated
 * kernel extent, times the padded extents of the dims inside it, times the
 * channels (the larger side's, rounded up to 16) times 4 - at most 2^30, as
 * must every padded plane below the outermost spatial dim. Past them:
 * MKC_STATUS_UNSUPPORTED naming the dim, before anything is built. Windows
 * lying wholly in padding (padding larger than the dilated kernel) are
 * computed: those outputs are the bias alone. */
typedef struct mkc_conv_params {
    size_t struct_size;        /* sizeof; set by mkc_conv_params_init         */
    int64_t stride[3];         /* >= 1                                        */
    int64_t pad_begin[3];      /* top, left (front, top, left); >= 0          */
    int64_t pad_end[3];        /* bottom, right; >= 0 (asymmetric allowed)    */
    int64_t dilation[3];       /* 1 = dense kernel (PyTorch convention)       */
    int64_t output_padding[3]; /* conv2d_transpose only: extra output cells   */
    int64_t groups;            /* >= 1; channels divisible by it              */
    mkc_layout data_format;    /* layout of src/dst dims: NCHW or NHWC        */
    mkc_activation_kind activation; /* fused post-op (NONE: none)             */
    float activation_alpha;    /* its parameters, as for mkc_activation       */
    float activation_beta;
    int sum;                   /* != 0: dst += conv(src) (residual add): *dst
                                  must exist and hold the residual; the sum
                                  happens before the activation             */
    int training;              /* != 0: forward_training; leaves its primitive
                                  descriptor for the *_backward call        */
    const char *name;          /* cache name; may be NULL                     */
} mkc_conv_params;

/* Fills `params` with defaults: stride 1, no padding, dilation 1, 1 group,
 * NCHW, no activation, no sum, no name. */
MKC_API mkc_status mkc_conv_params_init(mkc_conv_params *params);

/* 2-D convolution. src [N,C,H,W] (or [N,H,W,C] for NHWC data_format),
 * weights [O, C/groups, KH, KW] (always OIHW, any memory layout when
 * groups == 1, plain otherwise), bias [O] or NULL. Sets the thread's target
 * layout to data_format. */
MKC_API mkc_status mkc_conv2d(const mkc_conv_params *params,
                              const mkc_tensor *src, const mkc_tensor *weights,
                              const mkc_tensor *bias, mkc_tensor **dst);

/* 3-D convolution: src [N,C,D,H,W] (or NDHWC), weights [O, C/groups, KD,
 * KH, KW]. Otherwise as mkc_conv2d. */
MKC_API mkc_status mkc_conv3d(const mkc_conv_params *params,
                              const mkc_tensor *src, const mkc_tensor *weights,
                              const mkc_tensor *bias, mkc_tensor **dst);

/* Transposed 2-D convolution ("deconvolution"), as PyTorch's
 * conv_transpose2d / PaddlePaddle's conv2d_transpose: weights
 * [C_in, C_out/groups, KH, KW] (plain), output size
 * (in - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + 1
 * + output_padding. */
MKC_API mkc_status mkc_conv2d_transpose(const mkc_conv_params *params,
                                        const mkc_tensor *src,
                                        const mkc_tensor *weights,
                                        const mkc_tensor *bias, mkc_tensor **dst);

/* Element-wise activation; the output keeps src's shape and layout.
 * `*dst == src` runs in place. `alpha`/`beta` parametrise the kinds that
 * say so above (pass 0 otherwise). The cache key carries the kind as its
 * in-place suffix. Up to 1024 elements run on the
 * calling thread alone (waking the OpenMP team costs more than the work);
 * the same holds for mkc_binary. */
MKC_API mkc_status mkc_activation(mkc_activation_kind kind, float alpha,
                                  float beta, const char *name,
                                  const mkc_tensor *src, mkc_tensor **dst);

/* Softmax along `axis` of the caller's dims order (negative counts from the
 * end; an NHWC tensor's axis -1 is C). `log` != 0 computes log-softmax.
 * Runs on src's layout; `*dst == src` runs in place. The key's in-place
 * suffix is the axis. */
MKC_API mkc_status mkc_softmax(int axis, int log, const char *name,
                               const mkc_tensor *src, mkc_tensor **dst);

typedef enum mkc_binary_kind {
    MKC_BINARY_ADD = 1,
    MKC_BINARY_SUB = 2,
    MKC_BINARY_MUL = 3, /* key suffix "M" */
    MKC_BINARY_DIV = 4,
    MKC_BINARY_MAX = 5,
    MKC_BINARY_MIN = 6,
    MKC_BINARY_MAX_ENUM = 0x7fffffff
} mkc_binary_kind;

/* a <kind> b with numpy broadcasting over the caller's dims order (shapes
 * are aligned at the end; size-1 dims stretch). The result has the
 * broadcast shape in the layout of the operand that already has it (a if
 * both); `*dst == a` then runs in place. */
MKC_API mkc_status mkc_binary(mkc_binary_kind kind, const char *name,
                              const mkc_tensor *a, const mkc_tensor *b,
                              mkc_tensor **dst);

typedef enum mkc_pool_kind {
    MKC_POOL_MAX = 1,
    MKC_POOL_AVG_INCLUDE_PAD = 2, /* padding cells count in the average */
    MKC_POOL_AVG_EXCLUDE_PAD = 3, /* they do not                        */
    MKC_POOL_KIND_MAX_ENUM = 0x7fffffff
} mkc_pool_kind;

/* Spatial fields: index 0..1 for 2-D (h, w), 0..2 for 3-D (d, h, w); the
 * spatial rank comes from src (4-D or 5-D). The window bounds of
 * mkc_conv_params hold (kernel for the dilated kernel extent).
 *
 * ceil_mode: the last window must start inside the input or its begin
 * padding (as PyTorch); it may reach past the end padding. An average
 * counting padding then divides by the cells it covers up to the end of
 * the padding, not by the kernel's size (as PyTorch and ONNX:
 * (min(start + kernel, size + pad_end) - start) per dim); the gradient
 * divides alike. */
typedef struct mkc_pool_params {
    size_t struct_size;     /* sizeof; set by mkc_pool_params_init */
    mkc_pool_kind kind;
    int64_t kernel[3];      /* >= 1                                          */
    int64_t stride[3];      /* >= 1                                          */
    int64_t pad_begin[3];   /* >= 0, smaller than the kernel                 */
    int64_t pad_end[3];
    int ceil_mode;          /* != 0: output size rounds up (as PyTorch)      */
    int global;             /* != 0: kernel = the whole spatial extent       */
    mkc_layout data_format; /* NCHW/NCDHW or NHWC/NDHWC                      */
    int training;           /* != 0: forward_training; max pooling leaves its
                               indices for mkc_pool_backward                 */
    const char *name;       /* cache name; may be NULL                       */
    int64_t dilation[3];    /* >= 1: the spacing of the kernel's taps (1:
                               dense); the window spans (kernel - 1) *
                               dilation + 1 cells                            */
} mkc_pool_params;

/* Defaults: max pooling, kernel 1, stride 1, dilation 1, no padding, NCHW. */
MKC_API mkc_status mkc_pool_params_init(mkc_pool_params *params);

/* Pooling over the spatial dims. Runs on src's layout. Sets the thread's
 * target layout to data_format. */
MKC_API mkc_status mkc_pool(const mkc_pool_params *params, const mkc_tensor *src,
                            mkc_tensor **dst);

typedef struct mkc_linear_params {
    size_t struct_size;             /* sizeof; set by mkc_linear_params_init */
    mkc_activation_kind activation; /* fused post-op (NONE: none)            */
    float activation_alpha;
    float activation_beta;
    int training;                   /* != 0: forward_training (see below)    */
    const char *name;               /* cache name; may be NULL               */
    int sum;                        /* != 0: dst += linear(src) (residual add):
                                       *dst must exist, plain row-major, and
                                       hold the residual; added before the
                                       activation. Graph nodes: 0 (an add node
                                       adds a residual; fusion merges it) */
} mkc_linear_params;

/* Defaults: no activation, no name. */
MKC_API mkc_status mkc_linear_params_init(mkc_linear_params *params);

/* Fully connected layer: dst[..., out] = src[..., in] . weights^T + bias.
 * weights [out, in] (mark them constant: their conversion to oneDNN's
 * blocked layout then happens once), bias [out] or NULL. The leading dims
 * of src are flattened; the result is row-major. */
MKC_API mkc_status mkc_linear(const mkc_linear_params *params,
                              const mkc_tensor *src, const mkc_tensor *weights,
                              const mkc_tensor *bias, mkc_tensor **dst);

typedef struct mkc_matmul_params {
    size_t struct_size;             /* sizeof; set by mkc_matmul_params_init */
    int transpose_a;                /* != 0: use a[..., K, M] as a^T         */
    int transpose_b;                /* != 0: use b[..., N, K] as b^T         */
    mkc_activation_kind activation; /* fused post-op (NONE: none)            */
    float activation_alpha;
    float activation_beta;
    const char *name;               /* cache name; may be NULL               */
    float scale;                    /* multiplies a @ b (+ bias), before the */
                                    /* activation (attention's 1/sqrt(d))    */
} mkc_matmul_params;

/* Defaults: no transposes, scale 1, no activation, no name. */
MKC_API mkc_status mkc_matmul_params_init(mkc_matmul_params *params);

/* Batched matrix product a[..., M, K] @ b[..., K, N] (+ bias [N]) with
 * numpy-style broadcasting of the batch dims (a lower rank gets leading 1s).
 * The result is row-major [..., M, N]. */
MKC_API mkc_status mkc_matmul(const mkc_matmul_params *params, const mkc_tensor *a,
                              const mkc_tensor *b, const mkc_tensor *bias,
                              mkc_tensor **dst);

typedef struct mkc_layer_norm_params {
    size_t struct_size;  /* sizeof; set by mkc_layer_norm_params_init             */
    int begin_norm_axis; /* normalize over dims [axis, rank) (negative: from end) */
    float epsilon;
    int training;        /* != 0: leaves mean/variance for the backward       */
    const char *name;    /* cache name; may be NULL                          */
} mkc_layer_norm_params;

/* Defaults: the last axis, epsilon 1e-5. */
MKC_API mkc_status mkc_layer_norm_params_init(mkc_layer_norm_params *params);

/* (x - mean) / sqrt(var + eps) * scale + shift over the trailing dims;
 * scale and shift (each optional) hold one value per normalized element.
 * The result is row-major in src's layout. */
MKC_API mkc_status mkc_layer_norm(const mkc_layer_norm_params *params,
                                  const mkc_tensor *src, const mkc_tensor *scale,
                                  const mkc_tensor *shift, mkc_tensor **dst);

typedef struct mkc_batch_norm_params {
    size_t struct_size;     /* sizeof; set by mkc_batch_norm_params_init */
    float epsilon;
    float momentum;         /* training: running = m * running + (1 - m) * batch */
    int training;           /* != 0: normalize with the batch statistics         */
    mkc_layout data_format; /* NCHW/NHWC (channels = dim 1 in oneDNN order)      */
    const char *name;       /* cache name; may be NULL                           */
} mkc_batch_norm_params;

/* Defaults: epsilon 1e-5, momentum 0.9, inference, NCHW. */
MKC_API mkc_status mkc_batch_norm_params_init(mkc_batch_norm_params *params);

/* Batch normalization over the channel dim. All statistics tensors are
 * float32 vectors of C values; scale and shift may be NULL.
 * Inference: uses `mean` and `variance` (the running statistics).
 * Training: computes the batch statistics, writes them to batch_mean /
 * batch_variance when given (biased variance), and updates `mean` and
 * `variance` in place with the momentum when given. Runs on src's layout and
 * sets the thread's target layout to data_format. */
MKC_API mkc_status mkc_batch_norm(const mkc_batch_norm_params *params,
                                  const mkc_tensor *src, mkc_tensor *mean,
                                  mkc_tensor *variance, const mkc_tensor *scale,
                                  const mkc_tensor *shift, mkc_tensor *batch_mean,
                                  mkc_tensor *batch_variance, mkc_tensor **dst);

typedef struct mkc_lrn_params {
    size_t struct_size;      /* sizeof; set by mkc_lrn_params_init           */
    int64_t size;            /* channels in the window (odd sizes centre it;
                                even ones reach one further up than down) */
    float alpha, beta, k;    /* dst = src / (k + alpha / size * sum(src^2))^beta */
    mkc_layout data_format;
    int training;            /* != 0: leaves its workspace for the backward  */
    const char *name;        /* cache name; may be NULL                      */
} mkc_lrn_params;

/* Defaults: size 5, alpha 1e-4, beta 0.75, k 1 (AlexNet), NCHW. The sum
 * runs over the `size` channels c - floor((size-1)/2) .. c + ceil((size-1)/2)
 * (clipped at the edges), ONNX's LRN: for an odd size also Caffe's and
 * PyTorch's formula; for an even size PyTorch's LocalResponseNorm takes the
 * mirror image, c - size/2 .. c + size/2 - 1. Even sizes run on a kernel of
 * mkcache's own (oneDNN's LRN centres its window), on plain data in src's
 * layout: the result is plain, forward and backward. PaddlePaddle's alpha
 * multiplies the plain sum, so pass alpha_paddle * size. */
MKC_API mkc_status mkc_lrn_params_init(mkc_lrn_params *params);

/* Local response normalization across channels, on src's layout. */
MKC_API mkc_status mkc_lrn(const mkc_lrn_params *params, const mkc_tensor *src,
                           mkc_tensor **dst);

/* Concatenates n tensors along `axis` of the caller's dims order (negative
 * counts from the end). All inputs have the same rank, the same layout
 * label (NCHW/NHWC) and equal dims outside the axis; they may be in any
 * memory layout. The key's in-place suffix is the axis. */
MKC_API mkc_status mkc_concat(int axis, int n, const mkc_tensor *const *srcs,
                              const char *name, mkc_tensor **dst);

/* dst = src with its (caller-order) axes permuted: dst dim i is src dim
 * perm[i], as numpy.transpose. The result is row-major (NCHW label). */
MKC_API mkc_status mkc_transpose(int n, const int *perm, const mkc_tensor *src,
                                 mkc_tensor **dst);

/* src's values in the caller's row-major order viewed with new dims
 * [ndims] (one may be -1: inferred), as numpy.reshape; the element counts
 * must match. The result is a row-major copy (NCHW label). Its gradient is
 * the reshape of diff_dst back to src's shape. */
MKC_API mkc_status mkc_reshape(const mkc_tensor *src, int ndims, const int64_t *dims,
                               mkc_tensor **dst);

/* A new tensor with src's values in `format`: a plain layout ("NCHW",
 * "NHWC", "NCDHW", "NDHWC") or a oneDNN blocked one ("nChw8c", "nChw16c",
 * "nCdhw8c", "nCdhw16c"). `*dst` must be NULL. */
MKC_API mkc_status mkc_tensor_to_layout(const mkc_tensor *src, const char *format,
                                        mkc_tensor **dst);

/* ------------------------------------------------------------------------
 * Training: backward (grad) operators
 *
 * Each takes what its forward took plus diff_dst (the gradient of the loss
 * with respect to the forward's output) and computes the gradients asked
 * for: every `mkc_tensor **diff_*` may be NULL (not computed) and otherwise
 * follows the operators' convention (*diff_x NULL: a new tensor; else an
 * existing tensor of the right shape, written into). At least one gradient
 * must be requested; no output may be an input.
 *
 * Forward -> backward: a forward run with `training` set leaves its
 * primitive descriptor in the cache under a key without thread id: same
 * name, same shapes, same executor, session and input-shape group. The
 * backward call with the same parameters finds it, on any thread, so both
 * agree on layouts. If nothing (or something left by a forward with other
 * arguments) is there, the backward builds its own; it never uses a
 * mismatched entry. Data of one execution (max-pool indices, the LRN
 * workspace, layer-norm statistics) is recomputed by the backward from its
 * own src, so it is right whatever src holds now. Gradients come back in the
 * forward's layouts: diff_src like dst of the forward (data_format label),
 * weight and bias gradients always plain in the forward's weights shape.
 *
 * dtypes: training computes in float32, or in bfloat16 as mixed precision
 * (the training forwards of conv, pooling, linear, layer and batch norm take
 * bfloat16 data as their inference does). A gradient's diff_dst has its
 * forward's data dtype, else INVALID_ARGUMENT naming both. The data
 * gradients (diff_src; a binary's, a matmul's and concat's operand
 * gradients) come back in that dtype; the gradients of weights, biases and
 * normalisation parameters (diff_weights, diff_bias, diff_scale,
 * diff_shift) are always float32, accumulated in float32 by oneDNN, so
 * float32 master weights take them as they are. A given result tensor must
 * have the result's dtype. bfloat16 needs oneDNN's bfloat16 kernels
 * (AVX-512 or AVX2-VNNI-2): elsewhere UNSUPPORTED naming the ISA.
 * ------------------------------------------------------------------------ */

/* Gradients of mkc_conv2d with the same params (no fused activation or
 * sum: run those as their own ops). diff_bias, when requested, needs
 * diff_weights too. src, weights and diff_dst: float32, or bfloat16 all
 * three; diff_src in their dtype, diff_weights and diff_bias float32. */
MKC_API mkc_status mkc_conv2d_backward(const mkc_conv_params *params,
                                       const mkc_tensor *src, const mkc_tensor *weights,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_src,
                                       mkc_tensor **diff_weights, mkc_tensor **diff_bias);

/* Gradients of mkc_conv3d; as mkc_conv2d_backward. */
MKC_API mkc_status mkc_conv3d_backward(const mkc_conv_params *params,
                                       const mkc_tensor *src, const mkc_tensor *weights,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_src,
                                       mkc_tensor **diff_weights, mkc_tensor **diff_bias);

/* Gradients of mkc_conv2d_transpose; diff_weights is [C_in, C_out/groups,
 * KH, KW] like its weights. */
MKC_API mkc_status mkc_conv2d_transpose_backward(const mkc_conv_params *params,
                                                 const mkc_tensor *src,
                                                 const mkc_tensor *weights,
                                                 const mkc_tensor *diff_dst,
                                                 mkc_tensor **diff_src,
                                                 mkc_tensor **diff_weights,
                                                 mkc_tensor **diff_bias);

/* Gradient of mkc_pool with the same params. Max pooling uses the indices
 * its training forward left for this src (recomputed when there are none).
 * src and diff_dst: float32 or bfloat16, one dtype; diff_src in it. */
MKC_API mkc_status mkc_pool_backward(const mkc_pool_params *params, const mkc_tensor *src,
                                     const mkc_tensor *diff_dst, mkc_tensor **diff_src);

/* Gradient of mkc_activation, computed from the forward's src (in place:
 * `*diff_src == diff_dst` is allowed). src and diff_dst: float32 or
 * bfloat16, one dtype; diff_src in it. */
MKC_API mkc_status mkc_activation_backward(mkc_activation_kind kind, float alpha,
                                           float beta, const char *name,
                                           const mkc_tensor *src, const mkc_tensor *diff_dst,
                                           mkc_tensor **diff_src);

/* Gradient of mkc_softmax (log != 0: log-softmax), computed from the
 * forward's output `dst`. dst and diff_dst: float32 or bfloat16, one dtype;
 * diff_src in it. */
MKC_API mkc_status mkc_softmax_backward(int axis, int log, const char *name,
                                        const mkc_tensor *dst, const mkc_tensor *diff_dst,
                                        mkc_tensor **diff_src);

/* Gradients of mkc_linear (no fused activation): diff_src in src's shape,
 * diff_weights [out, in], diff_bias [out] (needs diff_weights). src,
 * weights and diff_dst: float32, or bfloat16 all three; diff_src in their
 * dtype, diff_weights and diff_bias float32. */
MKC_API mkc_status mkc_linear_backward(const mkc_linear_params *params,
                                       const mkc_tensor *src, const mkc_tensor *weights,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_src,
                                       mkc_tensor **diff_weights, mkc_tensor **diff_bias);

/* Gradients of mkc_layer_norm. scale and shift are the forward's (shift
 * only tells whether there was one); diff_scale/diff_shift have the shape
 * of the normalized trailing dims. The statistics come from the training
 * forward of this src, or are recomputed. src and diff_dst: float32 or
 * bfloat16, one dtype; diff_src in it; scale, shift, diff_scale and
 * diff_shift float32. */
MKC_API mkc_status mkc_layer_norm_backward(const mkc_layer_norm_params *params,
                                           const mkc_tensor *src, const mkc_tensor *scale,
                                           const mkc_tensor *shift,
                                           const mkc_tensor *diff_dst, mkc_tensor **diff_src,
                                           mkc_tensor **diff_scale, mkc_tensor **diff_shift);

/* Gradients of a training mkc_batch_norm: mean and variance are the batch
 * statistics that forward returned (batch_mean, batch_variance); scale and
 * shift as in the forward (diff_scale needs scale, diff_shift needs shift).
 * src and diff_dst: float32 or bfloat16, one dtype; diff_src in it; the
 * statistics, scale, shift, diff_scale and diff_shift float32. */
MKC_API mkc_status mkc_batch_norm_backward(const mkc_batch_norm_params *params,
                                           const mkc_tensor *src, const mkc_tensor *mean,
                                           const mkc_tensor *variance,
                                           const mkc_tensor *scale, const mkc_tensor *shift,
                                           const mkc_tensor *diff_dst, mkc_tensor **diff_src,
                                           mkc_tensor **diff_scale, mkc_tensor **diff_shift);

/* Gradient of mkc_lrn, with the workspace its training forward left for
 * this src (recomputed when there is none). float32 only, as mkc_lrn. */
MKC_API mkc_status mkc_lrn_backward(const mkc_lrn_params *params, const mkc_tensor *src,
                                    const mkc_tensor *diff_dst, mkc_tensor **diff_src);

/* Gradients of mkc_binary: diff_a / diff_b have the shapes (and layout
 * labels) of a and b, summed over the dims each was broadcast along. For
 * maximum/minimum a tie splits the gradient in halves (as PyTorch). a, b
 * and diff_dst: float32 or bfloat16, one dtype; diff_a and diff_b in it
 * (bfloat16: a product or quotient is rounded before the sum). */
MKC_API mkc_status mkc_binary_backward(mkc_binary_kind kind, const char *name,
                                       const mkc_tensor *a, const mkc_tensor *b,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_a,
                                       mkc_tensor **diff_b);

/* Gradients of mkc_matmul with the same params (no fused activation):
 * diff_a and diff_b in the shapes of a and b (summed over broadcast batch
 * dims), diff_bias [N] (needs the forward's bias). Row-major results. a, b
 * and diff_dst: float32 or bfloat16, one dtype; diff_a and diff_b in it
 * (bfloat16: each product rounded, then its batch sum); diff_bias float32
 * whatever the bias's dtype. A layer whose weights want float32 gradients
 * is mkc_linear. */
MKC_API mkc_status mkc_matmul_backward(const mkc_matmul_params *params,
                                       const mkc_tensor *a, const mkc_tensor *b,
                                       const mkc_tensor *bias, const mkc_tensor *diff_dst,
                                       mkc_tensor **diff_a, mkc_tensor **diff_b,
                                       mkc_tensor **diff_bias);

/* Gradients of mkc_concat: diff_srcs is an array of n slots, each NULL (a
 * new tensor, plain, in srcs[i]'s shape and layout label) or an existing
 * tensor of srcs[i]'s shape. srcs and diff_dst: float32 or bfloat16, one
 * dtype; the diff_srcs in it. */
MKC_API mkc_status mkc_concat_backward(int axis, int n, const mkc_tensor *const *srcs,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_srcs);

/* ------------------------------------------------------------------------
 * Programs: a model's graph, compiled once, run many times
 *
 * An mkc_graph is built node by node: inputs (dims with -1 for a dim bound
 * at run time), constants (weights: copied into the graph), nodes (an
 * operator, its params struct and input values, giving an output value) and
 * named outputs. Values are small integers the builder hands out; a node
 * can only read values that exist, so a graph has no cycles.
 *
 * mkc_program_compile checks the graph and makes an mkc_program from it (the
 * graph may then be destroyed or built further). A program compiles a plan
 * on the first run of each distinct set of input shapes: every node's
 * operator is checked and its primitive built, a conversion is placed
 * wherever a node reads a value in another arrangement than its producer
 * wrote (constants are converted then, once), and every intermediate value
 * gets an offset in one arena, shared by values whose lives do not
 * overlap. Runs then execute the plan's steps on the run's arena.
 *
 * Every cache entry a program makes carries the program's own executor id
 * (mkc_program_executor; distinct from every other program's, with the top
 * bit set) and the plan's input shapes as its input-shape group, in session
 * 0: two programs never share an entry, and destroying a program removes
 * all of its entries. Errors name the node ("node 3 (conv2d 'stem'): ...")
 * or the input.
 *
 * Thread safety: a graph is used from one thread at a time. A program may
 * be run and queried from any number of threads at once (plans are
 * compiled one at a time, and a run of a known plan never waits for one;
 * each run takes an arena of its own from the program's pool). Destroying
 * it while other threads use it waits for the calls already inside it;
 * calls made after the destroy began are refused with
 * MKC_STATUS_INVALID_HANDLE.
 * ------------------------------------------------------------------------ */

typedef struct mkc_graph mkc_graph;
typedef struct mkc_program mkc_program;

/* What a node computes, and the params struct it takes. Inputs in order;
 * [bracketed] ones are optional (pass -1 to leave one out before a given
 * one). Every node has one output. The params' name (where there is one)
 * is the node's cache name; training fields are ignored (programs infer);
 * a conv's sum must be 0 (an add node adds a residual; fusion merges it). */
typedef enum mkc_op {
    MKC_OP_CONV2D = 1,           /* mkc_conv_params: src, weights [, bias]   */
    MKC_OP_CONV3D = 2,           /* mkc_conv_params: src, weights [, bias]   */
    MKC_OP_CONV2D_TRANSPOSE = 3, /* mkc_conv_params: src, weights [, bias]   */
    MKC_OP_ACTIVATION = 4,       /* mkc_activation_params: src               */
    MKC_OP_SOFTMAX = 5,          /* mkc_softmax_params: src                  */
    MKC_OP_BINARY = 6,           /* mkc_binary_params: a, b                  */
    MKC_OP_POOL = 7,             /* mkc_pool_params: src                     */
    MKC_OP_LINEAR = 8,           /* mkc_linear_params: src, weights [, bias] */
    MKC_OP_MATMUL = 9,           /* mkc_matmul_params: a, b [, bias [, addend]]:
                                    the addend (an attention mask) broadcast
                                    into the result, added after the scale,
                                    before the activation; one that would
                                    widen the result is INVALID_ARGUMENT     */
    MKC_OP_LAYER_NORM = 10,      /* mkc_layer_norm_params: src [, scale [, shift]] */
    MKC_OP_BATCH_NORM = 11,      /* mkc_batch_norm_params: src, mean, variance
                                    [, scale [, shift]] (inference)           */
    MKC_OP_LRN = 12,             /* mkc_lrn_params: src                      */
    MKC_OP_CONCAT = 13,          /* mkc_concat_params: src0, src1, ...       */
    MKC_OP_TRANSPOSE = 14,       /* mkc_transpose_params: src                */
    MKC_OP_RESHAPE = 15,         /* mkc_reshape_params: src                  */
    MKC_OP_ERF = 16,             /* no params (NULL): src                    */
    MKC_OP_REDUCE = 17,          /* mkc_reduce_params: src                   */
    MKC_OP_GATHER = 18,          /* mkc_gather_params: data, indices         */
    MKC_OP_CAST = 19,            /* mkc_cast_params: src                     */
    MKC_OP_WHERE = 20,           /* no params (NULL): condition, x, y        */
    MKC_OP_SLICE = 21,           /* mkc_slice_params: src                    */
    MKC_OP_EXPAND = 22,          /* mkc_expand_params: src                   */
    MKC_OP_COMPARE = 23,         /* mkc_compare_params: a, b                 */
    MKC_OP_PAD = 24,             /* mkc_pad_params: src                      */
    MKC_OP_RESIZE = 25,          /* mkc_resize_params: src                   */
    MKC_OP_LOGICAL = 26,         /* mkc_logical_params: a [, b]              */
    MKC_OP_RANGE = 27,           /* mkc_range_params: like                   */
    MKC_OP_GATHER_ELEMENTS = 28, /* mkc_gather_params: data, indices         */
    MKC_OP_GATHER_ND = 29,       /* mkc_gather_nd_params: data, indices      */
    MKC_OP_INTEGER_BINARY = 30,  /* mkc_binary_params: a, b                  */
    MKC_OP_QUANTIZE = 31,        /* mkc_quantize_params: src, scale [, zero_point] */
    MKC_OP_DEQUANTIZE = 32,      /* mkc_quantize_params: src, scale [, zero_point] */
    MKC_OP_QUANTIZED_CONV2D = 33, /* mkc_quantized_conv_params: the 8 quantized ports */
    MKC_OP_QUANTIZED_LINEAR = 34, /* mkc_quantized_linear_params: the 8 quantized ports */
    MKC_OP_ROUND = 35,           /* no params (NULL): src                    */
    MKC_OP_QUANTIZED_MATMUL = 36, /* mkc_quantized_matmul_params: a, b, their scales ... */
    MKC_OP_MAX_ENUM = 0x7fffffff
} mkc_op;

/* The params of the operators whose eager calls take plain arguments; the
 * fields mean what those arguments mean (mkc_activation, mkc_softmax, ...). */
typedef struct mkc_activation_params {
    size_t struct_size;       /* sizeof; set by mkc_activation_params_init */
    mkc_activation_kind kind; /* default RELU */
    float alpha, beta;
    const char *name;         /* cache name; may be NULL */
} mkc_activation_params;
typedef struct mkc_softmax_params {
    size_t struct_size; /* sizeof; set by mkc_softmax_params_init */
    int axis;           /* default -1 */
    int log;            /* != 0: log-softmax */
    const char *name;
} mkc_softmax_params;
typedef struct mkc_binary_params {
    size_t struct_size;   /* sizeof; set by mkc_binary_params_init */
    mkc_binary_kind kind; /* default ADD */
    const char *name;
} mkc_binary_params;
typedef struct mkc_concat_params {
    size_t struct_size; /* sizeof; set by mkc_concat_params_init */
    int axis;           /* default 1 */
    const char *name;
} mkc_concat_params;
typedef struct mkc_transpose_params {
    size_t struct_size;       /* sizeof; set by mkc_transpose_params_init */
    int ndims;                /* default 0: must be set */
    int perm[MKC_MAX_NDIMS];
} mkc_transpose_params;
typedef struct mkc_reshape_params {
    size_t struct_size;          /* sizeof; set by mkc_reshape_params_init */
    int ndims;                   /* default 0: must be set */
    int64_t dims[MKC_MAX_NDIMS]; /* one may be -1; 0: the input's dim at
                                    that place (as ONNX's Reshape) */
} mkc_reshape_params;

MKC_API mkc_status mkc_activation_params_init(mkc_activation_params *params);
MKC_API mkc_status mkc_softmax_params_init(mkc_softmax_params *params);
MKC_API mkc_status mkc_binary_params_init(mkc_binary_params *params);
MKC_API mkc_status mkc_concat_params_init(mkc_concat_params *params);
MKC_API mkc_status mkc_transpose_params_init(mkc_transpose_params *params);
MKC_API mkc_status mkc_reshape_params_init(mkc_reshape_params *params);

/* A reduction over some axes: the sum, mean, maximum or minimum of the
 * values along them. */
typedef enum mkc_reduce_kind {
    MKC_REDUCE_SUM = 1,
    MKC_REDUCE_MEAN = 2,
    MKC_REDUCE_MAX = 3,
    MKC_REDUCE_MIN = 4,
    MKC_REDUCE_MAX_ENUM = 0x7fffffff
} mkc_reduce_kind;
typedef struct mkc_reduce_params {
    size_t struct_size;    /* sizeof; set by mkc_reduce_params_init */
    mkc_reduce_kind kind;  /* default SUM */
    int naxes;             /* how many of `axes` count; 0 (default): every axis */
    int axes[MKC_MAX_NDIMS]; /* in the caller's dims order; negative counts
                                from the end; each at most once */
    int keepdims;          /* != 0: reduced axes stay as 1s, the result keeps
                              src's layout; 0 (default): they are dropped and
                              the result is channels-first (a result of no
                              dims is given as [1]) */
    const char *name;      /* cache name; may be NULL */
} mkc_reduce_params;
MKC_API mkc_status mkc_reduce_params_init(mkc_reduce_params *params);

/* Slices of `data` (any dtype) picked along `axis` by int32 or int64 `indices`
 * (negative ones count from the end; one out of range fails the call or
 * the run with INVALID_ARGUMENT): the result's dims are data's before the
 * axis, then the indices', then data's after it (ONNX's Gather; an
 * embedding lookup is axis 0). Channels-first; a result of no dims is [1]. */
typedef struct mkc_gather_params {
    size_t struct_size; /* sizeof; set by mkc_gather_params_init */
    int axis;           /* default 0 */
    const char *name;   /* cache name; may be NULL */
} mkc_gather_params;
MKC_API mkc_status mkc_gather_params_init(mkc_gather_params *params);

/* src (any mkc_dtype) converted element by element to `to`: floats to
 * integers truncated toward zero (saturated at the integer's range, NaN to
 * 0), to BOOL "not zero", BOOL to 0 or 1, to BF16 and F16 rounded to the
 * nearest (ties to even; F16 overflows to infinity, NaN stays NaN), BF16
 * and F16 to F32 exactly. Same dims and layout. */
typedef struct mkc_cast_params {
    size_t struct_size; /* sizeof; set by mkc_cast_params_init */
    mkc_dtype to;       /* default F32 */
    const char *name;   /* cache name; may be NULL */
} mkc_cast_params;
MKC_API mkc_status mkc_cast_params_init(mkc_cast_params *params);

/* src's elements start, start + step, ... (before end) along each of
 * `axes`, as numpy's a[start:end:step] and ONNX's Slice: negative starts and
 * ends count from the end, both are clamped to the dim (end to -1 for a
 * negative step), a step is not 0. Any dtype; the result keeps src's dtype
 * and is channels-first (a slice that is empty is an error). */
typedef struct mkc_slice_params {
    size_t struct_size;            /* sizeof; set by mkc_slice_params_init */
    int naxes;                     /* default 0: must be set */
    int axes[MKC_MAX_NDIMS];       /* caller order, negative from the end, each once */
    int64_t starts[MKC_MAX_NDIMS];
    int64_t ends[MKC_MAX_NDIMS];
    int64_t steps[MKC_MAX_NDIMS];  /* default 1 */
    const char *name;              /* cache name; may be NULL */
} mkc_slice_params;
MKC_API mkc_status mkc_slice_params_init(mkc_slice_params *params);

/* src broadcast to `dims` as numpy broadcasts (ONNX's Expand: the result
 * has the broadcast of src's dims and these). Any dtype; channels-first. */
typedef struct mkc_expand_params {
    size_t struct_size;           /* sizeof; set by mkc_expand_params_init */
    int ndims;                    /* default 0: must be set */
    int64_t dims[MKC_MAX_NDIMS];  /* 1 keeps src's dim there */
    const char *name;             /* cache name; may be NULL */
} mkc_expand_params;
MKC_API mkc_status mkc_expand_params_init(mkc_expand_params *params);

/* a (kind) b element by element with numpy broadcasting, a BOOL result
 * (channels-first): a and b of one dtype, F32, S32 or S64 (integers
 * compared exactly). NaN compares unequal to everything. */
typedef enum mkc_compare_kind {
    MKC_COMPARE_EQUAL = 1,
    MKC_COMPARE_LESS = 2,
    MKC_COMPARE_LESS_EQUAL = 3,
    MKC_COMPARE_GREATER = 4,
    MKC_COMPARE_GREATER_EQUAL = 5,
    MKC_COMPARE_MAX_ENUM = 0x7fffffff
} mkc_compare_kind;
typedef struct mkc_compare_params {
    size_t struct_size;    /* sizeof; set by mkc_compare_params_init */
    mkc_compare_kind kind; /* default EQUAL */
    const char *name;      /* cache name; may be NULL */
} mkc_compare_params;
MKC_API mkc_status mkc_compare_params_init(mkc_compare_params *params);

/* src with each of `axes` grown by begin[k] elements before and end[k]
 * after (ONNX's Pad): a negative count removes that many instead. The
 * removals are made first, and the new elements are taken from what is
 * left: CONSTANT writes `value` (converted to src's dtype), REFLECT
 * mirrors the elements next to the border without repeating it (at most
 * n - 1 on a side, n the extent left), EDGE repeats the border element,
 * WRAP continues from the other side. Removing all of an axis is an
 * error. Any dtype; the result keeps src's dtype and is channels-first. */
typedef enum mkc_pad_mode {
    MKC_PAD_CONSTANT = 1,
    MKC_PAD_REFLECT = 2,
    MKC_PAD_EDGE = 3,
    MKC_PAD_WRAP = 4,
    MKC_PAD_MAX_ENUM = 0x7fffffff
} mkc_pad_mode;
typedef struct mkc_pad_params {
    size_t struct_size;           /* sizeof; set by mkc_pad_params_init */
    mkc_pad_mode mode;            /* default CONSTANT */
    double value;                 /* CONSTANT's fill; default 0 */
    int naxes;                    /* default 0: must be set (1..src's rank) */
    int axes[MKC_MAX_NDIMS];      /* caller order, negative from the end, each
                                     once; default 0, 1, 2, ... */
    int64_t begin[MKC_MAX_NDIMS]; /* per axis of `axes`: added before */
    int64_t end[MKC_MAX_NDIMS];   /* and after (negative: removed) */
    const char *name;             /* cache name; may be NULL */
} mkc_pad_params;
MKC_API mkc_status mkc_pad_params_init(mkc_pad_params *params);

/* float32 src resized to new dims by interpolation (ONNX's Resize, without
 * its region of interest). The result's dims
 * are `sizes`, or floor(src's dim * scale) by `scales`: exactly one of the
 * two is given, one entry per dim of src (caller order). Each result
 * element's coordinate along an axis maps back to src's by `coordinates`
 * (x the result's index, n and m src's and the result's extents, s the
 * scale: the given one, else m / n):
 *   HALF_PIXEL          (x + 0.5) / s - 0.5
 *   PYTORCH_HALF_PIXEL  as HALF_PIXEL, but 0 where n * s is 1 (as ONNX
 *                       defines it and onnxruntime computes it; ONNX's
 *                       reference implementation takes -0.5 there, which
 *                       reads the same element but for CUBIC and antialias)
 *   ALIGN_CORNERS       x * (n - 1) / (n * s - 1), 0 where n * s is 1
 *   ASYMMETRIC          x / s
 *   HALF_PIXEL_SYMMETRIC  as HALF_PIXEL, plus n / 2 * (1 - m / (n * s)): the
 *                       result centred on src where m is not n * s
 * NEAREST takes the element there rounded by `nearest`; LINEAR weighs the
 * two elements around it per axis (bi-, trilinear); CUBIC the four around
 * it, by Keys' cubic convolution with parameter `cubic_coeff_a` (ONNX's
 * weights: for a coordinate c, r = c - (ceil(c) - 1) in (0, 1], the
 * elements ceil(c) - 2 .. ceil(c) + 1 weigh W(r + 1), W(r), W(1 - r),
 * W(2 - r), with W(t) = (a + 2)|t|^3 - (a + 3)|t|^2 + 1 for |t| <= 1 and
 * a|t|^3 - 5a|t|^2 + 8a|t| - 4a for 1 < |t| < 2). Elements past src's
 * border read the border element, unless `exclude_outside` is set: then
 * they weigh 0 and the other weights are divided by their sum. With
 * `antialias` set, LINEAR and CUBIC stretch their weights by 1 / s along
 * each axis that shrinks (s < 1: a triangle or cubic filter over
 * 2 / s or 4 / s elements, divided by its sum, as ONNX's Resize of opset 18
 * defines it). Any axis may be resized (a scale of 1 keeps one). The
 * result keeps src's layout. */
typedef enum mkc_resize_mode {
    MKC_RESIZE_NEAREST = 1,
    MKC_RESIZE_LINEAR = 2,
    MKC_RESIZE_CUBIC = 3,
    MKC_RESIZE_MAX_ENUM = 0x7fffffff
} mkc_resize_mode;
typedef enum mkc_resize_coordinates {
    MKC_COORDINATES_HALF_PIXEL = 1,
    MKC_COORDINATES_PYTORCH_HALF_PIXEL = 2,
    MKC_COORDINATES_ALIGN_CORNERS = 3,
    MKC_COORDINATES_ASYMMETRIC = 4,
    MKC_COORDINATES_HALF_PIXEL_SYMMETRIC = 5,
    MKC_COORDINATES_MAX_ENUM = 0x7fffffff
} mkc_resize_coordinates;
typedef enum mkc_resize_nearest {
    MKC_NEAREST_ROUND_PREFER_FLOOR = 1, /* halves down */
    MKC_NEAREST_ROUND_PREFER_CEIL = 2,  /* halves up */
    MKC_NEAREST_FLOOR = 3,
    MKC_NEAREST_CEIL = 4,
    MKC_NEAREST_MAX_ENUM = 0x7fffffff
} mkc_resize_nearest;
typedef struct mkc_resize_params {
    size_t struct_size;                 /* sizeof; set by mkc_resize_params_init */
    mkc_resize_mode mode;               /* default NEAREST */
    mkc_resize_coordinates coordinates; /* default HALF_PIXEL */
    mkc_resize_nearest nearest;         /* default ROUND_PREFER_FLOOR */
    int nsizes;                         /* 0 (default) or src's rank */
    int64_t sizes[MKC_MAX_NDIMS];       /* each >= 1 */
    int nscales;                        /* 0 (default) or src's rank */
    float scales[MKC_MAX_NDIMS];        /* each > 0, giving a dim >= 1 */
    const char *name;                   /* cache name; may be NULL */
    /* Appended after name (an older struct ends there and gets these
     * defaults): */
    double cubic_coeff_a;               /* CUBIC's a, finite; default -0.75 */
    int exclude_outside;                /* 0 (default) or 1; LINEAR and CUBIC only */
    int antialias;                      /* 0 (default) or 1; LINEAR and CUBIC only */
} mkc_resize_params;
MKC_API mkc_status mkc_resize_params_init(mkc_resize_params *params);

/* a (kind) b on BOOL values with numpy broadcasting, or NOT a (one input):
 * a BOOL result, channels-first. */
typedef enum mkc_logical_kind {
    MKC_LOGICAL_AND = 1,
    MKC_LOGICAL_OR = 2,
    MKC_LOGICAL_XOR = 3,
    MKC_LOGICAL_NOT = 4,
    MKC_LOGICAL_MAX_ENUM = 0x7fffffff
} mkc_logical_kind;
typedef struct mkc_logical_params {
    size_t struct_size;    /* sizeof; set by mkc_logical_params_init */
    mkc_logical_kind kind; /* default AND */
    const char *name;      /* cache name; may be NULL */
} mkc_logical_params;
MKC_API mkc_status mkc_logical_params_init(mkc_logical_params *params);

/* MKC_OP_RANGE: the sequence start, start + delta, start + 2 delta, ...
 * below (delta > 0) or above (delta < 0) a limit of `like`'s dim at `axis`
 * (in its caller order) plus `limit_offset`: ONNX's Range whose limit is a
 * dim bound at run time. Its length is max(ceil((limit - start) / delta), 0);
 * a length of 0 is an error (no value of a program is empty). The values are
 * computed in double and converted to `dtype` (F32, S32 or S64); a 1-D
 * channels-first result. `like` (any dtype) gives its dims only. */
typedef struct mkc_range_params {
    size_t struct_size; /* sizeof; set by mkc_range_params_init */
    int axis;           /* default 0; negative counts from the end */
    double start;       /* default 0 */
    double limit_offset; /* default 0: the limit is the dim itself */
    double delta;       /* default 1; not 0 */
    mkc_dtype dtype;    /* default S64 */
    const char *name;   /* cache name; may be NULL */
} mkc_range_params;
MKC_API mkc_status mkc_range_params_init(mkc_range_params *params);

/* MKC_OP_GATHER_ELEMENTS (mkc_gather_params): ONNX's GatherElements. data
 * (any dtype) and int32 or int64 indices of the same rank, each of indices'
 * dims at most data's except at `axis`; out[i][j][k] = data[idx][j][k] for
 * axis 0, idx = indices[i][j][k] (negative counts from the end; one out of
 * range fails the call or the run with INVALID_ARGUMENT). The result has
 * indices' dims and data's dtype, channels-first.
 *
 * MKC_OP_GATHER_ND: ONNX's GatherND. data (any dtype) of rank r, int32 or
 * int64 indices of rank q; the first batch_dims dims of both agree; the last
 * dim of indices, k (1 .. r - batch_dims), counts the coordinates each index
 * gives (negative ones count from the end; one out of range is an error as
 * above). The result's dims are indices' first q - 1, then data's last
 * r - batch_dims - k; data's dtype, channels-first (a result of no dims is
 * [1]). */
typedef struct mkc_gather_nd_params {
    size_t struct_size; /* sizeof; set by mkc_gather_nd_params_init */
    int batch_dims;     /* default 0 */
    const char *name;   /* cache name; may be NULL */
} mkc_gather_nd_params;
MKC_API mkc_status mkc_gather_nd_params_init(mkc_gather_nd_params *params);

/* MKC_OP_INTEGER_BINARY (mkc_binary_params): a (kind) b on S32 or S64
 * values of one dtype, with numpy broadcasting, in that dtype's arithmetic
 * (wrapping as unsigned arithmetic does on overflow); DIV truncates toward
 * zero and a zero divisor fails the call or the run with INVALID_ARGUMENT.
 * The result channels-first. */
/* 8-bit quantization as ONNX's QuantizeLinear and DequantizeLinear:
 *   quantize    q = saturate(round(x / scale) + zero_point)
 *   dequantize  x = (q - zero_point) * scale
 * computed in float32 (the division and the product rounded once), the
 * rounding to the nearest, ties to even; NaN quantizes to the zero point.
 * `scale` (F32) and `zero_point` (quantize: U8 or S8; dequantize: src's
 * dtype) hold one element for the whole tensor, or one per index of
 * `axis` (negative: from the end; of src's dims as the caller orders
 * them); every scale must be finite and > 0. quantize's src is F32 and its
 * result `to` (U8 or S8), which must be the zero point's dtype when one is
 * given; dequantize's src is U8, S8 or S32 and its result F32. Any rank and
 * layout; the result has src's dims and layout (an NHWC value stays NHWC). */
typedef struct mkc_quantize_params {
    size_t struct_size; /* sizeof; set by mkc_quantize_params_init */
    int axis;           /* default 1 (used where scale has more than one element) */
    mkc_dtype to;       /* quantize only: default U8 */
    const char *name;   /* cache name; may be NULL */
    int fast;           /* quantize only, default 0. != 0: x is multiplied by
                           1 / scale, so where x / scale lies within float32
                           rounding of a half the result may be the other
                           neighbour, and NaN gives an unspecified value; in
                           return a per-tensor scale runs on oneDNN's parallel
                           reorder (reading src in any arrangement) */
} mkc_quantize_params;
MKC_API mkc_status mkc_quantize_params_init(mkc_quantize_params *params);

/* Convolution and fully connected layers on 8-bit data, for callers that
 * calibrate themselves. Inputs, by port (through mkc_op_run or a graph
 * node; NULL / absent for an optional one):
 *   0 src             U8 or S8
 *   1 weights         S8, symmetric (no zero point): conv2d's [O, C/groups,
 *                     KH, KW], linear's [N, K]
 *   2 src_scale       F32 [1]
 *   3 weight_scale    F32 [1] or [O]: per tensor or per output channel
 *   4 bias            F32 [O] (optional), in real units
 *   5 src_zero_point  S32 [1] (optional; absent: 0)
 *   6 dst_scale       F32 [1] (U8 and S8 results only)
 *   7 dst_zero_point  S32 [1] (optional, U8 and S8 results only; absent: 0)
 *   8 residual        with a sum (quantized_conv2d: conv.sum != 0,
 *                     quantized_linear: sum != 0) only: the value
 *                     added before the activation, of the result's dtype and
 *                     shape (real value sum_scale * (residual -
 *                     sum_zero_point))
 * Computed as
 *   y = activation(sum(src_scale * (src - src_zero_point) *
 *                      weight_scale[o] * weights) + bias[o]
 *                  [+ sum_scale * (residual - sum_zero_point)])
 * with exact integer products and sums, and returned as F32 (`dst_dtype`
 * F32), or requantized: saturate(round(y / dst_scale) + dst_zero_point),
 * ties to even, as U8 or S8. Scales must be finite and > 0. Runs on
 * oneDNN's int8 kernels where they compute exactly this (grouped and
 * depthwise conv2d included), on a CPU without VNNI with U8 src only (oneDNN rounds
 * the weights of its S8-src convolutions to even values there); the
 * reference kernel otherwise. Without VNNI, oneDNN's kernels also add pairs
 * of products in 16 bits: a run on them refuses weights outside -63..63
 * (MKC_STATUS_UNSUPPORTED) rather than saturate. */
typedef struct mkc_quantized_conv_params {
    size_t struct_size;    /* sizeof; set by mkc_quantized_conv_params_init */
    mkc_conv_params conv;  /* the convolution (its name unused; training must be
                              0; sum != 0 adds the residual, port 8) */
    mkc_dtype dst_dtype;   /* F32 (default), U8 or S8 */
    const char *name;      /* cache name; may be NULL */
    float sum_scale;       /* the residual's scale (default 1; > 0, finite) */
    int32_t sum_zero_point; /* the residual's zero point (default 0; 0 for F32) */
} mkc_quantized_conv_params;
MKC_API mkc_status mkc_quantized_conv_params_init(mkc_quantized_conv_params *params);

/* src [..., K] -> [..., N] (leading dims kept); otherwise as above. */
typedef struct mkc_quantized_linear_params {
    size_t struct_size;             /* sizeof; set by mkc_quantized_linear_params_init */
    mkc_activation_kind activation; /* fused post-op (NONE: none) */
    float activation_alpha;
    float activation_beta;
    mkc_dtype dst_dtype;            /* F32 (default), U8 or S8 */
    const char *name;               /* cache name; may be NULL */
    int sum;                        /* != 0: adds the residual (port 8) */
    float sum_scale;                /* the residual's scale (default 1) */
    int32_t sum_zero_point;         /* its zero point (default 0; 0 for F32) */
} mkc_quantized_linear_params;
MKC_API mkc_status mkc_quantized_linear_params_init(mkc_quantized_linear_params *params);

/* A batched matmul of two 8-bit values, for activations quantized at run
 * time (an attention's scores and context). Inputs, by port:
 *   0 a               U8 or S8 [..., M, K]
 *   1 b               S8 [..., K, N], symmetric (no zero point)
 *   2 a_scale         F32 [1]
 *   3 b_scale         F32 [1] or [N] (per column of b)
 *   4 bias            F32 [N] (optional), in real units
 *   5 a_zero_point    S32 [1] (optional; absent: 0)
 *   6 dst_scale       F32 [1] (U8 and S8 results only)
 *   7 dst_zero_point  S32 [1] (optional, U8 and S8 results only)
 *   8 addend          F32 (optional): added in real units, numpy-broadcast
 *                     into the result (an attention mask)
 * Computed as
 *   y = activation(a_scale * b_scale[n] * sum_k((a - a_zero_point) * b)
 *                  + bias[n] + addend)
 * with exact integer products and sums, and returned as F32 or requantized
 * as mkc_quantized_linear_params says. The batch dims broadcast as numpy's;
 * transpose_a / transpose_b read an operand with its last two dims
 * swapped. Runs on oneDNN's int8 matmul (reading strided operands where
 * they are in a program); without VNNI only for u8 a, and a run there
 * refuses b outside -63..63 (MKC_STATUS_UNSUPPORTED), as quantized_linear
 * does; the reference kernel otherwise. */
typedef struct mkc_quantized_matmul_params {
    size_t struct_size;             /* sizeof; set by mkc_quantized_matmul_params_init */
    int transpose_a;                /* != 0: a's last two dims swapped */
    int transpose_b;                /* != 0: b's last two dims swapped */
    mkc_activation_kind activation; /* fused post-op (NONE: none) */
    float activation_alpha;
    float activation_beta;
    mkc_dtype dst_dtype;            /* F32 (default), U8 or S8 */
    const char *name;               /* cache name; may be NULL */
} mkc_quantized_matmul_params;
MKC_API mkc_status mkc_quantized_matmul_params_init(mkc_quantized_matmul_params *params);

/* MKC_OP_ROUND: float32 src rounded element by element to the nearest
 * integer, ties to even (ONNX's Round, numpy's rint): 2.5 -> 2, -0.5 ->
 * -0; infinities, NaN and values already integers (every one of magnitude
 * 2^23 and more) unchanged. The result has src's dims and layout. */

/* MKC_OP_WHERE: condition (BOOL) ? x : y (float32), element by element,
 * the three broadcast as numpy does (in their caller orders); the result
 * channels-first. */

/* Runs operator `op` once on tensors, as a one-node program would: the
 * implementation is the best one that supports the call (onednn, then
 * reference; a node's plan shows the same choice). `params` is the
 * operator's struct (see mkc_op; NULL where it takes none), `inputs` its
 * `ninputs` tensors in port order (NULL for an absent optional one).
 * `*dst`: NULL -> a new tensor holding the result (destroy it); else a
 * tensor of the result's shape and dtype, which receives the result in its
 * own layout (it may share memory with an input). Errors as the operator's
 * node gives them, named by the operator. Thread safety as for the other
 * operator calls: any thread, the calling thread's cache scope. */
MKC_API mkc_status mkc_op_run(mkc_op op, const void *params, int ninputs,
                              const mkc_tensor *const *inputs, mkc_tensor **dst);

MKC_API mkc_status mkc_graph_create(mkc_graph **graph);
/* NULL is accepted and ignored. */
MKC_API mkc_status mkc_graph_destroy(mkc_graph *graph);

/* An input the runs pass by `name` (unique): dtype, layout (CHANNELS_FIRST
 * or CHANNELS_LAST, in which order `dims` are given) and dims, -1 for a dim
 * bound at run time. */
MKC_API mkc_status mkc_graph_input(mkc_graph *graph, const char *name, mkc_dtype dtype,
                                   int ndims, const int64_t *dims, mkc_layout layout,
                                   int *value);
/* A constant: a copy of the tensor's values (the tensor may be destroyed
 * afterwards). `name` (may be NULL) is for messages and the plan. */
MKC_API mkc_status mkc_graph_constant(mkc_graph *graph, const mkc_tensor *tensor,
                                      const char *name, int *value);
/* A node computing `op` with `params` (its struct, see mkc_op) on `ninputs`
 * values; `*output` is its result. */
MKC_API mkc_status mkc_graph_node(mkc_graph *graph, mkc_op op, const void *params, int ninputs,
                                  const int *inputs, int *output);
/* Marks `value` as an output of the runs, by `name` (unique). */
MKC_API mkc_status mkc_graph_output(mkc_graph *graph, int value, const char *name);

typedef struct mkc_program_options {
    size_t struct_size; /* sizeof; set by mkc_program_options_init */
    int fuse;           /* != 0 (default): before compiling, merge what oneDNN
                           runs as one primitive: an activation into the conv,
                           linear or matmul before it; an add into the conv
                           before it (its sum); an inference batch norm with
                           constant statistics into the weights of the conv
                           before it; a multiplication by a constant scalar
                           into the matmul before it (its scale). Results
                           move by rounding only. */
    int inplace;        /* != 0 (default): a conv's sum writes into the
                           residual's buffer where that is its last use, as
                           an activation, softmax, binary, layer or batch norm
                           writes over its (first) input there;
                           reshape and transpose run as no step, their
                           results read from their input's bytes (a matmul
                           reads such a view where it is, and writes its
                           result so that a transpose after it is plain) */
    int reuse;          /* != 0 (default): values whose lives do not overlap
                           share arena bytes; 0: each its own */
    int64_t capacity;   /* > 0: at most this many plans (input-shape sets)
                           kept: a new one drops the plan used least
                           recently, with its cache entries (counted in
                           mkc_cache_stats' evictions), so a repeated set of
                           at most this many shapes compiles each once;
                           0 (default): no limit */
    const char *impl;   /* the implementation per operator, as
                           "conv2d=reference,softmax=onednn" (NULL or ""
                           (default): each node's best by priority, onednn
                           before reference, unless MKCACHE_IMPL names one;
                           the variants onednn_matmul (a linear layer on
                           oneDNN's matmul, not its inner product; a float32
                           linear's by priority), onednn_matmul_shared (the
                           same in row parts shared between input shapes,
                           see exact_plans), onednn_conv1x1 (a linear layer
                           as a 1x1 convolution over its rows, channels
                           last) and onednn_contiguous (a node that reads
                           strided views, on contiguous copies of them)
                           otherwise only when named here or measured;
                           this text wins over MKCACHE_IMPL for an operator
                           both name). An implementation asked for that
                           cannot run a node is an error naming the node and
                           the reason, never a silent fallback. Operators are
                           mkc_op's names as mkc_enum_name gives them
                           (conv2d, activation, matmul, ...) */
    int measure;        /* != 0: a node no override decides gets the fastest
                           implementation that supports it, each timed on the
                           first plan of an input shape (the key holds the
                           CPU's ISA, the OpenMP threads, the node and its
                           inputs' shapes), the variants among them; one
                           later by priority must be more than 3% faster to
                           replace an earlier; an attention chain (scores
                           matmul, softmax, context matmul) is timed as one
                           step and as three the same way, its choice kept
                           under "attention|" and the scores matmul's key as
                           onednn_attention or three_steps; 0 (default): by
                           priority */
    const char *choices;/* choices to start from: what mkc_program_choices
                           gave an earlier program (NULL or "": none); taken
                           as they are for the nodes they name, measuring or
                           not, so a deployment need not measure */
    const char *dump;   /* a file to append the compiler's IR to as text after
                           every pass: the graph as built and after fusion,
                           then per plan (input shapes) after bind_inputs,
                           infer, precision, choose, lower, outputs and
                           plan_memory, each section headed "=== ... ===" (NULL or "" (default):
                           the path MKCACHE_DUMP names, or none). A file that
                           cannot be opened is an error */
    const char *precision;   /* "f32" (NULL or "", default): every node as built;
                                "int8": each conv2d (grouped, depthwise and
                                with a fused sum included) and linear layer with float32
                                constant weights, and (with VNNI) each matmul of
                                two values, quantized from `calibration`:
                                each value they read gets one uint8 form
                                (scale and zero point over its recorded
                                range), weights int8 per output channel (7
                                bits on a CPU without VNNI); a quantized layer
                                whose result a quantized reader takes writes
                                that uint8 itself, and quantize / dequantize
                                steps convert where the forms differ; the rest
                                float32.
                                "bf16": every convolution, linear, matmul,
                                pooling, activation, softmax, batch and layer
                                norm, binary, concat and transpose node
                                computes in bfloat16 (biases and the norms'
                                statistics, scale and shift stay float32);
                                converters change the
                                dtype where a value arrives in the other one
                                (constants once, at compile) and the outputs
                                are float32. Needs oneDNN's bfloat16 kernels
                                (AVX-512 or AVX2-VNNI-2): elsewhere
                                UNSUPPORTED naming the ISA, unless `impl`
                                puts each of those operators on "reference".
                                "auto": "int8" with a calibration, else
                                "bf16" where the CPU computes bfloat16
                                natively, else "f32" (the plan text's
                                "precision auto:" line says which).
                                Then, after commas, operators that compute
                                otherwise: "bf16,layer_norm=f32",
                                "f32,conv2d=bf16", "int8,matmul=f32" (in an
                                int8 plan only =f32; =int8 never: 8 bits
                                are the program's, with its calibration).
                                Others: INVALID_ARGUMENT */
    const char *calibration; /* int8 (and auto): what mkc_program_calibration gave a
                                program of the same graph. A line naming no
                                node of this graph, or a node to quantize
                                without its line, is INVALID_ARGUMENT */
    int64_t exact_plans;     /* the plans (input shapes, per OpenMP thread
                                count) compiled with every primitive made for
                                their own shapes (default 8). The plans
                                compiled after them run each float32 linear
                                layer that would run on oneDNN's matmul in
                                two parts, its rows' whole multiples of 128
                                and the rest, on primitives made for those
                                row counts, which the plans of other shapes
                                share through oneDNN's primitive cache (the
                                implementation onednn_matmul_shared): a
                                program meeting many input shapes then holds
                                far fewer primitives, and a layer in two
                                parts runs a few percent slower. 0: every
                                plan so; < 0: none */
} mkc_program_options;

MKC_API mkc_status mkc_program_options_init(mkc_program_options *options);

/* options may be NULL (the defaults). The graph needs an output. */
MKC_API mkc_status mkc_program_compile(const mkc_graph *graph,
                                       const mkc_program_options *options,
                                       mkc_program **program);
/* Removes every cache entry of the program. NULL is accepted and ignored.
 * Waits for the calls other threads are making inside the program. */
MKC_API mkc_status mkc_program_destroy(mkc_program *program);

/* How many inputs and outputs, and their names in order (static strings of
 * the program, valid until it is destroyed). */
MKC_API mkc_status mkc_program_inputs(const mkc_program *program, int *count);
MKC_API mkc_status mkc_program_input_name(const mkc_program *program, int index,
                                          const char **name);
MKC_API mkc_status mkc_program_outputs(const mkc_program *program, int *count);
MKC_API mkc_status mkc_program_output_name(const mkc_program *program, int index,
                                           const char **name);

/* One run: `inputs` has one tensor per input in order (any layout; the
 * graph input's layout label and dims, dynamic dims any size); `outputs`
 * one slot per output: NULL gets a new tensor (plain, in the output's
 * layout label), else a plain tensor of the output's shape and layout label
 * to write into. An output may share memory with an input (it is computed
 * apart and copied at the end); two outputs sharing memory, or one tensor
 * given as an input and an output, are refused. A run that fails creates
 * nothing. */
MKC_API mkc_status mkc_program_run(mkc_program *program, int ninputs,
                                   const mkc_tensor *const *inputs, int noutputs,
                                   mkc_tensor **outputs);

/* mkc_program_run with every step timed on its own (the steps then run one
 * after another with nothing overlapped, so their sum exceeds a plain
 * run's time). The times are kept with the program: mkc_program_profile_text
 * gives the last profile any thread made, one line per step:
 * "<step>\t<node or convert>\t<implementation>\t<microseconds>\t<flops>\t<arithmetic>\n",
 * flops the step's arithmetic (a multiply-add counted as two) for the
 * convolutions, linear and matmul layers, 0 for the other steps, and
 * arithmetic what those operations are in: "f32", "bf16" or "int8" (for
 * mkc_get_peak_ops). */
MKC_API mkc_status mkc_program_profile(mkc_program *program, int ninputs,
                                       const mkc_tensor *const *inputs, int noutputs,
                                       mkc_tensor **outputs);
MKC_API mkc_status mkc_program_profile_text(const mkc_program *program, char *buf, size_t size,
                                            size_t *needed);

/* The executor id in all of the program's cache keys. */
MKC_API mkc_status mkc_program_executor(const mkc_program *program, uint64_t *executor);

/* The plan of the last compiled input-shape set: what was fused (if
 * anything), one line per step (node or conversion; a node's implementation
 * and why it was chosen; where it reads and writes: input, constant, arena
 * offset and size or output, with each arrangement's oneDNN format; "in
 * place"; a conversion's reason) and per view, then the totals. Node numbers are the fused graph's.
 * Copied as mkc_key_make does (needed = length + 1). No plan yet:
 * MKC_STATUS_INVALID_ARGUMENT. */
MKC_API mkc_status mkc_program_plan(const mkc_program *program, char *buf, size_t size,
                                    size_t *needed);

/* The same plan for a program to read: one line per step or view, in order,
 * of 8 tab-separated fields:
 *   step      its index among the steps ("-" for a view: no step)
 *   node      the node's number in the fused graph (-1: a conversion)
 *   kind      "node", "convert" or "view"
 *   impl      the implementation ("onednn:brgconv:avx512_core",
 *             "reference"; "-": view); a linear in row parts adds their
 *             rows, "onednn_matmul_shared:brg:avx512_core rows 128+5"
 *   choice    why that implementation (a node's): "priority", "priority,
 *             past the program's exact plans" (see exact_plans), "override
 *             (option)" or "override (MKCACHE_IMPL)", then "; <name>:
 *             <reason>" for each better one that could not run it; "-"
 *   inputs    "<place> <format>" per buffer read, joined by ", "; a place is
 *             input:<i>, const:<i>, arena:<offset>:<bytes> or output:<i>;
 *             a view's single entry is the bytes it reads and, for the
 *             format, its dims ("1x12x128x64", then "/" and the strides
 *             when they are not row-major)
 *   outputs   the same for the buffers written ("-": a view)
 *   note      "in place" (a sum written into its residual's buffer), a
 *             conversion's reason, or "-"
 * Copied as mkc_program_plan. Any thread. */
MKC_API mkc_status mkc_program_steps(const mkc_program *program, char *buf, size_t size,
                                     size_t *needed);

/* Calibration for 8-bit plans: one float32 run of the program on `inputs`
 * (as mkc_program_run takes them) that records the range of every value a
 * quantized plan would quantize - the src of each conv2d and linear node and
 * both operands of each matmul, as the program's graph has them after
 * fusion - merged with the ranges of the earlier calibrate calls; the
 * default method of mkc_calibrate_options chooses each range. It runs
 * a calibration program of its own (made on the first call; its cache
 * entries go with the program). A value holding NaN or an infinity is
 * INVALID_ARGUMENT naming it, the ranges kept as they were; a program with
 * no such node is INVALID_ARGUMENT. Any thread, many at once. */
MKC_API mkc_status mkc_program_calibrate(mkc_program *program, int ninputs,
                                         const mkc_tensor *const *inputs);
/* How mkc_program_calibrate_with chooses each value's range. */
typedef struct mkc_calibrate_options {
    size_t struct_size; /* sizeof; set by mkc_calibrate_options_init */
    const char *method; /* "minmax": the least and greatest value seen;
                           "percentile": the values' (100 - percentile) / 2
                           and 100 - (100 - percentile) / 2 percentiles
                           (what is cut off, half at each end), found in a
                           histogram (linear within a bin of width at most
                           max|x| / 1024) and kept within [min, max];
                           "mse": the range whose 256 levels quantize the
                           values' histogram with the least squared error
                           (a value outside costing its distance to the
                           range's nearer end squared, one inside
                           step^2 / 12, exact zeros nothing), its ends
                           searched over the bin edges (every 16th, then
                           every one near the best pair);
                           "kl": TensorRT's entropy calibration: the
                           threshold T minimising the KL divergence between
                           the histogram of |x| clipped at T and its
                           quantization to 128 levels (255 when the values
                           have one sign), the range [-T, T] within
                           [min, max];
                           NULL or "" (default): "percentile" (99.999),
                           chosen by measuring int8 accuracy per method
                           (docs/design.md, section 12).
                           Each range is then widened to hold 0, as
                           mkc_program_options.precision "int8" says.
                           The histograms (4096 bins per value, their range
                           doubled when a later run reaches past it, so that
                           several runs give what one run on all their
                           values would) are kept between the calls; the
                           range is chosen from them when
                           mkc_program_calibration is asked. Others:
                           INVALID_ARGUMENT */
    double percentile;  /* "percentile": in (0, 100] (100: minmax); 0
                           (default): 99.999. Nonzero with another method, or
                           outside (0, 100] (NaN included): INVALID_ARGUMENT */
} mkc_calibrate_options;

/* The defaults above, struct_size set; NULL is INVALID_ARGUMENT. Any thread,
 * at any time. */
MKC_API mkc_status mkc_calibrate_options_init(mkc_calibrate_options *options);

/* mkc_program_calibrate with a method (options NULL: the defaults). Every
 * call on one program must ask for the same method (and percentile): one
 * asking for another is INVALID_ARGUMENT, what the earlier calls recorded
 * kept. Any thread, many at once. */
MKC_API mkc_status mkc_program_calibrate_with(mkc_program *program, int ninputs,
                                              const mkc_tensor *const *inputs,
                                              const mkc_calibrate_options *options);

/* The ranges so far: a first line "# calibration method: <method>\n"
 * ("minmax", "mse" or "percentile <p>"), then one line per value:
 * "node<n>|<operator>|<node name>|<port>\t<min>\t<max>\t<runs>\n", in node
 * order, the range the method chose; empty before any calibrate.
 * mkc_program_options.calibration skips lines starting with '#' (and reads
 * texts without the method's line, as older versions wrote). Copied as
 * mkc_program_plan. Any thread. */
MKC_API mkc_status mkc_program_calibration(const mkc_program *program, char *buf, size_t size,
                                           size_t *needed);

/* The implementation choices measured so far (or read back), one line each:
 * "<key>\t<implementation>\t<name>=<microseconds>,...\n" - the text
 * mkc_program_options.choices takes. Copied as mkc_program_plan; empty when
 * nothing was measured. Any thread. */
MKC_API mkc_status mkc_program_choices(const mkc_program *program, char *buf, size_t size,
                                       size_t *needed);

typedef struct mkc_program_memory {
    size_t struct_size;       /* sizeof(mkc_program_memory)                 */
    size_t arena_bytes;       /* the last plan's arena                      */
    size_t lower_bound_bytes; /* max over its steps of the bytes then live  */
    size_t naive_bytes;       /* every intermediate value its own buffer    */
    size_t constant_bytes;    /* constants converted for the plan           */
    int steps;                /* steps of the plan                          */
    int converters;           /* of which conversions                       */
    int plans;                /* plans kept                                 */
    int in_place;             /* steps writing into an input's buffer       */
    int views;                /* reshape/transpose nodes run as views (no   */
                              /* step: their input's bytes read in place)   */
    size_t held_constant_bytes; /* constants converted for the plans kept,  */
                              /* each copy once: the plans of other input   */
                              /* shapes share a copy in one arrangement     */
} mkc_program_memory;

/* The figures of the last compiled plan (no plan yet: INVALID_ARGUMENT).
 * memory->struct_size must be set (written as mkc_cache_stats is). */
MKC_API mkc_status mkc_program_memory_info(const mkc_program *program,
                                           mkc_program_memory *memory);

/* ------------------------------------------------------------------------
 * For language bindings; may change between minor versions
 *
 * Calls shaped by what a binding pays per call (ctypes pays per argument
 * and per pointer object it builds) and by the object layout of its arrays
 * (numpy keeps an array's data pointer at a fixed offset in the object). A
 * binding is shipped with the library it calls; a C program may use these
 * too, rebuilt against each minor version's header.
 * ------------------------------------------------------------------------ */

/* Everything about an activation on plain buffers but the buffers: filled
 * once by the caller and passed to every mkc_activation_plain call of that
 * kind and shape (binding language wrappers pay per argument, so the call
 * itself takes three). */
typedef struct mkc_activation_call {
    size_t struct_size;           /* sizeof(mkc_activation_call), exactly */
    mkc_activation_kind kind;
    float alpha, beta;            /* as mkc_activation */
    const char *name;             /* NULL or "" = derived from kind/alpha/beta */
    int ndims;                    /* 1..MKC_MAX_NDIMS */
    int64_t dims[MKC_MAX_NDIMS];  /* row-major shape */
} mkc_activation_call;

/* mkc_activation on plain row-major float32 buffers of shape
 * call->dims[call->ndims], with no tensor handles: the cheapest call for
 * small arrays (no allocation, no handle; a repeated shape builds nothing).
 * dst may equal src. */
MKC_API mkc_status mkc_activation_plain(const mkc_activation_call *call, const float *src,
                                        float *dst);

/* mkc_activation_plain with the buffers read from where the caller keeps
 * their addresses: src = *src_ref, dst = *dst_ref. For bindings whose array
 * objects hold the data pointer in a field: passing the field's address
 * costs them less than building a pointer object per call (numpy's arrays
 * keep it at a fixed offset in the array object). */
MKC_API mkc_status mkc_activation_plain_ref(const mkc_activation_call *call,
                                            const float *const *src_ref, float *const *dst_ref);

/* The caller dims of program output `index` for inputs of the caller dims
 * `input_dims` (every input's dims one after another, each input's rank as
 * the graph declares it); compiles the plan if it is new. What a binding
 * allocates its outputs by for mkc_program_run_plain. Any thread, as
 * mkc_program_run. */
MKC_API mkc_status mkc_program_output_shape(mkc_program *program, const int64_t *input_dims,
                                            int index, int *ndims, int64_t *dims);
/* The dtype of program output `index` (float32, or another where the
 * model computes one: a comparison's BOOL, a cast's, a Shape's S64), taking
 * input_dims and compiling as mkc_program_output_shape does. Any thread, as
 * mkc_program_run. */
MKC_API mkc_status mkc_program_output_dtype(mkc_program *program, const int64_t *input_dims,
                                            int index, mkc_dtype *dtype);

/* mkc_program_run on dense buffers without tensor handles: input i holds
 * its dims (from input_dims, as mkc_program_output_shape takes them)
 * row-major in its graph layout's order; output j is dense in the shape
 * mkc_program_output_shape gives and in its layout label's order. The
 * buffers' sizes are the caller's to get right; they may overlap as
 * mkc_program_run's tensors may (an output over an input is computed
 * apart; outputs over each other are refused). Any thread, as
 * mkc_program_run. */
MKC_API mkc_status mkc_program_run_plain(mkc_program *program, const int64_t *input_dims,
                                         const void *const *inputs, void *const *outputs);

/* mkc_program_run_plain with each buffer read from where the caller keeps
 * its address: input i is *input_refs[i], output j is *output_refs[j] (as
 * mkc_activation_plain_ref: for bindings whose arrays hold their data
 * pointer in a field). */
MKC_API mkc_status mkc_program_run_plain_ref(mkc_program *program, const int64_t *input_dims,
                                             const void *const *const *input_refs,
                                             void *const *const *output_refs);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MKCACHE_MKCACHE_H */
