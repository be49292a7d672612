#include "handler/handler.hpp"

#include <algorithm>
#include <cstring>

#include "cache/blob_cache.hpp"
#include "common/thread_state.hpp"
#include "common/engine.hpp"
#include "common/handles.hpp"
#include "common/serial.hpp"
#include "common/error.hpp"
#include "keys/keys.hpp"

namespace mkc {

namespace {
std::atomic<uint64_t> reorders_executed{0};

void check(dnnl_status_t status, const char *what) {
    if (status != dnnl_success)
        fail(MKC_STATUS_ONEDNN_ERROR, what, " failed with oneDNN status ", static_cast<int>(status));
}

// Cached reorder primitives live in the blob cache like every other object.
struct ReorderEntry : PrimitiveEntry {};
} // namespace

namespace {
std::atomic<uint64_t> next_entry_id{1};

// With oneDNN's sequential, OpenMP or TBB CPU runtime, executing a primitive
// returns when it is done: waiting on the (in-order) stream is a no-op call.
const bool kExecuteBlocks = [] {
    const unsigned runtime = dnnl_version()->cpu_runtime;
    return runtime == DNNL_RUNTIME_SEQ || runtime == DNNL_RUNTIME_OMP ||
           runtime == DNNL_RUNTIME_TBB;
}();
} // namespace

PrimitiveEntry::PrimitiveEntry() : id(next_entry_id.fetch_add(1, std::memory_order_relaxed)) {
    std::fill(std::begin(direct_index_), std::end(direct_index_), int8_t(-1));
}

bool PrimitiveEntry::matches(const Tensor &t, int arg_id, const dnnl::memory::desc &want) const {
    constexpr uint64_t kDiffers = uint64_t(1) << 63;
    const uint64_t key = layout_match_key(id, arg_id);
    const uint64_t memo = t.layout_match.load(std::memory_order_relaxed);
    if (memo == key) return true;
    if (memo == (key | kDiffers)) return false;
    const bool same = t.desc == want;
    t.layout_match.store(same ? key : key | kDiffers, std::memory_order_relaxed);
    return same;
}

void PrimitiveEntry::set_args(const std::vector<std::pair<int, dnnl::memory::desc>> &args) {
    for (auto &a : args) {
        if (static_cast<unsigned>(a.first) < kDirectArgIds && arg_ids.size() < 127 &&
            direct_index_[a.first] < 0)
            direct_index_[a.first] = static_cast<int8_t>(arg_ids.size());
        arg_ids.push_back(a.first);
        arg_descs.push_back(a.second);
        // Made on the first execution that binds it (Execution::memory_for):
        // a program's steps bind memory objects of their own, and an entry
        // of every plan over many input shapes would otherwise hold them.
        memories.emplace_back();
        bound.push_back(nullptr);
        converted_memo.emplace_back();
    }
}

void PrimitiveEntry::set_args(const dnnl::primitive_desc_base &pd, const std::vector<int> &ids) {
    std::vector<std::pair<int, dnnl::memory::desc>> args;
    for (int arg : ids) args.push_back({arg, pd.query_md(dnnl::query::exec_arg_md, arg)});
    set_args(args);
    add_scratchpad(pd);
}

void PrimitiveEntry::add_scratchpad(const dnnl::primitive_desc_base &pd) {
    const auto md = pd.query_md(dnnl::query::scratchpad_md);
    scratchpad_bytes = md.get_size();
    bytes = scratchpad_bytes;
    if (scratchpad_bytes > 0) set_args({{DNNL_ARG_SCRATCHPAD, md}});
}

dnnl::primitive_attr user_scratchpad_attr() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
}

int PrimitiveEntry::arg_index_searched(int arg_id) const {
    for (size_t i = 0; i < arg_ids.size(); ++i)
        if (arg_ids[i] == arg_id) return static_cast<int>(i);
    fail(MKC_STATUS_INTERNAL_ERROR, "primitive has no argument ", arg_id);
}

bool PrimitiveEntry::has_arg(int arg_id) const {
    return std::find(arg_ids.begin(), arg_ids.end(), arg_id) != arg_ids.end();
}

