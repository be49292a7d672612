// A plan's compile passes, in the order kPlanPasses lists them:
//   bind_inputs  the inputs' dims bound: their plain descriptions;
//   infer        every node's outputs from its row (its operator's checks,
//                errors naming the node), on plain descriptions;
//   fold_adds    a binary add of a matmul's result (its only reader) and a
//                value that broadcasts into it becomes the matmul's addend
//                (a post-op: an attention's mask), the add no step;
//   precision    which nodes compute in bfloat16 (a bfloat16 plan: each
//                whose operator computes in either float); their data
//                inputs are shown to them in bfloat16 from here on, so the
//                converters below change the dtype where it differs;
//   choose       every node's implementation by override or priority;
//   attention    a matmul -> softmax -> matmul chain (an attention's scores,
//                probabilities and context) whose scores of all heads
//                outgrow the threads' L2 caches runs as one step, in blocks
//                of rows per thread (ops/attention.hpp);
//   lower        per node in order: a measured choice where asked, the
//                step prepared on its inputs' actual arrangements (its entry
//                in the program's scope) - or, for a reshape or transpose, a
//                view of its input's bytes - a converter wherever an input's
//                arrangement is not the one the step reads (constants
//                converted here, once), and whether it writes in place;
//   outputs      the graph outputs written where the caller wants them;
//   plan_memory  liveness and the arena offsets.
// With a dump, the IR is written after each.
#include <algorithm>
#include <cstring>
#include <atomic>
#include <functional>
#include <map>
#include <utility>

#include "common/error.hpp"
#include "common/serial.hpp"
#include "graph/implementations.hpp"
#include "graph/memory_plan.hpp"
#include "graph/pass_dump.hpp"
#include "graph/plan.hpp"
#include "graph/views.hpp"
#include "keys/keys.hpp"
#include "layout/layout.hpp"
#include "ops/attention.hpp"
#include "ops/matmul.hpp"
#include "ops/quantized.hpp"

namespace mkc::graph {

namespace {

using ops::ValueDesc;

// Re-throws what a node's phase threw with the node named first.
template <typename F> auto for_node(const Graph &g, int node, F &&f) {
    try {
        return f();
    } catch (const Error &e) {
        throw Error(e.status(), g.describe_node(node) + ": " + e.what());
    } catch (const dnnl::error &e) {
        throw Error(MKC_STATUS_ONEDNN_ERROR, g.describe_node(node) + ": oneDNN: " + e.what());
    }
}

// "<implementation>:<oneDNN's name of the kernel it chose>" for a step of
// one primitive ("onednn:brg:avx512_core"; a linear in row parts adds
// " rows 384+8"), else the implementation's name.
std::string implementation(const char *impl, const PrimitiveEntry &e) {
    const_dnnl_primitive_desc_t pd = nullptr;
    const char *name = nullptr;
    if (!e.primitive || dnnl_primitive_get_primitive_desc(e.primitive.get(), &pd) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success ||
        name == nullptr)
        return impl;
    const std::string parts = ops::linear_row_parts(e); // "384+8" for a linear in two parts
    return std::string(impl) + ":" + name + (parts.empty() ? "" : " rows " + parts);
}

// An arrangement as plans show it: its format, and " bf16" for bfloat16
// bytes (a bfloat16 plan's converters change the dtype).
std::string arrangement_name(const dnnl::memory::desc &d) {
    return format_name(d) + (d.get_data_type() == dnnl::memory::data_type::bf16 ? " bf16" : "");
}

void run_converter(const CacheScope &scope, PrimitiveEntry &entry, const ops::Buffers &b) {
    run_reorder(scope, entry, b.in[0], b.out[0]);
}

// A converter between two equal arrangements is a copy of the bytes: any
// dtype (oneDNN cannot copy int64), no primitive.
struct CopyEntry : PrimitiveEntry {
    size_t bytes = 0;
};
void run_copy(const CacheScope &, PrimitiveEntry &entry, const ops::Buffers &b) {
    std::memcpy(b.out[0], b.in[0], static_cast<CopyEntry &>(entry).bytes);
}

class Compiler {
    // An attention chain starting at a scores matmul (attention_chain).
    struct AttentionChain {
        int softmax = -1, context = -1;
        bool pays = false;    // by the rule (ops::attention_in_blocks_pays)
        bool measure = false; // timed against its three steps when lowered
        Measured known;       // the choice read back or made by an earlier plan
    };

public:
    Compiler(const Graph &g, const CompileOptions &options, Plan &plan)
        : g_(g), options_(options), plan_(plan), nodes_(g.nodes), desc_(g.values.size()),
          where_(g.values.size()), view_(g.values.size(), false),
          last_reader_(g.values.size(), -1), is_output_(g.values.size(), false),
          readers_(g.values.size(), 0) {
        std::vector<int> &readers = readers_;
        for (size_t n = 0; n < g.nodes.size(); ++n)
            for (int v : g.nodes[n].inputs)
                if (v != kNoValue) {
                    last_reader_[v] = static_cast<int>(n);
                    ++readers[v];
                }
        for (const Output &o : g.outputs)
            is_output_[o.value] = true;
        if (!options.inplace)
            return;
        // A matmul whose result only a transpose reads writes it so that
        // the transpose is plain bytes (an attention's context, transposed
        // back to [batch, seq, heads, head dim]).
        for (size_t n = 0; n < g.nodes.size(); ++n) {
            const Node &node = g.nodes[n];
            if (!row(node).permutation)
                continue;
            const int v = node.inputs[0];
            const Value &value = g.values[v];
            if (value.kind == Value::Kind::result && readers[v] == 1 && !is_output_[v] &&
                row(g.nodes[value.producer]).onednn_reads_views)
                y_perm_[value.producer] = *row(node).permutation(node);
        }
        // A convolution whose result only another convolution reads (as its
        // src) may write it as that one reads it (see write_for_reader).
        for (size_t r = 0; r < g.nodes.size(); ++r) {
            const Node &reader = g.nodes[r];
            if (!row(reader).convolution || reader.op == NodeOp(MKC_OP_CONV2D_TRANSPOSE))
                continue;
            const int v = reader.inputs[0];
            const Value &value = g.values[v];
            if (value.kind != Value::Kind::result || readers[v] != 1 || is_output_[v])
                continue;
            const Node &producer = g.nodes[value.producer];
            if (row(producer).convolution && producer.op != NodeOp(MKC_OP_CONV2D_TRANSPOSE) &&
                !std::get<mkc_conv_params>(producer.params).sum &&
                !std::get<mkc_conv_params>(producer.params).training)
                conv_reader_[value.producer] = static_cast<int>(r);
        }
        // A reshape or transpose may be a view of its input's bytes: its
        // readers then read the input's buffer, so they count as the
        // input's readers (and an output among them as the input's).
        for (size_t n = g.nodes.size(); n-- > 0;) {
            const Node &node = g.nodes[n];
            if (!row(node).view)
                continue;
            const int v = node.inputs[0], w = node.outputs[0];
            last_reader_[v] = std::max(last_reader_[v], last_reader_[w]);
            if (is_output_[w])
                is_output_[v] = true;
        }
    }

    void bind_inputs(const std::vector<std::vector<int64_t>> &dims) {
        int k = 0;
        for (size_t v = 0; v < g_.values.size(); ++v) {
            const Value &value = g_.values[v];
            if (value.kind == Value::Kind::input) {
                const Dims onednn = layout::to_onednn_order(dims.at(k), value.layout);
                desc_[v] = ops::plain_value(value.dtype, value.layout, onednn);
                plan_.inputs.push_back(desc_[v]);
                where_[v] = {BufferRef::Kind::input, k++, 0};
            } else if (value.kind == Value::Kind::constant) {
                desc_[v] = ops::describe(*value.constant);
            }
        }
    }

