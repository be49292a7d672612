// Choosing an implementation by measuring: on the first plan of an input
// shape, every implementation that supports a node is prepared and timed
// on its own (buffers in the arrangements it reads and writes, filled with
// small values) with the conversions its inputs would need, and the
// fastest is kept. The choices are remembered per
// program under a key of the CPU's ISA, the OpenMP thread count, the node
// and its inputs' shapes, and can be written out and read back as text, so
// a deployment reuses them without measuring.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "graph/implementations.hpp"

namespace mkc::graph {

struct Measured {
    std::string impl;                                  // the fastest (or the one read back)
    std::vector<std::pair<std::string, double>> times; // microseconds per candidate
    bool loaded = false;                               // read back, not measured here
};

// A program's measured choices by key. Thread-safe.
class Choices {
public:
    // The choice under `key`, if there is one.
    bool find(const std::string &key, Measured &out) const;
    void add(const std::string &key, Measured m);
    // One line per choice: "<key>\t<impl>\t<name>=<us>,<name>=<us>...\n".
    std::string text() const;
    // Reads text() back (every choice marked loaded); errors are
    // INVALID_ARGUMENT naming the line. Replaces nothing already there.
    void load(const std::string &text);

    // For the fork handlers (common/fork.cpp) only.
    void lock_for_fork() { mutex_.lock(); }
    void unlock_for_fork() { mutex_.unlock(); }

private:
    mutable std::mutex mutex_;
    std::map<std::string, Measured> by_key_;
};

// The key of node `n` of `graph` on these inputs.
std::string choice_key(const Graph &graph, int n, const NodeInputs &inputs);

// Times `impl`'s step for the node: microseconds per run (median), plus
// those of the conversions its inputs need from the arrangements they
// arrive in (`arriving`, per port; null: nothing to convert per run - a
// constant, converted once - or absent); a negative number when it refuses
// to prepare (`why` says why). A candidate whose first run takes longer
// than kHopeless times `best_us` (the best so far, negative: none) is
// timed by that run alone. Where the node's result is wanted with
// strides `y_strides` (the view a transpose after it reads), a step that
// writes them is prepared so, and one that cannot is charged the
// conversion of its result into them.
// The step's constant inputs are evicted from the caches before each timed
// run: a step run alone again and again keeps its weights cached, where in
// a model (whose weights outgrow the caches, and whose other steps pass
// between two runs of this one) they come from memory.
double time_candidate(const CacheScope &scope, const Implementation &impl, const Node &node,
                      const NodeInputs &inputs,
                      const std::vector<const dnnl::memory::desc *> &arriving,
                      const Dims *y_strides, double best_us, std::string &why);

// Microseconds per run (median) of `run` on a prepared step, with buffers
// for the inputs `present` says are there and its first `outputs` results.
double time_prepared(const CacheScope &scope, const ops::Prepared &p, NodeRun run,
                     const std::vector<bool> &present, size_t outputs);

// An attention chain (scores matmul, softmax, context matmul) is chosen as
// one step or as its three nodes' steps: its choice's key starts with
// kAttentionKey, and names one of the two.
constexpr const char *kAttentionKey = "attention|";
constexpr const char *kAttentionStep = "onednn_attention";
constexpr const char *kAttentionSteps = "three_steps";

// A candidate after the first must be faster than the best so far by this
// factor to replace it (medians of a few runs differ by a few percent
// between equal kernels).
constexpr double kMeasuredMargin = 0.97;
constexpr double kHopeless = 4.0;

// "measured: onednn 12.3 us, reference 45.6 us" (or "measured (loaded): ...").
std::string measured_text(const Measured &m);

} // namespace mkc::graph
