// Shapes that hold for every run of a graph whose inputs have dims bound
// at run time: each such dim is a symbol, and an operator's output shape
// keeps the symbols its row's shaping rule says it keeps. Two values with
// equal known shapes are equal at every run, which is what a rewrite that
// adds them element by element must know.
#pragma once

#include <vector>

#include "graph/graph.hpp"

namespace mkc::graph {

// A value's shape as far as it holds for every run: dims in oneDNN order,
// each known (> 0) or a symbol (< 0) standing for a dim bound at run time.
// Two shapes with equal entries are equal at every run; a value whose
// shape cannot be told so is not known.
struct Shape {
    bool known = false;
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST;
    Dims dims;

    bool symbolic() const {
        return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; });
    }
};

bool same_shape(const Shape &a, const Shape &b);

// Every value's shape as the graph is built (a value whose shape cannot be
// told for every run: not known).
std::vector<Shape> symbolic_shapes(const Graph &graph);

// Whether `layout` is a concrete one (not TARGET, which a plan resolves).
bool concrete(mkc_layout layout);

} // namespace mkc::graph
