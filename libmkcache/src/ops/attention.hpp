// Attention as one step: scores = a @ b (times a scale, plus an addend),
// softmax over the scores' last dim, then scores @ v - three nodes a
// program runs as one when the scores of all heads outgrow the caches of
// the threads in use.
//
// Run separately, the three steps each stream the whole [heads, S, S2]
// scores through memory: written, read and written again, read. Here each
// thread takes whole (batch, head) slices in blocks of rows, keeps one
// block's scores in a buffer of its own that stays in its L2 cache, and
// runs the three products on it with primitives built for one thread. No
// scores buffer of all heads exists at all.
#pragma once

#include <cstdint>
#include <string>

#include "ops/phases.hpp"

namespace mkc::ops {

// The three nodes' operands as a program holds them: plain strided float32
// arrangements with the same batch dims ([..., S, D], [..., D, S2] read as
// b - or [..., S2, D] with transpose_b - and [..., S2, Dv] likewise; the
// addend broadcasts into [..., S, S2]).
struct AttentionParts {
    dnnl::memory::desc a, b, v;
    const dnnl::memory::desc *addend = nullptr; // null: none
    bool transpose_b = false, transpose_v = false;
    float scale = 1.f;
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST; // the result's caller layout
    const Dims *y_strides = nullptr; // the result's strides (a transpose after it); null: row-major
};

// Whether running in blocks pays: the scores of all `slices` (batch times
// heads) of [rows, cols] floats outgrow the L2 caches of `threads` threads,
// and a slice has enough columns (keys) for one thread's kernels.
bool attention_in_blocks_pays(int64_t slices, int64_t rows, int64_t cols, int threads);

// The entry for these operands (the plan's own, not the cache's: it is
// three primitives per block size, built for one thread). `takes`: a, b,
// addend (or an empty desc), v, each read where it is; `outputs`: the
// result. Throws UNSUPPORTED where an operand is not plain float32 or the
// batch dims differ, ONEDNN_ERROR where oneDNN builds no primitive.
Prepared prepare_attention(const AttentionParts &parts);

// "<scores>/<softmax>/<context>": oneDNN's kernels for the entry's blocks.
std::string attention_kernels(const PrimitiveEntry &entry);

// Buffers: in = a, b, addend (null: none), v; out = the result.
void run_attention(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);

} // namespace mkc::ops
