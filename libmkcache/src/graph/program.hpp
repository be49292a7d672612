// A compiled program: a graph, compiled on the first run of each distinct
// set of input shapes (the plan kept under that shape group), run many
// times from any number of threads.
//
// Thread safety: run() and the queries may be called from many threads at
// once. Plans are compiled one at a time, outside the lock that guards the
// plans and the arena pool (a run of a known plan never waits for a
// compile); a run then works on its own arena and binds the calling thread's
// stream and scratchpad. Destroying the program while a run is under way is
// the caller's error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fusion/fuse.hpp"
#include "graph/calibration.hpp"
#include "graph/graph.hpp"
#include "graph/plan.hpp"
#include "graph/run_context.hpp"

namespace mkc::graph {

struct ProgramOptions {
    bool fuse = true; // merge nodes oneDNN runs as one primitive first (fusion/fuse.hpp)
    FuseOptions fuse_options;
    CompileOptions compile;
    // > 0: at most this many plans (input-shape groups) kept, the one used
    // least recently dropped for a new one.
    int64_t capacity = 0;
    // The plans compiled with every primitive made for their own shapes;
    // the ones after share row parts (CompileOptions::shared_rows), so that
    // a program meeting many input shapes holds fewer primitives. < 0: no
    // plan shares.
    int64_t exact_plans = kExactPlans;
    static constexpr int64_t kExactPlans = 8;
    // A plan in row parts that has run this many times is compiled again
    // with every primitive made for its shapes: a shape run that often pays
    // for the memory of its own primitives.
    static constexpr int64_t kExactAfterRuns = 32;
    // Implementations asked for per operator, "conv2d=reference,..." (see
    // graph/implementations.hpp); MKCACHE_IMPL is read beside it.
    std::string impl;
    // Choose the others by timing them (graph/measure.hpp), starting from
    // these choices (Choices::text() of an earlier program; "": none).
    bool measure = false;
    std::string choices;
    // Append the IR after every compile pass to this file ("": MKCACHE_DUMP,
    // or none; graph/pass_dump.hpp).
    std::string dump;
    // "" / "f32", or "int8" with the ranges `calibration` holds
    // (precision/quantize_graph.hpp).
    std::string precision;
    std::string calibration;
};

class Program {
public:
    Program(Graph graph, const ProgramOptions &options);
    ~Program(); // drops every cache entry the program made
    Program(const Program &) = delete;
    Program &operator=(const Program &) = delete;

    // The graph the program runs: the caller's, fused (fuse_report()).
    const Graph &graph() const { return graph_; }
    const FuseReport &fuse_report() const { return fuse_report_; }
    // The precision chosen ("auto"), and the 8-bit plan's choices node by
    // node or the count of bfloat16 nodes (empty for a float32 program).
    const std::string &precision_report() const { return precision_report_; }
    // The graph's inputs' value ids, in the order runs pass them.
    const std::vector<int> &input_values() const { return input_values_; }
    uint64_t executor() const { return executor_; }

    // One tensor per graph input (the order they were added) and one slot
    // per graph output: null gets a new tensor, else a plain tensor of the
    // output's dims and layout to write into.
    void run(const Tensor *const *inputs, mkc_tensor **outputs);
    // run(), each step timed: one line per step,
    // "<step>\t<what>\t<implementation>\t<microseconds>".
    std::string profile(const Tensor *const *inputs, mkc_tensor **outputs);

    // Compiles the plan now when no input has a dim bound at run time (so
    // the graph's errors show at once); otherwise does nothing.
    void compile_static();
    // run() on plain buffers: `dims` holds every input's caller dims one
    // after another (each input's rank as the graph gives it); inputs are
    // dense in their graph layout, outputs dense in theirs (output_desc).
    // The buffers' sizes are the caller's to get right.
    void run_plain(const int64_t *dims, const void *const *inputs, void *const *outputs);
    // Output `index` for inputs of these dims (as run_plain takes them):
    // its dims, dtype and layout label; compiles the plan if new.
    ops::ValueDesc output_desc(const int64_t *input_dims, size_t index);

