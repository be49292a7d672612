#include "common/error.hpp"

#include <new>

#include <oneapi/dnnl/dnnl.hpp>

namespace mkc {

mkc_status status_of_current_exception(std::string &message) noexcept {
    try {
        try {
            throw;
        } catch (const Error &e) {
            message = e.what();
            return e.status();
        } catch (const dnnl::error &e) {
            message = std::string("oneDNN: ") + e.what();
            return e.status == dnnl_out_of_memory ? MKC_STATUS_OUT_OF_MEMORY
                                                  : MKC_STATUS_ONEDNN_ERROR;
        } catch (const std::bad_alloc &) {
            message = "out of memory";
            return MKC_STATUS_OUT_OF_MEMORY;
        } catch (const std::exception &e) {
            message = std::string("internal error: ") + e.what();
            return MKC_STATUS_INTERNAL_ERROR;
        } catch (...) {
            message = "internal error: unknown exception";
            return MKC_STATUS_INTERNAL_ERROR;
        }
    } catch (...) {
        return MKC_STATUS_OUT_OF_MEMORY;
    }
}

} // namespace mkc