const Tensor &as_layout(const CacheScope &scope, const Tensor &t, const dnnl::memory::desc &want,
                        std::unique_ptr<Tensor> &holder) {
    if (t.desc == want) return t;
    holder = make_owned_tensor(want, t.layout, t.dtype);
    reorder(scope, t.desc, t.data, holder->desc, holder->data);
    return *holder;
}

const Tensor &row_major(const CacheScope &scope, const Tensor &t, std::unique_ptr<Tensor> &holder) {
    return as_layout(scope, t, layout::plain_desc(t.dims, to_onednn(t.dtype), t.layout), holder);
}

uint64_t reorder_count() { return reorders_executed.load(std::memory_order_relaxed); }

void check_rearrangeable(const dnnl::memory::desc &from, const dnnl::memory::desc &to) {
    // f64 descriptions stand for int64 bytes (to_onednn): a oneDNN kernel
    // would read them as doubles, which is not a copy.
    const auto f64 = dnnl::memory::data_type::f64;
    if (from.get_data_type() == f64 || to.get_data_type() == f64)
        fail(MKC_STATUS_UNSUPPORTED,
             "int64 data cannot be rearranged (oneDNN has no 64-bit integer type): "
             "use it in its own plain layout");
}

namespace {

// 16-bit float data moved between plain arrangements, described as pairs of
// bytes: some of oneDNN's reorders move bf16 and f16 through float32 with
// denormals flushed, which is no copy. A plain desc of dims d and strides s
// is the u8 desc of dims d + [2] and strides 2s + [1]. False (the descs left
// alone) for other data, a blocked arrangement or a view at an offset (a
// u8 desc made from dims and strides would lose it).
bool as_byte_pairs(const dnnl::memory::desc &from, const dnnl::memory::desc &to,
                   dnnl::memory::desc &from_bytes, dnnl::memory::desc &to_bytes) {
    const auto type = from.get_data_type();
    if (type != to.get_data_type() ||
        (type != dnnl::memory::data_type::bf16 && type != dnnl::memory::data_type::f16))
        return false;
    const auto bytes = [](const dnnl::memory::desc &d, dnnl::memory::desc &out) {
        if (d.get_format_kind() != dnnl::memory::format_kind::blocked ||
            d.get_inner_nblks() != 0 || d.get_submemory_offset() != 0)
            return false;
        Dims dims = d.get_dims(), strides = d.get_strides();
        for (int64_t &st : strides) st *= 2;
        dims.push_back(2);
        strides.push_back(1);
        out = dnnl::memory::desc(dims, dnnl::memory::data_type::u8, strides);
        return true;
    };
    return bytes(from, from_bytes) && bytes(to, to_bytes);
}

} // namespace

std::shared_ptr<PrimitiveEntry> reorder_entry(const CacheScope &scope,
                                              const dnnl::memory::desc &from_desc,
                                              const dnnl::memory::desc &to_desc) {
    check_rearrangeable(from_desc, to_desc);
    dnnl::memory::desc from_bytes, to_bytes;
    const bool pairs = as_byte_pairs(from_desc, to_desc, from_bytes, to_bytes);
    const dnnl::memory::desc &from = pairs ? from_bytes : from_desc;
    const dnnl::memory::desc &to = pairs ? to_bytes : to_desc;
    // The default name, "reorder:<from>-><to>", built without allocating:
    // this runs on every conversion (and every export of a blocked tensor).
    char name[2 * kFormatNameSize + 16] = "reorder:";
    char *end = format_name(from, name + 8);
    std::memcpy(end, "->", 2);
    format_name(to, end + 2);
    Handler handler(scope, "reorder", nullptr, name, nullptr, from.get_dims());
    handler.sign(OpKind::reorder);
    handler.sign_layout(from);
    handler.sign_layout(to);
    return handler.acquire_primitive<ReorderEntry>([&] {
        auto e = std::make_shared<ReorderEntry>();
        dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to,
                                         user_scratchpad_attr());
        e->primitive = dnnl::reorder(pd);
        e->set_args(pd, {DNNL_ARG_FROM, DNNL_ARG_TO});
        return e;
    });
}

