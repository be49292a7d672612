#include "ops/phases.hpp"

#include <utility>

#include "layout/layout.hpp"

namespace mkc::ops {

ValueDesc describe(const Tensor &t) { return {t.dtype, t.layout, t.dims, t.desc}; }

ValueDesc plain_value(mkc_dtype dtype, mkc_layout layout, Dims dims) {
    dnnl::memory::desc desc = layout::plain_desc(dims, to_onednn(dtype), layout);
    return {dtype, layout, std::move(dims), std::move(desc)};
}

ValueDesc arranged_as(const ValueDesc &like, const dnnl::memory::desc &desc) {
    return {like.dtype, like.layout, desc.get_dims(), desc};
}

void run_bound(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers,
               std::initializer_list<int> in_args, std::initializer_list<int> out_args) {
    Handler::Execution exec(entry, scope);
    int i = 0;
    for (int arg : in_args) {
        // The primitive only reads its inputs; its memory objects take
        // non-const handles.
        if (void *data = const_cast<void *>(buffers.in[i++])) exec.raw(arg, data);
    }
    i = 0;
    for (int arg : out_args)
        if (void *data = buffers.out[i++]) exec.raw(arg, data);
    exec.run();
}

} // namespace mkc::ops
