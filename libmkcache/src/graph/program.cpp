#include "graph/program.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cache/blob_cache.hpp"
#include "common/cpu_features.hpp"
#include "common/error.hpp"
#include "common/heap_trim.hpp"
#include "common/serial.hpp"
#include "common/thread_state.hpp"
#include "graph/op_table.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "precision/quantize_graph.hpp"
#include "layout/layout.hpp"

namespace mkc::graph {

uint64_t new_program_executor() {
    static std::atomic<uint64_t> next{1};
    return (uint64_t(1) << 63) | next.fetch_add(1, std::memory_order_relaxed);
}

Program::Program(Graph graph, const ProgramOptions &options)
    : graph_(std::move(graph)), options_(options), executor_(new_program_executor()) {
    require(!graph_.outputs.empty(), "compile: the graph has no outputs");
    require(options_.capacity >= 0, "compile: capacity must be >= 0");
    options_.compile.overrides.by_option = parse_overrides(options_.impl, "compile: impl");
    const char *env = std::getenv("MKCACHE_IMPL");
    options_.compile.overrides.by_environment = parse_overrides(env ? env : "", "MKCACHE_IMPL");
    choices_.load(options_.choices);
    options_.compile.measure = options_.measure;
    options_.compile.fold_adds = options_.fuse;
    dump_ = PassDump(dump_path(options_.dump));
    options_.compile.dump = &dump_;
    // The graph's passes (each plan's follow when its input dims are known).
    const std::string title = "program " + std::to_string(executor_ & ~(uint64_t(1) << 63));
    dump_.section(title + ": graph as built", graph_text(graph_));
    if (options_.fuse) {
        graph_ = fuse(graph_, &fuse_report_, options_.fuse_options);
        dump_.section(title + " after fuse", fuse_report_.text() + graph_text(graph_));
    }
    // "<program-wide>[,<operator>=<precision>...]": the hint, then the
    // operators that compute otherwise.
    std::map<std::string, std::string> per_op;
    const size_t comma = options_.precision.find(',');
    if (comma != std::string::npos) {
        per_op = parse_precision_overrides(options_.precision.substr(comma + 1));
        options_.precision.resize(comma);
    }
    std::string &precision = options_.precision;
    require(precision.empty() || precision == "f32" || precision == "int8" ||
                precision == "bf16" || precision == "auto",
            "compile: precision must be \"f32\", \"bf16\", \"int8\" or \"auto\" (then any "
            "\",operator=f32|bf16\"), got \"",
            precision, "\"");
    if (precision == "auto") {
        // The fastest this CPU runs: 8 bits where there are ranges to
        // quantize with, else bfloat16 where the CPU computes it natively.
        precision = !options_.calibration.empty() ? "int8"
                    : cpu_has_native_bf16()       ? "bf16"
                                                  : "f32";
        precision_report_ = "precision auto: " + precision + " (" + cpu_isa_name() +
                            (precision == "int8"   ? ", calibrated"
                             : precision == "bf16" ? ", native bfloat16"
                                                   : ", no calibration nor native bfloat16") +
                            ")\n";
    }
    // Per operator: f32 or bf16 (8 bits need the program's calibration).
    std::set<NodeOp> keep_f32, bf16_ops;
    for (const auto &[op, p] : per_op) {
        if (p == "int8")
            fail(MKC_STATUS_INVALID_ARGUMENT, "compile: precision: ", op, "=int8: 8 bits are the "
                 "program's (with its calibration); \"int8,", op, "=f32\" keeps an operator "
                 "float32 instead");
        if (p == "bf16" && precision == "int8")
            fail(MKC_STATUS_INVALID_ARGUMENT, "compile: precision: ", op, "=bf16 in an int8 "
                 "plan (its other operators stay float32; only =f32 overrides are taken there)");
        (p == "f32" ? keep_f32 : bf16_ops).insert(op_named(op)->op);
    }
    if (precision == "bf16")
        for (const Node &node : graph_.nodes)
            if (row(node).reference_widens_bf16 && !keep_f32.count(node.op))
                bf16_ops.insert(node.op);
    if (!per_op.empty()) {
        precision_report_ += "precision per operator:";
        for (const auto &[op, p] : per_op)
            precision_report_ += " " + op + "=" + p;
        precision_report_ += "\n";
    }
    if (precision == "int8") {
        QuantizeReport report;
        graph_ = quantize_graph(graph_, options_.calibration, &report, keep_f32);
        dump_.section(title + " after quantize", report.text + graph_text(graph_));
        precision_report_ += report.text;
    } else if (!bf16_ops.empty()) {
        options_.compile.bf16 = bf16_ops;
        require_bf16_plan();
        int nodes = 0;
        for (const Node &node : graph_.nodes)
            nodes += row(node).reference_widens_bf16 && bf16_ops.count(node.op);
        precision_report_ += std::to_string(nodes) + " node(s) compute in bfloat16 (" +
                             (cpu_has_native_bf16() ? "native" : "emulated through float32") +
                             " on " + cpu_isa_name() + ")\n";
    }
    for (size_t v = 0; v < graph_.values.size(); ++v)
        if (graph_.values[v].kind == Value::Kind::input)
            input_values_.push_back(static_cast<int>(v));
}

// A bfloat16 plan on a CPU without oneDNN's bfloat16 kernels: only the
// reference implementation computes it, so every node that would compute in
// bfloat16 must be overridden to it; anything else is refused here, naming
// the ISA, rather than left to fail node by node.
void Program::require_bf16_plan() const {
    if (cpu_has_bf16_kernels())
        return;
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
        const OpRow &r = row(graph_.nodes[n]);
        if (!r.reference_widens_bf16 || !options_.compile.bf16.count(graph_.nodes[n].op))
            continue;
        const std::string *asked = options_.compile.overrides.asked(r.name);
        if (!asked || *asked != "reference")
            fail(MKC_STATUS_UNSUPPORTED, "compile: precision \"bf16\" needs a CPU with AVX-512 "
                 "or AVX2-VNNI-2: oneDNN has no bfloat16 kernels for ", cpu_isa_name(), " (",
                 graph_.describe_node(static_cast<int>(n)),
                 "; impl={\"", r.name, "\": \"reference\"} computes it on the reference "
                 "kernels instead)");
    }
}