void run_reorder(const CacheScope &scope, PrimitiveEntry &entry, const void *src_data,
                 void *dst_data) {
    Handler::Execution exec(entry, scope);
    exec.raw(DNNL_ARG_FROM, const_cast<void *>(src_data));
    exec.raw(DNNL_ARG_TO, dst_data);
    exec.run();
    reorders_executed.fetch_add(1, std::memory_order_relaxed);
}

void reorder(const CacheScope &scope, const dnnl::memory::desc &from, const void *src_data,
             const dnnl::memory::desc &to, void *dst_data) {
    check_rearrangeable(from, to);
    run_reorder(scope, *reorder_entry(scope, from, to), src_data, dst_data);
}

Handler::Handler(const CacheScope &scope, const char *op, const char *name,
                 const char *default_name, const char *suffix, const Dims &key_dims)
    : op_(op), scope_(scope), state_(*scope.state), threads_(openmp_max_threads()),
      memo_context_(memo_context_now(scope, threads_)) {
    if (state_.key_depth == ThreadState::kKeyDepth)
        fail(MKC_STATUS_INTERNAL_ERROR, op, ": handlers nested too deep");
    key_ = &state_.key_buffers[state_.key_depth];
    const char *key_name = (name != nullptr && name[0] != '\0') ? name : default_name;
    const int ndims = static_cast<int>(key_dims.size());
    const FrontCache::Call call(key_name, suffix, key_dims.data(), ndims);
    call_hash_ = call.hash;
    call_ndims_ = ndims;
    if (ndims <= kMaxKeyDims) {
        std::copy(key_dims.begin(), key_dims.end(), call_dims_);
        // A remembered hit brings its key along: no formatting.
        front_blob_ = state_.front_cache().find(call, memo_context_, ticket_, key_);
    }
    if (!front_blob_)
        keys::make(*key_, key_name, suffix, key_dims.data(), ndims, scope_.executor,
                   scope_.thread_bound, scope_.thread_hash);
    ++state_.key_depth; // only once constructed: the destructor undoes it
    // oneDNN bakes the thread count into some primitives (a convolution's
    // work split): an entry serves calls under the count it was built for.
    sign(static_cast<int64_t>(threads_));
}

Handler::~Handler() { --state_.key_depth; }

void Handler::overflow() const {
    fail(MKC_STATUS_INTERNAL_ERROR, op_, ": handler signature overflow");
}

void Handler::sign_float(float v) {
    int32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    sign(bits);
}

void Handler::sign_value(const dnnl::memory::desc &desc) {
    // The C queries point into the descriptor: nothing is copied on the hit
    // path. A list the descriptor has none of (not blocked) is signed empty.
    const const_dnnl_memory_desc_t md = desc.get();
    int ndims = 0, nblks = 0;
    dnnl_data_type_t type = dnnl_data_type_undef;
    dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &ndims);
    dnnl_memory_desc_query(md, dnnl_query_data_type, &type);
    if (dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &nblks) != dnnl_success) nblks = 0;
    auto list = [&](dnnl_query_t what, int n) {
        const dnnl_dims_t *values = nullptr;
        if (dnnl_memory_desc_query(md, what, &values) == dnnl_success && values != nullptr)
            sign_range(*values, static_cast<size_t>(n));
        else
            sign_range(nullptr, 0);
    };
    list(dnnl_query_dims, ndims);
    sign(static_cast<int64_t>(type));
    list(dnnl_query_strides, ndims);
    list(dnnl_query_inner_blks, nblks);
    list(dnnl_query_inner_idxs, nblks);
}

std::shared_ptr<void> Handler::find_blob() {
    if (front_blob_) return std::move(front_blob_);
    auto blob = BlobCache::instance().get(scope_.session, *scope_.shape_group, *key_,
                                          BlobKind::primitive, &ticket_, /*count=*/false);
    if (blob && call_ndims_ <= kMaxKeyDims)
        state_.front_cache().remember(call_hash_, call_dims_, call_ndims_, memo_context_,
                                      *key_, blob, ticket_);
    return blob;
}

