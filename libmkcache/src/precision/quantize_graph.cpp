#include "precision/quantize_graph.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "common/error.hpp"
#include "fusion/fusions.hpp"
#include "graph/calibration.hpp"
#include "graph/op_table.hpp"
#include "layout/layout.hpp"
#include "ops/quantized.hpp"

namespace mkc::graph {

namespace {

struct Range {
    double min = 0, max = 0;
};

// "key\tmin\tmax\truns" lines (graph/calibration.hpp).
std::map<std::string, Range> parse(const std::string &text) {
    std::map<std::string, Range> ranges;
    size_t at = 0;
    int line_number = 0;
    while (at < text.size()) {
        const size_t end = std::min(text.find('\n', at), text.size());
        const std::string line = text.substr(at, end - at);
        at = end + 1;
        ++line_number;
        if (line.empty())
            continue;
        const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        char *stop1 = nullptr, *stop2 = nullptr;
        Range r;
        if (t1 != std::string::npos && t2 != std::string::npos) {
            r.min = std::strtod(line.c_str() + t1 + 1, &stop1);
            r.max = std::strtod(line.c_str() + t2 + 1, &stop2);
        }
        if (t1 == std::string::npos || t2 == std::string::npos || *stop1 != '\t' ||
            (*stop2 != '\t' && *stop2 != '\0') || !std::isfinite(r.min) ||
            !std::isfinite(r.max) || r.min > r.max)
            fail(MKC_STATUS_INVALID_ARGUMENT, "calibration line ", line_number, ": '", line,
                 "' is not <key>\\t<min>\\t<max>\\t<runs> with min <= max");
        ranges[line.substr(0, t1)] = r;
    }
    return ranges;
}

// The key of the src a quantized node reads (its port 0).
std::string key_of(const Graph &g, size_t n) { return calibration_key(g, n, 0); }

// Whether the pass rewrites `node`: a conv2d without groups or fused sum,
// or a linear layer, whose weights are a float32 constant.
bool quantizable(const Graph &g, const Node &node) {
    if (node.op == NodeOp::conv2d) {
        const auto &p = std::get<mkc_conv_params>(node.params);
        if (p.groups != 1 || p.sum != 0)
            return false;
    } else if (node.op != NodeOp::linear) {
        return false;
    }
    const int w = node.inputs[1];
    const Value &weights = g.values[static_cast<size_t>(w)];
    return weights.kind == Value::Kind::constant && weights.dtype == MKC_DTYPE_F32;
}

template <typename T>
std::shared_ptr<Tensor> constant_of(mkc_dtype dtype, const Dims &dims, const std::vector<T> &data) {
    std::shared_ptr<Tensor> t = make_owned_tensor(
        layout::plain_desc(dims, to_onednn(dtype), MKC_LAYOUT_CHANNELS_FIRST),
        MKC_LAYOUT_CHANNELS_FIRST, dtype);
    std::memcpy(t->data, data.data(), data.size() * sizeof(T));
    t->constant = true;
    return t;
}

class Rewrite {
public:
    Rewrite(const Graph &g, const std::map<std::string, Range> &ranges, QuantizeReport &report)
        : g_(g), ranges_(ranges), report_(report), map_(g.values.size(), kNoValue) {}

