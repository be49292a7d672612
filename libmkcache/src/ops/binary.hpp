// Binary element-wise ops with numpy broadcasting, their gradients and the
// reduction behind them, as phases (see ops/phases.hpp).
//
// run takes a and b each in its own arrangement (prepare's `takes`): the
// operand with the output's shape as the primitive reads it, the broadcast
// one plain in its own (smaller) shape, which the primitive sees through a
// view. The result is arranged as the full operand; when neither operand
// has the output's shape, a is first expanded to it (as the eager call
// does) and the result is plain.
#pragma once

#include "ops/phases.hpp"

namespace mkc::ops {

// A binary op's one attribute: its kind (also the key's suffix, a letter).
struct BinaryAttrs {
    mkc_binary_kind kind;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("kind", kind);
    }
};

// a, b -> dst.
struct BinaryOp {
    using Attrs = BinaryAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &a, const ValueDesc &b);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &a, const ValueDesc &b);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// a, b, diff_dst -> diff_a, diff_b (the shapes and layout labels of a and
// b, plain). Made of binary ops and reductions as the eager call's (the
// name is unused: those share the forward ops' entries); run computes only
// the gradients given a buffer (a null output is skipped) and reads its
// inputs as they are (takes = their own arrangements), converting where a
// step needs another.
struct BinaryBackwardOp {
    using Attrs = BinaryAttrs;
    static std::vector<ValueDesc> infer(const Attrs &attrs, const ValueDesc &a, const ValueDesc &b,
                                        const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &a, const ValueDesc &b, const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// reduce_sum_to's arguments besides its values: the factor and the
// operator named in messages.
struct ReduceSumToAttrs {
    float scale;
    const char *op;
};

// full, like -> full summed over the dims like was broadcast along, times
// scale: like's shape and layout label and full's dtype, plain. Only like's description is
// used (its takes is empty: run reads no buffer for it); full is read
// row-major in its caller order. The entry's name is fixed ("reduce_sum").
struct ReduceSumToOp {
    using Attrs = ReduceSumToAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &full, const ValueDesc &like);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &full, const ValueDesc &like);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
