// What a run of a plan binds once per arena: for every step the plan can
// execute directly (Step::in_args), the primitive's argument list with a
// memory object per argument. Arena and constant buffers keep their
// addresses for the arena's life, so only the run's inputs and outputs and
// the thread's scratchpad are re-pointed on each run; a step is then one
// oneDNN execution, with no per-step lookup, lock or allocation.
#pragma once

#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "graph/plan.hpp"

namespace mkc::graph {

class RunContext {
public:
    // Binds `plan`'s direct steps to `arena` (its constants included).
    RunContext(const Plan &plan, char *arena);
    uint64_t plan_id() const { return plan_id_; }

    // Runs every step of the plan on the calling thread (`state` its state;
    // `scope` the plan's scope with that state): inputs and outputs by the
    // plan's indices.
    // `seconds` (optional): each step's wall time, one per step.
    void run(const Plan &plan, const CacheScope &scope, ThreadState &state,
             const void *const *inputs, void *const *outputs,
             std::vector<double> *seconds = nullptr);

private:
    void run_steps(const Plan &plan, const CacheScope &scope, ThreadState &state,
                   const void *const *inputs, void *const *outputs, size_t begin, size_t end);
    struct PerRun {
        int arg;       // index in the step's argument list
        BufferRef ref; // input, output (re-pointed each run)
    };
    struct Bound {
        bool direct = false;
        std::vector<dnnl::memory> memories;
        std::vector<dnnl_exec_arg_t> args;
        std::vector<PerRun> per_run;
        int scratchpad = -1; // index in args, or -1
        size_t scratchpad_bytes = 0;
        std::vector<void *> last; // the handle each per-run argument had last
    };
    uint64_t plan_id_;
    char *arena_;
    std::vector<Bound> steps_;
};

} // namespace mkc::graph
