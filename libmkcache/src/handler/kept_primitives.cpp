#include "handler/kept_primitives.hpp"

#include "common/serial.hpp"

#include <mutex>
#include <unordered_map>

namespace mkc {

namespace {

using query = dnnl::query;

struct Kept {
    std::mutex mutex;
    std::unordered_map<std::string, dnnl::primitive> by_key;
};

// Leaked on purpose: the primitives must not be destroyed after oneDNN's
// own globals during process exit.
Kept &kept() {
    static auto *k = new Kept();
    return *k;
}

void append_dims(std::string &s, const dnnl::memory::dims &d) {
    for (auto v : d) s += std::to_string(v) + ',';
    s += ';';
}

void append_md(std::string &s, const dnnl::memory::desc &md) {
    if (md.is_zero()) {
        s += "-;";
        return;
    }
    s += std::to_string(static_cast<int>(md.get_data_type())) + ':' +
         std::to_string(static_cast<int>(md.get_format_kind())) + ':';
    append_dims(s, md.get_dims());
    append_dims(s, md.get_padded_dims());
    append_dims(s, md.get_strides());
    append_dims(s, md.get_inner_blks());
    append_dims(s, md.get_inner_idxs());
}

} // namespace

bool never_freed(const dnnl::primitive_desc &pd) {
    // Only brgemm convolutions (forward, backward, transposed) store their
    // kernels process-wide.
    const std::string impl = pd.impl_info_str();
    if (impl.find("brgconv") == std::string::npos && impl.find("brgdeconv") == std::string::npos)
        return false;
    // The backward kernels are not told apart here: all kept.
    if (pd.get_prop_kind() != dnnl::prop_kind::forward_training &&
        pd.get_prop_kind() != dnnl::prop_kind::forward_inference)
        return true;
    // An AVX2 kernel masks a channel tail through an address.
    const dnnl::memory::dims dst = pd.query_md(query::dst_md).get_dims();
    if (impl.find("avx2") != std::string::npos && dst.size() > 1 && dst[1] % 8 != 0)
        return true;
    // Element-wise post-ops load their constants through an address, as a
    // sum does its scale or zero point when they are not 1 and 0.
    const dnnl::post_ops po = pd.get_primitive_attr().get_post_ops();
    for (int i = 0; i < po.len(); ++i) {
        if (po.kind(i) == dnnl::primitive::kind::eltwise) return true;
        if (po.kind(i) == dnnl::primitive::kind::sum) {
            float scale;
            int32_t zero_point;
            dnnl::memory::data_type dt;
            po.get_params_sum(i, scale, zero_point, dt);
            if (scale != 1.f || zero_point != 0) return true;
        }
    }
    return false;
}

std::string description_key(const dnnl::primitive_desc &pd) {
    // The OpenMP thread count the description was made under: oneDNN splits
    // a convolution's work for it when it creates the primitive, so one made
    // for another count would run on that many threads.
    std::string s = std::to_string(openmp_max_threads()) + '|' + pd.impl_info_str() + '|';
    s += std::to_string(static_cast<int>(pd.get_kind())) + '|' +
         std::to_string(static_cast<int>(pd.get_prop_kind())) + '|' +
         std::to_string(static_cast<int>(pd.get_algorithm())) + '|';
    for (query q : {query::src_md, query::diff_src_md, query::weights_md, query::diff_weights_md,
                    query::dst_md, query::diff_dst_md})
        for (int i = 0; i < 2; ++i) append_md(s, pd.query_md(q, i));
    append_dims(s, pd.get_strides());
    append_dims(s, pd.get_dilations());
    append_dims(s, pd.get_padding_l());
    append_dims(s, pd.get_padding_r());
    const dnnl::post_ops po = pd.get_primitive_attr().get_post_ops();
    for (int i = 0; i < po.len(); ++i) {
        const dnnl::primitive::kind k = po.kind(i);
        s += "po" + std::to_string(static_cast<int>(k)) + ':';
        if (k == dnnl::primitive::kind::eltwise) {
            dnnl::algorithm alg;
            float alpha, beta;
            po.get_params_eltwise(i, alg, alpha, beta);
            s += std::to_string(static_cast<int>(alg)) + ':' + std::to_string(alpha) + ':' +
                 std::to_string(beta) + ';';
        } else if (k == dnnl::primitive::kind::sum) {
            float scale;
            int32_t zero_point;
            dnnl::memory::data_type dt;
            po.get_params_sum(i, scale, zero_point, dt);
            s += std::to_string(scale) + ':' + std::to_string(zero_point) + ':' +
                 std::to_string(static_cast<int>(dt)) + ';';
        } else {
            // A kind this key does not describe: never share it.
            s += "unique" + std::to_string(reinterpret_cast<uintptr_t>(&pd)) + ';';
        }
    }
    s += std::to_string(static_cast<int>(pd.get_primitive_attr().get_scratchpad_mode()));
    return s;
}

dnnl::primitive find_kept(const std::string &key) {
    Kept &k = kept();
    std::lock_guard<std::mutex> lock(k.mutex);
    auto found = k.by_key.find(key);
    return found == k.by_key.end() ? dnnl::primitive() : found->second;
}

void keep(const std::string &key, const dnnl::primitive &p) {
    Kept &k = kept();
    std::lock_guard<std::mutex> lock(k.mutex);
    k.by_key.emplace(key, p);
}

} // namespace mkc
