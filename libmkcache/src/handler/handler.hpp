// The handler base: create-or-fetch a primitive, bind, execute.
//
// An operator derives nothing from the cache: it describes itself to a
// Handler (key parts + a signature of everything its primitive depends on)
// and hands it a function that builds the primitive on a miss. The handler
// creates-or-fetches the entry through the blob cache, converts inputs that
// arrive in another layout, binds memory and executes.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "cache/build_once.hpp"
#include "cache/front_cache.hpp"
#include "common/engine.hpp"
#include "common/fresh_thread.hpp"
#include "common/op_kind.hpp"
#include "common/small_dims.hpp"
#include "common/thread_state.hpp"
#include "common/cache_scope.hpp"
#include "layout/layout.hpp"
#include "tensor/tensor.hpp"

namespace mkc {

// The value mkc_tensor::layout_match holds for (entry, argument).
inline uint64_t layout_match_key(uint64_t entry_id, int arg_id) {
    return (entry_id << 20) | static_cast<uint64_t>(arg_id & 0xfffff);
}

// Pseudo arguments (above every DNNL_ARG_*) under which a tensor remembers it
// passed a check of an entry that is no primitive argument's layout
// (PrimitiveEntry::matches): kept together so no two operators share one.
constexpr int kPlainWeightsCheck = 0xffff; // conv: grouped/transposed weights are plain
constexpr int kPlainSrc1Check = 0xfffe;    // binary: a broadcast-viewed src1 is plain

// What every cached operator entry holds. Operators derive from it to keep
// what their calls need beside the primitive (descriptor_of: not its
// descriptor).
struct PrimitiveEntry {
    PrimitiveEntry();
    virtual ~PrimitiveEntry() = default;

    const uint64_t id; // unique for the process, never reused
    // Does `t` (already) have exactly the layout this entry wants for
    // `arg_id`? Remembered in the tensor, see mkc_tensor::layout_match.
    bool matches(const Tensor &t, int arg_id, const dnnl::memory::desc &want) const;
    // The same against the layout the primitive takes for `arg_id`.
    bool takes_as_is(const Tensor &t, int arg_id) const {
        return matches(t, arg_id, arg_desc(arg_id));
    }

    std::vector<int64_t> signature;               // what the primitive was built for
    std::vector<dnnl::memory::desc> exact_inputs; // input layouts it was built for, if any
    dnnl::primitive primitive;
    std::vector<int> arg_ids;                     // DNNL_ARG_* of each argument
    std::vector<dnnl::memory::desc> arg_descs;    // the layout the primitive wants per arg
    size_t bytes = 0;                             // scratchpad etc., for the cache figures

    // Memory objects reused on the hit path: whoever grabs `busy` swaps the
    // data handles; a concurrent caller of the same entry builds its own.
    std::atomic<bool> busy{false};
    std::vector<dnnl::memory> memories; // empty until an execution binds one
    std::vector<void *> bound; // the data handle each of `memories` holds now
    // Per argument, the constant tensor's converted copy bound last time,
    // under the tensor's converted_stamp: a repeat binds it without the
    // tensor's lock (also only by whoever holds `busy`).
    struct ConvertedMemo {
        uint64_t stamp = 0;
        void *copy = nullptr;
    };
    std::vector<ConvertedMemo> converted_memo;

    // Registers the scratchpad argument the primitive needs (if any) and
    // records its size; Execution::run binds the thread's scratchpad to it.
    void add_scratchpad(const dnnl::primitive_desc_base &pd);
    size_t scratchpad_bytes = 0;