Program::~Program() {
    calibration_.reset(); // its own program's entries go with it
    {
        std::lock_guard<std::mutex> lock(mutex_);
        plans_.clear();
        last_.reset();
    }
    BlobCache::instance().reset_executor(executor_);
}

namespace {

// The inputs' shapes and types ("program:2x3:4x5"): a plan is compiled
// for both.
std::string shape_group_of(const Graph &graph, const std::vector<int> &input_values,
                           const std::vector<std::vector<int64_t>> &dims) {
    std::string s = "program";
    for (size_t k = 0; k < dims.size(); ++k) {
        s += ':';
        keys::append_value(s, dims[k].data(), static_cast<int>(dims[k].size()),
                           graph.values[input_values[k]].dtype);
    }
    return s;
}

} // namespace

void Program::calibrate(const Tensor *const *inputs, const CalibrationMethod &method) {
    Calibration *c;
    {
        std::lock_guard<std::mutex> lock(calibration_mutex_);
        if (!calibration_)
            calibration_ = std::make_unique<Calibration>(graph_, options_);
        c = calibration_.get();
    }
    c->observe(inputs, method);
}

std::string Program::calibration_text() const {
    std::lock_guard<std::mutex> lock(calibration_mutex_);
    return calibration_ ? calibration_->text() : std::string();
}

void Program::compile_static() {
    std::vector<std::vector<int64_t>> dims;
    for (int v : input_values_) {
        for (int64_t d : graph_.values[v].dims)
            if (d == -1)
                return;
        dims.push_back(graph_.values[v].dims);
    }
    find_or_compile(dims);
}