    void infer() {
        logical_ = desc_;
        inferred_.assign(nodes_.size(), {});
        for (size_t n = 0; n < nodes_.size(); ++n) {
            const Node &node = nodes_[n];
            NodeInputs inputs;
            for (int v : node.inputs)
                inputs.push_back(v == kNoValue ? nullptr : &logical_[v]);
            inferred_[n] = for_node(g_, static_cast<int>(n), [&] { return infer_node(node, inputs); });
            for (size_t o = 0; o < node.outputs.size() && o < inferred_[n].size(); ++o) {
                const ValueDesc &y = inferred_[n][o];
                logical_[node.outputs[o]] = ops::plain_value(y.dtype, y.layout, y.dims);
            }
        }
    }

    void fold_adds() {
        folded_into_.assign(nodes_.size(), -1);
        folded_add_.assign(nodes_.size(), -1);
        if (!options_.fold_adds)
            return;
        for (size_t n = 0; n < nodes_.size(); ++n) {
            const Node &add = nodes_[n];
            if (add.op != NodeOp::binary ||
                std::get<BinaryParams>(add.params).kind != MKC_BINARY_ADD)
                continue;
            for (int side = 0; side < 2; ++side) {
                const int y = add.inputs[side], other = add.inputs[1 - side];
                if (fold_add(static_cast<int>(n), y, other))
                    break;
            }
        }
    }

    void precision() {
        bf16_.assign(nodes_.size(), false);
        for (size_t n = 0; n < nodes_.size(); ++n)
            bf16_[n] = row(nodes_[n]).reference_widens_bf16 && options_.bf16.count(nodes_[n].op);
    }

    void choose_implementations() {
        choices_.assign(nodes_.size(), {});
        for (size_t n = 0; n < nodes_.size(); ++n) {
            const Node &node = nodes_[n];
            if (lowered_as_view(node) || folded_into_[n] >= 0)
                continue;
            NodeInputs inputs;
            std::vector<ValueDesc> typed(node.inputs.size());
            for (size_t i = 0; i < node.inputs.size(); ++i) {
                const int v = node.inputs[i];
                inputs.push_back(v == kNoValue ? nullptr
                                               : computed_as(static_cast<int>(n), i, logical_[v],
                                                             typed[i]));
            }
            choices_[n] =
                choose(node, inputs, options_.overrides, g_.describe_node(static_cast<int>(n)),
                       options_.shared_rows);
        }
    }

    // Marks each scores matmul whose chain runs as one attention step (see
    // attention_chain): by the choice options_.choices holds for the chain,
    // else where it pays by the rule, or, measuring, every chain, timed when
    // it is lowered. The softmax and the context matmul are lowered with it
    // (their nodes are then not timed one by one). Not without the fusion
    // option.
    void attention() {
        in_attention_.assign(nodes_.size(), false);
        if (!options_.fold_adds)
            return;
        const int threads = std::max(openmp_max_threads(), 1);
        for (size_t n = 0; n < nodes_.size(); ++n) {
            AttentionChain chain;
            if (!attention_chain(static_cast<int>(n), chain, threads))
                continue;
            const bool known = options_.choices &&
                               options_.choices->find(attention_key(static_cast<int>(n)),
                                                      chain.known);
            chain.measure = !known && options_.measure;
            if (known && chain.known.impl != kAttentionStep)
                notes_[static_cast<int>(n)] =
                    "; the attention in three steps (" + measured_text(chain.known) + ")";
            if (known ? chain.known.impl != kAttentionStep : !(chain.measure || chain.pays))
                continue;
            in_attention_[chain.softmax] = in_attention_[chain.context] = true;
            attention_[static_cast<int>(n)] = std::move(chain);
        }
    }

    // The key of the choice between one step and three for the chain
    // starting at matmul `n`: the scores matmul's, as the inputs arrive.
    std::string attention_key(int n) const {
        NodeInputs inputs;
        for (int v : nodes_[n].inputs)
            inputs.push_back(v == kNoValue ? nullptr : &logical_[v]);
        return kAttentionKey + choice_key(g_, n, inputs);
    }

    void lower() {
        for (size_t n = 0; n < nodes_.size(); ++n)
            node(static_cast<int>(n));
    }

    // The IR as text: each value's description (as inferred, and as
    // lowered where it is), each node's choice, then the steps so far.
    std::string text() const {
        std::string s;
        for (size_t v = 0; v < g_.values.size(); ++v) {
            const Value &value = g_.values[v];
            s += "v" + std::to_string(v) + " ";
            if (value.kind == Value::Kind::result)
                s += "= node " + std::to_string(value.producer) +
                     (value.port ? "." + std::to_string(value.port) : "");
            else
                s += value.kind == Value::Kind::input ? "input '" + value.name + "'" : "constant";
            const ValueDesc &d = v < logical_.size() && !logical_[v].dims.empty() ? logical_[v]
                                                                                   : desc_[v];
            if (!d.dims.empty())
                s += std::string(" ") + dtype_name(d.dtype) + " " + shape_text(d.dims) + " " +
                     layout::name(d.layout);
            if (!desc_[v].dims.empty() && value.kind == Value::Kind::result)
                s += " as " + arrangement_name(desc_[v].desc);
            s += "\n";
        }
        for (size_t n = 0; n < choices_.size(); ++n)
            if (choices_[n].impl)
                s += g_.describe_node(static_cast<int>(n)) + ": " + choices_[n].impl->name +
                     (n < bf16_.size() && bf16_[n] ? " in bfloat16" : "") + " (" +
                     choices_[n].why + ")\n";
        if (!plan_.steps.empty() || !plan_.views.empty())
            s += plan_text(g_, plan_);
        return s;
    }

    void outputs() {
        for (size_t k = 0; k < g_.outputs.size(); ++k) {
            const int v = g_.outputs[k].value;
            const ValueDesc &have = desc_[v];
            // As the graph types it (a bfloat16 result is converted back).
            const ValueDesc plain = ops::plain_value(logical_[v].dtype, have.layout, have.dims);
            plan_.outputs.push_back(plain);
            const BufferRef out{BufferRef::Kind::output, static_cast<int>(k), 0};
            // A node's result already plain is written where the caller wants
            // it, unless another output took that place first.
            if (where_[v].kind == BufferRef::Kind::arena && have.desc == plain.desc &&
                !redirected_[where_[v].index]) {
                redirect(v, out);
                continue;
            }
            add_converter(v, plain.desc, out, "to the output's plain layout");
        }
    }

    void memory() {
        std::vector<BufferLife> lives;
        for (const Buffer &b : buffers_)
            lives.push_back(b.life);
        const MemoryPlan m = plan_memory(lives, options_.reuse);
        plan_.arena_bytes = m.arena_bytes;
        plan_.lower_bound_bytes = m.lower_bound_bytes;
        plan_.naive_bytes = m.naive_bytes;
        for (Step &s : plan_.steps)
            for (auto *refs : {&s.in, &s.out})
                for (BufferRef &r : *refs)
                    if (r.kind == BufferRef::Kind::arena)
                        r.offset = m.offsets[r.index];
        for (View &view : plan_.views)
            if (view.at.kind == BufferRef::Kind::arena)
                view.at.offset = m.offsets[view.at.index];
    }

private:
    struct Buffer {
        BufferLife life;
    };

