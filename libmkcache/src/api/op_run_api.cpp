// C ABI: one call of any operator of the operator table on tensors, as a
// one-node program runs it - the same row, the same choice of
// implementation - with the inputs converted to what the step reads and
// the result written into the caller's tensor in its own layout.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/aliasing.hpp"
#include "api/eager_scope.hpp"
#include "api/guard.hpp"
#include "graph/implementations.hpp"
#include "handler/handler.hpp"

using namespace mkc;
using mkc::api::guard;
using mkc::api::require_out;

namespace {

// The bytes of `t` arranged as `want`: its own, or a converted copy held
// in `temps`.
const void *arranged(const CacheScope &scope, const Tensor &t, const dnnl::memory::desc &want,
                     std::vector<std::shared_ptr<void>> &temps) {
    if (t.desc == want)
        return t.data;
    temps.push_back(allocate(want.get_size(), false));
    reorder(scope, t.desc, t.data, want, temps.back().get());
    return temps.back().get();
}

void run_op(const graph::OpRow &row, const void *params, int ninputs,
            const mkc_tensor *const *inputs, mkc_tensor **dst) {
    const char *op = row.name;
    const graph::Arity a = row.arity;
    require(ninputs >= a.min_inputs && ninputs <= a.max_inputs, op, ": takes ", a.min_inputs,
            a.min_inputs == a.max_inputs ? "" : "..",
            a.min_inputs == a.max_inputs ? std::string() : std::to_string(a.max_inputs),
            " inputs, got ", ninputs);
    require(inputs != nullptr, op, ": inputs is NULL");
    require_out(dst, "dst");
    graph::Node node;
    node.op = row.op;
    node.params = row.read_params(params, node.name, "op_run");
    std::vector<const Tensor *> tensors(static_cast<size_t>(ninputs), nullptr);
    std::vector<ops::ValueDesc> descs(tensors.size());
    graph::NodeInputs in(tensors.size(), nullptr);
    for (int i = 0; i < ninputs; ++i) {
        if (inputs[i] == nullptr) {
            require(i >= row.first_optional, op, ": input ", i, " is required");
            node.inputs.push_back(graph::kNoValue);
            continue;
        }
        const std::string what = "input " + std::to_string(i);
        tensors[i] = &api::tensor_arg(inputs[i], op, what.c_str());
        descs[i] = ops::describe(*tensors[i]);
        in[i] = &descs[i];
        node.inputs.push_back(i);
    }
    if (*dst != nullptr)
        api::tensor_arg(*dst, op, "*dst");
    node.outputs = {ninputs};

    const CacheScope &scope = api::eager_scope();
    // The operator's own errors as they are (the implementations' verdicts
    // would wrap them in their names).
    graph::infer_node(node, in);
    const graph::Choice choice = graph::choose(node, in, graph::Overrides{}, op);
    const ops::Prepared p = choice.impl->prepare(scope, node, in, nullptr);
    std::vector<std::shared_ptr<void>> temps;
    std::vector<const void *> in_data(p.takes.size(), nullptr);
    for (size_t i = 0; i < p.takes.size() && i < tensors.size(); ++i) {
        if (!tensors[i] || p.takes[i].is_zero())
            continue;
        const bool through_view = i < p.views.size() && !p.views[i].view.is_zero();
        if (!through_view) {
            in_data[i] = arranged(scope, *tensors[i], p.takes[i], temps);
            continue;
        }
        // Read through a view (grouped conv weights): the bytes arranged as
        // the view's base, read as the view, converted to what it takes.
        const void *base = arranged(scope, *tensors[i], p.views[i].base, temps);
        temps.push_back(allocate(p.takes[i].get_size(), false));
        reorder(scope, p.views[i].view, base, p.takes[i], temps.back().get());
        in_data[i] = temps.back().get();
    }
    const ops::ValueDesc &y = p.outputs.at(0);
    api::write_result(dst, tensors.data(), tensors.size(), nullptr, false, op, [&](mkc_tensor **out) {
        std::unique_ptr<Tensor> created;
        std::shared_ptr<void> temporary;
        void *y_data;
        Tensor *target = *out;
        if (target == nullptr) {
            created = make_owned_tensor(y.desc, y.layout, y.dtype);
            y_data = created->data;
        } else {
            require(target->dtype == y.dtype, op, ": dst is ", dtype_name(target->dtype),
                    ", the result ", dtype_name(y.dtype));
            require(caller_dims(*target) == ops::caller_dims(y) && target->layout == y.layout,
                    op, ": dst's shape ", shape_text(caller_dims(*target)), " ",
                    layout::name(target->layout), " is not the result's ",
                    shape_text(ops::caller_dims(y)), " ", layout::name(y.layout));
            if (target->desc == y.desc) {
                y_data = target->data;
            } else {
                temporary = allocate(y.desc.get_size(), false);
                y_data = temporary.get();
            }
        }
        // A fused sum adds to what the output buffer holds: the residual.
        const int residual = row.residual_port(node);
        if (residual != graph::kNoValue && tensors.at(static_cast<size_t>(residual))) {
            const void *r = arranged(scope, *tensors[static_cast<size_t>(residual)], y.desc, temps);
            if (r != y_data)
                std::memcpy(y_data, r, y.desc.get_size());
        }
        std::vector<void *> out_data(p.outputs.size(), nullptr);
        out_data[0] = y_data;
        choice.impl->run(row)(scope, *p.entry, {in_data.data(), out_data.data()});
        if (temporary)
            reorder(scope, y.desc, y_data, target->desc, target->data);
        Handler::publish(created, out);
    });
}

} // namespace

extern "C" {

MKC_API mkc_status mkc_op_run(mkc_op op, const void *params, int ninputs,
                              const mkc_tensor *const *inputs, mkc_tensor **dst) {
    return guard([&] {
        // Read as a plain integer: loading a value outside the enum as the
        // enum is undefined behaviour.
        int32_t raw;
        static_assert(sizeof raw == sizeof op);
        std::memcpy(&raw, &op, sizeof raw);
        const graph::OpRow *row = graph::op_by_id(raw);
        if (!row)
            fail(MKC_STATUS_INVALID_ARGUMENT, "op_run: unknown operator ", raw);
        run_op(*row, params, ninputs, inputs, dst);
    });
}

} // extern "C"