std::shared_ptr<const Plan> Program::last_plan_for(const Tensor *const *inputs) const {
    const int threads = openmp_max_threads();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!last_ || last_threads_ != threads)
        return nullptr;
    for (size_t k = 0; k < input_values_.size(); ++k) {
        const Tensor *t = inputs[k];
        const Value &in = graph_.values[input_values_[k]];
        const Dims &want = last_->input_dims[k];
        if (t == nullptr || t->dtype != in.dtype || t->dims.size() != want.size())
            return nullptr;
        if (t->layout != in.layout && t->dims.size() >= 3)
            return nullptr;
        // want is in the caller's order; t->dims in oneDNN's.
        const bool last = in.layout == MKC_LAYOUT_CHANNELS_LAST && want.size() >= 3;
        const size_t n = want.size();
        for (size_t i = 0; i < n; ++i) {
            const size_t j = !last ? i : i == 0 ? 0 : i == n - 1 ? 1 : i + 1;
            if (t->dims[j] != want[i])
                return nullptr;
        }
    }
    return last_;
}

std::shared_ptr<const Plan> Program::plan_for(const Tensor *const *inputs) {
    if (auto plan = last_plan_for(inputs))
        return plan;
    std::vector<std::vector<int64_t>> dims;
    for (size_t k = 0; k < input_values_.size(); ++k) {
        const Value &in = graph_.values[input_values_[k]];
        require(inputs[k] != nullptr, "run: input '", in.name, "' is missing");
        const Tensor &t = *inputs[k];
        require(t.dtype == in.dtype, "run: input '", in.name, "' must be float32");
        const Dims cd = caller_dims(t);
        const bool labelled = t.layout == in.layout || cd.size() < 3;
        if (!labelled || cd.size() != in.dims.size())
            fail(MKC_STATUS_INVALID_ARGUMENT, "run: input '", in.name, "' must be ",
                 layout::name(in.layout), " of rank ", in.dims.size(), ", got ",
                 layout::name(t.layout), " ", shape_text(cd));
        check_input_dims(k, cd);
        dims.push_back(cd);
    }
    return find_or_compile(dims);
}

void Program::check_input_dims(size_t k, const Dims &cd) const {
    const Value &in = graph_.values[input_values_[k]];
    for (size_t i = 0; i < cd.size(); ++i) {
        if (in.dims[i] != -1 && in.dims[i] != cd[i])
            fail(MKC_STATUS_INVALID_ARGUMENT, "run: input '", in.name, "' dim ", i, " must be ",
                 in.dims[i], ", got ", cd[i], " (shape ", shape_text(cd), ")");
        if (cd[i] < 1)
            fail(MKC_STATUS_INVALID_ARGUMENT, "run: input '", in.name, "' dim ", i,
                 " must be >= 1, got ", cd[i]);
    }
}

std::shared_ptr<const Plan> Program::plan_for_dims(const int64_t *dims) {
    {
        const int threads = openmp_max_threads();
        std::lock_guard<std::mutex> lock(mutex_);
        if (last_ && last_threads_ == threads) {
            const int64_t *d = dims;
            bool same = true;
            for (const Dims &want : last_->input_dims)
                for (int64_t w : want)
                    same = same && *d++ == w;
            if (same)
                return last_;
        }
    }
    std::vector<std::vector<int64_t>> all;
    const int64_t *d = dims;
    for (size_t k = 0; k < input_values_.size(); ++k) {
        const size_t rank = graph_.values[input_values_[k]].dims.size();
        Dims cd(d, d + rank);
        d += rank;
        check_input_dims(k, cd);
        check_dims("run: input", static_cast<int>(rank), cd.data(),
                   graph_.values[input_values_[k]].dtype);
        all.push_back(std::move(cd));
    }
    return find_or_compile(all);
}

namespace {

// Where a program keeps the plan of a shape group for an OpenMP thread count.
std::string plan_slot(const std::string &group, int threads) {
    return group + "|threads " + std::to_string(threads);
}

} // namespace

