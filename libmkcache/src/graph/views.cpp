#include "graph/views.hpp"

#include "layout/layout.hpp"
#include "tensor/tensor.hpp"

namespace mkc::graph {

using ops::ValueDesc;

bool row_major_bytes(const ValueDesc &src) {
    Dims strides;
    return layout::caller_strides(src.desc, src.layout, strides) &&
           layout::dense_row_major(ops::caller_dims(src), strides);
}

bool transposed_view(const ValueDesc &src, const std::vector<int> &perm, ValueDesc &out) {
    Dims strides;
    if (!layout::caller_strides(src.desc, src.layout, strides))
        return false;
    const Dims dims = ops::caller_dims(src);
    Dims view_dims(perm.size()), view_strides(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
        view_dims[i] = dims.at(perm[i]);
        view_strides[i] = strides.at(perm[i]);
    }
    out = ops::plain_value(src.dtype, MKC_LAYOUT_CHANNELS_FIRST, view_dims);
    if (!layout::dense_row_major(view_dims, view_strides))
        out.desc = dnnl::memory::desc(view_dims, to_onednn(src.dtype), view_strides);
    return true;
}

Dims strides_for_transpose(const Dims &dims, const std::vector<int> &perm) {
    Dims transposed(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
        transposed[i] = dims.at(perm[i]);
    const Dims row_major = row_major_strides(transposed);
    // Axis perm[i] of the value is axis i of its transpose.
    Dims strides(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
        strides[perm[i]] = row_major[i];
    return strides;
}

bool strided_view(const ValueDesc &v) {
    Dims strides;
    return layout::caller_strides(v.desc, v.layout, strides) &&
           v.desc != layout::plain_desc(v.dims, v.desc.get_data_type(), v.layout);
}

} // namespace mkc::graph