    // Fills arg_ids/arg_descs/memories from a primitive descriptor query.
    void set_args(const std::vector<std::pair<int, dnnl::memory::desc>> &args);
    // The same, each argument's layout queried from the primitive
    // descriptor, plus the scratchpad it needs (add_scratchpad).
    void set_args(const dnnl::primitive_desc_base &pd, const std::vector<int> &arg_ids);
    // The position of an argument in arg_ids (a table lookup for the usual
    // DNNL_ARG_* ids: a call asks this for every argument it binds).
    int arg_index(int arg_id) const {
        if (static_cast<unsigned>(arg_id) < kDirectArgIds && direct_index_[arg_id] >= 0)
            return direct_index_[arg_id];
        return arg_index_searched(arg_id);
    }
    bool has_arg(int arg_id) const;
    // The layout the primitive wants for an argument (no descriptor copy).
    const dnnl::memory::desc &arg_desc(int arg_id) const { return arg_descs[arg_index(arg_id)]; }

private:
    static constexpr unsigned kDirectArgIds = 256; // SRC .. DIFF_BIAS, SCRATCHPAD, ...
    int8_t direct_index_[kDirectArgIds]; // arg_id -> index, -1 = not an argument
    int arg_index_searched(int arg_id) const;
};

// A copy of the descriptor `primitive` was built from. Entries keep their
// primitive and not its descriptor: the primitive holds a copy of its own,
// and one kept beside it (with what oneDNN keeps to walk to the next
// implementation) would double what every entry holds, for a brgemm matmul
// more than its generated code. The rare caller that needs a descriptor
// later (a backward primitive's hint) makes one here.
template <typename PrimitiveDesc>
PrimitiveDesc descriptor_of(const dnnl::primitive &primitive) {
    // The constructor copies the descriptor it is given (and checks its
    // kind); the primitive keeps its own.
    return PrimitiveDesc(const_cast<dnnl_primitive_desc_t>(primitive.get_primitive_desc()));
}

// Attributes every primitive is built with: the scratchpad is ours (see
// ThreadState::scratchpad), passed at execution.
dnnl::primitive_attr user_scratchpad_attr();

// `t` if it is laid out as `want` (same dims), else a converted copy kept
// in `holder`.
const Tensor &as_layout(const CacheScope &scope, const Tensor &t, const dnnl::memory::desc &want,
                        std::unique_ptr<Tensor> &holder);
// `t` if it is row-major in its caller's order, else a row-major copy.
const Tensor &row_major(const CacheScope &scope, const Tensor &t, std::unique_ptr<Tensor> &holder);

// Executes `primitive` with its arguments bound on the calling thread's
// stream (`state` is its state), waiting for it where the runtime does not
// return when it is done.
void execute(ThreadState &state, dnnl_primitive_t primitive, int nargs,
             const dnnl_exec_arg_t *args);

// A library-wide count of layout conversions (reorders) executed, so tests
// can prove a chain of operators performs none between them.
uint64_t reorder_count();

// Refuses (UNSUPPORTED) a rearrangement of int64 data, which oneDNN cannot
// copy as it is.
void check_rearrangeable(const dnnl::memory::desc &from, const dnnl::memory::desc &to);
// Converts `src_data` laid out as `from` into `dst_data` laid out as `to`
// (same dims) with a reorder primitive cached in `scope`.
void reorder(const CacheScope &scope, const dnnl::memory::desc &from, const void *src_data,
             const dnnl::memory::desc &to, void *dst_data);
// The same in two steps: the cached reorder entry from `from` to `to`, and
// one execution of it (counted by reorder_count).
std::shared_ptr<PrimitiveEntry> reorder_entry(const CacheScope &scope,
                                              const dnnl::memory::desc &from,
                                              const dnnl::memory::desc &to);
void run_reorder(const CacheScope &scope, PrimitiveEntry &entry, const void *src_data,
                 void *dst_data);

// What a training forward leaves its grad op (see Handler::leave_transfer).
struct Transfer {
    std::vector<int64_t> signature;          // the forward's (set by leave_transfer)
    std::shared_ptr<PrimitiveEntry> forward; // its entry: the training primitive descriptor
    // No data of one execution (max-pool indices, the LRN workspace,
    // layer-norm statistics) comes along: it is right only for the values
    // the forward read, and telling whether a backward's src still holds
    // them means reading all of src - as costly as recomputing the data,
    // which the backward does. A data address cannot tell: a new array may
    // sit where a freed one was, and a caller may refill a buffer.
};

class Handler {
public:
    // `name` may be null/empty: `default_name` is used then. `key_dims` is
    // the input shape that goes into the key. `scope` outlives the handler.
    Handler(const CacheScope &scope, const char *op, const char *name, const char *default_name,
            const char *suffix, const Dims &key_dims);

    Handler(const Handler &) = delete;
    Handler &operator=(const Handler &) = delete;
    ~Handler();

