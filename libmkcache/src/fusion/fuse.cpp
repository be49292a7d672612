// The fusion pass: the registered fusions, tried in order on each producer
// and its only reader, until none applies.
#include "fusion/fuse.hpp"

#include "fusion/fusions.hpp"

namespace mkc::graph {

std::string FuseReport::text() const {
    if (total() == 0)
        return {};
    std::string s = "fused " + std::to_string(total()) + " node" + (total() == 1 ? "" : "s") +
                    ": " + std::to_string(activations) + " activation, " + std::to_string(sums) +
                    " sum, " + std::to_string(batch_norms) + " batch_norm, " +
                    std::to_string(scales) + " scale\n";
    for (const std::string &line : lines)
        s += line + "\n";
    return s;
}

namespace {

struct Fusion {
    const char *name;
    bool FuseOptions::*enabled;
    bool (*apply)(fusion::Rewriter &r, int producer, int consumer);
};

// In this order on each pair: a batch_norm folds only into a convolution
// without post-ops, and a sum or a scale comes before an activation.
const Fusion kFusions[] = {
    {"batch_norm", &FuseOptions::batch_norm, fusion::fold_batch_norm},
    {"sum", &FuseOptions::sum, fusion::fuse_sum},
    {"scale", &FuseOptions::scale, fusion::fuse_scale},
    {"activation", &FuseOptions::activation, fusion::fuse_activation},
};

} // namespace

Graph fuse(const Graph &graph, FuseReport *report, const FuseOptions &options) {
    FuseReport local;
    FuseReport &r = report ? *report : local;
    r = FuseReport{};
    fusion::Rewriter rewriter(graph, r);
    const auto one = [&](int p, int c) {
        for (const Fusion &f : kFusions)
            if (options.*f.enabled && f.apply(rewriter, p, c))
                return true;
        return false;
    };
    while (rewriter.each_pair(one)) {
    }
    return rewriter.result();
}

} // namespace mkc::graph
