// Attention in row blocks, one thread per block: see attention.hpp.
#include "ops/attention.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <shared_mutex>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/fresh_thread.hpp"
#include "common/serial.hpp"
#include "common/thread_state.hpp"
#include "ops/matmul.hpp"

namespace mkc::ops {

namespace {

using dt = dnnl::memory::data_type;
constexpr int64_t kFloat = 4;
constexpr size_t kAlign = 64;

// A block's scores are kept within this share of the L2 cache, leaving the
// rest to the head's b and v, which every block of the head reads again.
constexpr int64_t kScoresShareOfL2 = 4;

// Below this many columns (keys) a slice's products are too small for one
// thread's kernels to beat all threads sharing every head's: many short
// sequences of a batch stay three steps, whatever their scores add up to.
constexpr int64_t kFewestColumns = 256;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// One operand of the products as the kernels see one slice of it: the
// element strides of its batch dims (0 where it broadcasts) and of its last
// two dims as read (a transposed read swaps them).
struct Operand {
    Dims batch_strides;
    int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;
};

Operand operand(const char *what, const dnnl::memory::desc &d, const Dims &batch, bool transposed) {
    if (d.get_data_type() != dt::f32 || d.get_format_kind() != dnnl::memory::format_kind::blocked ||
        d.get_inner_nblks() != 0)
        fail(MKC_STATUS_UNSUPPORTED, "attention: ", what, " is not plain float32");
    Dims dims = d.get_dims(), strides = d.get_strides();
    const size_t rank = batch.size() + 2;
    if (dims.size() > rank || dims.empty())
        fail(MKC_STATUS_UNSUPPORTED, "attention: ", what, " has another rank");
    // A lower rank (an addend) broadcasts from the last dims.
    dims.insert(dims.begin(), rank - dims.size(), 1);
    strides.insert(strides.begin(), rank - strides.size(), 0);
    Operand o;
    for (size_t i = 0; i < batch.size(); ++i) {
        if (dims[i] != batch[i] && dims[i] != 1)
            fail(MKC_STATUS_UNSUPPORTED, "attention: ", what, "'s batch dims differ");
        o.batch_strides.push_back(dims[i] == 1 ? 0 : strides[i]);
    }
    const size_t r = transposed ? rank - 1 : rank - 2, c = transposed ? rank - 2 : rank - 1;
    o.rows = dims[r];
    o.cols = dims[c];
    o.row_stride = strides[r];
    o.col_stride = strides[c];
    return o;
}

// `rows` rows of operand `o` (a broadcast row: one) as a 2-D description.
dnnl::memory::desc slice_desc(const Operand &o, int64_t rows) {
    if (o.rows == 1) // one row, broadcast: its stride is no matter (oneDNN wants one > 0)
        return dnnl::memory::desc({1, o.cols}, dt::f32, {o.cols * o.col_stride, o.col_stride});
    return dnnl::memory::desc({rows, o.cols}, dt::f32, {o.row_stride, o.col_stride});
}

// While one lives, this thread builds primitives for one thread (oneDNN
// fixes a kernel's work split when it builds it).
class OneThread {
public:
    OneThread() : previous_(openmp_max_threads()) {
        if (previous_ > 1) set_openmp_max_threads(1);
    }
    ~OneThread() {
        if (previous_ > 1) set_openmp_max_threads(previous_);
    }
    OneThread(const OneThread &) = delete;
    OneThread &operator=(const OneThread &) = delete;

private:
    int previous_;
};

// The three primitives for blocks of `rows` rows.
struct Block {
    int64_t rows = 0;
    dnnl::primitive scores, softmax, context;
    dnnl::memory::desc a, b, addend, s, v, y;
    int addend_arg = 0;
    size_t scratchpad = 0; // the largest of the three's
    std::string kernels;   // "<scores>/<softmax>/<context>"
};

std::string kernel_of(const dnnl::primitive_desc_base &pd) { return pd.impl_info_str(); }

struct AttentionEntry : PrimitiveEntry {
    Dims batch;                          // the result's batch dims
    Operand a, b, addend, v, y;
    bool has_addend = false;
    int64_t rows = 0, cols = 0;          // the scores' [S, S2]
    Block full, tail;                    // blocks of full.rows rows; the last one's
    int64_t blocks_per_slice = 0, slices = 0;
    size_t scores_bytes = 0;             // one block's, aligned
};

Block make_block(const AttentionEntry &e, int64_t rows, float scale) {
    Block k;
    k.rows = rows;
    k.a = slice_desc(e.a, rows);
    k.b = slice_desc(e.b, e.b.rows);
    k.v = slice_desc(e.v, e.v.rows);
    k.y = slice_desc(e.y, rows);
    k.s = dnnl::memory::desc({rows, e.cols}, dt::f32, dnnl::memory::format_tag::ab);
    if (e.has_addend) k.addend = slice_desc(e.addend, rows);
    // The scores' post-ops as the matmul node's: its scale, then its addend.
    const dnnl::primitive_attr attr =
        activation_attr(MKC_ACTIVATION_NONE, 0.f, 0.f, scale, false,
                        e.has_addend ? &k.addend : nullptr, &k.addend_arg);
    OneThread one;
    // As every primitive of the library's is made: with fork() held off,
    // and on a fresh thread after a kernel failed to generate on this one.
    std::shared_lock<std::shared_mutex> creating(primitive_creation_mutex());
    return create_isolated([&] {
        Block made = k;
        const dnnl::matmul::primitive_desc spd(cpu_engine(), k.a, k.b, k.s, attr);
        const dnnl::softmax_forward::primitive_desc mpd(
            cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate,
            k.s, k.s, 1, user_scratchpad_attr());
        const dnnl::matmul::primitive_desc cpd(cpu_engine(), k.s, k.v, k.y,
                                               user_scratchpad_attr());
        made.scores = dnnl::matmul(spd);
        made.softmax = dnnl::softmax_forward(mpd);
        made.context = dnnl::matmul(cpd);
        made.scratchpad = std::max({spd.scratchpad_desc().get_size(),
                                    mpd.scratchpad_desc().get_size(),
                                    cpd.scratchpad_desc().get_size()});
        made.kernels = kernel_of(spd) + "/" + kernel_of(mpd) + "/" + kernel_of(cpd);
        return made;
    });
}

// Element offset of slice `s` (row-major over the batch dims) in an operand.
int64_t slice_offset(const Dims &batch, const Dims &strides, int64_t s) {
    int64_t off = 0;
    for (size_t i = batch.size(); i-- > 0;) {
        off += (s % batch[i]) * strides[i];
        s /= batch[i];
    }
    return off;
}

// A run's blocks, shared by the threads; the first error any of them met.
struct Work {
    const AttentionEntry &e;
    const Buffers &buffers;
    std::mutex failed_mutex;
    std::exception_ptr failed;
};

// Points memory object `m` at `data`, `offset` floats in.
void bind(dnnl::memory &m, const void *data, int64_t offset) {
    m.set_data_handle(const_cast<float *>(static_cast<const float *>(data)) + offset);
}

void run_blocks(const AttentionEntry &e, const Buffers &buffers, int64_t begin, int64_t end) {
    ThreadState &state = thread_state();
    const size_t scratchpad = std::max(e.full.scratchpad, e.tail.scratchpad);
    char *scratch = static_cast<char *>(state.scratchpad(e.scores_bytes + scratchpad));
    const auto &eng = cpu_engine();
    struct Bound {
        dnnl::memory a, b, addend, s, v, y, pad;
    };
    auto memories = [&](const Block &k) {
        Bound m{dnnl::memory(k.a, eng, nullptr), dnnl::memory(k.b, eng, nullptr),
                k.addend_arg ? dnnl::memory(k.addend, eng, nullptr) : dnnl::memory(),
                dnnl::memory(k.s, eng, scratch), dnnl::memory(k.v, eng, nullptr),
                dnnl::memory(k.y, eng, nullptr), dnnl::memory()};
        if (scratchpad > 0)
            m.pad = dnnl::memory({{static_cast<int64_t>(scratchpad)}, dt::u8, {1}}, eng,
                                 scratch + e.scores_bytes);
        return m;
    };
    Bound full = memories(e.full), tail;
    if (e.tail.rows > 0) tail = memories(e.tail);
    for (int64_t w = begin; w < end; ++w) {
        const int64_t slice = w / e.blocks_per_slice, block = w % e.blocks_per_slice;
        const int64_t row0 = block * e.full.rows;
        const bool last = row0 + e.full.rows > e.rows;
        const Block &k = last ? e.tail : e.full;
        Bound &m = last ? tail : full;
        bind(m.a, buffers.in[0],
             slice_offset(e.batch, e.a.batch_strides, slice) + row0 * e.a.row_stride);
        bind(m.b, buffers.in[1], slice_offset(e.batch, e.b.batch_strides, slice));
        if (k.addend_arg)
            bind(m.addend, buffers.in[2],
                 slice_offset(e.batch, e.addend.batch_strides, slice) +
                     (e.addend.rows == 1 ? 0 : row0 * e.addend.row_stride));
        bind(m.v, buffers.in[3], slice_offset(e.batch, e.v.batch_strides, slice));
        bind(m.y, buffers.out[0],
             slice_offset(e.batch, e.y.batch_strides, slice) + row0 * e.y.row_stride);
        // Each primitive's arguments, the scratchpad (when any) last.
        const dnnl_exec_arg_t pad{DNNL_ARG_SCRATCHPAD, m.pad.get(true)};
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m.a.get()},
                                   {DNNL_ARG_WEIGHTS, m.b.get()},
                                   {DNNL_ARG_DST, m.s.get()}};
        int n = 3;
        if (k.addend_arg) args[n++] = {k.addend_arg, m.addend.get()};
        if (scratchpad > 0) args[n++] = pad;
        execute(state, k.scores.get(), n, args);
        n = 0;
        args[n++] = {DNNL_ARG_SRC, m.s.get()};
        args[n++] = {DNNL_ARG_DST, m.s.get()};
        if (scratchpad > 0) args[n++] = pad;
        execute(state, k.softmax.get(), n, args);
        n = 0;
        args[n++] = {DNNL_ARG_SRC, m.s.get()};
        args[n++] = {DNNL_ARG_WEIGHTS, m.v.get()};
        args[n++] = {DNNL_ARG_DST, m.y.get()};
        if (scratchpad > 0) args[n++] = pad;
        execute(state, k.context.get(), n, args);
    }
}

