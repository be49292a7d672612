#include "layout/layout.hpp"

#include "common/error.hpp"
#include "common/thread_state.hpp"

namespace mkc::layout {

mkc_layout target() { return thread_state().target_layout; }

void set_target(mkc_layout layout) {
    require(layout == MKC_LAYOUT_CHANNELS_FIRST || layout == MKC_LAYOUT_CHANNELS_LAST,
            "target layout must be CHANNELS_FIRST (NCHW) or CHANNELS_LAST (NHWC), got ",
            static_cast<int>(layout));
    thread_state().target_layout = layout;
}

mkc_layout resolve(mkc_layout layout, int ndims) {
    return resolve(thread_state(), layout, ndims);
}

mkc_layout resolve(ThreadState &state, mkc_layout layout, int ndims) {
    if (layout == MKC_LAYOUT_TARGET) layout = state.target_layout;
    require(layout == MKC_LAYOUT_CHANNELS_FIRST || layout == MKC_LAYOUT_CHANNELS_LAST,
            "unknown layout value ", static_cast<int>(layout));
    // Channels-last has no meaning below rank 3: such tensors are row-major.
    if (ndims < 3) return MKC_LAYOUT_CHANNELS_FIRST;
    return layout;
}

Dims to_onednn_order(const Dims &caller_dims, mkc_layout layout) {
    if (layout != MKC_LAYOUT_CHANNELS_LAST || caller_dims.size() < 3) return caller_dims;
    Dims out;
    out.reserve(caller_dims.size());
    out.push_back(caller_dims[0]);
    out.push_back(caller_dims.back());
    out.insert(out.end(), caller_dims.begin() + 1, caller_dims.end() - 1);
    return out;
}

Dims to_caller_order(const Dims &onednn_dims, mkc_layout layout) {
    if (layout != MKC_LAYOUT_CHANNELS_LAST || onednn_dims.size() < 3) return onednn_dims;
    Dims out;
    out.reserve(onednn_dims.size());
    out.push_back(onednn_dims[0]);
    out.insert(out.end(), onednn_dims.begin() + 2, onednn_dims.end());
    out.push_back(onednn_dims[1]);
    return out;
}

int to_onednn_axis(int caller_axis, int ndims, mkc_layout layout) {
    if (layout != MKC_LAYOUT_CHANNELS_LAST || ndims < 3 || caller_axis == 0) return caller_axis;
    if (caller_axis == ndims - 1) return 1; // channels
    return caller_axis + 1;
}

dnnl::memory::desc plain_desc(const Dims &onednn_dims, dnnl::memory::data_type dtype,
                              mkc_layout layout) {
    const int n = static_cast<int>(onednn_dims.size());
    Dims strides(n, 1);
    if (layout == MKC_LAYOUT_CHANNELS_LAST && n >= 3) {
        // Memory order: dim 0, dims 2..n-1, dim 1 (channels innermost).
        int64_t stride = 1;
        strides[1] = stride;
        stride *= onednn_dims[1];
        for (int i = n - 1; i >= 2; --i) {
            strides[i] = stride;
            stride *= onednn_dims[i];
        }
        strides[0] = stride;
    } else {
        for (int i = n - 2; i >= 0; --i) strides[i] = strides[i + 1] * onednn_dims[i + 1];
    }
    return dnnl::memory::desc(onednn_dims, dtype, strides);
}

bool caller_strides(const dnnl::memory::desc &desc, mkc_layout layout, Dims &strides) {
    if (desc.is_zero() || desc.get_format_kind() != dnnl::memory::format_kind::blocked ||
        desc.get_inner_nblks() != 0)
        return false;
    strides = to_caller_order(desc.get_strides(), layout);
    return true;
}

bool dense_row_major(const Dims &dims, const Dims &strides) {
    int64_t expected = 1;
    for (size_t i = dims.size(); i-- > 0;) {
        if (dims[i] == 1) continue;
        if (strides[i] != expected) return false;
        expected *= dims[i];
    }
    return true;
}

const char *name(mkc_layout layout) {
    switch (layout) {
    case MKC_LAYOUT_TARGET: return "TARGET";
    case MKC_LAYOUT_CHANNELS_FIRST: return "NCHW";
    case MKC_LAYOUT_CHANNELS_LAST: return "NHWC";
    default: break;
    }
    return "?";
}

} // namespace mkc::layout
