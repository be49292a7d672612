// The shapes of a batched matmul, whatever its dtypes: the float32 /
// bfloat16 matmul and the 8-bit one read their operands, broadcast their
// batch dims and add an addend the same way.
#pragma once

#include <algorithm>
#include <utility>

#include "common/dims.hpp"
#include "common/error.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

// Dims of a matmul call, all padded to the same rank n: a and b as read
// (transposes applied through the strides of their bytes) and the result.
struct MatmulGeometry {
    Dims ac, bc, a_strides, b_strides, yc;
    Dims addend; // its caller dims padded to the result's rank; empty: none
    int64_t n = 0;
    mkc_dtype dtype = MKC_DTYPE_F32;   // a's and b's (and the result's)
    mkc_dtype b_dtype = MKC_DTYPE_F32; // the bias's, when there is one
};

// The strides of an operand's bytes in its caller order. A tensor's are
// row-major (the eager call makes them so first). A described value's are
// its arrangement's when that is a strided one - in a program, a transpose
// or reshape of another value's bytes, read where they are - else
// row-major (the program converts it first).
inline Dims operand_strides(const Tensor &t) { return row_major_strides(caller_dims(t)); }
inline Dims operand_strides(const ValueDesc &v) {
    Dims strides;
    if (layout::caller_strides(v.desc, v.layout, strides)) return strides;
    return row_major_strides(caller_dims(v));
}

// What a matmul reads an operand as in a program: its own arrangement when
// that is a strided one (operand_strides), else its bytes row-major.
inline dnnl::memory::desc operand_takes(const ValueDesc &v) {
    Dims strides;
    if (layout::caller_strides(v.desc, v.layout, strides)) return v.desc;
    return layout::plain_desc(v.dims, to_onednn(v.dtype), v.layout);
}

// `strides` for `dims` padded with leading 1s to rank n.
inline void pad_strides(Dims &strides, const Dims &dims, size_t n) {
    const int64_t outer = dims.empty() ? 1 : dims[0] * strides[0];
    strides.insert(strides.begin(), n - strides.size(), outer);
}

// a [..., M, K] @ b [..., K, N] (either read with its last two dims
// swapped), numpy's broadcasting of the batch dims, a bias [N] and an
// addend broadcasting into the result: the checks of the shapes, `op`
// naming the operator in their messages. The dtypes are the caller's to
// check.
template <typename V>
MatmulGeometry matmul_shapes(const char *op, bool transpose_a, bool transpose_b, const V &a,
                             const V &b, const V *bias, const V *addend) {
    MatmulGeometry g;
    Dims &ac = g.ac, &bc = g.bc;
    ac = caller_dims(a);
    bc = caller_dims(b);
    require(ac.size() >= 2 && bc.size() >= 2, op, ": a and b must have rank >= 2, got ", ac.size(),
            " and ", bc.size());
    const size_t n = std::max(ac.size(), bc.size());
    g.n = static_cast<int64_t>(n);
    // Memory order is [..., rows, cols]; the views swap the last two when
    // transposed.
    g.a_strides = operand_strides(a);
    g.b_strides = operand_strides(b);
    pad_strides(g.a_strides, ac, n);
    pad_strides(g.b_strides, bc, n);
    ac.insert(ac.begin(), n - ac.size(), 1);
    bc.insert(bc.begin(), n - bc.size(), 1);
    if (transpose_a) {
        std::swap(ac[n - 1], ac[n - 2]);
        std::swap(g.a_strides[n - 1], g.a_strides[n - 2]);
    }
    if (transpose_b) {
        std::swap(bc[n - 1], bc[n - 2]);
        std::swap(g.b_strides[n - 1], g.b_strides[n - 2]);
    }
    const int64_t M = ac[n - 2], K = ac[n - 1], N = bc[n - 1];
    if (bc[n - 2] != K)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": inner dims differ: a is ",
             shape_text(caller_dims(a)), transpose_a ? " (transposed)" : "", ", b is ",
             shape_text(caller_dims(b)), transpose_b ? " (transposed)" : "",
             "; need a[..., K] @ b[K, ...]");
    Dims &yc = g.yc;
    yc.resize(n);
    for (size_t i = 0; i + 2 < n; ++i) {
        if (!(ac[i] == bc[i] || ac[i] == 1 || bc[i] == 1))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": batch dims ", shape_text(caller_dims(a)),
                 " and ", shape_text(caller_dims(b)), " do not broadcast");
        yc[i] = std::max(ac[i], bc[i]);
    }
    yc[n - 2] = M;
    yc[n - 1] = N;
    check_result_dims(op, yc, MKC_DTYPE_F32);
    if (bias) {
        const Dims &bd = onednn_dims(*bias);
        require(bd.size() == 1 && bd[0] == N, op, ": bias must have shape [", N, "]");
    }
    if (addend) {
        const Dims c = caller_dims(*addend);
        if (!broadcasts_into(c, yc))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": the addend ", shape_text(c),
                 " does not broadcast into the result ", shape_text(yc));
        g.addend = Dims(n - c.size(), 1);
        g.addend.insert(g.addend.end(), c.begin(), c.end());
    }
    return g;
}

} // namespace mkc::ops