    // A reshape or transpose of a value that is not a constant runs as no
    // step when in-place work is allowed.
    bool lowered_as_view(const Node &node) const {
        return options_.inplace && row(node).view &&
               g_.values[node.inputs[0]].kind != Value::Kind::constant;
    }

    void node(int n) {
        const Node &node = nodes_[n];
        if (in_attention_[n]) // lowered with the scores' matmul
            return;
        auto chain = attention_.find(n);
        if (chain != attention_.end() && lower_attention(n, chain->second))
            return;
        if (lowered_as_view(node)) {
            view(n);
            return;
        }
        if (folded_into_[n] >= 0) { // the matmul wrote the add's result as y
            const int w = node.outputs[0], y = nodes_[folded_into_[n]].outputs[0];
            desc_[w] = desc_[y];
            where_[w] = where_[y];
            view_[w] = view_[y];
            share(where_[w], w);
            return;
        }
        NodeInputs inputs;
        for (int v : node.inputs)
            inputs.push_back(v == kNoValue ? nullptr : &desc_[v]);
        const std::vector<ValueDesc> &inferred = inferred_[n];
        const std::string what = g_.describe_node(n);
        Choice &choice = choices_[n];
        if (options_.choices && !choice.overridden)
            measure_choice(n, inputs, choice);
        ops::Prepared prepared;
        Dims y_strides;
        for (;;) {
            const Implementation &impl = *choice.impl;
            std::vector<ValueDesc> shown;
            shown_to(impl, n, inputs, shown);
            y_strides.clear();
            auto perm = y_perm_.find(n);
            if (perm != y_perm_.end() && impl.reads_views(row(node)))
                y_strides = strides_for_transpose(ops::caller_dims(inferred.at(0)), perm->second);
            try {
                prepared = for_node(g_, n, [&] {
                    return impl.prepare(plan_.scope, node, inputs,
                                        y_strides.empty() ? nullptr : &y_strides);
                });
                break;
            } catch (const Error &e) {
                // Refused when it came to building (oneDNN's "could not
                // create a primitive descriptor"): the next implementation
                // that supports the node, unless this one was asked for.
                const Implementation *next =
                    choice.overridden ? nullptr : next_after(node, inputs, impl);
                while (next && !next->supports(node, inputs).ok())
                    next = next_after(node, inputs, *next);
                if (!next ||
                    (e.status() != MKC_STATUS_ONEDNN_ERROR && e.status() != MKC_STATUS_UNSUPPORTED))
                    throw;
                choice.refused.push_back(std::string(impl.name) + ": " + e.what());
                choice.impl = next;
            }
        }
        for (size_t i = 0; i < node.inputs.size(); ++i)
            inputs[i] = node.inputs[i] == kNoValue ? nullptr : &desc_[node.inputs[i]];
        write_for_reader(n, *choice.impl, prepared, y_strides);

        Step step;
        step.node = n;
        step.implementation = choice.impl;
        step.run = choice.impl->run(row(node));
        step.entry = prepared.entry;
        step.what = what;
        if (folded_add_[n] >= 0)
            step.what += " + " + g_.describe_node(folded_add_[n]) + " as its addend";
        step.impl = implementation(choice.impl->name, *step.entry);
        step.choice = choice.why;
        if (row(node).flops && !prepared.outputs.empty()) {
            step.flops = row(node).flops(node, inputs, prepared.outputs[0]);
            // The data operand's dtype as the step reads it.
            using dt = dnnl::memory::data_type;
            const dt d = prepared.takes.empty() ? dt::f32 : prepared.takes[0].get_data_type();
            step.arithmetic = d == dt::u8 || d == dt::s8 ? MKC_DTYPE_S8
                              : d == dt::bf16            ? MKC_DTYPE_BF16
                                                         : MKC_DTYPE_F32;
        }
        for (const std::string &r : choice.refused)
            step.choice += "; " + r;
        auto note = notes_.find(n);
        if (note != notes_.end())
            step.choice += note->second;
        // 8-bit weights that are a constant are checked once, here, rather
        // than on every run (where the CPU needs them within 7 bits).
        const int wp = row(node).seven_bit_weights_port;
        if (wp >= 0 && static_cast<size_t>(wp) < node.inputs.size() &&
            node.inputs[static_cast<size_t>(wp)] != kNoValue) {
            const Value &w = g_.values[node.inputs[static_cast<size_t>(wp)]];
            if (w.kind == Value::Kind::constant && w.constant && w.dtype == MKC_DTYPE_S8)
                step.weights_checked =
                    ops::within_seven_bits(w.constant->data, w.constant->desc.get_size());
        }
        step.serial_elements = prepared.serial_elements;
        if (!prepared.in_args.empty() || !prepared.out_args.empty()) {
            step.in_args = prepared.in_args;
            step.out_args = prepared.out_args;
            step.in_args.resize(prepared.takes.size(), 0);
            step.out_args.resize(prepared.outputs.size(), 0);
        }
        read_inputs(node.inputs, prepared, step);
        // A fused sum: the output buffer holds the residual before the
        // node runs.
        const bool sum = row(node).residual_port(node) != kNoValue;
        BufferRef residual_buffer;
        if (sum)
            residual_buffer = residual(n, prepared.outputs.at(0), step.in, step.in_place);
        // Or an element-wise or normalising node writing over its input.
        const BufferRef over =
            sum ? BufferRef{} : overwritten_input(n, *choice.impl, prepared, step.in);
        if (over.kind != BufferRef::Kind::none) {
            residual_buffer = over;
            step.in_place = true;
            ++plan_.in_place;
        }
        const int step_index = static_cast<int>(plan_.steps.size());
        for (const BufferRef &r : step.in)
            touch(r, step_index);
        for (size_t o = 0; o < prepared.outputs.size(); ++o) {
            if (o >= node.outputs.size()) { // produced by the primitive, not by the node
                step.out.push_back({});
                continue;
            }
            if (o == 0 && (sum || step.in_place)) {
                const int v = node.outputs[0];
                desc_[v] = prepared.outputs[0];
                where_[v] = residual_buffer;
                share(residual_buffer, v);
                touch(residual_buffer, step_index);
                step.out.push_back(residual_buffer);
                step.out_formats.push_back(arrangement_name(prepared.outputs[0].desc));
                continue;
            }
            // (A convolution writing its reader's order is no view: its
            // bytes are dense, and what reads them takes them as they are.)
            write_new(node.outputs[o], prepared.outputs[o],
                      !y_strides.empty() && choice.impl->reads_views(row(node)), step_index, step);
        }
        plan_.steps.push_back(std::move(step));
    }

    // The step's reads of `values` (per port of the entry; absent optional
    // ones: none), converters placed first; the reads are counted from the
    // step itself.
    void read_inputs(const std::vector<int> &values, const ops::Prepared &prepared, Step &step) {
        for (size_t i = 0; i < prepared.takes.size(); ++i) {
            const int v = i < values.size() ? values[i] : kNoValue;
            const dnnl::memory::desc &want = prepared.takes[i];
            if (v == kNoValue || want.is_zero()) {
                step.in.push_back({});
                step.in_formats.push_back("-");
                continue;
            }
            const bool through_view =
                i < prepared.views.size() && !prepared.views[i].view.is_zero();
            step.in.push_back(through_view ? read_through(v, prepared.views[i], want)
                                           : read(v, want));
            step.in_formats.push_back(arrangement_name(want));
        }
    }

