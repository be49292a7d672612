// The sizes a sliding window (convolution, transposed convolution, pooling)
// may have before oneDNN sees it.
//
// oneDNN's kernels keep spatial sizes, strides, paddings and dilations in
// 32-bit ints and address what one window step moves over with 32-bit
// offsets in generated code. Past that range a kernel fails to generate,
// and oneDNN v3.2 does not always say so: its brgemm convolution drops the
// status of its post-op kernels' generation, so the primitive is created
// with a null kernel, called for the outputs whose window lies wholly in
// padding (a SIGSEGV). The failed generation also leaves Xbyak's per-thread
// error set (see common/fresh_thread.hpp), so on that thread the next
// kernel - the weights' reorder - fails, and oneDNN v3.2's primitive cache
// keeps that failure under the reorder's key for good (it drops a failed
// entry only when it holds a value). Alone, such a call was thus refused by
// accident; after another refusal had moved primitive creation onto fresh
// threads, nothing failed before it ran. So these sizes are refused here,
// before anything is built, with bounds well inside what the kernels index.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/error.hpp"

namespace mkc::ops {

// Every padded spatial size, stride, dilation and dilated kernel extent.
inline constexpr int64_t kMaxWindowDim = int64_t(1) << 24;
// The bytes one window step spans: (stride, dilation or dilated kernel
// extent) x the padded rows inside that dim x channels (rounded up to a
// block of 16) x 4; also every padded plane below the outermost dim. Half
// of 2^31, so that a kernel adding two such offsets stays in range.
inline constexpr int64_t kMaxWindowStepBytes = int64_t(1) << 30;

// One spatial dim of the side the window slides over (a convolution's src,
// a transposed convolution's dst, pooling's src): its extent, its paddings
// (pad_end may be negative: a transposed convolution's output_padding),
// stride, dilation (1: dense) and the kernel's dilated extent.
struct WindowDim {
    int64_t extent, pad_begin, pad_end, stride, dilation, window;
};

// Refuses (UNSUPPORTED, naming the dim) a window geometry past the bounds
// above; `channels`: the larger channel count of the two sides. Dims below
// 2^56 and stride, padding and dilation at most 2^30 (checked before):
// nothing here leaves int64.
inline void check_window_bounds(const char *op, const WindowDim *dims, int k, int64_t channels) {
    const int64_t block = 16;
    const int64_t lanes = (std::min<int64_t>(channels, kMaxWindowStepBytes) + block - 1) /
                          block * block;
    for (int i = 0; i < k; ++i) {
        const WindowDim &d = dims[i];
        const int64_t padded = d.extent + d.pad_begin + d.pad_end;
        const auto refuse = [&](const char *what, int64_t value) {
            fail(MKC_STATUS_UNSUPPORTED, op, ": ", what, " (", value, ") along spatial dim ", i,
                 " is past 2^24, the largest stride, padding, dilation, kernel extent or padded "
                 "size oneDNN's kernels index with 32-bit offsets");
        };
        if (d.stride > kMaxWindowDim) refuse("the stride", d.stride);
        if (d.dilation > kMaxWindowDim) refuse("the dilation", d.dilation);
        if (d.window > kMaxWindowDim) refuse("the dilated kernel extent", d.window);
        if (d.pad_begin > kMaxWindowDim || d.pad_end > kMaxWindowDim)
            refuse("the padding", std::max(d.pad_begin, d.pad_end));
        if (padded > kMaxWindowDim) refuse("the padded size", padded);
    }
    // Bytes: from the innermost dim out, `row` is what one step along dim i
    // moves over. Every factor is at most 2^24 and row stays below 2^30
    // when checked, so the products fit int64.
    int64_t row = lanes * 4;
    if (row > kMaxWindowStepBytes)
        fail(MKC_STATUS_UNSUPPORTED, op, ": ", channels,
             " channels are more than oneDNN's kernels index with 32-bit offsets");
    for (int i = k - 1; i >= 0; --i) {
        const WindowDim &d = dims[i];
        const int64_t padded = d.extent + d.pad_begin + d.pad_end;
        const int64_t step = std::max({d.stride, d.dilation, d.window});
        if (step * row > kMaxWindowStepBytes)
            fail(MKC_STATUS_UNSUPPORTED, op, ": a window step along spatial dim ", i, " spans ",
                 step * row, " bytes (stride ", d.stride, ", dilation ", d.dilation,
                 ", kernel extent ", d.window,
                 "), past 2^30, what oneDNN's kernels index with 32-bit offsets");
        if (i > 0) {
            if (padded * row > kMaxWindowStepBytes)
                fail(MKC_STATUS_UNSUPPORTED, op, ": the padded input along spatial dim ", i,
                     " and inside it spans ", padded * row,
                     " bytes per outer row, past 2^30, what oneDNN's kernels index with 32-bit "
                     "offsets");
            row *= padded;
        }
    }
}

} // namespace mkc::ops
