// Calibration for 8-bit plans: the ranges a program's float32 runs give the
// values its quantizable nodes read (the src of each 2-D convolution and
// linear layer, and both operands of each matmul), gathered over any number
// of runs, as text a later compile reads back.
//
// The values are observed as outputs of a calibration program: the
// program's (fused) graph with each observed value added as an output,
// compiled without fusing again, so the nodes and their numbers are the
// program's own. Keys name the node as the plan does, and the port:
// "node<n>|<op>|<name>|<port>".
//
// How a range is chosen from what a value held is the calibration's method:
// its extremes (minmax), a percentile of each end (percentile), the range
// that quantizes its histogram with the least squared error (mse) or the
// least KL divergence (kl);
// graph/range_histogram.hpp keeps the histograms.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/range_histogram.hpp"
#include "tensor/tensor.hpp"

namespace mkc::graph {

class Program;
struct ProgramOptions;

// The key of node `n`'s observed port, and the node's part of it
// ("node3|conv2d|c2"): what calibration writes and the int8 pass reads.
std::string calibration_node(const Graph &graph, size_t n);
std::string calibration_key(const Graph &graph, size_t n, int port);

struct CalibrationMethod {
    enum class Kind { minmax, percentile, mse, kl };
    Kind kind = Kind::minmax;
    double percentile = 99.999; // percentile: the share of values kept, in (0, 100]

    // From the API's fields: `name` "minmax", "percentile", "mse" or "kl" (NULL
    // or "": the default method); `percentile` for "percentile" only (0:
    // its default). Anything else is INVALID_ARGUMENT.
    static CalibrationMethod parse(const char *name, double percentile);
    // "minmax", "mse", "kl", "percentile 99.999".
    std::string text() const;
    bool operator==(const CalibrationMethod &o) const {
        return kind == o.kind && (kind != Kind::percentile || percentile == o.percentile);
    }
};

// The method a calibration without one uses.
CalibrationMethod default_calibration_method();

class Calibration {
public:
    // `graph`: the program's graph (fused); `options`: its compile options.
    Calibration(const Graph &graph, const ProgramOptions &options);
    ~Calibration();

    // One float32 run on `inputs` (one per graph input), its observed values'
    // extremes (and histograms) merged into the ones so far. A NaN or
    // infinity in an observed value is an error naming it, and so is a
    // method other than the earlier runs' one; either leaves everything as
    // it was. Thread safe.
    void observe(const Tensor *const *inputs, const CalibrationMethod &method);
    // "# calibration method: <method>\n", then
    // "<key>\t<min>\t<max>\t<runs>\n" per observed value, in node order,
    // the range the method chose; empty before any run.
    std::string text() const;
    // Whether the graph has anything to observe.
    bool empty() const { return keys_.empty(); }

private:
    struct Range {
        double min = 0, max = 0;
    };
    void require_method(const CalibrationMethod &method) const; // mutex_ held
    std::vector<std::string> keys_; // per calibration output past the graph's own
    size_t first_output_ = 0;       // where they start among the outputs
    std::unique_ptr<Program> program_;
    mutable std::mutex mutex_;
    std::vector<Range> ranges_;
    std::vector<RangeHistogram> histograms_; // per key, for the histogram methods
    CalibrationMethod method_;               // the runs' method, once runs_ > 0
    int64_t runs_ = 0;
};

} // namespace mkc::graph