    // Value `v`, described as `y`, written by step `step_index` into a new
    // arena buffer; a strided view for its readers when `viewed` and the
    // bytes are one (a transpose after it).
    void write_new(int v, const ValueDesc &y, bool viewed, int step_index, Step &step) {
        desc_[v] = y;
        view_[v] = viewed && strided_view(desc_[v]);
        where_[v] = new_buffer(y.desc.get_size(), step_index);
        share(where_[v], v);
        step.out.push_back(where_[v]);
        step.out_formats.push_back(arrangement_name(y.desc));
    }

    // Whether matmul `n` starts an attention chain run as one step: its
    // result (with the add folded into it, if any) read only by a softmax
    // over the last dim, whose result only a matmul reads, as its `a`; all
    // three float32 on oneDNN by priority, the matmuls with no bias nor
    // activation, the first not reading `a` transposed, the second with no
    // scale nor addend; the context's `b` computed before `n`; every
    // operand channels-first. `chain.pays`: the scores of all heads outgrow
    // the L2 caches of `threads` threads (ops::attention_in_blocks_pays).
    bool attention_chain(int n, AttentionChain &chain, int threads) const {
        int &softmax = chain.softmax, &context = chain.context;
        auto onednn_by_priority = [&](int k) {
            const Choice &c = choices_[k];
            return c.impl && !c.overridden && std::strcmp(c.impl->name, "onednn") == 0 &&
                   !bf16_[k];
        };
        auto plain_matmul = [&](int k) {
            const Node &m = nodes_[k];
            if (m.op != NodeOp::matmul || !onednn_by_priority(k))
                return false;
            const auto &p = std::get<mkc_matmul_params>(m.params);
            return p.activation == MKC_ACTIVATION_NONE && !p.transpose_a &&
                   (m.inputs.size() < 3 || m.inputs[2] == kNoValue);
        };
        // The only reader of value `v` (none: -1).
        auto only_reader = [&](int v) {
            const Value &value = g_.values[v];
            if (value.kind != Value::Kind::result || readers_[v] != 1 || is_output_[v])
                return -1;
            const int r = last_reader_[v];
            return r > value.producer ? r : -1;
        };
        auto channels_first = [&](int v) {
            return v == kNoValue || logical_[v].layout == MKC_LAYOUT_CHANNELS_FIRST;
        };
        if (!plain_matmul(n))
            return false;
        const Node &scores = nodes_[n];
        const int y = folded_add_[n] >= 0 ? nodes_[folded_add_[n]].outputs[0] : scores.outputs[0];
        softmax = only_reader(y);
        if (softmax < 0 || nodes_[softmax].op != NodeOp::softmax || !onednn_by_priority(softmax))
            return false;
        const ValueDesc &s = logical_[y];
        const auto &sp = std::get<SoftmaxParams>(nodes_[softmax].params);
        const int rank = static_cast<int>(s.dims.size());
        if (sp.log || (sp.axis != -1 && sp.axis != rank - 1) || rank < 3 ||
            s.dtype != MKC_DTYPE_F32)
            return false;
        context = only_reader(nodes_[softmax].outputs[0]);
        if (context < 0 || !plain_matmul(context) || folded_add_[context] >= 0)
            return false;
        const Node &c = nodes_[context];
        if (c.inputs[0] != nodes_[softmax].outputs[0] || c.inputs[1] == c.inputs[0] ||
            std::get<mkc_matmul_params>(c.params).scale != 1.f)
            return false;
        const Value &v = g_.values[c.inputs[1]];
        if (v.kind == Value::Kind::result && v.producer >= n)
            return false;
        for (int k : {scores.inputs[0], scores.inputs[1], c.inputs[1], y, c.outputs[0]})
            if (!channels_first(k) || logical_[k].dtype != MKC_DTYPE_F32)
                return false;
        int64_t slices = 1;
        for (int d = 0; d < rank - 2; ++d)
            slices *= s.dims[d];
        chain.pays =
            ops::attention_in_blocks_pays(slices, s.dims[rank - 2], s.dims[rank - 1], threads);
        return true;
    }

    // The chain starting at matmul `n` as one step (ops/attention.hpp):
    // false, with the chain's nodes to be lowered one by one, where an
    // operand is not plain bytes, oneDNN builds no primitive for a block,
    // or (measuring) the three steps run faster.
    bool lower_attention(int n, const AttentionChain &chain) {
        const int softmax = chain.softmax, context = chain.context;
        const Node &scores = nodes_[n], &c = nodes_[context];
        const auto &p = std::get<mkc_matmul_params>(scores.params);
        const int a = scores.inputs[0], b = scores.inputs[1], v = c.inputs[1];
        const int addend = scores.inputs.size() > 3 ? scores.inputs[3] : kNoValue;
        ops::AttentionParts parts;
        parts.a = desc_[a].desc;
        parts.b = desc_[b].desc;
        parts.v = desc_[v].desc;
        if (addend != kNoValue)
            parts.addend = &desc_[addend].desc;
        parts.transpose_b = p.transpose_b != 0;
        parts.transpose_v = std::get<mkc_matmul_params>(c.params).transpose_b != 0;
        parts.scale = p.scale;
        parts.layout = inferred_[context].at(0).layout;
        Dims y_strides;
        auto perm = y_perm_.find(context);
        if (perm != y_perm_.end())
            y_strides = strides_for_transpose(ops::caller_dims(inferred_[context].at(0)),
                                              perm->second);
        parts.y_strides = y_strides.empty() ? nullptr : &y_strides;
        ops::Prepared prepared;
        try {
            prepared = ops::prepare_attention(parts);
        } catch (const Error &e) {
            if (e.status() != MKC_STATUS_ONEDNN_ERROR && e.status() != MKC_STATUS_UNSUPPORTED)
                throw;
            in_attention_[softmax] = in_attention_[context] = false;
            return false;
        } catch (const dnnl::error &) {
            in_attention_[softmax] = in_attention_[context] = false;
            return false;
        }
        std::string why = chain.pays ? "in blocks of rows, one thread each: the scores of all "
                                       "heads outgrow the threads' L2 caches"
                                     : "in blocks of rows, one thread each";
        if (chain.measure || !chain.known.impl.empty()) {
            Measured m = chain.known;
            if (chain.measure) {
                m = measure_attention(n, chain, prepared, y_strides);
                options_.choices->add(attention_key(n), m);
            }
            if (m.impl != kAttentionStep) {
                notes_[n] = "; the attention in three steps (" + measured_text(m) + ")";
                in_attention_[softmax] = in_attention_[context] = false;
                return false;
            }
            why += " (" + measured_text(m) + ")";
        }
        Step step;
        step.node = n;
        step.implementation = choices_[n].impl;
        step.run = ops::run_attention;
        step.entry = prepared.entry;
        step.what = g_.describe_node(n);
        if (folded_add_[n] >= 0)
            step.what += " + " + g_.describe_node(folded_add_[n]) + " as its addend";
        step.what += " + " + g_.describe_node(softmax) + " + " + g_.describe_node(context) +
                     " as one attention step";
        step.impl = "onednn_attention:" + ops::attention_kernels(*prepared.entry);
        step.choice = choices_[n].why + "; " + why;
        // Both products: every row of every slice against `cols` columns,
        // `depth` deep for the scores, `width` wide for the context.
        const Dims &yd = prepared.outputs[0].dims;
        const int64_t depth = logical_[a].dims.back(), width = yd.back();
        const int64_t cols = logical_[scores.outputs[0]].dims.back();
        step.flops = 2 * (dims_product(yd) / width) * cols * (depth + width);
        step.arithmetic = MKC_DTYPE_F32;
        read_inputs({a, b, addend, v}, prepared, step);
        const int step_index = static_cast<int>(plan_.steps.size());
        for (const BufferRef &r : step.in)
            touch(r, step_index);
        write_new(c.outputs[0], prepared.outputs[0], !y_strides.empty(), step_index, step);
        plan_.steps.push_back(std::move(step));
        return true;
    }

