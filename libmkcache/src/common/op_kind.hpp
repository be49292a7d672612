// The operator list: one value per kind of primitive the library builds,
// the first word of every signature and every remembered-call key, so two
// operators can never share an entry through an equal argument list.
#pragma once

#include <cstdint>

namespace mkc {

enum class OpKind : int64_t {
    convolution = 1,
    activation = 2,
    reorder = 3,
    softmax = 4,
    binary = 5,
    pooling = 6,
    linear = 7,
    matmul = 8,
    layer_norm = 9,
    batch_norm = 10,
    lrn = 11,
    concat = 12,
    deconvolution = 13,
    reduction = 14,
    resampling = 15,
    // Backward primitives: what a forward's kind and these tell apart.
    backward_data = 100,
    backward_weights = 101,
    activation_backward = 102,
    softmax_backward = 104,
    layer_norm_backward = 109,
    batch_norm_backward = 110,
    lrn_backward = 111,
    reduce_sum = 112, // a binary op's gradient reduced to an operand's shape
};

// The kind's bits in a remembered-call word (above the 40 bits the
// operators pack their small arguments into).
constexpr int64_t kind_word(OpKind kind) { return static_cast<int64_t>(kind) << 40; }

} // namespace mkc
