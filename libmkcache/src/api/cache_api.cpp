// C ABI: keys and the blob cache.
#include <memory>

#include "api/guard.hpp"
#include "api/struct_size.hpp"
#include "cache/blob_cache.hpp"
#include "common/thread_state.hpp"
#include "keys/keys.hpp"

// A reference to a cached blob held by a C caller.
struct mkc_blob {
    std::shared_ptr<void> blob;
};

using namespace mkc;
using mkc::api::guard;
using mkc::api::require_out;

namespace {

struct CallerBlob {
    void *data = nullptr;
    mkc_deleter deleter = nullptr;
    ~CallerBlob() {
        if (deleter) deleter(data);
    }
};

const std::string &key_arg(const char *key) {
    if (key == nullptr) fail(MKC_STATUS_INVALID_ARGUMENT, "key is NULL");
    thread_local std::string text;
    text = key;
    require(!text.empty(), "key is empty");
    return text;
}

const mkc_blob &blob_arg(const mkc_blob *blob) {
    if (blob == nullptr) fail(MKC_STATUS_INVALID_HANDLE, "blob is NULL");
    if (!registry<mkc_blob>().contains(blob))
        fail(MKC_STATUS_INVALID_HANDLE, "blob is not a live blob reference (released or foreign)");
    return *blob;
}

} // namespace

extern "C" {

MKC_API mkc_status mkc_key_make(const char *name, const char *suffix, int ndims,
                                const int64_t *dims, char *key, size_t size, size_t *needed) {
    return guard([&] {
        require(name != nullptr, "name is NULL");
        require(ndims >= 0 && ndims <= MKC_MAX_NDIMS, "ndims must be 0..", MKC_MAX_NDIMS);
        require(ndims == 0 || dims != nullptr, "dims is NULL");
        const ThreadState &ctx = thread_state();
        std::string text;
        keys::make(text, name, suffix, dims, ndims, ctx.executor(), !ctx.clearing_mode(),
                   ctx.thread_hash);
        api::copy_out(text, key, size, needed);
    });
}

MKC_API mkc_status mkc_cache_set_blob(const char *key, void *data, size_t nbytes,
                                      mkc_deleter deleter) {
    return guard([&] {
        const std::string &k = key_arg(key);
        require(data != nullptr, "data is NULL");
        // The owner calls the deleter once, when the last reference goes. It
        // is armed only once the cache holds it: a failed call adopts nothing.
        auto owner = std::make_shared<CallerBlob>();
        owner->data = data;
        const ThreadState &ctx = thread_state();
        BlobInfo info;
        info.kind = BlobKind::caller;
        info.bytes = nbytes;
        info.executor = ctx.executor();
        BlobCache::instance().set(ctx.session(), ctx.input_shape(), ctx.capacity(), k,
                                  std::shared_ptr<void>(owner, data), info);
        owner->deleter = deleter;
    });
}

MKC_API mkc_status mkc_cache_get_blob(const char *key, mkc_blob **blob) {
    return guard([&] {
        const std::string &k = key_arg(key);
        require_out(blob, "blob");
        const ThreadState &ctx = thread_state();
        auto found = BlobCache::instance().get(ctx.session(), ctx.input_shape(), k, BlobKind::caller);
        if (!found) {
            *blob = nullptr;
            return;
        }
        auto ref = std::make_unique<mkc_blob>();
        ref->blob = std::move(found);
        registry<mkc_blob>().add(ref.get());
        *blob = ref.release();
    });
}

MKC_API mkc_status mkc_blob_get_data(const mkc_blob *blob, void **data) {
    return guard([&] {
        const mkc_blob &b = blob_arg(blob);
        require_out(data, "data");
        *data = b.blob.get();
    });
}

MKC_API mkc_status mkc_blob_release(mkc_blob *blob) {
    return guard([&] {
        if (blob == nullptr) return;
        if (!registry<mkc_blob>().remove(blob))
            fail(MKC_STATUS_INVALID_HANDLE, "blob is not a live blob reference (released twice or foreign)");
        delete blob;
    });
}

MKC_API mkc_status mkc_cache_reset(void) {
    return guard([&] { BlobCache::instance().reset(); });
}

MKC_API mkc_status mkc_cache_reset_executor(uint64_t executor_id) {
    return guard([&] { BlobCache::instance().reset_executor(executor_id); });
}

MKC_API mkc_status mkc_cache_stats_init(mkc_cache_stats *stats) {
    return guard([&] {
        require_out(stats, "stats");
        *stats = mkc_cache_stats{};
        stats->struct_size = sizeof(mkc_cache_stats);
    });
}

MKC_API mkc_status mkc_cache_get_stats(mkc_cache_stats *stats) {
    return guard([&] {
        require_out(stats, "stats");
        api::write_sized("cache_get_stats", stats, BlobCache::instance().stats());
    });
}

MKC_API mkc_status mkc_cache_get_session_stats(int64_t session_id, mkc_cache_stats *stats) {
    return guard([&] {
        require_out(stats, "stats");
        api::write_sized("cache_get_session_stats", stats,
                         BlobCache::instance().session_stats(session_id));
    });
}

MKC_API mkc_status mkc_cache_get_keys(int64_t session_id, char *buf, size_t size,
                                      size_t *needed) {
    return guard([&] { api::copy_out(BlobCache::instance().keys(session_id), buf, size, needed); });
}

} // extern "C"