std::shared_ptr<const Plan>
Program::find_or_compile(const std::vector<std::vector<int64_t>> &dims) {
    const std::string group = shape_group_of(graph_, input_values_, dims);
    // A plan per shape and OpenMP thread count: oneDNN bakes the count into
    // some primitives, so a run under another count compiles its own.
    const int threads = openmp_max_threads();
    const std::string slot = plan_slot(group, threads);
    auto known = [&]() -> std::shared_ptr<const Plan> {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = plans_.find(slot);
        if (found == plans_.end()) return nullptr;
        found->second.used = ++uses_;
        last_ = found->second.plan;
        last_threads_ = threads;
        return last_;
    };
    if (auto plan = known()) return plan;
    // One compile at a time (they share the converted constants), outside
    // the lock runs take: a run of a known plan never waits for it.
    std::lock_guard<std::mutex> compiling(compile_mutex_);
    if (auto plan = known()) return plan; // compiled while this thread waited
    std::shared_ptr<const Plan> plan = compile_locked(
        dims, group, options_.exact_plans >= 0 && compiled_ >= options_.exact_plans);
    ++compiled_;
    std::shared_ptr<const Plan> dropped; // the plan used least recently, past the capacity
    bool group_kept = false;             // another plan (thread count) has its shape group
    {
        std::lock_guard<std::mutex> lock(mutex_);
        plans_[slot] = Kept{plan, ++uses_};
        last_ = plan;
        last_threads_ = threads;
        if (options_.capacity > 0 && static_cast<int64_t>(plans_.size()) > options_.capacity) {
            auto lru = plans_.begin();
            for (auto it = plans_.begin(); it != plans_.end(); ++it)
                if (it->second.used < lru->second.used) lru = it;
            dropped = std::move(lru->second.plan);
            plans_.erase(lru);
            for (const auto &kept : plans_)
                group_kept = group_kept || kept.second.plan->shape_group == dropped->shape_group;
        }
    }
    // The plan went, and its entries go with it, counted as an eviction (a
    // run still using it keeps what it holds); outside the lock runs take.
    if (dropped)
        BlobCache::instance().evict_plan(executor_, dropped->scope.session, dropped->shape_group,
                                         group_kept);
    // What building the plan's primitives freed, given back (see heap_trim.hpp).
    trim_heap();
    return plan;
}

std::shared_ptr<const Plan>
Program::compile_locked(const std::vector<std::vector<int64_t>> &dims, const std::string &group,
                        bool shared_rows) {
    CacheScope scope;
    scope.session = 0;
    scope.executor = executor_;
    scope.capacity = 0;
    scope.thread_bound = false;
    scope.state = &thread_state();
    CompileOptions options = options_.compile;
    options.constants = &constants_;
    options.choices = &choices_;
    options.shared_rows = shared_rows;
    return compile_plan(graph_, dims, scope, group, options);
}

void Program::count_run(const Plan &plan) {
    if (!plan.row_parts ||
        plan.runs.fetch_add(1, std::memory_order_relaxed) + 1 != ProgramOptions::kExactAfterRuns)
        return;
    // The plan's shapes run often: compiled again exact, in the plan's
    // place (runs holding the old plan finish on it). The new plan finds
    // the old one's other entries in the cache; its linears' parts stay
    // there until the group goes. Under the thread count the plan was made
    // for only (the slot's).
    std::lock_guard<std::mutex> compiling(compile_mutex_);
    const std::string slot = plan_slot(plan.shape_group, openmp_max_threads());
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = plans_.find(slot);
        if (found == plans_.end() || found->second.plan.get() != &plan)
            return;
    }
    std::shared_ptr<const Plan> exact;
    try {
        exact = compile_locked(plan.input_dims, plan.shape_group, false);
    } catch (const std::exception &) {
        return; // the plan in parts runs as it is
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = plans_.find(slot);
        if (found == plans_.end() || found->second.plan.get() != &plan)
            return;
        found->second.plan = exact;
        if (last_.get() == &plan)
            last_ = exact;
    }
    trim_heap();
}

