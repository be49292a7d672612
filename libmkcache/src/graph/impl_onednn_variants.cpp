// Other ways oneDNN computes a node than the one its row binds: kernels of
// another primitive family, or the same primitive on other arrangements of
// its operands. Which is faster depends on the CPU, the shapes and the
// thread count, so they stand below `onednn` by priority and are chosen by
// override or by measurement (`choose="measure"`).
//
//   onednn_matmul      a linear layer on oneDNN's matmul primitive, not its
//                      inner product (another kernel, another weights
//                      arrangement);
//   onednn_matmul_shared  the same with its rows in two parts, the whole
//                      multiples of 128 and the rest, whose primitives the
//                      plans of other input shapes share (fewer primitives
//                      over many shapes, a little slower where there are
//                      two parts): what a program's plans take by priority
//                      in place of onednn_matmul once it has compiled its
//                      `exact_plans` (graph/program.hpp);
//   onednn_conv1x1     a linear layer as a 1x1 convolution over its rows in
//                      channels-last order (the convolution's kernels and
//                      weights arrangement);
//   onednn_contiguous  a node that reads or writes strided views (an
//                      attention's heads) on contiguous copies of them,
//                      which some kernels read faster than the strided
//                      bytes.
#include "graph/implementations.hpp"
#include "ops/matmul.hpp"

namespace mkc::graph {

namespace {

bool no_views(const OpRow &) { return false; }

// ------------------------------------- onednn_matmul, onednn_conv1x1

ops::Verdict on_kernel_supports(const Node &node, const NodeInputs &inputs) {
    if (!row(node).prepare_on_kernel)
        return {MKC_STATUS_UNSUPPORTED, std::string(row(node).name) +
                                            " has no other primitive family (it is one, or "
                                            "has none)"};
    return onednn_supports(node, inputs);
}

// A float32 linear runs on oneDNN's matmul by priority on every ISA: below
// AVX-512 it is oneDNN's gemm (with the weights' rows spaced apart), which
// beats the inner product's brgemm there; with AVX-512 both are brgemm, and
// the matmul's blocking is even with the inner product's on two threads and
// ahead of it on one (docs/design.md has the figures per CPU). Other
// precisions stay on the inner product, whose bfloat16 and 8-bit kernels
// the matmul's do not beat.
bool as_matmul_preferred(const Node &node, const NodeInputs &inputs) {
    return inputs.size() > 1 && inputs[0] && inputs[1] && inputs[0]->dtype == MKC_DTYPE_F32 &&
           inputs[1]->dtype == MKC_DTYPE_F32 && row(node).prepare_on_kernel;
}

ops::Prepared as_matmul_prepare(const CacheScope &scope, const Node &node,
                                const NodeInputs &inputs, const Dims *) {
    return row(node).prepare_on_kernel(scope, node, inputs, ops::LinearKernel::matmul, false);
}

ops::Prepared shared_rows_prepare(const CacheScope &scope, const Node &node,
                                  const NodeInputs &inputs, const Dims *) {
    return row(node).prepare_on_kernel(scope, node, inputs, ops::LinearKernel::matmul, true);
}

ops::Prepared as_conv1x1_prepare(const CacheScope &scope, const Node &node,
                                 const NodeInputs &inputs, const Dims *) {
    return row(node).prepare_on_kernel(scope, node, inputs, ops::LinearKernel::conv1x1, false);
}

// ------------------------------------------------------- onednn_contiguous

ops::Verdict contiguous_supports(const Node &node, const NodeInputs &inputs) {
    if (!row(node).onednn_reads_views)
        return {MKC_STATUS_UNSUPPORTED, std::string(row(node).name) +
                                            " reads no strided views: the same as onednn"};
    return onednn_supports(node, inputs);
}

ops::Prepared contiguous_prepare(const CacheScope &scope, const Node &node,
                                 const NodeInputs &inputs, const Dims *) {
    return prepare_node(scope, node, inputs, nullptr);
}

} // namespace

extern const Implementation kOnednnMatmul, kOnednnMatmulShared, kOnednnConv1x1,
    kOnednnContiguous;
// name, priority, supports, prepare, run, overwrites_input, reads_views,
// variant, views_only, preferred, for_many_shapes
const Implementation kOnednnMatmul{"onednn_matmul", 50, on_kernel_supports, as_matmul_prepare,
                                   onednn_run, onednn_overwrites_input, no_views,
                                   true, false, as_matmul_preferred};
const Implementation kOnednnMatmulShared{"onednn_matmul_shared", 45, on_kernel_supports,
                                         shared_rows_prepare, onednn_run,
                                         onednn_overwrites_input, no_views, true, false,
                                         nullptr, true};
const Implementation kOnednnConv1x1{"onednn_conv1x1", 42, on_kernel_supports,
                                    as_conv1x1_prepare, onednn_run, onednn_overwrites_input,
                                    no_views, true, false, nullptr};
const Implementation kOnednnContiguous{"onednn_contiguous", 40, contiguous_supports,
                                       contiguous_prepare, onednn_run, onednn_overwrites_input,
                                       no_views, true, true, nullptr};

} // namespace mkc::graph
