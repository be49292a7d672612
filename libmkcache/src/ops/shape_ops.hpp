// concat, transpose, reshape and to_layout as phases (see ops/phases.hpp).
// transpose, reshape and to_layout are one reorder each: their entry is the
// cached reorder primitive.
#pragma once

#include <vector>

#include "ops/phases.hpp"

namespace mkc::ops {

// A concat's one attribute: the axis of the caller's dims (negative counts
// from the end). Its keys carry the axis counted from the front (also the
// suffix).
struct ConcatAttrs {
    int axis;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("axis", axis);
    }
};

// srcs (1 .. 4096, same rank, dtype and caller layout) -> dst in the
// first's caller layout. prepare takes at most as many as one oneDNN
// concat joins (the eager call joins more in runs).
struct ConcatOp {
    using Attrs = ConcatAttrs;
    static ValueDesc infer(const Attrs &attrs, const std::vector<ValueDesc> &srcs);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const std::vector<ValueDesc> &srcs);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src -> its caller dims permuted by `perm` (dst axis i is src axis
// perm[i]), row-major, labelled channels-first.
struct TransposeAttrs {
    int n;
    const int *perm;
};
struct TransposeOp {
    using Attrs = TransposeAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src's values in its caller row-major order with new dims (one may be
// -1), row-major, labelled channels-first.
struct ReshapeAttrs {
    int ndims;
    const int64_t *dims;
};
struct ReshapeOp {
    using Attrs = ReshapeAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src in a named arrangement: "NCHW", "NHWC", "nChw16c", ... (see
// mkc_to_layout).
struct ToLayoutAttrs {
    const char *format;
};
struct ToLayoutOp {
    using Attrs = ToLayoutAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