    // Signature: everything (besides names) the primitive depends on. Kept
    // in a fixed array: the hit path allocates nothing.
    void sign(OpKind kind) { sign(static_cast<int64_t>(kind)); }
    void sign(int64_t v) {
        if (signature_size_ < kMaxSignature) signature_[signature_size_++] = v;
        else signature_spill_.push_back(v); // rare: e.g. concat of many inputs
    }
    void sign(const Dims &dims) { sign_range(dims.data(), dims.size()); }
    void sign(const int64_t *values, size_t n) { sign_range(values, n); } // n, then the values
    void sign(const SmallDims &dims) { sign_range(dims.data(), dims.size()); }
    void sign_float(float v);
    // A value the primitive is built on: its dims and its element type,
    // which a primitive depends on as much as on the dims (an entry built
    // for float32 values must never serve bf16 ones of the same shape). A
    // signature signs a value's dims through these only, never alone.
    void sign_value(const Dims &dims, mkc_dtype dtype) {
        sign_range(dims.data(), dims.size());
        sign(static_cast<int64_t>(dtype));
    }
    // The same for a description of its bytes: dims, data type, strides and
    // inner blocks.
    void sign_value(const dnnl::memory::desc &desc);
    // Input layouts the primitive is built on (e.g. eltwise keeps its
    // input's layout); checked with oneDNN's descriptor equality on a hit.
    // The descriptor must outlive the handler.
    void sign_layout(const dnnl::memory::desc &desc) {
        if (exact_size_ == kMaxExact) overflow();
        exact_inputs_[exact_size_] = &desc;
        exact_tensors_[exact_size_] = nullptr;
        exact_args_[exact_size_++] = 0;
    }
    // The same for a tensor that is the primitive's argument `arg_id` (lets
    // the check use the tensor's remembered match).
    void sign_layout(const Tensor &tensor, int arg_id) {
        sign_layout(tensor.desc);
        exact_tensors_[exact_size_ - 1] = &tensor;
        exact_args_[exact_size_ - 1] = arg_id;
    }

    const std::string &key() const { return *key_; }

    // Whether acquire_primitive found its entry in the cache, and the ticket
    // that hit came with: what remembered_entry()'s acquire step reports
    // (an operator's own front cache, see ThreadState::argument_cache).
    void report_hit(BlobCache::HitTicket &ticket, bool &hit) const {
        ticket = ticket_;
        hit = hit_;
    }

    // Forward -> backward: a forward op in training mode leaves
    // `t` under this handler's key without the thread field (the grad op may
    // run on another thread), stamped with the signature. find_transfer()
    // returns it only if the signature matches this handler's exactly, so a
    // grad op never takes what a forward with other arguments left.
    void leave_transfer(const std::shared_ptr<Transfer> &t);
    std::shared_ptr<Transfer> find_transfer();

    // Fetches the entry for this key and signature, or builds and stores it
    // with `build()` (-> std::shared_ptr<Entry>). A template, not a
    // std::function: wrapping the builder would allocate on every hit.
    // Threads missing one shared key at once build it once (BuildOnce).
    template <typename Entry, typename Build>
    std::shared_ptr<Entry> acquire_primitive(Build &&build) {
        auto found = lookup();
        if (found) return std::static_pointer_cast<Entry>(found);
        for (;;) {
            BuildOnce::Claim claim = claim_build();
            if (claim.owner()) {
                claim.before_build();
                std::shared_ptr<Entry> entry;
                {
                    std::shared_lock<std::shared_mutex> creating(primitive_creation_mutex());
                    entry = create_isolated(build);
                }
                store(entry);
                return entry; // the claim is released after the store
            }
            claim.wait();
            // What the owner stored (if it succeeded, and built it for the
            // same arguments); this call's miss is counted already.
            found = lookup(/*count=*/false);
            if (found) return std::static_pointer_cast<Entry>(found);
        }
    }

    // Binds arguments of one execution. Inputs in a layout other than the
    // primitive's are converted (constant tensors keep the converted copy).
    class Execution {
    public:
        // `scope`: where conversions of its inputs are cached, and the
        // calling thread's state (outlives the execution).
        Execution(PrimitiveEntry &entry, const CacheScope &scope);
        ~Execution();
        Execution(const Execution &) = delete;
        Execution &operator=(const Execution &) = delete;

        // `view` (optional) re-describes the tensor's bytes, e.g. OIHW
        // weights seen as goihw for a grouped convolution.
        void input(int arg_id, const Tensor &tensor, const dnnl::memory::desc *view = nullptr);
        void output(int arg_id, void *data);
        void raw(int arg_id, void *data); // scratch/workspace memory
        void run();

    private:
        // Arguments of most primitives fit inline; a concat of many inputs
        // gets room on the heap, sized from the entry's argument list.
        static constexpr int kInlineArgs = 12;
        PrimitiveEntry &entry_;
        const CacheScope &scope_;
        ThreadState &state_;
        bool own_slot_ = false;
        std::vector<dnnl::memory> private_memories_; // when the slot is busy
        dnnl_exec_arg_t inline_args_[kInlineArgs];
        std::vector<dnnl_exec_arg_t> heap_args_;
        dnnl_exec_arg_t *args_ = inline_args_;
        int capacity_ = kInlineArgs;
        int nargs_ = 0;
        std::vector<std::shared_ptr<void>> temporaries_;
        dnnl::memory &memory_for(int index);
        void bind(int index, int arg_id, void *data);
        void rebind(int index, dnnl_memory_t memory, void *data);
        // The tensor's data in the layout argument `index` wants: a copy kept
        // in a constant tensor, else a temporary of this execution.
        void *converted(int index, int arg_id, const Tensor &tensor,
                        const dnnl::memory::desc *view);
        void *converted_copy(int index, int arg_id, const Tensor &tensor,
                             const dnnl::memory::desc &have);
        [[noreturn]] static void too_many_args();
    };

