#include "graph/calibration.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"
#include "common/handles.hpp"
#include "graph/op_table.hpp"
#include "graph/program.hpp"

namespace mkc::graph {

namespace {

// The ports of `node` whose values an 8-bit plan quantizes: the residual
// of a convolution or linear layer too, which its 8-bit form adds in 8
// bits.
std::vector<int> observed_ports(const Node &node) {
    if (node.op == NodeOp::conv2d || node.op == NodeOp::linear) {
        const int residual = row(node).residual_port(node);
        return residual == kNoValue ? std::vector<int>{0} : std::vector<int>{0, residual};
    }
    if (node.op == NodeOp::matmul)
        return {0, 1};
    return {};
}

} // namespace

// Chosen by measuring int8 accuracy against float32 per method
// (tests/bench/calibration_methods.py; docs/design.md, section 12): the
// least error over the models tried, and never far from minmax's.
CalibrationMethod default_calibration_method() {
    CalibrationMethod m;
    m.kind = CalibrationMethod::Kind::percentile;
    return m;
}

CalibrationMethod CalibrationMethod::parse(const char *name, double percentile) {
    CalibrationMethod m = default_calibration_method();
    if (name != nullptr && *name != '\0') {
        if (std::strcmp(name, "minmax") == 0)
            m.kind = Kind::minmax;
        else if (std::strcmp(name, "percentile") == 0)
            m.kind = Kind::percentile;
        else if (std::strcmp(name, "mse") == 0)
            m.kind = Kind::mse;
        else if (std::strcmp(name, "kl") == 0)
            m.kind = Kind::kl;
        else
            fail(MKC_STATUS_INVALID_ARGUMENT, "calibrate: unknown method '", name,
                 "' (expected 'minmax', 'percentile', 'mse' or 'kl')");
    }
    if (percentile != 0) {
        if (m.kind != Kind::percentile)
            fail(MKC_STATUS_INVALID_ARGUMENT, "calibrate: a percentile (", percentile,
                 ") is for method 'percentile', not '", m.text(), "'");
        if (!(percentile > 0 && percentile <= 100))
            fail(MKC_STATUS_INVALID_ARGUMENT, "calibrate: percentile ", percentile,
                 " is not in (0, 100]");
        m.percentile = percentile;
    }
    return m;
}

std::string CalibrationMethod::text() const {
    switch (kind) {
    case Kind::minmax: return "minmax";
    case Kind::mse: return "mse";
    case Kind::kl: return "kl";
    case Kind::percentile: break;
    }
    char p[32];
    std::snprintf(p, sizeof p, "%.9g", percentile);
    return std::string("percentile ") + p;
}

std::string calibration_node(const Graph &graph, size_t n) {
    const Node &node = graph.nodes[n];
    return "node" + std::to_string(n) + "|" + row(node).name + "|" + node.name;
}

std::string calibration_key(const Graph &graph, size_t n, int port) {
    return calibration_node(graph, n) + "|" + std::to_string(port);
}

Calibration::Calibration(const Graph &graph, const ProgramOptions &options) {
    Graph g = graph;
    first_output_ = g.outputs.size();
    for (size_t n = 0; n < g.nodes.size(); ++n) {
        const Node &node = g.nodes[n];
        for (int port : observed_ports(node)) {
            const int v = node.inputs[static_cast<size_t>(port)];
            if (v == kNoValue || g.values[static_cast<size_t>(v)].dtype != MKC_DTYPE_F32)
                continue;
            std::string key = calibration_key(g, n, port);
            g.outputs.push_back({v, "calibration:" + key});
            keys_.push_back(std::move(key));
        }
    }
    if (keys_.empty())
        return;
    ProgramOptions o = options;
    o.fuse = false; // already fused (and quantized): the nodes keep their numbers
    o.precision.clear();
    program_ = std::make_unique<Program>(std::move(g), o);
    ranges_.resize(keys_.size());
}

Calibration::~Calibration() = default;

void Calibration::require_method(const CalibrationMethod &method) const {
    if (runs_ > 0 && !(method == method_))
        fail(MKC_STATUS_INVALID_ARGUMENT, "calibrate: method '", method.text(),
             "', but this program was calibrated with '", method_.text(),
             "' (one method per program: calibrate another program of the graph for another)");
}

void Calibration::observe(const Tensor *const *inputs, const CalibrationMethod &method) {
    require(program_ != nullptr,
            "calibrate: the program has no node to calibrate (conv2d, linear or matmul "
            "reading float32)");
    {
        std::lock_guard<std::mutex> lock(mutex_);
        require_method(method);
    }
    std::vector<mkc_tensor *> outputs(first_output_ + keys_.size(), nullptr);
    struct Release {
        std::vector<mkc_tensor *> &t;
        ~Release() {
            for (mkc_tensor *p : t)
                if (p && registry<Tensor>().remove(p))
                    delete p;
        }
    } release{outputs};
    program_->run(inputs, outputs.data());
    const bool histogram = method.kind != CalibrationMethod::Kind::minmax;
    std::vector<Range> seen(keys_.size());
    std::vector<RangeHistogram> seen_histograms(histogram ? keys_.size() : 0);
    for (size_t k = 0; k < keys_.size(); ++k) {
        const Tensor &t = *outputs[first_output_ + k];
        const auto *x = static_cast<const float *>(t.data); // plain float32
        const int64_t n = element_count(t);
        float lo = INFINITY, hi = -INFINITY;
        bool finite = true;
        for (int64_t i = 0; i < n; ++i) {
            finite &= std::isfinite(x[i]);
            lo = std::fmin(lo, x[i]);
            hi = std::fmax(hi, x[i]);
        }
        if (!finite)
            for (int64_t i = 0; i < n; ++i)
                if (!std::isfinite(x[i]))
                    fail(MKC_STATUS_INVALID_ARGUMENT, "calibrate: ", keys_[k], " read ", x[i],
                         ": calibration data must give finite values");
        seen[k] = {lo, hi};
        if (histogram)
            seen_histograms[k].add(x, n, lo, hi);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    require_method(method); // another thread may have begun with another
    for (size_t k = 0; k < keys_.size(); ++k) {
        if (runs_ == 0) {
            ranges_[k] = seen[k];
            continue;
        }
        ranges_[k].min = std::fmin(ranges_[k].min, seen[k].min);
        ranges_[k].max = std::fmax(ranges_[k].max, seen[k].max);
    }
    if (histogram) {
        if (runs_ == 0)
            histograms_.assign(keys_.size(), RangeHistogram{});
        for (size_t k = 0; k < keys_.size(); ++k)
            histograms_[k].merge(seen_histograms[k]);
    }
    method_ = method;
    ++runs_;
}

std::string Calibration::text() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    if (runs_ == 0)
        return out;
    out = "# calibration method: " + method_.text() + "\n";
    for (size_t k = 0; k < keys_.size(); ++k) {
        std::pair<double, double> r{ranges_[k].min, ranges_[k].max};
        if (method_.kind == CalibrationMethod::Kind::percentile)
            r = histograms_[k].percentile_range(method_.percentile);
        else if (method_.kind == CalibrationMethod::Kind::mse)
            r = histograms_[k].mse_range();
        else if (method_.kind == CalibrationMethod::Kind::kl)
            r = histograms_[k].kl_range();
        char line[96];
        std::snprintf(line, sizeof line, "\t%.9g\t%.9g\t%lld\n", r.first, r.second,
                      static_cast<long long>(runs_));
        out += keys_[k] + line;
    }
    return out;
}

} // namespace mkc::graph