std::shared_ptr<void> Handler::lookup(bool count) {
    auto blob = find_blob();
    if (blob && usable(*static_cast<const PrimitiveEntry *>(blob.get()))) {
        if (count) BlobCache::instance().count_hit(ticket_, state_.stripe);
        hit_ = true;
        return blob;
    }
    // Nothing there, or an entry built for other arguments (the one about
    // to be built replaces it): a miss either way.
    if (count) BlobCache::instance().count_miss(ticket_, scope_.session);
    return nullptr;
}

BuildOnce::Claim Handler::claim_build() {
    if (scope_.thread_bound) return {}; // the key carries this thread's hash
    return BuildOnce::instance().claim(scope_.session, *scope_.shape_group, *key_);
}

bool Handler::usable(const PrimitiveEntry &entry) const {
    // Same name, other arguments: never reuse a primitive built for others.
    if (!signature_equals(entry.signature)) return false;
    if (entry.exact_inputs.size() != static_cast<size_t>(exact_size_)) return false;
    for (int i = 0; i < exact_size_; ++i) {
        const bool same = exact_tensors_[i]
                              ? entry.matches(*exact_tensors_[i], exact_args_[i], entry.exact_inputs[i])
                              : entry.exact_inputs[i] == *exact_inputs_[i];
        if (!same) return false;
    }
    return true;
}

bool Handler::signature_equals(const std::vector<int64_t> &sig) const {
    return sig.size() == signature_size_ + signature_spill_.size() &&
           (signature_size_ == 0 ||
            std::memcmp(sig.data(), signature_, sizeof(int64_t) * signature_size_) == 0) &&
           std::equal(signature_spill_.begin(), signature_spill_.end(),
                      sig.begin() + signature_size_);
}

std::vector<int64_t> Handler::signature() const {
    std::vector<int64_t> sig(signature_, signature_ + signature_size_);
    sig.insert(sig.end(), signature_spill_.begin(), signature_spill_.end());
    return sig;
}

std::string Handler::transfer_key() const {
    std::string key = *key_;
    if (scope_.thread_bound) key.erase(key.rfind("|t")); // names are escaped: '|' is ours
    key += "|train";
    return key;
}

void Handler::leave_transfer(const std::shared_ptr<Transfer> &t) {
    t->signature = signature();
    BlobInfo info;
    info.kind = BlobKind::transfer;
    info.bytes = 0; // a descriptor: its primitive's bytes count in the forward's entry
    info.executor = scope_.executor;
    info.thread_bound = false; // outlives the forward's thread: the grad op may run elsewhere
    BlobCache::instance().set(scope_.session, *scope_.shape_group, scope_.capacity, transfer_key(),
                              std::static_pointer_cast<void>(t), info);
}

std::shared_ptr<Transfer> Handler::find_transfer() {
    BlobCache::HitTicket ticket;
    auto blob = BlobCache::instance().get(scope_.session, *scope_.shape_group, transfer_key(),
                                          BlobKind::transfer, &ticket, /*count=*/false);
    auto t = std::static_pointer_cast<Transfer>(blob);
    // One a forward with other arguments left is no transfer for this call.
    if (t && signature_equals(t->signature)) {
        BlobCache::instance().count_hit(ticket, state_.stripe);
        return t;
    }
    BlobCache::instance().count_miss(ticket, scope_.session);
    return nullptr;
}

void Handler::store(const std::shared_ptr<PrimitiveEntry> &entry) {
    entry->signature = signature();
    entry->exact_inputs.clear();
    for (int i = 0; i < exact_size_; ++i) entry->exact_inputs.push_back(*exact_inputs_[i]);
    BlobInfo info;
    info.kind = BlobKind::primitive;
    info.bytes = entry->bytes;
    info.executor = scope_.executor;
    info.thread_bound = scope_.thread_bound;
    info.thread = scope_.thread_hash;
    BlobCache::instance().set(scope_.session, *scope_.shape_group, scope_.capacity, *key_,
                              std::static_pointer_cast<void>(entry), info);
}

// ---------------------------------------------------------------- Execution

