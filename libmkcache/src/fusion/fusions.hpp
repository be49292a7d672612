// The fusions fuse() applies (fusion/fuse.hpp), each a matcher and its
// rewrite in a file of its own, and the rewriter they work through: the
// graph's nodes as slots, a fused node taking its consumer's slot.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fusion/fuse.hpp"
#include "graph/op_table.hpp"
#include "graph/shapes.hpp"

namespace mkc::graph::fusion {

class Rewriter {
public:
    Rewriter(const Graph &g, FuseReport &report);

    // The node in slot `slot` as it is now (fused ones included).
    const Node &node(int slot) const { return slots_[slot].node; }
    const Value &value(int v) const { return values_[v]; }
    bool is_constant(int v) const {
        return v != kNoValue && values_[v].kind == Value::Kind::constant;
    }
    // The value's shape for every run (not known for values made here).
    Shape shape(int v) const {
        return v >= 0 && v < static_cast<int>(shapes_.size()) ? shapes_[v] : Shape{};
    }
    // "node 3 (conv2d 'c1')" by the graph's numbering, and a value the same way.
    std::string describe(int slot) const;
    std::string describe_value(int v) const;
    FuseReport &report() { return report_; }

    // A new constant value holding `t`.
    int add_constant(std::shared_ptr<Tensor> t, std::string name);
    // The producer's node, changed to `fused`, takes the consumer's place
    // and output: what reads the consumer's output reads the fused node's,
    // and every value the fused node reads exists by then.
    void merge(int p, int c, Node fused, std::string line);

    // Each live producer with one output that only one node reads (not a
    // graph output), and that reader: `f(producer, consumer)` until it
    // returns true (then true), else false.
    template <typename F> bool each_pair(F &&f) const;

    // The graph as rewritten: inputs in their order, live nodes in slot
    // order, constants no node reads any more left out.
    Graph result() const;

private:
    struct Slot {
        Node node;
        int origin; // the graph's node it stands for (a fused one: the producer)
        bool alive;
    };
    void count_readers(std::vector<int> &readers, std::vector<int> &reader) const;

    const Graph &g_;
    FuseReport &report_;
    std::vector<Shape> shapes_;
    std::vector<Value> values_; // the graph's, then the constants made here
    std::vector<bool> is_output_;
    std::vector<Slot> slots_; // the nodes in order; fused ones in their consumer's place
};

template <typename F> bool Rewriter::each_pair(F &&f) const {
    std::vector<int> readers, reader;
    count_readers(readers, reader);
    for (size_t p = 0; p < slots_.size(); ++p) {
        const Slot &producer = slots_[p];
        if (!producer.alive || producer.node.outputs.size() != 1)
            continue;
        const int y = producer.node.outputs[0];
        if (readers[y] != 1 || is_output_[y])
            continue;
        if (f(static_cast<int>(p), reader[y]))
            return true;
    }
    return false;
}

// A float32 constant's values, plain row-major over its oneDNN-order dims.
std::vector<float> plain_values(const Tensor &t);
// A new constant tensor holding `data` plain over oneDNN-order `dims`.
std::shared_ptr<Tensor> constant_tensor(const Dims &dims, mkc_layout label,
                                        const std::vector<double> &data);

// The fusions: each true when it rewrote producer slot `p` and its only
// reader `c`.
bool fold_batch_norm(Rewriter &r, int p, int c);
bool fuse_sum(Rewriter &r, int p, int c);
bool fuse_scale(Rewriter &r, int p, int c);
bool fuse_activation(Rewriter &r, int p, int c);

} // namespace mkc::graph::fusion
