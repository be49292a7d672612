// Plain layouts, the thread-local target layout (NHWC support) and the
// MatchShapeToLayout rule: callers speak NHWC dims, oneDNN always NCHW order.
#pragma once

#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/dims.hpp"
#include "common/thread_state.hpp"
#include "mkcache/mkcache.h"

namespace mkc {

namespace layout {

// The calling thread's target layout (CHANNELS_FIRST until set).
mkc_layout target();
void set_target(mkc_layout layout);

// TARGET -> the thread's target; checks the value is a known layout.
mkc_layout resolve(mkc_layout layout, int ndims);
// The same for a caller holding the thread's state (saves a thread-local
// lookup each); `layout` of set_target is resolve()'s result.
mkc_layout resolve(ThreadState &state, mkc_layout layout, int ndims);
inline void set_target(ThreadState &state, mkc_layout resolved) { state.target_layout = resolved; }

// [N,H,W,C] -> [N,C,H,W] for CHANNELS_LAST; unchanged for CHANNELS_FIRST.
Dims to_onednn_order(const Dims &caller_dims, mkc_layout layout);
// The inverse: oneDNN-order dims -> the caller's order.
Dims to_caller_order(const Dims &onednn_dims, mkc_layout layout);

// An axis of the caller's dims order -> the same axis in oneDNN's order.
int to_onednn_axis(int caller_axis, int ndims, mkc_layout layout);

// A dense plain memory descriptor for oneDNN-order dims in `layout`.
dnnl::memory::desc plain_desc(const Dims &onednn_dims,
                              dnnl::memory::data_type dtype, mkc_layout layout);

const char *name(mkc_layout layout); // "NCHW"-style name for messages

// The strides of `desc`'s bytes in the caller's dims order for `layout`
// (in elements), or false when the arrangement is not a plain strided one
// (blocked, as nChw16c). `strides` is left alone then.
bool caller_strides(const dnnl::memory::desc &desc, mkc_layout layout, Dims &strides);

// Whether `strides` lay `dims` out row-major with no gap (dims of size 1
// are ignored: their stride never matters).
bool dense_row_major(const Dims &dims, const Dims &strides);

} // namespace layout
} // namespace mkc