Handler::Execution::Execution(PrimitiveEntry &entry, const CacheScope &scope)
    : entry_(entry), scope_(scope), state_(*scope.state) {
    own_slot_ = !entry_.busy.exchange(true, std::memory_order_acquire);
    const int needed = static_cast<int>(entry_.arg_descs.size());
    if (needed > kInlineArgs) {
        heap_args_.resize(needed);
        args_ = heap_args_.data();
        capacity_ = needed;
    }
    if (!own_slot_) {
        for (auto &d : entry_.arg_descs)
            private_memories_.emplace_back(d, cpu_engine(), static_cast<void *>(nullptr));
    }
}

Handler::Execution::~Execution() {
    if (own_slot_) entry_.busy.store(false, std::memory_order_release);
}

dnnl::memory &Handler::Execution::memory_for(int index) {
    if (!own_slot_) return private_memories_[index];
    dnnl::memory &m = entry_.memories[index];
    if (!m) m = dnnl::memory(entry_.arg_descs[index], cpu_engine(), static_cast<void *>(nullptr));
    return m;
}

// Out of line, and called last: bind() then needs no frame of its own.
__attribute__((noinline)) void Handler::Execution::rebind(int index, dnnl_memory_t memory,
                                                          void *data) {
    check(dnnl_memory_set_data_handle(memory, data), "binding memory");
    if (own_slot_) entry_.bound[index] = data;
}

void Handler::Execution::too_many_args() {
    fail(MKC_STATUS_INTERNAL_ERROR, "too many primitive arguments");
}

void Handler::Execution::bind(int index, int arg_id, void *data) {
    if (nargs_ == capacity_) too_many_args();
    dnnl_memory_t memory = memory_for(index).get(/*allow_empty=*/true);
    args_[nargs_++] = {arg_id, memory};
    // The entry's memories keep their handles between calls: binding the
    // buffer bound last time (same tensors, the scratchpad) costs nothing.
    if (!own_slot_ || entry_.bound[index] != data) rebind(index, memory, data);
}

void Handler::Execution::raw(int arg_id, void *data) {
    bind(entry_.arg_index(arg_id), arg_id, data);
}

void Handler::Execution::output(int arg_id, void *data) { raw(arg_id, data); }

// The caller promised a constant tensor's data never changes: it is converted
// once and the copy kept in the tensor (freed with it, shared by every
// entry). The copy lives as long as the tensor, which outlives this call, and
// is only dropped by calls that need exclusive access to the tensor.
void *Handler::Execution::converted_copy(int index, int arg_id, const Tensor &tensor,
                                         const dnnl::memory::desc &have) {
    static std::atomic<uint64_t> next_stamp{1};
    const dnnl::memory::desc &want = entry_.arg_descs[index];
    const uint64_t key = layout_match_key(entry_.id, arg_id);
    void *copy = nullptr;
    std::unique_lock<std::mutex> lock(tensor.mutex);
    for (auto &c : tensor.converted) {
        if (c.match == key || c.desc == want) {
            c.match = key;
            copy = c.data.get();
            break;
        }
    }
    if (!copy) {
        lock.unlock();
        auto converted = allocate(want.get_size(), false);
        reorder(scope_, have, tensor.data, want, converted.get());
        lock.lock();
        tensor.converted.push_back({want, converted, key});
        copy = converted.get();
    }
    uint64_t stamp = tensor.converted_stamp.load(std::memory_order_relaxed);
    if (stamp == 0) {
        stamp = next_stamp.fetch_add(1, std::memory_order_relaxed);
        tensor.converted_stamp.store(stamp, std::memory_order_relaxed);
    }
    if (own_slot_) entry_.converted_memo[index] = {stamp, copy};
    return copy;
}

void Handler::Execution::input(int arg_id, const Tensor &tensor,
                               const dnnl::memory::desc *view) {
    const int index = entry_.arg_index(arg_id);
    if (own_slot_ && tensor.constant) {
        const auto &memo = entry_.converted_memo[index];
        const uint64_t stamp = tensor.converted_stamp.load(std::memory_order_relaxed);
        if (stamp != 0 && memo.stamp == stamp) {
            bind(index, arg_id, memo.copy);
            return;
        }
    }
    const dnnl::memory::desc &want = entry_.arg_descs[index];
    const bool as_is = view ? view == &want || *view == want : entry_.matches(tensor, arg_id, want);
    bind(index, arg_id, as_is ? tensor.data : converted(index, arg_id, tensor, view));
}