    // The plan for these inputs' shapes (compiled if new).
    std::shared_ptr<const Plan> plan_for(const Tensor *const *inputs);
    // The plan compiled last (null before any).
    std::shared_ptr<const Plan> last_plan() const;
    size_t plan_count() const;
    // The converted constants the plans kept hold, each copy once.
    size_t held_constant_bytes() const;
    // The measured (or read back) choices so far, as Choices::text().
    std::string choices_text() const { return choices_.text(); }
    // One float32 run recording the ranges of the values an 8-bit plan
    // quantizes (graph/calibration.hpp), and those ranges as text.
    void calibrate(const Tensor *const *inputs, const CalibrationMethod &method);
    std::string calibration_text() const;

    // For the fork handlers (common/fork.cpp) only: take every lock of the
    // program (compiling, then plans, then choices), free them in the
    // process that took them (a default mutex may also be freed so in a
    // child, by the forking thread).
    void lock_for_fork();
    void unlock_for_fork();

private:
    void require_bf16_plan() const;

    // An arena and the bindings of the plan it ran last (a plan's run on an
    // arena bound for it binds nothing).
    struct Arena {
        std::shared_ptr<void> data;
        size_t bytes = 0;
        std::unique_ptr<RunContext> context;
    };
    std::shared_ptr<const Plan> find_or_compile(const std::vector<std::vector<int64_t>> &dims);
    // A plan for these dims, under compile_mutex_ (`shared_rows`: its float32
    // linears in row parts shared between plans).
    std::shared_ptr<const Plan> compile_locked(const std::vector<std::vector<int64_t>> &dims,
                                               const std::string &group, bool shared_rows);
    // Counts a run of `plan`; the kExactAfterRuns-th run of a plan in row
    // parts compiles its shapes again exact, which replaces it.
    void count_run(const Plan &plan);
    // The last plan, if it is for these inputs (no allocation: every run
    // asks).
    std::shared_ptr<const Plan> last_plan_for(const Tensor *const *inputs) const;
    std::shared_ptr<const Plan> plan_for_dims(const int64_t *dims);
    // Refuses caller dims of input `k` the graph's static dims rule out.
    void check_input_dims(size_t k, const Dims &caller) const;
    // Refuses outputs sharing bytes; computes outputs sharing bytes with an
    // input apart, then copies them.
    void run_plan(const Plan &plan, const CacheScope &scope, const void *const *inputs,
                  void *const *outputs, std::vector<double> *seconds = nullptr);
    void run_arena(const Plan &plan, const CacheScope &scope, const void *const *inputs,
                   void *const *outputs, std::vector<double> *seconds);
    void run_tensors(const Tensor *const *inputs, mkc_tensor **outputs,
                     std::vector<double> *seconds, std::shared_ptr<const Plan> *used);
    Arena take_arena(const Plan &plan);
    void give_back(Arena arena);

    Graph graph_;
    PassDump dump_{""};
    FuseReport fuse_report_;
    std::string precision_report_;
    ProgramOptions options_;
    // Made by the first calibrate() (a program of its own: its entries go
    // with it, when this program is destroyed).
    mutable std::mutex calibration_mutex_;
    std::unique_ptr<Calibration> calibration_;
    uint64_t executor_;
    std::vector<int> input_values_; // value id of each graph input
    mutable std::mutex mutex_;      // plans_, uses_, last_, arenas_ (held briefly)
    mutable std::mutex compile_mutex_; // one compile at a time; constants_
    // By shape group and OpenMP thread count (the slot), with when each was
    // last used (a count of the lookups: the least recent goes first).
    struct Kept {
        std::shared_ptr<const Plan> plan;
        uint64_t used = 0;
    };
    std::map<std::string, Kept> plans_;
    uint64_t uses_ = 0;
    std::shared_ptr<const Plan> last_;
    int last_threads_ = 0;           // the thread count last_ was compiled under
    std::vector<Arena> arenas_;
    // Converted constants, shared by the plans (a copy lives while a plan
    // holds it; the map's reference goes with the program).
    ConvertedConstants constants_;
    Choices choices_;
    int64_t compiled_ = 0; // plans compiled so far (under compile_mutex_)
};

// A new executor id for a program: from a process-wide counter with the
// top bit set (ids callers choose for eager calls are expected below it).
uint64_t new_program_executor();

} // namespace mkc::graph
