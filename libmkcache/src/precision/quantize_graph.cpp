#include "precision/quantize_graph.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "common/error.hpp"
#include "common/text_lines.hpp"
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

// "key\tmin\tmax\truns" lines (graph/calibration.hpp); lines starting
// with '#' (the method's) are comments.
std::map<std::string, Range> parse(const std::string &text) {
    std::map<std::string, Range> ranges;
    each_tab_line(text, [&](const std::string &line, const std::vector<std::string> &fields,
                            int line_number) {
        if (line[0] == '#')
            return;
        // A number filling its whole field.
        const auto number = [](const std::string &field, double &v) {
            char *stop = nullptr;
            v = std::strtod(field.c_str(), &stop);
            return !field.empty() && *stop == '\0' && std::isfinite(v);
        };
        Range r;
        if ((fields.size() != 3 && fields.size() != 4) || !number(fields[1], r.min) ||
            !number(fields[2], r.max) || r.min > r.max)
            fail(MKC_STATUS_INVALID_ARGUMENT, "calibration line ", line_number, ": '", line,
                 "' is not <key>\\t<min>\\t<max>\\t<runs> with min <= max");
        ranges[fields[0]] = r;
    });
    return ranges;
}

// Whether the pass rewrites `node`: a conv2d or linear layer whose weights
// are a float32 constant.
bool quantizable(const Graph &g, const Node &node) {
    if (node.op != NodeOp::conv2d && node.op != NodeOp::linear)
        return false;
    const int w = node.inputs[1];
    const Value &weights = g.values[static_cast<size_t>(w)];
    return weights.kind == Value::Kind::constant && weights.dtype == MKC_DTYPE_F32;
}

// The residual port of a convolution or linear layer (kNoValue: it adds
// none).
int residual_port(const Node &node) { return row(node).residual_port(node); }

template <typename T>
std::shared_ptr<Tensor> constant_of(mkc_dtype dtype, const Dims &dims, const std::vector<T> &data) {
    std::shared_ptr<Tensor> t = make_owned_tensor(
        layout::plain_desc(dims, to_onednn(dtype), MKC_LAYOUT_CHANNELS_FIRST),
        MKC_LAYOUT_CHANNELS_FIRST, dtype);
    std::memcpy(t->data, data.data(), data.size() * sizeof(T));
    t->constant = true;
    return t;
}

// A value's uint8 form: real = scale * (q - zero_point), over the recorded
// range widened to hold zero (padding and relu's zeros stay exact).
struct Quantization {
    float scale = 1;
    int32_t zero_point = 0;
};
Quantization quantization_of(const Range &r) {
    const double lo = std::min(r.min, 0.0), hi = std::max(r.max, 0.0);
    const double span = hi - lo;
    Quantization q;
    q.scale = span > 0 ? static_cast<float>(span / 255.0) : 1.0f;
    q.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / q.scale), 0.0, 255.0));
    return q;
}

// The rewrite. Each value a quantized node reads gets one uint8 form, from
// the union of the ranges recorded where it is read. A quantized node's
// result is written in that form by the node itself (requantized inside
// its primitive) when the result has one and, for a convolution adding a
// residual, the residual has one too (the sum then adds it in 8 bits);
// otherwise it writes float32. A reader wanting the other form gets a
// quantize or dequantize step, made once per value, before its first such
// reader. Graph outputs stay float32.
class Rewrite {
public:
    Rewrite(const Graph &g, const std::map<std::string, Range> &ranges, QuantizeReport &report)
        : g_(g), ranges_(ranges), report_(report), map_(g.values.size(), kNoValue),
          range_(g.values.size()), known_(g.values.size(), false),
          held_(g.values.size(), false), u8_(g.values.size(), kNoValue),
          f32_(g.values.size(), kNoValue), form_(g.values.size()) {}