    Graph run() {
        // Inputs and constants first, in their order (runs pass the inputs so).
        for (size_t v = 0; v < g_.values.size(); ++v)
            if (g_.values[v].kind != Value::Kind::result) {
                out_.values.push_back(g_.values[v]);
                map_[v] = static_cast<int>(out_.values.size()) - 1;
            }
        // Every line must name a node of this graph (lines of matmul
        // operands, which this pass leaves float32, included).
        for (const auto &entry : ranges_) {
            const std::string &k = entry.first;
            const size_t port_bar = k.rfind('|');
            const long n = k.compare(0, 4, "node") == 0 ? std::strtol(k.c_str() + 4, nullptr, 10)
                                                        : -1;
            const bool names_a_node =
                n >= 0 && n < static_cast<long>(g_.nodes.size()) && port_bar != std::string::npos &&
                k.substr(0, port_bar) == calibration_node(g_, static_cast<size_t>(n));
            if (!names_a_node)
                fail(MKC_STATUS_INVALID_ARGUMENT, "compile (int8): calibration line '", k,
                     "' names no node of this graph: the calibration is of another graph");
        }
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            const Node &node = g_.nodes[n];
            const auto found = ranges_.find(key_of(g_, n));
            if (!quantizable(g_, node)) {
                copy(node);
                continue;
            }
            if (found == ranges_.end())
                fail(MKC_STATUS_INVALID_ARGUMENT, "compile (int8): ", g_.describe_node(static_cast<int>(n)),
                     " has no calibration line ('", key_of(g_, n),
                     "'): the calibration is of another graph, or none was made");
            quantize(static_cast<int>(n), found->second);
        }
        for (const Output &o : g_.outputs)
            out_.outputs.push_back({map_[static_cast<size_t>(o.value)], o.name});
        report_.text += std::to_string(report_.quantized) + " node(s) quantized to 8 bits\n";
        return std::move(out_);
    }

private:
    int add_constant(std::shared_ptr<Tensor> t, const std::string &name) {
        Value v;
        v.kind = Value::Kind::constant;
        v.name = name;
        v.dtype = t->dtype;
        v.layout = t->layout;
        v.dims = caller_dims(*t);
        v.constant = std::move(t);
        out_.values.push_back(std::move(v));
        return static_cast<int>(out_.values.size()) - 1;
    }

    // Appends `node` reading new value ids; its outputs get new results.
    void emit(Node node, const std::vector<int> &old_outputs) {
        const int index = static_cast<int>(out_.nodes.size());
        node.outputs.clear();
        for (size_t port = 0; port < old_outputs.size(); ++port) {
            Value v;
            v.kind = Value::Kind::result;
            v.producer = index;
            v.port = static_cast<int>(port);
            out_.values.push_back(std::move(v));
            node.outputs.push_back(static_cast<int>(out_.values.size()) - 1);
            if (old_outputs[port] != kNoValue)
                map_[static_cast<size_t>(old_outputs[port])] = node.outputs.back();
        }
        out_.nodes.push_back(std::move(node));
    }

    int mapped(int v) const { return v == kNoValue ? kNoValue : map_[static_cast<size_t>(v)]; }

    void copy(const Node &node) {
        Node n = node;
        for (int &v : n.inputs)
            v = mapped(v);
        emit(std::move(n), node.outputs);
    }