    // Produces the output tensor of a call. `*dst` null: a new owned tensor
    // in `desc`. Otherwise the caller's tensor, which must have the dims of
    // `desc`; if it cannot take `desc` directly, the result goes to a
    // temporary that finish_output() reorders into it.
    struct Output {
        Tensor *tensor = nullptr;
        std::unique_ptr<Tensor> created;
        std::shared_ptr<void> temporary;
        void *data = nullptr; // where the primitive writes
        const dnnl::memory::desc *desc = nullptr; // owned by the entry
    };
    static Output prepare_output(mkc_tensor **dst, const PrimitiveEntry &entry, int arg_id,
                                 mkc_layout layout, mkc_dtype dtype, const char *op);
    static void finish_output(const CacheScope &scope, Output &out, mkc_tensor **dst);

    // The whole call of a one-input, one-output primitive (SRC -> DST):
    // output, binding, execution.
    static void run_src_dst(const CacheScope &scope, PrimitiveEntry &entry, const Tensor &src,
                            mkc_tensor **dst, mkc_layout out_layout, const char *op);
    // The same for two inputs and a result argument (e.g. a backward:
    // SRC + DIFF_DST -> DIFF_SRC).
    static void run_two_inputs(const CacheScope &scope, PrimitiveEntry &entry, int arg_a,
                               const Tensor &a, int arg_b, const Tensor &b, int result_arg,
                               mkc_tensor **dst, mkc_layout out_layout, const char *op);
    // Executes a training forward (SRC -> DST) into `dst_data`; when the
    // primitive has a workspace (max-pool indices, LRN), it goes to a new
    // buffer returned in `workspace` (new each call: a grad op still reading
    // the previous one keeps it alive).
    static void run_training_forward(const CacheScope &scope, PrimitiveEntry &entry,
                                     const Tensor &src, void *dst_data,
                                     std::shared_ptr<void> &workspace);
    // The workspace `backward` needs for `src` (null if it takes none),
    // computed by running the training forward `forward()` returns.
    static std::shared_ptr<void>
    workspace_for(const CacheScope &scope, const PrimitiveEntry &backward, const Tensor &src,
                  const std::function<std::shared_ptr<PrimitiveEntry>()> &forward, const char *op);

    // `src` if it is laid out as `plain` (remembered per tensor), else a
    // converted copy kept in `holder`.
    static const Tensor &plain_input(const CacheScope &scope, const PrimitiveEntry &entry,
                                     int arg_id, const Tensor &src, const dnnl::memory::desc &plain,
                                     std::unique_ptr<Tensor> &holder);
    // The tensor a plain (row-major) result goes to: `*dst` (re-described if
    // it is owned and laid out otherwise) or a new one kept in `created`
    // until publish().
    static Tensor &plain_output(const PrimitiveEntry &entry, int arg_id, mkc_tensor **dst,
                                const dnnl::memory::desc &plain, mkc_layout layout,
                                std::unique_ptr<Tensor> &created, const char *op);
    // Hands a new tensor to the caller (registers the handle).
    static void publish(std::unique_ptr<Tensor> &created, mkc_tensor **dst);

    // A result the caller receives row-major (weight gradients, statistics)
    // with caller dims `plain`. `view` describes those bytes with the dims
    // the primitive uses (e.g. OIHW weights as goihw); the primitive writes
    // straight into the result when its layout for `arg_id` is `view`, else
    // into a temporary that finish() reorders.
    class PlainResult {
    public:
        PlainResult(const CacheScope &scope, const PrimitiveEntry &entry, int arg_id,
                    mkc_tensor **dst, const dnnl::memory::desc &plain,
                    const dnnl::memory::desc &view, const char *op);
        void *data() const { return data_; }
        void finish(); // after the execution: converts, hands the tensor over

    private:
        const CacheScope &scope_;
        mkc_tensor **dst_;
        std::unique_ptr<Tensor> created_;
        Tensor *tensor_;
        const dnnl::memory::desc *have_;
        dnnl::memory::desc view_ = empty_desc();
        std::shared_ptr<void> temporary_;
        void *data_;
    };

private:
    static constexpr int kMaxSignature = 64;
    static constexpr int kMaxExact = 4;

