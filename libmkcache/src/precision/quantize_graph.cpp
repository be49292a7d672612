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

// A conv2d or linear layer whose weights are a float32 constant.
bool has_constant_weights(const Graph &g, const Node &node) {
    if (node.op != NodeOp::conv2d && node.op != NodeOp::linear)
        return false;
    const Value &weights = g.values[static_cast<size_t>(node.inputs[1])];
    return weights.kind == Value::Kind::constant && weights.dtype == MKC_DTYPE_F32;
}

// A matmul of two values computed at run time (neither a constant), its
// scale > 0 so that it folds into b's. Only where the CPU has VNNI: without
// it oneDNN's int8 matmul needs b within 7 bits, which a value quantized
// at run time (a linear layer's requantized result, saturating at 127)
// cannot promise.
bool matmul_between_values(const Graph &g, const Node &node) {
    if (node.op != NodeOp::matmul || ops::int8_pairs_saturate())
        return false;
    for (int port : {0, 1}) {
        const Value &v = g.values[static_cast<size_t>(node.inputs[static_cast<size_t>(port)])];
        if (v.kind == Value::Kind::constant || v.dtype != MKC_DTYPE_F32)
            return false;
    }
    const float scale = std::get<mkc_matmul_params>(node.params).scale;
    return std::isfinite(scale) && scale > 0;
}

// The residual port of a convolution or linear layer (kNoValue: it adds
// none).
int residual_port(const Node &node) { return row(node).residual_port(node); }

// A reshape or transpose: its result is its input's values in another
// shape, so an 8-bit form passes through it.
bool moves_values(const Node &node) {
    return node.op == NodeOp::reshape || node.op == NodeOp::transpose;
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

// A value's 8-bit form: real = scale * (q - zero_point). uint8 over the
// recorded range widened to hold zero (padding and relu's zeros stay
// exact); int8 symmetric (zero point 0) for a matmul's b, which oneDNN
// takes without a zero point.
struct Quantization {
    float scale = 1;
    int32_t zero_point = 0;
    mkc_dtype dtype = MKC_DTYPE_U8;
};
Quantization quantization_of(const Range &r, mkc_dtype dtype) {
    const double lo = std::min(r.min, 0.0), hi = std::max(r.max, 0.0);
    Quantization q;
    q.dtype = dtype;
    if (dtype == MKC_DTYPE_S8) {
        const double peak = std::max(-lo, hi);
        q.scale = peak > 0 ? static_cast<float>(peak / 127.0) : 1.0f;
        return q;
    }
    const double span = hi - lo;
    q.scale = span > 0 ? static_cast<float>(span / 255.0) : 1.0f;
    q.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / q.scale), 0.0, 255.0));
    return q;
}

const char *dtype_word(mkc_dtype d) { return d == MKC_DTYPE_S8 ? "int8" : "uint8"; }

// The rewrite. Each value a quantized node reads in 8 bits gets one form,
// from the union of the ranges recorded where it is read. A value read
// through reshapes and transposes (an attention's heads) has its form at
// the value they view, the root: the views are made of the 8-bit bytes. A
// quantized node's result is written in its form by the node itself
// (requantized inside its primitive) when the result has one and, for a
// convolution adding a residual, the residual has one of the same dtype
// (the sum then adds it in 8 bits); otherwise it writes float32. A reader
// wanting the other form gets a quantize or dequantize step, made once per
// value, before its first such reader. Graph outputs stay float32.
class Rewrite {
public:
    Rewrite(const Graph &g, const std::map<std::string, Range> &ranges, QuantizeReport &report,
            const std::set<NodeOp> &keep_f32)
        : g_(g), ranges_(ranges), report_(report), keep_f32_(keep_f32),
          map_(g.values.size(), kNoValue),
          range_(g.values.size()), known_(g.values.size(), false),
          held_(g.values.size(), false), eight_(g.values.size(), kNoValue),
          f32_(g.values.size(), kNoValue), form_(g.values.size()),
          readers_(g.values.size(), 0), output_(g.values.size(), false),
          root_(g.values.size(), kNoValue), through_(g.nodes.size(), false) {}

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
            else if (through_[n])
                view_of_eight_bits(static_cast<int>(n));
            else
                copy(g_.nodes[n]);
        }
        for (const Output &o : g_.outputs)
            out_.outputs.push_back({as_f32(o.value), o.name});
        int kept = 0;
        for (size_t v = 0; v < g_.values.size(); ++v)
            kept += held_[v];
        report_.text += std::to_string(report_.quantized) + " node(s) quantized to 8 bits (" +
                        std::to_string(matmuls_) + " matmul(s) of two values); " +
                        std::to_string(kept) + " result(s) passed on in 8 bits, " +
                        std::to_string(quantize_steps_) + " quantize and " +
                        std::to_string(dequantize_steps_) + " dequantize step(s)\n";
        if (matmuls_skipped_)
            report_.text += std::to_string(matmuls_skipped_) +
                            " matmul(s) of two values kept float32: this CPU has no VNNI, and "
                            "oneDNN's int8 matmul there needs b within 7 bits\n";
        return std::move(out_);
    }