// Out of line: keeps input()'s frame small on the path that binds as is.
__attribute__((noinline)) void *Handler::Execution::converted(int index, int arg_id,
                                                               const Tensor &tensor,
                                                               const dnnl::memory::desc *view) {
    const dnnl::memory::desc &have = view ? *view : tensor.desc;
    if (tensor.constant) return converted_copy(index, arg_id, tensor, have);
    const dnnl::memory::desc &want = entry_.arg_descs[index];
    auto temp = allocate(want.get_size(), false);
    reorder(scope_, have, tensor.data, want, temp.get());
    temporaries_.push_back(temp);
    return temp.get();
}

void Handler::Execution::run() {
    if (entry_.scratchpad_bytes > 0)
        raw(DNNL_ARG_SCRATCHPAD, state_.scratchpad(entry_.scratchpad_bytes));
    execute(state_, entry_.primitive.get(), nargs_, args_);
}

void execute(ThreadState &state, dnnl_primitive_t primitive, int nargs,
             const dnnl_exec_arg_t *args) {
    dnnl_stream_t stream = thread_stream(state).get();
    check(dnnl_primitive_execute(primitive, stream, nargs, args), "executing primitive");
    if (!kExecuteBlocks) check(dnnl_stream_wait(stream), "waiting for stream");
}

// ------------------------------------------------------------------- Output

Handler::Output Handler::prepare_output(mkc_tensor **dst, const PrimitiveEntry &entry,
                                        int arg_id, mkc_layout layout, mkc_dtype dtype,
                                        const char *op) {
    const dnnl::memory::desc &desc = entry.arg_desc(arg_id);
    Output out;
    out.desc = &desc;
    if (*dst == nullptr) {
        out.created = make_owned_tensor(desc, layout, dtype);
        out.tensor = out.created.get();
        out.data = out.tensor->data;
        return out;
    }
    Tensor &t = **dst;
    require(t.dtype == dtype, op, ": dst dtype does not match the result");
    out.tensor = &t;
    if (entry.matches(t, arg_id, desc)) { // the common case: same tensor, same call
        out.data = t.data;
        return out;
    }
    require(t.dims == desc.get_dims(), op, ": dst shape does not match the result");
    if (adopt_result_layout(t, desc)) {
        out.data = t.data;
    } else {
        out.temporary = allocate(desc.get_size(), false);
        out.data = out.temporary.get();
    }
    return out;
}

void Handler::run_src_dst(const CacheScope &scope, PrimitiveEntry &entry, const Tensor &src,
                          mkc_tensor **dst, mkc_layout out_layout, const char *op) {
    Output out = prepare_output(dst, entry, DNNL_ARG_DST, out_layout, src.dtype, op);
    {
        Execution exec(entry, scope);
        exec.input(DNNL_ARG_SRC, src);
        exec.output(DNNL_ARG_DST, out.data);
        exec.run();
    }
    finish_output(scope, out, dst);
}

void Handler::run_two_inputs(const CacheScope &scope, PrimitiveEntry &entry, int arg_a,
                             const Tensor &a, int arg_b, const Tensor &b, int result_arg,
                             mkc_tensor **dst, mkc_layout out_layout, const char *op) {
    Output out;
    {
        Execution exec(entry, scope);
        // Inputs first: when the result goes into one of them (in place) in
        // another layout, prepare_output may re-describe that tensor; the
        // input was bound (or converted) before.
        exec.input(arg_a, a);
        exec.input(arg_b, b);
        out = prepare_output(dst, entry, result_arg, out_layout, a.dtype, op);
        exec.output(result_arg, out.data);
        exec.run();
    }
    finish_output(scope, out, dst);
}