    // The chain as one step (`prepared`) against its three nodes' steps on
    // their chosen implementations, each timed alone as measure_choice times
    // a node, the three summed: the one the rule puts first (the step where
    // it pays) is kept unless the other is faster by more than timing noise.
    Measured measure_attention(int n, const AttentionChain &chain,
                               const ops::Prepared &prepared, const Dims &y_strides) {
        const Node &scores = nodes_[n], &softmax = nodes_[chain.softmax],
                   &context = nodes_[chain.context];
        const double one = time_prepared(plan_.scope, prepared, ops::run_attention,
                                         std::vector<bool>(prepared.takes.size(), true), 1);
        // The nodes' inputs as they would arrive: q, k (views where they
        // are), the mask; the scores and probabilities plain.
        auto timed = [&](int k, const NodeInputs &inputs, const Dims *strides) {
            std::vector<const dnnl::memory::desc *> arriving;
            for (const ValueDesc *v : inputs)
                arriving.push_back(v ? &v->desc : nullptr);
            std::string why;
            return time_candidate(plan_.scope, *choices_[k].impl, nodes_[k], inputs, arriving,
                                  strides, -1, why);
        };
        NodeInputs in_scores;
        for (int v : scores.inputs)
            in_scores.push_back(v == kNoValue ? nullptr : &desc_[v]);
        const int y = folded_add_[n] >= 0 ? nodes_[folded_add_[n]].outputs[0] : scores.outputs[0];
        const ValueDesc s = ops::plain_value(MKC_DTYPE_F32, logical_[y].layout, logical_[y].dims);
        const int probs_value = softmax.outputs[0];
        const ValueDesc probs = ops::plain_value(MKC_DTYPE_F32, logical_[probs_value].layout,
                                                 logical_[probs_value].dims);
        const double parts[3] = {
            timed(n, in_scores, nullptr), timed(chain.softmax, {&s}, nullptr),
            timed(chain.context, {&probs, &desc_[context.inputs[1]]},
                  y_strides.empty() ? nullptr : &y_strides)};
        // A step that refused to prepare leaves the three steps untimed.
        const bool refused = std::any_of(std::begin(parts), std::end(parts),
                                         [](double us) { return us < 0; });
        const double three = refused ? -1 : parts[0] + parts[1] + parts[2];
        const std::pair<const char *, double> step{kAttentionStep, one},
            steps{kAttentionSteps, three};
        // As measure_choice keeps a node's: the first unless a later one is
        // faster by more than the margin.
        Measured m;
        double best = -1;
        for (const auto &[name, us] : chain.pays ? std::vector{step, steps}
                                                 : std::vector{steps, step}) {
            if (us < 0)
                continue;
            m.times.emplace_back(name, us);
            if (best < 0 || us < best * kMeasuredMargin) {
                best = us;
                m.impl = name;
            }
        }
        return m;
    }

    // Add node `n` of `y` and `other` folded into the matmul writing `y`
    // when that matmul takes an addend (its row says at which port) and has
    // none yet, the add is y's only reader, `other` is computed before the
    // matmul and broadcasts into y, and the add's result is y's shape: the
    // matmul then takes `other` as its addend and writes the add's result.
    bool fold_add(int n, int y, int other) {
        const Value &value = g_.values[y];
        if (y == other || value.kind != Value::Kind::result || readers_[y] != 1 || is_output_[y])
            return false;
        const int m = value.producer;
        Node &matmul = nodes_[m];
        const int port = row(matmul).addend_port ? row(matmul).addend_port(matmul) : kNoValue;
        if (port == kNoValue)
            return false;
        const size_t at = static_cast<size_t>(port);
        const bool has_addend = matmul.inputs.size() > at && matmul.inputs[at] != kNoValue;
        const Value &o = g_.values[other];
        if (has_addend || (o.kind == Value::Kind::result && o.producer >= m))
            return false;
        const int w = nodes_[n].outputs[0];
        const ValueDesc &ly = logical_[y], &lw = logical_[w];
        if (logical_[other].dtype != ly.dtype ||
            !broadcasts_into(ops::caller_dims(logical_[other]), ops::caller_dims(ly)) ||
            lw.dims != ly.dims || lw.layout != ly.layout)
            return false;
        matmul.inputs.resize(at, kNoValue);
        matmul.inputs.push_back(other);
        folded_into_[n] = m;
        folded_add_[m] = n;
        // y's bytes hold the add's result: its readers are y's now.
        last_reader_[y] = std::max(last_reader_[y], last_reader_[w]);
        if (is_output_[w])
            is_output_[y] = true;
        return true;
    }

    // Node `n`'s input `i`, held as `have`, in the dtype the node computes
    // it in: `have` itself, or plain in that dtype, kept in `slot` (a
    // converter makes it so).
    const ValueDesc *computed_as(int n, size_t i, const ValueDesc &have, ValueDesc &slot) const {
        const Node &node = nodes_[n];
        const int v = node.inputs[i];
        const mkc_dtype want = bf16_[n] && bf16_port(row(node), i) &&
                                       logical_[v].dtype == MKC_DTYPE_F32
                                   ? MKC_DTYPE_BF16
                                   : logical_[v].dtype;
        if (have.dtype == want)
            return &have;
        slot = ops::plain_value(want, have.layout, have.dims);
        return &slot;
    }

    // The bytes converters would move for `prepared` to read node n's
    // inputs as they are now (constants are converted once, not per run).
    size_t converted_bytes(int n, const ops::Prepared &prepared) const {
        size_t bytes = 0;
        const Node &node = nodes_[n];
        for (size_t i = 0; i < prepared.takes.size() && i < node.inputs.size(); ++i) {
            const int v = node.inputs[i];
            if (v == kNoValue || prepared.takes[i].is_zero() ||
                g_.values[v].kind == Value::Kind::constant)
                continue;
            if (prepared.takes[i] != desc_[v].desc)
                bytes += prepared.takes[i].get_size();
        }
        return bytes;
    }

    // A convolution whose only reader is a convolution that reads its src
    // plain in another order (channels-last, where this one writes blocked
    // channels) writes it that way instead, when oneDNN has a kernel for it
    // (not its reference one) and the converters that then go before this
    // one move fewer bytes than the one between them would: a network's
    // first convolution over 3 channels (a converter of its input) feeding
    // a depthwise one (of 32 channels) is the case. A convolution chooses
    // its src whatever arrives, so the reader is asked first, on the
    // result as inferred; its entry is the one it gets when it is lowered.
    void write_for_reader(int n, const Implementation &impl, ops::Prepared &prepared,
                          Dims &y_strides) {
        const auto found = conv_reader_.find(n);
        if (found == conv_reader_.end() || !y_strides.empty() || prepared.outputs.empty() ||
            std::strcmp(impl.name, "onednn") != 0)
            return;
        const int r = found->second;
        const Implementation &reader_impl = *choices_[r].impl;
        const Node &node = nodes_[n], &reader = nodes_[r];
        // (In bfloat16 the reader would be asked on float32: not done.)
        if (std::strcmp(reader_impl.name, "onednn") != 0 || options_.bf16.count(node.op) ||
            options_.bf16.count(reader.op))
            return;
        const ValueDesc &written = prepared.outputs[0];
        dnnl::memory::desc wanted;
        try {
            NodeInputs in;
            std::vector<ValueDesc> shown;
            in.resize(reader.inputs.size());
            shown_to(reader_impl, r, in, shown);
            const ValueDesc arriving = inferred_[n].at(0);
            in[0] = &arriving;
            wanted = reader_impl.prepare(plan_.scope, reader, in, nullptr).takes.at(0);
        } catch (const Error &) {
            return; // the reader is lowered (or refused) on its own
        } catch (const dnnl::error &) {
            return;
        }
        Dims strides;
        if (wanted == written.desc || !layout::caller_strides(wanted, written.layout, strides))
            return;
        NodeInputs in(node.inputs.size());
        std::vector<ValueDesc> shown;
        shown_to(impl, n, in, shown);
        ops::Prepared hinted;
        try {
            hinted = impl.prepare(plan_.scope, node, in, &strides);
        } catch (const Error &) {
            return; // no such kernel: the converter stays
        } catch (const dnnl::error &) {
            return;
        }
        if (implementation(impl.name, *hinted.entry).find(":ref") != std::string::npos ||
            hinted.outputs.empty() || hinted.outputs[0].desc != wanted)
            return;
        const size_t before = converted_bytes(n, prepared), after = converted_bytes(n, hinted);
        if (after >= before + wanted.get_size())
            return;
        prepared = std::move(hinted);
        y_strides = strides;
    }