    void quantize(int index, const Range &r) {
        const Node &node = g_.nodes[static_cast<size_t>(index)];
        // src: uint8 over [min(r.min, 0), max(r.max, 0)] (zero exactly
        // representable: padding and relu's zeros stay exact).
        const double lo = std::min(r.min, 0.0), hi = std::max(r.max, 0.0);
        const double span = hi - lo;
        const float src_scale = span > 0 ? static_cast<float>(span / 255.0) : 1.0f;
        const int32_t zero =
            static_cast<int32_t>(std::clamp(std::nearbyint(-lo / src_scale), 0.0, 255.0));
        // weights: per output channel, symmetric.
        const Tensor &w = *g_.values[static_cast<size_t>(node.inputs[1])].constant;
        const std::vector<float> values = fusion::plain_values(w);
        const int64_t channels = w.dims[0];
        const int64_t per = static_cast<int64_t>(values.size()) / channels;
        const double steps = ops::int8_pairs_saturate() ? 63.0 : 127.0;
        std::vector<float> weight_scale(static_cast<size_t>(channels));
        std::vector<int8_t> q(values.size());
        for (int64_t o = 0; o < channels; ++o) {
            double peak = 0;
            for (int64_t i = 0; i < per; ++i)
                peak = std::max(peak, std::fabs(static_cast<double>(values[o * per + i])));
            const float s = peak > 0 ? static_cast<float>(peak / steps) : 1.0f;
            weight_scale[static_cast<size_t>(o)] = s;
            for (int64_t i = 0; i < per; ++i)
                q[o * per + i] = static_cast<int8_t>(std::clamp(
                    std::nearbyint(static_cast<double>(values[o * per + i]) / s), -steps, steps));
        }
        const std::string base = node.name.empty() ? "node" + std::to_string(index) : node.name;
        const int c_src_scale = add_constant(
            constant_of<float>(MKC_DTYPE_F32, {1}, {src_scale}), base + ":src_scale");
        const int c_zero_u8 = add_constant(
            constant_of<uint8_t>(MKC_DTYPE_U8, {1}, {static_cast<uint8_t>(zero)}),
            base + ":src_zero_point");
        const int c_zero_s32 =
            add_constant(constant_of<int32_t>(MKC_DTYPE_S32, {1}, {zero}), base + ":src_zero");
        const int c_weights = add_constant(constant_of<int8_t>(MKC_DTYPE_S8, w.dims, q),
                                           base + ":weights_int8");
        const int c_weight_scale = add_constant(
            constant_of<float>(MKC_DTYPE_F32, {channels}, weight_scale), base + ":weight_scale");

        Node qnode;
        qnode.op = NodeOp(MKC_OP_QUANTIZE);
        mkc_quantize_params qp{};
        qp.struct_size = sizeof qp;
        qp.axis = 1;
        qp.to = MKC_DTYPE_U8;
        qnode.params = qp;
        qnode.inputs = {mapped(node.inputs[0]), c_src_scale, c_zero_u8};
        const int before = static_cast<int>(out_.values.size());
        emit(std::move(qnode), {kNoValue});
        const int src_q = before; // the quantize step's result

        Node qn;
        qn.name = node.name;
        const int bias = node.inputs.size() > 2 ? mapped(node.inputs[2]) : kNoValue;
        qn.inputs = {src_q, c_weights, c_src_scale, c_weight_scale, bias, c_zero_s32};
        if (node.op == NodeOp::conv2d) {
            mkc_quantized_conv_params p{};
            p.struct_size = sizeof p;
            p.conv = std::get<mkc_conv_params>(node.params);
            p.dst_dtype = MKC_DTYPE_F32;
            qn.op = NodeOp(MKC_OP_QUANTIZED_CONV2D);
            qn.params = p;
        } else {
            const auto &l = std::get<mkc_linear_params>(node.params);
            mkc_quantized_linear_params p{};
            p.struct_size = sizeof p;
            p.activation = l.activation;
            p.activation_alpha = l.activation_alpha;
            p.activation_beta = l.activation_beta;
            p.dst_dtype = MKC_DTYPE_F32;
            qn.op = NodeOp(MKC_OP_QUANTIZED_LINEAR);
            qn.params = p;
        }
        emit(std::move(qn), node.outputs);
        ++report_.quantized;
        char line[200];
        std::snprintf(line, sizeof line, "%s: src uint8 scale %.6g zero point %d, weights int8 "
                      "(%d steps) per output channel\n",
                      g_.describe_node(index).c_str(), src_scale, zero, static_cast<int>(steps));
        report_.text += line;
    }

    const Graph &g_;
    const std::map<std::string, Range> &ranges_;
    QuantizeReport &report_;
    std::vector<int> map_;
    Graph out_;
};

} // namespace

Graph quantize_graph(const Graph &graph, const std::string &calibration, QuantizeReport *report) {
    const std::map<std::string, Range> ranges = parse(calibration);
    require(!ranges.empty(), "compile (int8): the calibration is empty (calibrate the program "
                             "first, or pass the text it gave)");
    QuantizeReport local;
    Graph out = Rewrite(graph, ranges, report ? *report : local).run();
    return out;
}

} // namespace mkc::graph