void Program::lock_for_fork() {
    compile_mutex_.lock();
    mutex_.lock();
    choices_.lock_for_fork();
}

void Program::unlock_for_fork() {
    choices_.unlock_for_fork();
    mutex_.unlock();
    compile_mutex_.unlock();
}

std::shared_ptr<const Plan> Program::last_plan() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
}

size_t Program::held_constant_bytes() const {
    std::lock_guard<std::mutex> compiling(compile_mutex_);
    return constants_.held_bytes();
}

size_t Program::plan_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return plans_.size();
}

Program::Arena Program::take_arena(const Plan &plan) {
    bool dropped = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        // One bound for this plan first, else any large enough.
        size_t pick = arenas_.size();
        for (size_t i = 0; i < arenas_.size(); ++i) {
            if (arenas_[i].bytes < plan.arena_bytes)
                continue;
            if (arenas_[i].context && arenas_[i].context->plan_id() == plan.id) {
                pick = i;
                break;
            }
            if (pick == arenas_.size())
                pick = i;
        }
        if (pick < arenas_.size()) {
            Arena a = std::move(arenas_[pick]);
            arenas_.erase(arenas_.begin() + static_cast<std::ptrdiff_t>(pick));
            return a;
        }
        // None is large enough: the new one serves every smaller plan too,
        // so the smaller ones go (kept, inputs that keep growing would keep
        // one arena per size ever seen).
        dropped = !arenas_.empty();
        arenas_.clear();
    }
    // The smaller arenas' pages, given back (see heap_trim.hpp).
    if (dropped) trim_heap();
    const size_t bytes = plan.arena_bytes;
    return {allocate(bytes > 0 ? bytes : 1, false), bytes, nullptr};
}

void Program::give_back(Arena arena) {
    std::lock_guard<std::mutex> lock(mutex_);
    arenas_.push_back(std::move(arena));
}

void Program::run(const Tensor *const *inputs, mkc_tensor **outputs) {
    run_tensors(inputs, outputs, nullptr, nullptr);
}

std::string Program::profile(const Tensor *const *inputs, mkc_tensor **outputs) {
    std::vector<double> seconds;
    std::shared_ptr<const Plan> plan;
    run_tensors(inputs, outputs, &seconds, &plan);
    std::string text;
    for (size_t i = 0; i < seconds.size(); ++i) {
        char us[32];
        std::snprintf(us, sizeof us, "%.3f", seconds[i] * 1e6);
        const Step &step = plan->steps[i];
        const char *arithmetic = step.arithmetic == MKC_DTYPE_S8     ? "int8"
                                 : step.arithmetic == MKC_DTYPE_BF16 ? "bf16"
                                                                     : "f32";
        text += std::to_string(i) + "\t" + step.what + "\t" + step.impl + "\t" + us + "\t" +
                std::to_string(step.flops) + "\t" + arithmetic + "\n";
    }
    return text;
}

