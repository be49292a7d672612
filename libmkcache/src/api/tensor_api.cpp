// C ABI: tensors.
#include <memory>

#include "api/eager_scope.hpp"
#include "api/guard.hpp"
#include "handler/handler.hpp"
#include "ops/ops.hpp"

using namespace mkc;
using mkc::api::guard;
using mkc::api::require_out;
using mkc::api::tensor_arg;

namespace {

std::unique_ptr<Tensor> plain_tensor(mkc_dtype dtype, int ndims, const int64_t *dims,
                                     mkc_layout layout) {
    check_dims("dims", ndims, dims, dtype);
    const mkc_layout plain = layout::resolve(layout, ndims);
    const Dims onednn = layout::to_onednn_order(Dims(dims, dims + ndims), plain);
    auto t = std::make_unique<Tensor>(layout::plain_desc(onednn, to_onednn(dtype), plain));
    t->layout = plain;
    t->dtype = dtype;
    return t;
}

} // namespace

extern "C" {

MKC_API mkc_status mkc_tensor_wrap(mkc_dtype dtype, int ndims, const int64_t *dims,
                                   mkc_layout layout, void *data, mkc_tensor **tensor) {
    return guard([&] {
        require_out(tensor, "tensor");
        require(data != nullptr, "data is NULL");
        auto t = plain_tensor(dtype, ndims, dims, layout);
        t->data = data;
        registry<Tensor>().add(t.get());
        *tensor = t.release();
    });
}

MKC_API mkc_status mkc_tensor_create(mkc_dtype dtype, int ndims, const int64_t *dims,
                                     mkc_layout layout, mkc_tensor **tensor) {
    return guard([&] {
        require_out(tensor, "tensor");
        auto t = plain_tensor(dtype, ndims, dims, layout);
        t->owned = allocate(t->desc.get_size(), true);
        t->data = t->owned.get();
        registry<Tensor>().add(t.get());
        *tensor = t.release();
    });
}

MKC_API mkc_status mkc_tensor_destroy(mkc_tensor *tensor) {
    return guard([&] {
        if (tensor == nullptr) return;
        if (!registry<Tensor>().remove(tensor))
            fail(MKC_STATUS_INVALID_HANDLE,
                 "tensor is not a live tensor (destroyed twice or foreign handle)");
        delete tensor;
    });
}

MKC_API mkc_status mkc_tensor_get_shape(const mkc_tensor *tensor, int *ndims, int64_t *dims) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require_out(ndims, "ndims");
        require_out(dims, "dims");
        const Dims d = caller_dims(t);
        for (size_t i = 0; i < d.size(); ++i) dims[i] = d[i];
        *ndims = static_cast<int>(d.size());
    });
}

MKC_API mkc_status mkc_tensor_get_dtype(const mkc_tensor *tensor, mkc_dtype *dtype) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require_out(dtype, "dtype");
        *dtype = t.dtype;
    });
}

MKC_API mkc_status mkc_tensor_get_layout(const mkc_tensor *tensor, mkc_layout *layout) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require_out(layout, "layout");
        *layout = t.layout;
    });
}

MKC_API mkc_status mkc_tensor_get_format(const mkc_tensor *tensor, const char **format) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require_out(format, "format");
        std::lock_guard<std::mutex> lock(t.mutex);
        if (t.format.empty()) t.format = format_name(t.desc);
        *format = t.format.c_str();
    });
}

MKC_API mkc_status mkc_tensor_get_nbytes(const mkc_tensor *tensor, size_t *nbytes) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require_out(nbytes, "nbytes");
        *nbytes = t.desc.get_size();
    });
}

MKC_API mkc_status mkc_tensor_get_plain_nbytes(const mkc_tensor *tensor, size_t *nbytes) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require_out(nbytes, "nbytes");
        *nbytes = plain_nbytes(t);
    });
}

MKC_API mkc_status mkc_tensor_set_constant(mkc_tensor *tensor, int constant) {
    return guard([&] {
        Tensor &t = api::mutable_tensor_arg(tensor, "tensor");
        std::lock_guard<std::mutex> lock(t.mutex);
        t.constant = constant != 0;
        if (!t.constant) {
            t.converted.clear();
            t.converted_stamp.store(0, std::memory_order_relaxed);
        }
    });
}

MKC_API mkc_status mkc_tensor_export(const mkc_tensor *tensor, mkc_layout layout, void *dst,
                                     size_t dst_bytes) {
    return guard([&] {
        const Tensor &t = tensor_arg(tensor, "tensor");
        require(dst != nullptr, "export: dst is NULL");
        ops::export_plain(api::eager_scope(), t, layout, dst, dst_bytes);
    });
}

MKC_API mkc_status mkc_get_reorder_count(uint64_t *count) {
    return guard([&] {
        require_out(count, "count");
        *count = reorder_count();
    });
}

} // extern "C"
