#include "api/aliasing.hpp"
#include "api/eager_scope.hpp"

#include <cstdint>
#include <cstring>

#include "common/handles.hpp"
#include "handler/handler.hpp"

namespace mkc::api {

void require_separate(const Tensor *out, const char *op, const char *what,
                      std::initializer_list<NamedTensor> others) {
    if (out == nullptr) return;
    for (const NamedTensor &other : others)
        if (other.tensor != nullptr && shares_memory(*out, *other.tensor))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", what, " must not share memory with ",
                 other.name);
}

namespace detail {

void refuse_constant(const char *op) {
    fail(MKC_STATUS_INVALID_ARGUMENT, op,
         ": dst is marked constant (mkc_tensor_set_constant): its data must not change");
}

std::unique_ptr<Tensor> stand_in(const Tensor &dst, bool accumulate) {
    if (!accumulate) return nullptr;
    auto copy = make_owned_tensor(dst.desc, dst.layout, dst.dtype);
    std::memcpy(copy->data, dst.data, dst.nbytes);
    return copy;
}

std::unique_ptr<Tensor> written(std::unique_ptr<Tensor> stand_in, mkc_tensor *result) {
    if (stand_in) return stand_in;
    registry<Tensor>().remove(result); // never handed to the caller
    return std::unique_ptr<Tensor>(result);
}

void replace_contents(Tensor &dst, Tensor &result, const char *op) {
    require(dst.dtype == result.dtype && dst.dims == result.dims, op,
            ": dst shape does not match the result");
    if (dst.owned) {
        adopt_storage(dst, result.desc, result.owned);
        dst.layout = result.layout;
    } else {
        reorder(eager_scope(), result.desc, result.data, dst.desc, dst.data);
    }
}

} // namespace detail

} // namespace mkc::api