void Program::run_tensors(const Tensor *const *inputs, mkc_tensor **outputs,
                          std::vector<double> *seconds, std::shared_ptr<const Plan> *used) {
    const std::shared_ptr<const Plan> plan = plan_for(inputs);
    if (used)
        *used = plan;
    CacheScope scope = plan->scope;
    scope.state = &thread_state();

    // Inputs as the plan reads them: plain in their layout.
    std::vector<std::unique_ptr<Tensor>> converted(plan->inputs.size());
    std::vector<const void *> in_data(plan->inputs.size());
    for (size_t k = 0; k < plan->inputs.size(); ++k) {
        const Tensor &t = *inputs[k];
        in_data[k] = as_layout(scope, t, plan->inputs[k].desc, converted[k]).data;
    }
    // Outputs: the caller's (plain, the right dims) or new ones.
    std::vector<std::unique_ptr<Tensor>> created(plan->outputs.size());
    std::vector<void *> out_data(plan->outputs.size());
    for (size_t k = 0; k < plan->outputs.size(); ++k) {
        const ops::ValueDesc &want = plan->outputs[k];
        if (outputs[k] == nullptr) {
            created[k] = make_owned_tensor(want.desc, want.layout, want.dtype);
            out_data[k] = created[k]->data;
            continue;
        }
        const Tensor &t = *outputs[k];
        if (!(t.dtype == want.dtype && t.layout == want.layout && t.desc == want.desc))
            fail(MKC_STATUS_INVALID_ARGUMENT, "run: output '", graph_.outputs[k].name,
                 "' must be a plain ", layout::name(want.layout), " ", dtype_name(want.dtype),
                 " tensor of shape ", shape_text(layout::to_caller_order(want.dims, want.layout)));
        out_data[k] = t.data;
    }

    run_plan(*plan, scope, in_data.data(), out_data.data(), seconds);
    for (size_t k = 0; k < created.size(); ++k)
        if (created[k])
            Handler::publish(created[k], &outputs[k]);
}

namespace {

bool overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return x < y + b_bytes && y < x + a_bytes;
}

} // namespace

void Program::run_plan(const Plan &plan, const CacheScope &scope, const void *const *inputs,
                       void *const *outputs, std::vector<double> *seconds) {
    // The steps write outputs while later steps still read the inputs, and
    // a value that is an output may be read back from it: an output sharing
    // bytes with an input is computed apart and copied at the end (as an
    // eager out= is). Two outputs in the same bytes have no single answer.
    const size_t nin = plan.inputs.size(), nout = plan.outputs.size();
    std::vector<std::shared_ptr<void>> apart(nout);
    std::vector<void *> out(outputs, outputs + nout);
    for (size_t k = 0; k < nout; ++k) {
        const size_t bytes = plan.outputs[k].desc.get_size();
        for (size_t j = 0; j < k; ++j)
            if (overlap(outputs[k], bytes, outputs[j], plan.outputs[j].desc.get_size()))
                fail(MKC_STATUS_INVALID_ARGUMENT, "run: outputs '", graph_.outputs[j].name,
                     "' and '", graph_.outputs[k].name, "' share memory");
        for (size_t i = 0; i < nin && !apart[k]; ++i)
            if (overlap(outputs[k], bytes, inputs[i], plan.inputs[i].desc.get_size())) {
                apart[k] = allocate(bytes, false);
                out[k] = apart[k].get();
            }
    }
    run_arena(plan, scope, inputs, out.data(), seconds);
    for (size_t k = 0; k < nout; ++k)
        if (apart[k])
            std::memcpy(outputs[k], apart[k].get(), plan.outputs[k].desc.get_size());
    count_run(plan);
}

void Program::run_arena(const Plan &plan, const CacheScope &scope, const void *const *inputs,
                        void *const *outputs, std::vector<double> *seconds) {
    Arena arena = take_arena(plan);
    struct Return {
        Program &p;
        Arena &a;
        ~Return() { p.give_back(std::move(a)); }
    } give_back_at_exit{*this, arena};
    if (!arena.context || arena.context->plan_id() != plan.id)
        arena.context = std::make_unique<RunContext>(plan, static_cast<char *>(arena.data.get()));
    arena.context->run(plan, scope, *scope.state, inputs, outputs, seconds);
}

void Program::run_plain(const int64_t *dims, const void *const *inputs, void *const *outputs) {
    const std::shared_ptr<const Plan> plan = plan_for_dims(dims);
    CacheScope scope = plan->scope;
    scope.state = &thread_state();
    run_plan(*plan, scope, inputs, outputs);
}

ops::ValueDesc Program::output_desc(const int64_t *input_dims, size_t index) {
    const std::shared_ptr<const Plan> plan = plan_for_dims(input_dims);
    require(index < plan->outputs.size(), "program: output index ", index, " is not in 0..",
            plan->outputs.size() - 1);
    return plan->outputs[index];
}

} // namespace mkc::graph
