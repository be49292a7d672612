// Export: the one place data leaves the library, converted to a plain layout
// (the thread's target layout by default) with a cached reorder.
#include <cstring>

#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

void export_plain(const CacheScope &scope, const Tensor &src, mkc_layout layout, void *dst,
                  size_t dst_bytes) {
    const Dims &dims = onednn_dims(src);
    const mkc_layout plain = layout::resolve(layout, static_cast<int>(dims.size()));
    const size_t need = plain_nbytes(src);
    if (dst_bytes < need)
        fail(MKC_STATUS_BUFFER_TOO_SMALL, "export: buffer holds ", dst_bytes, " bytes, need ",
             need);
    const dnnl::memory::desc want = layout::plain_desc(dims, to_onednn(src.dtype), plain);
    if (src.desc == want) {
        std::memcpy(dst, src.data, need);
        return;
    }
    reorder(scope, src.desc, src.data, want, dst);
}

} // namespace mkc::ops
