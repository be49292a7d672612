// The implementations a program chooses among, per node. An implementation
// says which nodes it can run (`supports`), prepares a node's step (its
// entry, the arrangement it reads each input in and writes each output
// in) and runs it; its in-place options and whether it reads strided views
// follow from it, so the memory plan, made after the choice, follows the
// choice too.
//
// Built in, by priority:
//   onednn             the library's cached oneDNN primitives (ops/);
//   onednn_matmul      a linear layer on oneDNN's matmul, not its inner
//                      product (impl_onednn_variants.cpp);
//   onednn_matmul_shared  the same in row parts whose primitives the plans
//                      of other input shapes share;
//   onednn_contiguous  oneDNN's primitive on contiguous copies of the
//                      strided views it would read where they are;
//   reference          plain C++ loops on plain bytes (reference/): the
//                      fallback where oneDNN refuses a case, and an
//                      independent check of oneDNN's results.
// The variants compute what `onednn` computes, on other kernels. One is
// chosen by priority only where it says it is preferred on this CPU for the
// node (`onednn_matmul` for a float32 linear, whose kernels measure even
// with or faster than the inner product's on every ISA; in its place
// `onednn_matmul_shared` in the plans a program compiles past its exact
// ones); elsewhere only an override or a measurement chooses it.
//
// The choice per node: the highest-priority implementation whose
// `supports` accepts the node - unless an override names one for the
// node's operator (the compile option first, then MKCACHE_IMPL, both
// "conv2d=reference,softmax=onednn"), which must then accept it: an
// override is never silently dropped.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_table.hpp"
#include "ops/phases.hpp"

namespace mkc::graph {

struct Implementation {
    const char *name;
    int priority; // higher is preferred
    // Ok, or why this implementation cannot run the node on these inputs.
    ops::Verdict (*supports)(const Node &node, const NodeInputs &inputs);
    // The node's step as prepare_node makes it (`y_strides` only when
    // reads_views says so for a matmul).
    ops::Prepared (*prepare)(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                             const Dims *y_strides);
    // The step's run when it is not one primitive execution.
    NodeRun (*run)(const OpRow &op);
    // Whether the step may write its result over its first input's bytes
    // (when they are arranged as the result).
    bool (*overwrites_input)(const OpRow &op);
    // Whether the step reads strided views where they are and can write its
    // result with given strides (else views reach it converted to plain).
    bool (*reads_views)(const OpRow &op);
    // Whether it is another way of running what `onednn` runs: chosen by
    // override or measurement, by priority only where `preferred` says so.
    bool variant;
    // Whether it differs from `onednn` only where the node reads or writes
    // a strided view (elsewhere measuring it would time the same step
    // twice).
    bool views_only;
    // For a variant: whether it goes before `onednn` by priority for this
    // node on this CPU (null: never).
    bool (*preferred)(const Node &node, const NodeInputs &inputs);
    // Whether it is there for memory over many input shapes, not for speed
    // (`onednn_matmul_shared`): measuring times it only where it is the
    // priority choice.
    bool for_many_shapes = false;
};

// Whether the row's oneDNN primitive runs the node: the operator's own
// checks, then the cases its primitive computes as the operator defines
// them. What every implementation on oneDNN asks first.
ops::Verdict onednn_supports(const Node &node, const NodeInputs &inputs);
// The row's own run of its oneDNN step, and whether that step may write
// over its input: what the implementations on oneDNN's primitives share.
NodeRun onednn_run(const OpRow &op);
bool onednn_overwrites_input(const OpRow &op);

// Every implementation, highest priority first.
const std::vector<const Implementation *> &implementations();
// The one named `name`, or null.
const Implementation *implementation_named(const std::string &name);
// The implementations the priority walk tries for `node`, in order: the
// variants preferred for it, then the others by priority. `shared_rows`
// (a plan of a program past its exact plans): `onednn_matmul_shared` where
// `onednn_matmul` is preferred.
std::vector<const Implementation *> by_priority(const Node &node, const NodeInputs &inputs,
                                                bool shared_rows = false);

// Operator name ("conv2d", its row's) -> implementation name.
struct Overrides {
    std::map<std::string, std::string> by_option, by_environment;
    // The implementation asked for operator `op` - the option's first, then
    // MKCACHE_IMPL's - and `by` which of them asked ("option",
    // "MKCACHE_IMPL"); null when neither names it.
    const std::string *asked(const std::string &op, const char **by = nullptr) const;
};
// Parses "conv2d=reference,softmax=onednn" (spaces around the parts
// allowed, an empty text: none); `source` names it in errors, which are
// INVALID_ARGUMENT naming the part that is wrong: an unknown operator or
// implementation, a part without '=', an operator given twice.
std::map<std::string, std::string> parse_overrides(const std::string &text, const char *source);
// The same for a program's per-operator precisions, "layer_norm=f32,...",
// each f32, bf16 (or int8, which the program then refuses by name).
std::map<std::string, std::string> parse_precision_overrides(const std::string &text);

// What the choice for one node was and why (for the plan text).
struct Choice {
    const Implementation *impl = nullptr;
    bool overridden = false;          // asked for: never replaced by another
    std::string why;                  // "priority", "override (option)", "override (MKCACHE_IMPL)"
    std::vector<std::string> refused; // "onednn: <reason>" of better candidates
};
// Chooses for `node` (described as in messages by `what`; `shared_rows` as
// for by_priority); an override that cannot run the node throws
// INVALID_ARGUMENT naming it and the reason.
Choice choose(const Node &node, const NodeInputs &inputs, const Overrides &overrides,
              const std::string &what, bool shared_rows = false);

} // namespace mkc::graph
