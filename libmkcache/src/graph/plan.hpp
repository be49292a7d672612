// A compiled plan: the steps a program runs for one set of input shapes,
// where each step reads and writes, and the memory figures.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/cache_scope.hpp"
#include "graph/graph.hpp"
#include "graph/implementations.hpp"
#include "graph/measure.hpp"
#include "graph/pass_dump.hpp"
#include "graph/op_table.hpp"
#include "ops/phases.hpp"

namespace mkc::graph {

// Where a step's buffer is during a run.
struct BufferRef {
    enum class Kind {
        none,     // an absent optional input, or an output nobody reads
        input,    // the run's input `index` (plain, in the graph input's layout)
        constant, // the plan's constant `index`, converted at compile time
        arena,    // the run's arena, at `offset`
        output,   // the run's output `index` (plain, in its caller layout)
    } kind = Kind::none;
    int index = 0;
    size_t offset = 0;
    size_t bytes = 0; // arena: the buffer's size
};

struct Step {
    int node = -1; // -1: a converter between two arrangements
    const Implementation *implementation = nullptr; // a node's: the one chosen for it
    NodeRun run = nullptr;
    std::shared_ptr<PrimitiveEntry> entry;
    std::vector<BufferRef> in, out;
    // Set when the step is one execution of the entry's primitive with each
    // buffer bound to one argument (ops::Prepared::in_args): the argument
    // per in/out buffer (0: not bound), so a run binds once per arena and
    // executes the primitive itself. Empty: `run` does the step.
    std::vector<int> in_args, out_args;
    int64_t serial_elements = INT64_MAX; // see ops::Prepared
    // For the plan text.
    std::string what; // "node 3 (conv2d 'stem')", "convert"
    std::string impl;   // the implementation: "onednn:jit:avx2", "reference", ...
    std::string choice; // why it: "priority", "override (option)", then refusals
    std::vector<std::string> in_formats, out_formats;
    std::string why;       // a converter's reason
    bool in_place = false; // writes into a buffer one of its inputs had (a sum's residual)
    int64_t flops = 0;     // a node's arithmetic (OpRow::flops; 0 for the others)
    mkc_dtype arithmetic = MKC_DTYPE_F32; // what those operations are in: F32, BF16 or S8
    bool weights_checked = false; // its 8-bit constant weights were checked at compile
};

// A reshape or transpose node that runs as no step: its result is a view
// of another value's bytes (graph/views.hpp).
struct View {
    int node;
    int before_step; // where it sits among the steps
    BufferRef at;    // the bytes it reads
    dnnl::memory::desc desc;
};

struct Plan {
    uint64_t id = 0;              // unique in the process (what a run's bindings are for)
    std::vector<Dims> input_dims; // caller dims of each input this plan is for
    std::string shape_group;      // the same as text ("program:1x3x224x224:...")
    CacheScope scope;             // its entries' scope (state: the compiling thread's)
    std::vector<Step> steps;
    std::vector<View> views;
    std::vector<std::shared_ptr<void>> constants; // storage of converted constants
    std::vector<const void *> constant_data;      // per BufferRef constant index
    std::vector<ops::ValueDesc> inputs;           // per graph input, plain
    std::vector<ops::ValueDesc> outputs;          // per graph output, plain
    size_t arena_bytes = 0, lower_bound_bytes = 0, naive_bytes = 0;
    size_t constant_bytes = 0; // constants in arrangements of the plan's (held by it)
    int converters = 0;
    int in_place = 0; // steps writing into their input's buffer
    // A step runs a linear in row parts shared with other plans: the program
    // compiles the plan again exact once it has run kExactAfterRuns times.
    bool row_parts = false;
    mutable std::atomic<int64_t> runs{0};
};

// A program's constants as its plans converted them, keyed by value and
// arrangement: every plan that needs a constant in one arrangement shares
// the one copy (the key's text is the arrangement's format name, dims and,
// for a strided one, strides). The plans hold the copies; a copy goes with
// the last plan holding it.
struct ConvertedConstants {
    struct Copy {
        std::weak_ptr<void> storage;
        dnnl::memory::desc desc;
        uint64_t made = 0; // the order copies were made in
    };
    std::map<std::pair<int, std::string>, Copy> copies;
    uint64_t made = 0;
    // The copy of `key`, if a plan still holds it.
    std::shared_ptr<void> find(const std::pair<int, std::string> &key);
    void add(const std::pair<int, std::string> &key, const std::shared_ptr<void> &storage,
             const dnnl::memory::desc &desc);
    // The arrangement of the earliest copy of value `v` still held whose
    // dims and data type are `like`'s, other than `like` itself (so a new
    // plan's primitive may read that copy rather than have another made);
    // null: none.
    const dnnl::memory::desc *held(int v, const dnnl::memory::desc &like);
    size_t held_bytes() const; // bytes of the copies still held
};

struct CompileOptions {
    bool reuse = true;   // intermediate buffers share the arena when their lives allow
    // A convolution's sum writes into its residual at its last use; reshape
    // and transpose are views of their input's bytes (graph/views.hpp).
    bool inplace = true;
    Overrides overrides; // implementations asked for per operator
    // Choose among the implementations that support a node by timing them
    // (graph/measure.hpp), remembering the choices in `choices`. A choice
    // `choices` holds already (read back, or measured by an earlier plan)
    // is taken as it is, measuring or not.
    bool measure = false;
    // The operators whose nodes compute in bfloat16 (each computing in
    // bfloat16 as well), their float32 inputs converted where they arrive
    // (constants once) and their results passed on in bfloat16 to readers
    // that take it; the others, and the outputs, get float32 back by
    // converters.
    std::set<NodeOp> bf16;
    // A matmul's following add of a value broadcast into its result is run
    // as the matmul's post-op (the fusion option's plan-time part).
    bool fold_adds = true;
    // A float32 linear that runs on oneDNN's matmul by priority runs in row
    // parts whose primitives plans of other input shapes share
    // (`onednn_matmul_shared`): set by a program past its exact plans.
    bool shared_rows = false;
    Choices *choices = nullptr;
    ConvertedConstants *constants = nullptr; // shared between plans (null: the plan's own)
    const PassDump *dump = nullptr;          // the IR after each pass (null: none)
};

// Compiles `graph` for inputs of these caller dims (one per graph input, in
// the order they were added). Its entries live in `scope` with the plan's
// own shape group `shape_group`. Errors name the node.
std::unique_ptr<Plan> compile_plan(const Graph &graph,
                                   const std::vector<std::vector<int64_t>> &dims,
                                   const CacheScope &scope, const std::string &shape_group,
                                   const CompileOptions &options);

// One line per step, then the totals.
std::string plan_text(const Graph &graph, const Plan &plan);

// The same steps (and views) for a program to read: one line each, in
// order, of tab-separated fields (mkcache.h, mkc_program_steps).
std::string plan_steps(const Plan &plan);

} // namespace mkc::graph