void Handler::run_training_forward(const CacheScope &scope, PrimitiveEntry &entry,
                                   const Tensor &src, void *dst_data,
                                   std::shared_ptr<void> &workspace) {
    Execution exec(entry, scope);
    exec.input(DNNL_ARG_SRC, src);
    exec.output(DNNL_ARG_DST, dst_data);
    if (entry.has_arg(DNNL_ARG_WORKSPACE)) {
        workspace = allocate(entry.arg_desc(DNNL_ARG_WORKSPACE).get_size(), false);
        exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
    }
    exec.run();
}

std::shared_ptr<void>
Handler::workspace_for(const CacheScope &scope, const PrimitiveEntry &backward, const Tensor &src,
                       const std::function<std::shared_ptr<PrimitiveEntry>()> &forward,
                       const char *op) {
    if (!backward.has_arg(DNNL_ARG_WORKSPACE)) return nullptr;
    const auto &want = backward.arg_desc(DNNL_ARG_WORKSPACE);
    auto fwd = forward();
    require(fwd->arg_desc(DNNL_ARG_WORKSPACE) == want, op,
            ": internal: the forward's workspace layout does not match the backward's");
    auto scratch_dst = allocate(fwd->arg_desc(DNNL_ARG_DST).get_size(), false);
    std::shared_ptr<void> workspace;
    run_training_forward(scope, *fwd, src, scratch_dst.get(), workspace);
    return workspace;
}

const Tensor &Handler::plain_input(const CacheScope &scope, const PrimitiveEntry &entry, int arg_id,
                                   const Tensor &src, const dnnl::memory::desc &plain,
                                   std::unique_ptr<Tensor> &holder) {
    if (entry.matches(src, arg_id, plain)) return src;
    return as_layout(scope, src, plain, holder);
}

Tensor &Handler::plain_output(const PrimitiveEntry &entry, int arg_id, mkc_tensor **dst,
                              const dnnl::memory::desc &plain, mkc_layout layout,
                              std::unique_ptr<Tensor> &created, const char *op) {
    // A float result: bfloat16 where the primitive writes it so.
    const mkc_dtype dtype =
        plain.get_data_type() == dnnl::memory::data_type::bf16 ? MKC_DTYPE_BF16 : MKC_DTYPE_F32;
    if (*dst == nullptr) {
        created = make_owned_tensor(plain, layout, dtype);
        return *created;
    }
    Tensor &y = **dst;
    if (!entry.matches(y, arg_id, plain)) {
        require(y.dtype == dtype, op, ": dst is ", dtype_name(y.dtype), " but the result ",
                dtype_name(dtype));
        if (!(y.dims == plain.get_dims()))
            fail(MKC_STATUS_INVALID_ARGUMENT, op,
                 ": dst must have the result's shape ", shape_text(plain.get_dims()));
        require(static_cast<bool>(y.owned), op, ": dst must be row-major");
        adopt_result_layout(y, plain);
        y.layout = layout;
    }
    return y;
}

void Handler::publish(std::unique_ptr<Tensor> &created, mkc_tensor **dst) {
    if (!created) return;
    registry<Tensor>().add(created.get());
    *dst = created.release();
}

Handler::PlainResult::PlainResult(const CacheScope &scope, const PrimitiveEntry &entry, int arg_id,
                                  mkc_tensor **dst, const dnnl::memory::desc &plain,
                                  const dnnl::memory::desc &view, const char *op)
    : scope_(scope), dst_(dst), have_(&entry.arg_desc(arg_id)), view_(view) {
    tensor_ = &plain_output(entry, arg_id, dst, plain, MKC_LAYOUT_CHANNELS_FIRST, created_, op);
    if (*have_ == view_) {
        data_ = tensor_->data;
    } else {
        temporary_ = allocate(have_->get_size(), false);
        data_ = temporary_.get();
    }
}

void Handler::PlainResult::finish() {
    if (temporary_) reorder(scope_, *have_, temporary_.get(), view_, tensor_->data);
    publish(created_, dst_);
}

void Handler::finish_output(const CacheScope &scope, Output &out, mkc_tensor **dst) {
    if (out.temporary) reorder(scope, *out.desc, out.data, out.tensor->desc, out.tensor->data);
    publish(out.created, dst);
}

} // namespace mkc