private:
    // Every line must name a node of this graph.
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

    const Range *recorded(size_t n, int port) const {
        const auto found = ranges_.find(calibration_key(g_, n, port));
        return found == ranges_.end() ? nullptr : &found->second;
    }

    // The value a reader of `v` reads the bytes of: v itself, or the value
    // a chain of reshapes and transposes views, each its input's only
    // reader. The chain's nodes are marked in `chain`.
    int root_of(int v, std::vector<int> *chain) const {
        for (;;) {
            const Value &value = g_.values[static_cast<size_t>(v)];
            if (value.kind != Value::Kind::result)
                return v;
            const Node &producer = g_.nodes[static_cast<size_t>(value.producer)];
            const int in = producer.inputs[0];
            if (!moves_values(producer) || readers_[static_cast<size_t>(in)] != 1 ||
                output_[static_cast<size_t>(in)] ||
                g_.values[static_cast<size_t>(in)].dtype != MKC_DTYPE_F32)
                return v;
            if (chain)
                chain->push_back(value.producer);
            v = in;
        }
    }

    // The 8-bit reads of node n: (port, dtype) pairs.
    std::vector<std::pair<int, mkc_dtype>> eight_bit_reads(size_t n) const {
        const Node &node = g_.nodes[n];
        if (node.op == NodeOp::matmul)
            return {{0, MKC_DTYPE_U8}, {1, MKC_DTYPE_S8}};
        return {{0, MKC_DTYPE_U8}};
    }

    void decide() {
        for (size_t n = 0; n < g_.nodes.size(); ++n)
            for (int v : g_.nodes[n].inputs)
                if (v != kNoValue)
                    ++readers_[static_cast<size_t>(v)];
        for (const Output &o : g_.outputs) {
            output_[static_cast<size_t>(o.value)] = true;
            ++readers_[static_cast<size_t>(o.value)];
        }
        quantized_.assign(g_.nodes.size(), false);
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            const Node &node = g_.nodes[n];
            if (keep_f32_.count(node.op))
                continue;
            if (has_constant_weights(g_, node)) {
                if (!recorded(n, 0))
                    fail(MKC_STATUS_INVALID_ARGUMENT, "compile (int8): ",
                         g_.describe_node(static_cast<int>(n)), " has no calibration line ('",
                         calibration_key(g_, n, 0),
                         "'): the calibration is of another graph, or none was made");
                quantized_[n] = true;
            } else if (node.op == NodeOp::matmul && recorded(n, 0) && recorded(n, 1)) {
                if (matmul_between_values(g_, node))
                    quantized_[n] = true;
                else if (ops::int8_pairs_saturate())
                    ++matmuls_skipped_;
            }
        }
        // Each root wanted in one dtype: a matmul whose operand's root is
        // wanted in the other one too stays float32; repeat until none
        // conflicts.
        for (bool changed = true; changed;) {
            changed = false;
            std::map<int, mkc_dtype> wanted;
            std::vector<int> conflicts;
            for (size_t n = 0; n < g_.nodes.size(); ++n) {
                if (!quantized_[n])
                    continue;
                for (auto [port, dtype] : eight_bit_reads(n)) {
                    const int root = root_of(g_.nodes[n].inputs[static_cast<size_t>(port)], nullptr);
                    auto [at, fresh] = wanted.emplace(root, dtype);
                    if (!fresh && at->second != dtype)
                        conflicts.push_back(root);
                }
            }
            for (size_t n = 0; n < g_.nodes.size() && !conflicts.empty(); ++n) {
                if (!quantized_[n] || g_.nodes[n].op != NodeOp::matmul)
                    continue;
                for (int port : {0, 1}) {
                    const int root = root_of(g_.nodes[n].inputs[static_cast<size_t>(port)], nullptr);
                    if (std::find(conflicts.begin(), conflicts.end(), root) != conflicts.end() &&
                        quantized_[n]) {
                        quantized_[n] = false;
                        changed = true;
                    }
                }
            }
        }
        // The forms: the ranges recorded where each value is read, at its
        // root; the chains' views marked to be made of the 8-bit bytes.
        std::vector<mkc_dtype> dtype(g_.values.size(), MKC_DTYPE_U8);
        const auto record = [&](size_t n, int port, mkc_dtype want) {
            const Range *r = recorded(n, port);
            if (!r)
                return;
            std::vector<int> chain;
            const int v = g_.nodes[n].inputs[static_cast<size_t>(port)];
            const size_t root = static_cast<size_t>(root_of(v, &chain));
            for (int c : chain) {
                through_[static_cast<size_t>(c)] = true;
                root_[static_cast<size_t>(g_.nodes[static_cast<size_t>(c)].outputs[0])] =
                    static_cast<int>(root);
            }
            root_[static_cast<size_t>(v)] = static_cast<int>(root);
            Range &range = range_[root];
            range = known_[root] ? Range{std::min(range.min, r->min), std::max(range.max, r->max)}
                                 : *r;
            known_[root] = true;
            dtype[root] = want;
        };
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            if (!quantized_[n])
                continue;
            for (auto [port, want] : eight_bit_reads(n))
                record(n, port, want);
            const int residual = residual_port(g_.nodes[n]);
            if (residual != kNoValue) {
                const Range *r = recorded(n, residual);
                const size_t v = static_cast<size_t>(g_.nodes[n].inputs[static_cast<size_t>(residual)]);
                if (r) {
                    range_[v] = known_[v] ? Range{std::min(range_[v].min, r->min),
                                                  std::max(range_[v].max, r->max)}
                                          : *r;
                    known_[v] = true;
                }
            }
        }
        for (size_t v = 0; v < g_.values.size(); ++v)
            if (known_[v])
                form_[v] = quantization_of(range_[v], dtype[v]);
        for (size_t n = 0; n < g_.nodes.size(); ++n) {
            if (!quantized_[n])
                continue;
            const Node &node = g_.nodes[n];
            const size_t y = static_cast<size_t>(node.outputs[0]);
            const int residual = residual_port(node);
            bool residual_fits = true;
            if (residual != kNoValue) {
                const size_t r = static_cast<size_t>(node.inputs[static_cast<size_t>(residual)]);
                residual_fits = known_[r] && form_[r].dtype == form_[y].dtype;
            }
            held_[y] = known_[y] && !output_[y] && residual_fits;
        }
        // A result is held only while some reader takes it in 8 bits: a
        // quantized node's 8-bit input (through a chain of views), or the
        // residual of a convolution whose own result is held. Dropping one
        // may drop another (a residual whose convolution now writes
        // float32): repeat until none changes.
        for (bool changed = true; changed;) {
            changed = false;
            std::vector<bool> wanted(g_.values.size(), false);
            for (size_t n = 0; n < g_.nodes.size(); ++n) {
                if (!quantized_[n])
                    continue;
                const Node &node = g_.nodes[n];
                for (auto [port, want] : eight_bit_reads(n))
                    wanted[static_cast<size_t>(root_of(node.inputs[static_cast<size_t>(port)],
                                                       nullptr))] = true;
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

    // The constants of value v's form: scale, zero point in the form's
    // dtype (quantize and dequantize take the result's dtype) and as int32
    // (the quantized operators'), made once.
    struct FormConstants {
        int scale = kNoValue, zero = kNoValue, zero_s32 = kNoValue;
    };
    const FormConstants &constants(size_t v) {
        FormConstants &c = form_constants_[v];
        if (c.scale != kNoValue)
            return c;
        const Quantization &q = form_[v];
        const std::string base = base_name(v);
        c.scale =
            out_.add_constant(constant_of<float>(MKC_DTYPE_F32, {1}, {q.scale}), base + ":scale");
        c.zero = q.dtype == MKC_DTYPE_S8
                     ? out_.add_constant(constant_of<int8_t>(MKC_DTYPE_S8, {1}, {0}),
                                         base + ":zero_point")
                     : out_.add_constant(constant_of<uint8_t>(MKC_DTYPE_U8, {1},
                                                              {static_cast<uint8_t>(q.zero_point)}),
                                         base + ":zero_point");
        c.zero_s32 = out_.add_constant(
            constant_of<int32_t>(MKC_DTYPE_S32, {1}, {q.zero_point}), base + ":zero_point_s32");
        return c;
    }

    static Node conversion(int op, mkc_dtype to) {
        Node node;
        node.op = NodeOp(op);
        mkc_quantize_params qp{};
        qp.struct_size = sizeof qp;
        qp.axis = 1;
        qp.to = to;
        // The plan's own steps: a value at a half step may round either
        // way (a difference within the form's error), for oneDNN's
        // parallel reorder.
        qp.fast = 1;
        node.params = qp;
        return node;
    }

    // Value v (of the input graph) in 8 bits, in its root's form: a view
    // made of the 8-bit bytes, the node's own result, or a quantize step
    // made once.
    int as_eight_bits(int v) {
        const size_t i = static_cast<size_t>(v);
        if (root_[i] != kNoValue && root_[i] != v)
            return map_[i]; // the last view of a chain made of 8-bit bytes
        if (held_[i])
            return map_[i];
        if (eight_[i] == kNoValue) {
            const FormConstants &c = constants(i);
            Node q = conversion(MKC_OP_QUANTIZE, form_[i].dtype);
            q.inputs = {map_[i], c.scale, c.zero};
            eight_[i] = emit(std::move(q), {kNoValue});
            ++quantize_steps_;
        }
        return eight_[i];
    }

    // Value v as float32: as it is, or a dequantize step made once (of its
    // own 8-bit bytes, or of a view made of its root's).
    int as_f32(int v) {
        if (v == kNoValue)
            return kNoValue;
        const size_t i = static_cast<size_t>(v);
        const bool viewed = root_[i] != kNoValue && root_[i] != v;
        if (!held_[i] && !viewed)
            return map_[i];
        if (f32_[i] == kNoValue) {
            const FormConstants &c = constants_read(v);
            Node d = conversion(MKC_OP_DEQUANTIZE, MKC_DTYPE_U8);
            d.inputs = {map_[i], c.scale, c.zero};
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

    // A reshape or transpose of a chain: made of its input's 8-bit bytes
    // (the chain's root in its form, or the view before it).
    void view_of_eight_bits(int index) {
        const Node &node = g_.nodes[static_cast<size_t>(index)];
        Node n = node;
        const int in = node.inputs[0];
        const Value &value = g_.values[static_cast<size_t>(in)];
        const bool in_chain = value.kind == Value::Kind::result &&
                              through_[static_cast<size_t>(value.producer)];
        n.inputs[0] = in_chain ? map_[static_cast<size_t>(in)] : as_eight_bits(in);
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

    // The form a read of value v sees: its root's.
    const Quantization &form_read(int v) const {
        const size_t i = static_cast<size_t>(v);
        return form_[static_cast<size_t>(root_[i] != kNoValue ? root_[i] : v)];
    }
    const FormConstants &constants_read(int v) {
        const size_t i = static_cast<size_t>(v);
        return constants(static_cast<size_t>(root_[i] != kNoValue ? root_[i] : v));
    }

    std::string result_text(size_t y) const {
        if (!held_[y])
            return "float32";
        return std::string(dtype_word(form_[y].dtype)) + " scale " + format_float(form_[y].scale) +
               " zero point " + std::to_string(form_[y].zero_point);
    }

    // The ports 6 and 7 of a quantized node writing result y in its 8-bit
    // form: its scale and zero point (left out when 0: oneDNN's kernels
    // then skip their compensation).
    void add_result_form(Node &qn, size_t y) {
        const FormConstants &out = constants(y);
        qn.inputs.push_back(out.scale);
        qn.inputs.push_back(form_[y].zero_point != 0 ? out.zero_s32 : kNoValue);
    }

    // A matmul of two values: a in uint8, b in int8 (symmetric), the
    // matmul's scale folded into b's; its bias and addend as they are.
    void quantize_matmul(int index) {
        const Node &node = g_.nodes[static_cast<size_t>(index)];
        const auto &mp = std::get<mkc_matmul_params>(node.params);
        const int a = node.inputs[0], b = node.inputs[1];
        const size_t y = static_cast<size_t>(node.outputs[0]);
        const Quantization qa = form_read(a), qb = form_read(b);
        const FormConstants &ca = constants_read(a);
        const std::string base = node.name.empty() ? "node" + std::to_string(index) : node.name;
        const int b_scale = out_.add_constant(
            constant_of<float>(MKC_DTYPE_F32, {1}, {static_cast<float>(
                                                      static_cast<double>(qb.scale) * mp.scale)}),
            base + ":b_scale");
        Node qn;
        qn.name = node.name;
        qn.op = NodeOp(MKC_OP_QUANTIZED_MATMUL);
        const int bias = node.inputs.size() > 2 ? as_f32(node.inputs[2]) : kNoValue;
        qn.inputs = {as_eight_bits(a), as_eight_bits(b), ca.scale, b_scale, bias,
                     qa.zero_point != 0 ? ca.zero_s32 : kNoValue};
        const bool held = held_[y];
        if (held)
            add_result_form(qn, y);
        if (node.inputs.size() > 3 && node.inputs[3] != kNoValue) {
            qn.inputs.resize(ops::kQResidual, kNoValue);
            qn.inputs.push_back(as_f32(node.inputs[3]));
        }
        mkc_quantized_matmul_params p{};
        p.struct_size = sizeof p;
        p.transpose_a = mp.transpose_a;
        p.transpose_b = mp.transpose_b;
        p.activation = mp.activation;
        p.activation_alpha = mp.activation_alpha;
        p.activation_beta = mp.activation_beta;
        p.dst_dtype = held ? form_[y].dtype : MKC_DTYPE_F32;
        qn.params = p;
        while (!qn.inputs.empty() && qn.inputs.back() == kNoValue)
            qn.inputs.pop_back();
        emit(std::move(qn), node.outputs);
        ++report_.quantized;
        ++matmuls_;
        report_.text += g_.describe_node(index) + ": a uint8 scale " + format_float(qa.scale) +
                        " zero point " + std::to_string(qa.zero_point) + ", b int8 scale " +
                        format_float(qb.scale) + ", result " + result_text(y) + "\n";
    }

    void quantize(int index) {
        const Node &node = g_.nodes[static_cast<size_t>(index)];
        if (node.op == NodeOp::matmul)
            return quantize_matmul(index);
        const int src = node.inputs[0];
        const size_t y = static_cast<size_t>(node.outputs[0]);
        const std::string base = node.name.empty() ? "node" + std::to_string(index) : node.name;
        const Weights w = weights_of(node, base);
        const Quantization qs = form_read(src);
        const FormConstants &in = constants_read(src);
        const int src_q = as_eight_bits(src);
        Node qn;
        qn.name = node.name;
        const int bias = node.inputs.size() > 2 ? as_f32(node.inputs[2]) : kNoValue;
        // Zero points of 0 are left out: oneDNN's kernels then skip their
        // compensation.
        qn.inputs = {src_q, w.values, in.scale, w.scales, bias,
                     qs.zero_point != 0 ? in.zero_s32 : kNoValue};
        const bool held = held_[y];
        if (held)
            add_result_form(qn, y);
        const mkc_dtype dst = held ? form_[y].dtype : MKC_DTYPE_F32;
        // A residual: added in 8 bits (its form) when the result is 8-bit,
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
                qn.inputs.push_back(as_eight_bits(r));
                sum_text = std::string(", adds its residual in ") + dtype_word(rq.dtype);
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
        report_.text += g_.describe_node(index) + ": src " + dtype_word(qs.dtype) + " scale " +
                        format_float(qs.scale) + " zero point " + std::to_string(qs.zero_point) +
                        ", weights int8 (" + std::to_string(w.steps) +
                        " steps) per output channel, result " + result_text(y) + sum_text + "\n";
    }

    static std::string format_float(float f) {
        char text[32];
        std::snprintf(text, sizeof text, "%.6g", f);
        return text;
    }

    const Graph &g_;
    const std::map<std::string, Range> &ranges_;
    QuantizeReport &report_;
    const std::set<NodeOp> &keep_f32_;
    std::vector<int> map_;        // input graph's value -> its (float32 or held) id here
    std::vector<Range> range_;    // per value of the input graph (at roots)
    std::vector<bool> known_;     // its range was recorded
    std::vector<bool> held_;      // written in 8 bits by its quantized producer
    std::vector<int> eight_, f32_; // the quantize / dequantize step's result, once made
    std::vector<Quantization> form_;
    std::vector<int> readers_;    // nodes reading each value (an output counts as one)
    std::vector<bool> output_;
    std::vector<int> root_;       // an 8-bit read's value -> the root its bytes are
    std::vector<bool> through_;   // per node: a view in a chain, made of 8-bit bytes
    std::map<size_t, FormConstants> form_constants_;
    std::vector<bool> quantized_; // per node
    int quantize_steps_ = 0, dequantize_steps_ = 0, matmuls_ = 0, matmuls_skipped_ = 0;
    Graph out_;
};

} // namespace

Graph quantize_graph(const Graph &graph, const std::string &calibration, QuantizeReport *report,
                     const std::set<NodeOp> &keep_f32) {
    const std::map<std::string, Range> ranges = parse(calibration);
    require(!ranges.empty(), "compile (int8): the calibration is empty (calibrate the program "
                             "first, or pass the text it gave)");
    QuantizeReport local;
    Graph out = Rewrite(graph, ranges, report ? *report : local, keep_f32).run();
    return out;
}

} // namespace mkc::graph