    // A PrimitiveEntry for this key and signature; `count`: as a hit or a
    // miss in the cache figures.
    std::shared_ptr<void> lookup(bool count = true);
    BuildOnce::Claim claim_build(); // a claim owning nothing for thread-bound keys
    bool usable(const PrimitiveEntry &entry) const; // built for exactly this call
    std::shared_ptr<void> find_blob(); // front cache, else the shared maps
    void store(const std::shared_ptr<PrimitiveEntry> &entry);
    bool signature_equals(const std::vector<int64_t> &sig) const;
    std::vector<int64_t> signature() const;
    std::string transfer_key() const;
    [[noreturn]] void overflow() const;
    void sign_range(const int64_t *dims, size_t n) { // its size, then its values
        if (signature_size_ + 1 + n <= kMaxSignature) { // one copy, not n bounds checks
            signature_[signature_size_] = static_cast<int64_t>(n);
            if (n > 0) std::memcpy(signature_ + signature_size_ + 1, dims, n * sizeof(int64_t));
            signature_size_ += static_cast<int>(n) + 1;
            return;
        }
        sign(static_cast<int64_t>(n));
        for (size_t i = 0; i < n; ++i) sign(dims[i]);
    }

    const char *op_;
    const CacheScope &scope_;
    ThreadState &state_;
    const int threads_;            // the OpenMP thread count of this call (signed)
    const uint64_t memo_context_;  // memo_context_now(scope_, threads_)
    std::string *key_;   // a per-thread buffer (one per nesting level)
    // What the front cache knows this call by (dims copied: the caller's
    // may be a temporary), and the blob it found when constructed.
    uint64_t call_hash_;
    static constexpr int kMaxKeyDims = 8; // calls with more are not remembered
    int64_t call_dims_[kMaxKeyDims];
    int call_ndims_;
    std::shared_ptr<void> front_blob_;
    BlobCache::HitTicket ticket_; // of the front cache's blob, then of the hit
    bool hit_ = false;
    int64_t signature_[kMaxSignature];
    int signature_size_ = 0;
    std::vector<int64_t> signature_spill_;
    const dnnl::memory::desc *exact_inputs_[kMaxExact];
    const Tensor *exact_tensors_[kMaxExact];
    int exact_args_[kMaxExact];
    int exact_size_ = 0;
};

// An operator's entry through the thread's argument cache: the one a call
// with equal raw arguments (`args`, a CallWords, and the name's text) got
// last time, if the cache still holds it and `usable(entry)` (what can
// differ between such calls, e.g. src's exact layout); else the one
// `acquire(ticket, hit)` gets through a Handler, remembered when that was a
// cache hit. A remembered entry's hit is counted as the Handler's would be.
// The result points to an Entry; it is returned as the cache holds it (a
// shared_ptr<Entry> copy would cost two more atomic operations per call).
template <typename Entry, typename Words, typename Usable, typename Acquire>
std::shared_ptr<void> remembered_entry(ThreadState &state, const CacheScope &scope,
                                       const Words &args, const char *name, Usable &&usable,
                                       Acquire &&acquire) {
    const FrontCache::Call call = args.call(name);
    BlobCache::HitTicket ticket;
    if (args.fits()) {
        auto blob = state.argument_cache().find(call, memo_context_now(scope), ticket);
        if (blob && usable(*static_cast<Entry *>(blob.get()))) {
            BlobCache::instance().count_hit(ticket, state.stripe);
            return blob;
        }
    }
    bool hit = false;
    std::shared_ptr<void> entry = acquire(ticket, hit);
    if (hit && args.fits())
        state.argument_cache().remember(call, memo_context_now(scope), entry, ticket);
    return entry;
}

// remembered_entry() for operators whose training calls leave data for
// their grad op through the Handler of a full lookup: a training call takes
// that path (acquire) every time, an inference call goes through the
// argument cache.
template <typename Entry, typename Words, typename Usable, typename Acquire>
std::shared_ptr<void> remembered_inference_entry(bool training, ThreadState &state,
                                                 const CacheScope &scope, const Words &args,
                                                 const char *name, Usable &&usable,
                                                 Acquire &&acquire) {
    if (training) {
        BlobCache::HitTicket ticket;
        bool hit = false;
        return acquire(ticket, hit);
    }
    return remembered_entry<Entry>(state, scope, args, name, usable, acquire);
}

} // namespace mkc