    // Node `n`'s inputs as `impl` is shown them (`inputs` pointed at those
    // descriptions, kept in `shown`): in the dtype the node computes them
    // in, and a view plain to an implementation that does not read strided
    // bytes where they are (read() then converts it).
    void shown_to(const Implementation &impl, int n, NodeInputs &inputs,
                  std::vector<ValueDesc> &shown) const {
        const Node &node = nodes_[n];
        shown.assign(node.inputs.size(), {});
        for (size_t i = 0; i < node.inputs.size(); ++i) {
            const int v = node.inputs[i];
            inputs[i] = v == kNoValue ? nullptr : computed_as(n, i, desc_[v], shown[i]);
            if (v != kNoValue && inputs[i] == &desc_[v] && view_[v] &&
                !impl.reads_views(row(node))) {
                const ValueDesc &have = desc_[v];
                shown[i] = ops::plain_value(have.dtype, have.layout, have.dims);
                inputs[i] = &shown[i];
            }
            if (v != kNoValue && static_cast<int>(i) == row(node).held_weights_port &&
                g_.values[v].kind == Value::Kind::constant && options_.constants &&
                std::string(impl.name) == "onednn") {
                // Weights an earlier plan converted are shown in that
                // arrangement: the primitive reads them so where it can,
                // and the program keeps one copy for every input shape.
                const ValueDesc &have = *inputs[i];
                const auto plain = ops::plain_value(have.dtype, have.layout, have.dims).desc;
                if (const dnnl::memory::desc *held = options_.constants->held(v, plain)) {
                    shown[i] = ops::arranged_as(have, *held);
                    inputs[i] = &shown[i];
                }
            }
        }
    }

    // The choice options_.choices holds for node `n` (read back, or
    // measured by an earlier plan), else, when measuring, the fastest of the
    // implementations that support it, timed now and remembered there.
    void measure_choice(int n, NodeInputs inputs, Choice &choice) {
        const Node &node = nodes_[n];
        std::vector<const Implementation *> capable;
        // `inputs` points into `shown` from here on: the last shown's dims,
        // layouts and dtypes are every implementation's, as the key needs.
        std::vector<ValueDesc> shown;
        // The node's priority order first (its first is the one to beat),
        // then the variants not in it.
        std::vector<const Implementation *> order =
            by_priority(node, inputs, options_.shared_rows);
        for (const Implementation *impl : implementations())
            if (!impl->for_many_shapes && std::find(order.begin(), order.end(), impl) == order.end())
                order.push_back(impl);
        for (const Implementation *impl : order) {
            if (impl->views_only && !reads_or_writes_view(n))
                continue;
            shown_to(*impl, n, inputs, shown);
            if (impl->supports(node, inputs).ok())
                capable.push_back(impl);
        }
        if (capable.size() < 2)
            return;
        const std::string key = choice_key(g_, n, inputs);
        Measured m;
        const bool known = options_.choices->find(key, m);
        if (!known && !options_.measure)
            return;
        if (!known) {
            std::vector<const dnnl::memory::desc *> arriving;
            for (int v : node.inputs)
                arriving.push_back(v == kNoValue || g_.values[v].kind == Value::Kind::constant
                                       ? nullptr
                                       : &desc_[v].desc);
            Dims y_strides;
            auto perm = y_perm_.find(n);
            if (perm != y_perm_.end())
                y_strides = strides_for_transpose(ops::caller_dims(inferred_[n].at(0)),
                                                  perm->second);
            // In priority order: a later candidate replaces the best so far
            // only when it is faster by more than timing noise, so equal
            // kernels keep the priority choice (and its shared weights).
            double best = -1;
            for (const Implementation *impl : capable) {
                shown_to(*impl, n, inputs, shown);
                std::string why;
                const double us =
                    time_candidate(plan_.scope, *impl, node, inputs, arriving,
                                   y_strides.empty() ? nullptr : &y_strides, best, why);
                if (us < 0) {
                    choice.refused.push_back(std::string(impl->name) + ": " + why);
                    continue;
                }
                m.times.emplace_back(impl->name, us);
                if (best < 0 || us < best * kMeasuredMargin) {
                    best = us;
                    m.impl = impl->name;
                }
            }
            if (m.times.empty())
                return;
            options_.choices->add(key, m);
        }
        const Implementation *chosen = implementation_named(m.impl);
        shown_to(*chosen, n, inputs, shown);
        const ops::Verdict v = chosen->supports(node, inputs);
        if (!v.ok())
            fail(MKC_STATUS_INVALID_ARGUMENT, g_.describe_node(n), ": the choice read back, '",
                 m.impl, "', cannot run it: ", v.reason);
        choice.impl = chosen;
        choice.why = measured_text(m);
    }

    // Whether node `n` reads a strided view or writes its result as one
    // (for a transpose after it).
    bool reads_or_writes_view(int n) const {
        for (int v : nodes_[n].inputs)
            if (v != kNoValue && view_[v])
                return true;
        return y_perm_.count(n) != 0;
    }

    // The implementation after `impl` in the node's priority order, or null.
    const Implementation *next_after(const Node &node, const NodeInputs &inputs,
                                     const Implementation &impl) const {
        const auto order = by_priority(node, inputs, options_.shared_rows);
        auto at = std::find(order.begin(), order.end(), &impl);
        return at == order.end() || at + 1 == order.end() ? nullptr : *(at + 1);
    }

    // A reshape or transpose node as a view: its result is its input's
    // bytes read with other dims and strides, no step. Bytes it cannot view
    // (blocked ones, or a reshape of a transposed view) are made plain
    // first by a converter, shared with any other reader wanting them so.
    void view(int n) {
        const Node &node = nodes_[n];
        const int v = node.inputs[0], w = node.outputs.at(0);
        const ValueDesc &out = inferred_[n].at(0);
        BufferRef at = where_[v];
        ValueDesc result;
        const OpRow &op = row(node);
        if (!op.view_of(node, desc_[v], out, result)) {
            const ValueDesc &have = desc_[v];
            const ValueDesc plain = ops::plain_value(have.dtype, have.layout, have.dims);
            at = read(v, plain.desc);
            for_node(g_, n,
                     [&] { require(op.view_of(node, plain, out, result), "no view of plain bytes"); });
        }
        desc_[w] = result;
        where_[w] = at;
        view_[w] = strided_view(result);
        share(at, w);
        plan_.views.push_back({n, static_cast<int>(plan_.steps.size()), at, result.desc});
    }