    Graph run() {
        check_lines();
        decide();
        // Inputs and constants first, in their order (runs pass the inputs so).
        for (size_t v = 0; v < g_.values.size(); ++v)
            if (g_.values[v].kind != Value::Kind::result) {
                out_.values.push_back(g_.values[v]);
                map_[v] = static_cast<int>(out_.values.size()) - 1;
            }
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            if (quantized_[n])
                quantize(static_cast<int>(n));
            else
                copy(g_.nodes[n]);
        }
        for (const Output &o : g_.outputs)
            out_.outputs.push_back({as_f32(o.value), o.name});
        int kept = 0;
        for (size_t v = 0; v < g_.values.size(); ++v)
            kept += held_[v];
        report_.text += std::to_string(report_.quantized) + " node(s) quantized to 8 bits; " +
                        std::to_string(kept) + " result(s) passed on as uint8, " +
                        std::to_string(quantize_steps_) + " quantize and " +
                        std::to_string(dequantize_steps_) + " dequantize step(s)\n";
        return std::move(out_);
    }

private:
    // Every line must name a node of this graph (lines of matmul operands,
    // which this pass leaves float32, included).
    void check_lines() const {
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
    }

    // Adds the range recorded at (node n, port) to its value's.
    void record(size_t n, int port) {
        const auto found = ranges_.find(calibration_key(g_, n, port));
        if (found == ranges_.end())
            return;
        const size_t v = static_cast<size_t>(g_.nodes[n].inputs[static_cast<size_t>(port)]);
        Range &r = range_[v];
        r = known_[v] ? Range{std::min(r.min, found->second.min), std::max(r.max, found->second.max)}
                      : found->second;
        known_[v] = true;
    }

    void decide() {
        quantized_.assign(g_.nodes.size(), false);
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            const Node &node = g_.nodes[n];
            if (!quantizable(g_, node))
                continue;
            if (ranges_.find(calibration_key(g_, n, 0)) == ranges_.end())
                fail(MKC_STATUS_INVALID_ARGUMENT, "compile (int8): ", g_.describe_node(static_cast<int>(n)),
                     " has no calibration line ('", calibration_key(g_, n, 0),
                     "'): the calibration is of another graph, or none was made");
            quantized_[n] = true;
            record(n, 0);
            const int residual = residual_port(node);
            if (residual != kNoValue)
                record(n, residual);
        }
        std::vector<bool> output(g_.values.size(), false);
        for (const Output &o : g_.outputs)
            output[static_cast<size_t>(o.value)] = true;
        for (size_t v = 0; v < g_.values.size(); ++v)
            if (known_[v])
                form_[v] = quantization_of(range_[v]);
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            if (!quantized_[n])
                continue;
            const Node &node = g_.nodes[n];
            const size_t y = static_cast<size_t>(node.outputs[0]);
            const int residual = residual_port(node);
            held_[y] = known_[y] && !output[y] &&
                       (residual == kNoValue ||
                        known_[static_cast<size_t>(node.inputs[static_cast<size_t>(residual)])]);
        }
        // A result is held only while some reader takes it as uint8: a
        // quantized node's src, or the residual of a convolution whose own
        // result is held. Dropping one may drop another (a residual whose
        // convolution now writes float32): repeat until none changes.
        for (bool changed = true; changed;) {
            changed = false;
            std::vector<bool> wanted(g_.values.size(), false);
            for (size_t n = 0; n < g_.nodes.size(); ++n) {
                if (!quantized_[n])
                    continue;
                const Node &node = g_.nodes[n];
                wanted[static_cast<size_t>(node.inputs[0])] = true;
                const int residual = residual_port(node);
                if (residual != kNoValue && held_[static_cast<size_t>(node.outputs[0])])
                    wanted[static_cast<size_t>(node.inputs[static_cast<size_t>(residual)])] = true;
            }
            for (size_t v = 0; v < g_.values.size(); ++v)
                if (held_[v] && !wanted[v]) {
                    held_[v] = false;
                    changed = true;
                }
        }
    }

    // Appends `node` reading new value ids; its outputs get new results.
    // Returns its first output.
    int emit(Node node, const std::vector<int> &old_outputs) {
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
        return out_.nodes.back().outputs.front();
    }

    // The value's name for its constants ("x", "node7").
    std::string base_name(size_t v) const {
        const Value &value = g_.values[v];
        if (!value.name.empty())
            return value.name;
        if (value.kind == Value::Kind::result) {
            const Node &producer = g_.nodes[static_cast<size_t>(value.producer)];
            return producer.name.empty() ? "node" + std::to_string(value.producer) : producer.name;
        }
        return "value" + std::to_string(v);
    }

    // The constants of value v's uint8 form: scale, zero point as uint8
    // (quantize and dequantize take the result's dtype) and as int32 (the
    // quantized operators'), made once.
    struct FormConstants {
        int scale = kNoValue, zero_u8 = kNoValue, zero_s32 = kNoValue;
    };
    const FormConstants &constants(size_t v) {
        FormConstants &c = form_constants_[v];
        if (c.scale != kNoValue)
            return c;
        const Quantization &q = form_[v];
        const std::string base = base_name(v);
        c.scale =
            out_.add_constant(constant_of<float>(MKC_DTYPE_F32, {1}, {q.scale}), base + ":scale");
        c.zero_u8 = out_.add_constant(
            constant_of<uint8_t>(MKC_DTYPE_U8, {1}, {static_cast<uint8_t>(q.zero_point)}),
            base + ":zero_point");
        c.zero_s32 = out_.add_constant(
            constant_of<int32_t>(MKC_DTYPE_S32, {1}, {q.zero_point}), base + ":zero_point_s32");
        return c;
    }

    static Node conversion(int op) {
        Node node;
        node.op = NodeOp(op);
        mkc_quantize_params qp{};
        qp.struct_size = sizeof qp;
        qp.axis = 1;
        qp.to = MKC_DTYPE_U8;
        node.params = qp;
        return node;
    }

    // Value v (of the input graph) as uint8 in its form: the node's own
    // result, or a quantize step made once.
    int as_u8(int v) {
        const size_t i = static_cast<size_t>(v);
        if (held_[i])
            return map_[i];
        if (u8_[i] == kNoValue) {
            const FormConstants &c = constants(i);
            Node q = conversion(MKC_OP_QUANTIZE);
            q.inputs = {map_[i], c.scale, c.zero_u8};
            u8_[i] = emit(std::move(q), {kNoValue});
            ++quantize_steps_;
        }
        return u8_[i];
    }

    // Value v as float32: as it is, or a dequantize step made once.
    int as_f32(int v) {
        if (v == kNoValue)
            return kNoValue;
        const size_t i = static_cast<size_t>(v);
        if (!held_[i])
            return map_[i];
        if (f32_[i] == kNoValue) {
            const FormConstants &c = constants(i);
            Node d = conversion(MKC_OP_DEQUANTIZE);
            d.inputs = {map_[i], c.scale, c.zero_u8};
            f32_[i] = emit(std::move(d), {kNoValue});
            ++dequantize_steps_;
        }
        return f32_[i];
    }

    void copy(const Node &node) {
        Node n = node;
        for (int &v : n.inputs)
            v = as_f32(v);
        emit(std::move(n), node.outputs);
    }

    // Weights: int8, symmetric, per output channel.
    struct Weights {
        int values = kNoValue, scales = kNoValue;
        int steps = 127;
    };
    Weights weights_of(const Node &node, const std::string &base) {
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
        Weights out;
        out.values = out_.add_constant(constant_of<int8_t>(MKC_DTYPE_S8, w.dims, q),
                                       base + ":weights_int8");
        out.scales = out_.add_constant(
            constant_of<float>(MKC_DTYPE_F32, {channels}, weight_scale), base + ":weight_scale");
        out.steps = static_cast<int>(steps);
        return out;
    }

    void quantize(int index) {
        const Node &node = g_.nodes[static_cast<size_t>(index)];
        const size_t src = static_cast<size_t>(node.inputs[0]);
        const size_t y = static_cast<size_t>(node.outputs[0]);
        const std::string base = node.name.empty() ? "node" + std::to_string(index) : node.name;
        const Weights w = weights_of(node, base);
        const FormConstants &in = constants(src);
        const int src_u8 = as_u8(static_cast<int>(src));
        // Zero points of 0 are left out: oneDNN's kernels then skip their
        // compensation.
        const auto zero_or_none = [&](size_t v, int constant) {
            return form_[v].zero_point != 0 ? constant : kNoValue;
        };
        Node qn;
        qn.name = node.name;
        const int bias = node.inputs.size() > 2 ? as_f32(node.inputs[2]) : kNoValue;
        qn.inputs = {src_u8, w.values, in.scale, w.scales, bias, zero_or_none(src, in.zero_s32)};
        const bool held = held_[y];
        if (held) {
            const FormConstants &out = constants(y);
            qn.inputs.push_back(out.scale);
            qn.inputs.push_back(zero_or_none(y, out.zero_s32));
        }
        const mkc_dtype dst = held ? MKC_DTYPE_U8 : MKC_DTYPE_F32;
        // A residual: added in uint8 (its form) when the result is uint8,
        // else in float32.
        std::string sum_text;
        float sum_scale = 1;
        int32_t sum_zero_point = 0;
        const int residual = residual_port(node);
        if (residual != kNoValue) {
            const int r = node.inputs[static_cast<size_t>(residual)];
            qn.inputs.resize(ops::kQResidual, kNoValue);
            if (held) {
                const Quantization &rq = form_[static_cast<size_t>(r)];
                sum_scale = rq.scale;
                sum_zero_point = rq.zero_point;
                qn.inputs.push_back(as_u8(r));
                sum_text = ", adds its residual in uint8";
            } else {
                qn.inputs.push_back(as_f32(r));
                sum_text = ", adds its residual in float32";
            }
        }
        if (node.op == NodeOp::conv2d) {
            mkc_quantized_conv_params p{};
            p.struct_size = sizeof p;
            p.conv = std::get<mkc_conv_params>(node.params);
            p.dst_dtype = dst;
            p.sum_scale = sum_scale;
            p.sum_zero_point = sum_zero_point;
            qn.op = NodeOp(MKC_OP_QUANTIZED_CONV2D);
            qn.params = p;
        } else {
            const auto &l = std::get<mkc_linear_params>(node.params);
            mkc_quantized_linear_params p{};
            p.struct_size = sizeof p;
            p.activation = l.activation;
            p.activation_alpha = l.activation_alpha;
            p.activation_beta = l.activation_beta;
            p.dst_dtype = dst;
            p.sum = l.sum;
            p.sum_scale = sum_scale;
            p.sum_zero_point = sum_zero_point;
            qn.op = NodeOp(MKC_OP_QUANTIZED_LINEAR);
            qn.params = p;
        }
        while (!qn.inputs.empty() && qn.inputs.back() == kNoValue)
            qn.inputs.pop_back();
        emit(std::move(qn), node.outputs);
        ++report_.quantized;
        char line[320];
        std::snprintf(line, sizeof line,
                      "%s: src uint8 scale %.6g zero point %d, weights int8 (%d steps) per output "
                      "channel, result %s%s\n",
                      g_.describe_node(index).c_str(), form_[src].scale, form_[src].zero_point,
                      w.steps,
                      held ? ("uint8 scale " + format_float(form_[y].scale) + " zero point " +
                              std::to_string(form_[y].zero_point))
                                 .c_str()
                           : "float32",
                      sum_text.c_str());
        report_.text += line;
    }

    static std::string format_float(float f) {
        char text[32];
        std::snprintf(text, sizeof text, "%.6g", f);
        return text;
    }

    const Graph &g_;
    const std::map<std::string, Range> &ranges_;
    QuantizeReport &report_;
    std::vector<int> map_;        // input graph's value -> its (float32 or held) id here
    std::vector<Range> range_;    // per value of the input graph
    std::vector<bool> known_;     // its range was recorded
    std::vector<bool> held_;      // written as uint8 by its quantized producer
    std::vector<int> u8_, f32_;   // the quantize / dequantize step's result, once made
    std::vector<Quantization> form_;
    std::map<size_t, FormConstants> form_constants_;
    std::vector<bool> quantized_; // per node
    int quantize_steps_ = 0, dequantize_steps_ = 0;
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