void run_part(void *context, int64_t begin, int64_t end) {
    auto &work = *static_cast<Work *>(context);
    try {
        run_blocks(work.e, work.buffers, begin, end);
    } catch (...) {
        std::lock_guard<std::mutex> lock(work.failed_mutex);
        if (!work.failed) work.failed = std::current_exception();
    }
}

} // namespace

bool attention_in_blocks_pays(int64_t slices, int64_t rows, int64_t cols, int threads) {
    return cols >= kFewestColumns &&
           slices * rows * cols * kFloat > l2_cache_bytes() * std::max(threads, 1);
}

Prepared prepare_attention(const AttentionParts &parts) {
    const Dims a_dims = parts.a.get_dims();
    if (a_dims.size() < 3) fail(MKC_STATUS_UNSUPPORTED, "attention: no batch dims");
    auto e = std::make_shared<AttentionEntry>();
    e->batch.assign(a_dims.begin(), a_dims.end() - 2);
    e->a = operand("a", parts.a, e->batch, false);
    e->b = operand("b", parts.b, e->batch, parts.transpose_b);
    e->v = operand("v", parts.v, e->batch, parts.transpose_v);
    if (e->a.cols != e->b.rows || e->b.cols != e->v.rows)
        fail(MKC_STATUS_UNSUPPORTED, "attention: the products' dims do not meet");
    e->rows = e->a.rows;
    e->cols = e->b.cols;
    Dims y_dims = e->batch;
    y_dims.push_back(e->rows);
    y_dims.push_back(e->v.cols);
    Dims y_strides = parts.y_strides ? *parts.y_strides : row_major_strides(y_dims);
    const dnnl::memory::desc y(y_dims, dt::f32, y_strides);
    e->y = operand("the result", y, e->batch, false);
    if (parts.addend) {
        e->has_addend = true;
        e->addend = operand("the addend", *parts.addend, e->batch, false);
        if ((e->addend.rows != 1 && e->addend.rows != e->rows) || e->addend.cols != e->cols)
            fail(MKC_STATUS_UNSUPPORTED,
                 "attention: the addend does not broadcast into the scores");
    }
    e->slices = dims_product(e->batch);
    // As many rows as fit the share, in blocks of near equal size.
    const int64_t share = l2_cache_bytes() / kScoresShareOfL2;
    const int64_t most = std::max<int64_t>(16, share / (e->cols * kFloat));
    const int64_t blocks = (e->rows + most - 1) / most;
    const int64_t rows = std::min(e->rows, ((e->rows + blocks - 1) / blocks + 15) / 16 * 16);
    e->full = make_block(*e, rows, parts.scale);
    if (e->rows % rows) e->tail = make_block(*e, e->rows % rows, parts.scale);
    e->blocks_per_slice = (e->rows + rows - 1) / rows;
    e->scores_bytes = aligned(static_cast<size_t>(rows * e->cols * kFloat));
    e->bytes = e->scores_bytes + std::max(e->full.scratchpad, e->tail.scratchpad);

    Prepared out;
    out.takes = {parts.a, parts.b, parts.addend ? *parts.addend : dnnl::memory::desc(), parts.v};
    ValueDesc result;
    result.dtype = MKC_DTYPE_F32;
    result.layout = parts.layout;
    result.dims = y_dims;
    result.desc = y;
    out.outputs = {result};
    out.entry = e;
    return out;
}

std::string attention_kernels(const PrimitiveEntry &entry) {
    return static_cast<const AttentionEntry &>(entry).full.kernels;
}

void run_attention(const CacheScope &, PrimitiveEntry &entry, const Buffers &buffers) {
    const auto &e = static_cast<const AttentionEntry &>(entry);
    Work work{e, buffers, {}, {}};
    parallel_parts(e.slices * e.blocks_per_slice, 1, run_part, &work);
    if (work.failed) std::rethrow_exception(work.failed);
}

} // namespace mkc::ops