    // Value `v` is held in arena buffer `r` (with the others there).
    void share(const BufferRef &r, int v) {
        if (r.kind == BufferRef::Kind::arena)
            holders_[r.index].push_back(v);
    }

    // The buffer a node with a sum (a convolution, a linear layer) writes,
    // which holds the residual before it runs: in place, the residual's own
    // bytes when they are arranged as the node writes, or the copy of them a
    // converter already made in that arrangement for an earlier reader -
    // either only when nothing reads the residual after the node and the
    // node does not read those bytes itself (conv(r) + r). Else a copy of the
    // residual made by a step before it.
    BufferRef residual(int n, const ValueDesc &y, const std::vector<BufferRef> &reads,
                       bool &in_place) {
        const Node &node = nodes_[n];
        const int r = node.inputs.at(static_cast<size_t>(row(node).residual_port(node)));
        for_node(g_, n, [&] {
            require(desc_[r].layout == y.layout && desc_[r].dims == y.dims, "the residual's shape ",
                    shape_text(desc_[r].dims), " is not the output's ", shape_text(y.dims));
        });
        const auto read_here = [&](const BufferRef &b) {
            for (size_t i = 0; i < 3 && i < reads.size(); ++i)
                if (same_buffer(reads[i], b))
                    return true;
            return false;
        };
        in_place = false;
        if (options_.inplace) {
            const BufferRef target = own_bytes(r, n, y.desc);
            if (target.kind == BufferRef::Kind::arena && !read_here(target)) {
                in_place = true;
                ++plan_.in_place;
                return target;
            }
        }
        const BufferRef copy = new_buffer(y.desc.get_size(), static_cast<int>(plan_.steps.size()));
        add_converter(r, y.desc, copy, "the residual the node adds to");
        return copy;
    }

    // Bytes node `n` may overwrite with a result arranged as `y`: value `v`
    // arranged as `y`, its own arena buffer or the copy a converter already
    // made in that arrangement, when `v` is a node's result that nothing
    // reads after node `n` (nor a view of it) and no graph output; none else.
    BufferRef own_bytes(int v, int n, const dnnl::memory::desc &y) const {
        const bool dead = where_[v].kind == BufferRef::Kind::arena
                              ? dead_after(where_[v], n)
                              : last_reader_[v] <= n && !is_output_[v];
        if (!dead || g_.values[v].kind != Value::Kind::result)
            return {};
        if (desc_[v].desc == y)
            return where_[v].kind == BufferRef::Kind::arena ? where_[v] : BufferRef{};
        auto copy = converted_.find(std::make_pair(v, desc_key(y)));
        return copy != converted_.end() ? copy->second : BufferRef{};
    }

    // The buffer an element-wise or normalising node (activation, softmax,
    // binary, layer or batch norm: oneDNN computes them with dst over src,
    // or src0) writes its result over: its first input's bytes as own_bytes
    // gives them, when it reads exactly those there and nowhere else.
    //
    // Or, when the value lives on, the copy a converter made for this node
    // to read: those bytes are only a copy, so the node may write over them
    // if later readers of that arrangement get a copy of their own (the
    // shared copy is forgotten).
    BufferRef overwritten_input(int n, const Implementation &impl, const ops::Prepared &prepared,
                                const std::vector<BufferRef> &reads) {
        const Node &node = nodes_[n];
        if (!options_.inplace || node.inputs.empty() || node.inputs[0] == kNoValue ||
            prepared.outputs.empty() || reads.empty() || !impl.overwrites_input(row(node)))
            return {};
        const int v = node.inputs[0];
        const dnnl::memory::desc &y = prepared.outputs[0].desc;
        BufferRef target = own_bytes(v, n, y);
        auto copy = converted_.end();
        if (target.kind == BufferRef::Kind::none) {
            copy = converted_.find(std::make_pair(v, desc_key(prepared.takes.at(0))));
            // Only a copy nothing else reads later: a view of it (a
            // reshape of a transposed value) may be read or be an output.
            if (copy != converted_.end() && dead_after(copy->second, n, v))
                target = copy->second;
            else
                copy = converted_.end();
        }
        if (target.kind != BufferRef::Kind::arena || !same_buffer(reads[0], target) ||
            prepared.takes.at(0) != y)
            return {};
        for (size_t i = 1; i < reads.size(); ++i)
            if (same_buffer(reads[i], target))
                return {};
        if (copy != converted_.end()) {
            // Forgotten as v's copy: the bytes now hold this node's result.
            std::vector<int> &held = holders_[target.index];
            held.erase(std::remove(held.begin(), held.end(), v), held.end());
            converted_.erase(copy);
        }
        return target;
    }

    static bool same_buffer(const BufferRef &a, const BufferRef &b) {
        return a.kind == b.kind && a.index == b.index && a.kind != BufferRef::Kind::none;
    }

    // Whether no value held in arena buffer `r` (a value and its views),
    // `except` aside, is read after node `n` or is a graph output.
    bool dead_after(const BufferRef &r, int n, int except = kNoValue) const {
        auto found = holders_.find(r.index);
        if (found == holders_.end())
            return false;
        for (int v : found->second)
            if (v != except && (last_reader_[v] > n || is_output_[v]))
                return false;
        return true;
    }

    // Where a step reads value `v` arranged as `want`: the value itself, a
    // converted copy made at compile time (constants) or by a converter
    // step placed before the reader (shared by every reader of the pair).
    BufferRef read(int v, const dnnl::memory::desc &want) {
        const ValueDesc &have = desc_[v];
        const Value &value = g_.values[v];
        if (value.kind == Value::Kind::constant)
            return constant(v, want);
        if (have.desc != want) {
            auto key = std::make_pair(v, desc_key(want));
            auto found = converted_.find(key);
            if (found == converted_.end()) {
                const BufferRef out =
                    new_buffer(want.get_size(), static_cast<int>(plan_.steps.size()));
                add_converter(v, want, out, "the reader takes another arrangement");
                found = converted_.emplace(key, out).first;
                // The copy holds v for every later reader of v wanting it
                // so: nothing may write over it while v is read after.
                share(out, v);
            }
            return found->second;
        }
        return where_[v];
    }

    BufferRef constant(int v, const dnnl::memory::desc &want) {
        const Tensor &t = *g_.values[v].constant;
        auto key = std::make_pair(v, desc_key(want));
        auto found = constants_.find(key);
        if (found != constants_.end())
            return found->second;
        if (t.desc == want) { // the tensor itself, held by the graph
            const BufferRef ref{BufferRef::Kind::constant,
                                static_cast<int>(plan_.constant_data.size()), 0};
            plan_.constant_data.push_back(t.data);
            constants_.emplace(key, ref);
            return ref;
        }
        return converted_constant(key, want, t.desc, t.data);
    }

    // The constant `key` names: `from` (bytes arranged as `have`) converted
    // to `want`, once per program (options_.constants shares it between
    // plans), held by the plan.
    BufferRef converted_constant(const std::pair<int, std::string> &key,
                                 const dnnl::memory::desc &want, const dnnl::memory::desc &have,
                                 const void *from) {
        std::shared_ptr<void> storage;
        if (options_.constants)
            storage = options_.constants->find(key);
        if (!storage) {
            storage = allocate(want.get_size(), false);
            reorder(plan_.scope, have, from, want, storage.get());
            if (options_.constants)
                options_.constants->add(key, storage, want);
        }
        const BufferRef ref{BufferRef::Kind::constant, static_cast<int>(plan_.constant_data.size()),
                            0};
        plan_.constant_data.push_back(storage.get());
        plan_.constant_bytes += want.get_size();
        plan_.constants.push_back(std::move(storage));
        constants_.emplace(key, ref);
        return ref;
    }

    void add_converter(int v, const dnnl::memory::desc &want, const BufferRef &out,
                       const char *why) {
        const ValueDesc &have = desc_[v];
        const Value &value = g_.values[v];
        const BufferRef from =
            value.kind == Value::Kind::constant ? constant(v, have.desc) : where_[v];
        add_converter_from(from, have.desc, want, out, why);
    }

    // A step converting the bytes at `from`, read as `have`, into `want`.
    void add_converter_from(const BufferRef &from, const dnnl::memory::desc &have,
                            const dnnl::memory::desc &want, const BufferRef &out, const char *why) {
        Step step;
        step.what = "convert";
        if (have == want) {
            auto copy = std::make_shared<CopyEntry>();
            copy->bytes = want.get_size();
            step.run = run_copy;
            step.entry = std::move(copy);
            step.impl = "copy";
        } else {
            step.run = run_converter;
            step.entry = reorder_entry(plan_.scope, have, want);
            step.impl = implementation("onednn", *step.entry);
            step.in_args = {DNNL_ARG_FROM};
            step.out_args = {DNNL_ARG_TO};
        }
        touch(from, static_cast<int>(plan_.steps.size()));
        step.in = {from};
        step.out = {out};
        step.in_formats = {arrangement_name(have)};
        step.out_formats = {arrangement_name(want)};
        step.why = why;
        plan_.steps.push_back(std::move(step));
        ++plan_.converters;
    }

    // Value `v` read through a view (grouped conv weights): its bytes as the
    // view's base, read as the view, converted to `want` - at compile time,
    // once, for a constant; else by a converter step (shared as read()'s).
    BufferRef read_through(int v, const ops::InputView &view, const dnnl::memory::desc &want) {
        const BufferRef base = read(v, view.base);
        auto key = std::make_pair(v, "view " + desc_key(view.view) + " " + desc_key(want));
        if (g_.values[v].kind == Value::Kind::constant) {
            auto found = constants_.find(key);
            if (found != constants_.end())
                return found->second;
            return converted_constant(key, want, view.view, plan_.constant_data.at(base.index));
        }
        auto found = converted_.find(key);
        if (found == converted_.end()) {
            const BufferRef out = new_buffer(want.get_size(), static_cast<int>(plan_.steps.size()));
            add_converter_from(base, view.view, want, out, "the reader takes a view of it");
            found = converted_.emplace(key, out).first;
            share(out, v);
        }
        return found->second;
    }

    // A node result that is a graph output, written straight to it (and
    // every value held in its buffer read from there).
    void redirect(int v, const BufferRef &out) {
        const BufferRef old = where_[v];
        auto moved = [&](BufferRef &r) {
            if (r.kind == BufferRef::Kind::arena && r.index == old.index)
                r = out;
        };
        for (Step &s : plan_.steps)
            for (auto *refs : {&s.in, &s.out})
                for (BufferRef &r : *refs)
                    moved(r);
        for (View &view : plan_.views)
            moved(view.at);
        for (int held : holders_[old.index])
            moved(where_[held]);
        buffers_[old.index].life.bytes = 0; // no arena bytes
        redirected_[old.index] = true;
    }

    BufferRef new_buffer(size_t bytes, int step) {
        buffers_.push_back({{bytes, step, step}});
        return {BufferRef::Kind::arena, static_cast<int>(buffers_.size()) - 1, 0, bytes};
    }

    // The buffer is read by step `step`.
    void touch(const BufferRef &r, int step) {
        if (r.kind != BufferRef::Kind::arena)
            return;
        BufferLife &life = buffers_[r.index].life;
        life.last = std::max(life.last, step);
    }

    // An arrangement as a key: its format name, dims and data type, and its
    // strides when it is a strided one (two views of one shape differ only
    // there).
    static std::string desc_key(const dnnl::memory::desc &d) {
        std::string key = format_name(d) + ':';
        keys::append_value(key, d);
        if (d.get_format_kind() == dnnl::memory::format_kind::blocked && d.get_inner_nblks() == 0)
            key += shape_text(d.get_strides());
        return key;
    }

    const Graph &g_;
    const CompileOptions &options_;
    Plan &plan_;
    std::vector<Node> nodes_; // the graph's, a folded add's value an input of its matmul
    std::vector<ValueDesc> desc_;    // per value, as lowered (its actual arrangement)
    std::vector<ValueDesc> logical_; // per value, as inferred (plain)
    std::vector<std::vector<ValueDesc>> inferred_; // per node, its outputs as inferred
    std::vector<Choice> choices_;                  // per node (none for a view)
    std::vector<bool> bf16_;                       // per node: computes in bfloat16
    std::vector<int> folded_into_;                 // per add node: the matmul it became part of
    std::vector<int> folded_add_;                  // per matmul: the add folded into it
    std::map<int, AttentionChain> attention_; // by its scores matmul
    std::map<int, std::string> notes_;        // added to a node's step's choice text
    std::vector<bool> in_attention_;               // lowered in its scores matmul's step
    std::vector<BufferRef> where_;
    std::vector<bool> view_;                  // a strided view only a matmul reads as it is
    std::map<int, bool> redirected_;          // per arena buffer: moved to a graph output
    std::map<int, std::vector<int>> holders_; // per arena buffer, the values held there
    std::map<int, std::vector<int>> y_perm_;  // matmul node -> the transpose after it
    std::map<int, int> conv_reader_;          // convolution -> the convolution reading it
    // Per value, the last node reading it or a view of it (-1: none), and
    // whether it or a view of it is a graph output.
    std::vector<int> last_reader_;
    std::vector<bool> is_output_;
    std::vector<int> readers_; // per value, the nodes reading it
    std::vector<Buffer> buffers_;
    std::map<std::pair<int, std::string>, BufferRef> converted_, constants_;
};

} // namespace

std::unique_ptr<Plan> compile_plan(const Graph &graph,
                                   const std::vector<std::vector<int64_t>> &dims,
                                   const CacheScope &scope, const std::string &shape_group,
                                   const CompileOptions &options) {
    static std::atomic<uint64_t> next_id{1};
    auto plan = std::make_unique<Plan>();
    plan->id = next_id.fetch_add(1, std::memory_order_relaxed);
    plan->input_dims = dims;
    plan->shape_group = shape_group;
    plan->scope = scope;
    plan->scope.shape_group = &plan->shape_group;
    plan->scope.memo_context = fresh_memo_context();
    Compiler c(graph, options, *plan);
    struct Pass {
        const char *name;
        std::function<void()> run;
    };
    const Pass kPlanPasses[] = {
        {"bind_inputs", [&] { c.bind_inputs(dims); }},
        {"infer", [&] { c.infer(); }},
        {"fold_adds", [&] { c.fold_adds(); }},
        {"precision", [&] { c.precision(); }},
        {"choose", [&] { c.choose_implementations(); }},
        {"attention", [&] { c.attention(); }},
        {"lower", [&] { c.lower(); }},
        {"outputs", [&] { c.outputs(); }},
        {"plan_memory", [&] { c.memory(); }},
    };
    for (const Pass &pass : kPlanPasses) {
        pass.run();
        if (options.dump && options.dump->enabled())
            options.dump->section("plan " + shape_group + " after " + pass.name, c.text());
    }
    for (const Step &step : plan->steps)
        plan->row_parts =
            plan->row_parts || (step.entry && !ops::linear_row_parts(*step.entry).empty());
    return plan;
}

} // namespace mkc::graph
