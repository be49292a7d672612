// C ABI: graphs and programs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/guard.hpp"
#include "api/program_handle.hpp"
#include "api/struct_size.hpp"
#include "graph/op_table.hpp"
#include "graph/program.hpp"

using namespace mkc;
using mkc::api::guard;
using mkc::api::ProgramUse;
using mkc::api::require_out;
using mkc::api::sized_params;

struct mkc_graph {
    graph::Graph g;
};

namespace {

graph::Graph &graph_arg(mkc_graph *g) {
    if (g == nullptr || !registry<mkc_graph>().contains(g))
        fail(MKC_STATUS_INVALID_HANDLE,
             g ? "graph is not a live graph (destroyed or foreign handle)" : "graph is NULL");
    return g->g;
}

std::string text_or_empty(const char *s) { return s ? s : ""; }

const graph::Plan &last_plan(const graph::Program &p, std::shared_ptr<const graph::Plan> &hold) {
    hold = p.last_plan();
    require(hold != nullptr, "program: no plan yet (it has dims bound at run time: run it first)");
    return *hold;
}

} // namespace

namespace {
// mkc_program_run's checks and run; `profile` keeps its steps' times.
void run_program(mkc_program *program, int ninputs, const mkc_tensor *const *inputs, int noutputs,
                 mkc_tensor **outputs, bool profile) {
    const ProgramUse use(program);
    graph::Program &p = *use;
    const graph::Graph &g = p.graph();
    const int want_in = static_cast<int>(p.input_values().size());
    const int want_out = static_cast<int>(g.outputs.size());
    if (ninputs != want_in)
        fail(MKC_STATUS_INVALID_ARGUMENT, "run: the program takes ", want_in, " inputs, got ",
             ninputs);
    if (noutputs != want_out)
        fail(MKC_STATUS_INVALID_ARGUMENT, "run: the program gives ", want_out, " outputs, got ",
             noutputs);
    require(ninputs == 0 || inputs != nullptr, "run: inputs is NULL");
    require(outputs != nullptr, "run: outputs is NULL");
    for (int k = 0; k < ninputs; ++k) {
        const graph::Value &value = g.values[p.input_values()[k]];
        const std::string what = "input '" + value.name + "'";
        const Tensor &t = api::tensor_arg(inputs[k], "run", what.c_str());
        require(t.dtype == value.dtype, "run: ", what, " is ", dtype_name(t.dtype),
                ", the graph's input is ", dtype_name(value.dtype));
    }
    for (int k = 0; k < noutputs; ++k) {
        if (outputs[k] == nullptr)
            continue;
        const std::string what = "output '" + g.outputs[k].name + "'";
        api::tensor_arg(outputs[k], "run", what.c_str());
        require(!outputs[k]->constant, "run: ", what, " is a constant tensor");
        for (int i = 0; i < ninputs; ++i)
            require(outputs[k] != inputs[i], "run: ", what, " is also input '",
                    g.values[p.input_values()[i]].name, "'");
        for (int j = 0; j < k; ++j)
            require(outputs[k] != outputs[j], "run: ", what, " is also output '", g.outputs[j].name,
                    "'");
    }
    if (profile) {
        std::string text = p.profile(inputs, outputs);
        std::lock_guard<std::mutex> lock(program->profile_mutex);
        program->profile = std::move(text);
    } else {
        p.run(inputs, outputs);
    }
}
} // namespace

namespace {

// mkc_program_run_plain's checks and run.
void run_plain_checked(graph::Program &p, const int64_t *input_dims, const void *const *inputs,
                       void *const *outputs) {
    require(input_dims != nullptr, "run: input_dims is NULL");
    require(inputs != nullptr || p.input_values().empty(), "run: inputs is NULL");
    require(outputs != nullptr, "run: outputs is NULL");
    for (size_t k = 0; k < p.input_values().size(); ++k)
        require(inputs[k] != nullptr, "run: input '", p.graph().values[p.input_values()[k]].name,
                "' is NULL");
    for (size_t k = 0; k < p.graph().outputs.size(); ++k)
        require(outputs[k] != nullptr, "run: output '", p.graph().outputs[k].name, "' is NULL");
    p.run_plain(input_dims, inputs, outputs);
}

} // namespace

extern "C" {

#define MKC_PARAMS_INIT(T, ...)                                                                    \
    MKC_API mkc_status T##_init(T *params) {                                                       \
        return guard([&] {                                                                         \
            require_out(params, "params");                                                         \
            *params = T{};                                                                         \
            params->struct_size = sizeof(T);                                                       \
            __VA_ARGS__;                                                                           \
        });                                                                                        \
    }
MKC_PARAMS_INIT(mkc_activation_params, params->kind = MKC_ACTIVATION_RELU)
MKC_PARAMS_INIT(mkc_softmax_params, params->axis = -1)
MKC_PARAMS_INIT(mkc_binary_params, params->kind = MKC_BINARY_ADD)
MKC_PARAMS_INIT(mkc_concat_params, params->axis = 1)
MKC_PARAMS_INIT(mkc_transpose_params, (void)0)
MKC_PARAMS_INIT(mkc_reshape_params, (void)0)
MKC_PARAMS_INIT(mkc_reduce_params, params->kind = MKC_REDUCE_SUM)
MKC_PARAMS_INIT(mkc_gather_params, (void)0)
MKC_PARAMS_INIT(mkc_cast_params, params->to = MKC_DTYPE_F32)
MKC_PARAMS_INIT(mkc_slice_params, for (int64_t &s : params->steps) s = 1)
MKC_PARAMS_INIT(mkc_expand_params, (void)0)
MKC_PARAMS_INIT(mkc_compare_params, params->kind = MKC_COMPARE_EQUAL)
MKC_PARAMS_INIT(mkc_pad_params, params->mode = MKC_PAD_CONSTANT;
                for (int i = 0; i < MKC_MAX_NDIMS; ++i) params->axes[i] = i)
MKC_PARAMS_INIT(mkc_resize_params, params->mode = MKC_RESIZE_NEAREST;
                params->coordinates = MKC_COORDINATES_HALF_PIXEL;
                params->nearest = MKC_NEAREST_ROUND_PREFER_FLOOR;
                params->cubic_coeff_a = -0.75)
MKC_PARAMS_INIT(mkc_logical_params, params->kind = MKC_LOGICAL_AND)
MKC_PARAMS_INIT(mkc_range_params, params->delta = 1.0; params->dtype = MKC_DTYPE_S64)
MKC_PARAMS_INIT(mkc_gather_nd_params, (void)0)
MKC_PARAMS_INIT(mkc_quantize_params, params->axis = 1; params->to = MKC_DTYPE_U8)
MKC_PARAMS_INIT(mkc_quantized_conv_params, mkc_conv_params_init(&params->conv);
                params->dst_dtype = MKC_DTYPE_F32; params->sum_scale = 1.0f)
MKC_PARAMS_INIT(mkc_quantized_linear_params, params->activation = MKC_ACTIVATION_NONE;
                params->dst_dtype = MKC_DTYPE_F32; params->sum_scale = 1.0f)
MKC_PARAMS_INIT(mkc_quantized_matmul_params, params->activation = MKC_ACTIVATION_NONE;
                params->dst_dtype = MKC_DTYPE_F32)
MKC_PARAMS_INIT(mkc_program_options, params->fuse = params->inplace = params->reuse = 1;
                params->exact_plans = graph::ProgramOptions::kExactPlans)
#undef MKC_PARAMS_INIT

MKC_API mkc_status mkc_graph_create(mkc_graph **graph) {
    return guard([&] {
        require_out(graph, "graph");
        auto g = std::make_unique<mkc_graph>();
        registry<mkc_graph>().add(g.get());
        *graph = g.release();
    });
}

MKC_API mkc_status mkc_graph_destroy(mkc_graph *graph) {
    return guard([&] {
        if (graph == nullptr)
            return;
        if (!registry<mkc_graph>().remove(graph))
            fail(MKC_STATUS_INVALID_HANDLE,
                 "graph is not a live graph (destroyed twice or foreign handle)");
        delete graph;
    });
}

MKC_API mkc_status mkc_graph_input(mkc_graph *graph, const char *name, mkc_dtype dtype, int ndims,
                                   const int64_t *dims, mkc_layout layout, int *value) {
    return guard([&] {
        graph::Graph &g = graph_arg(graph);
        require_out(value, "value");
        require(ndims >= 1 && ndims <= MKC_MAX_NDIMS, "graph input '", text_or_empty(name),
                "': rank must be 1..", MKC_MAX_NDIMS, ", got ", ndims);
        require(dims != nullptr, "graph input '", text_or_empty(name), "': dims is NULL");
        *value = g.add_input(text_or_empty(name), dtype, std::vector<int64_t>(dims, dims + ndims),
                             layout);
    });
}

MKC_API mkc_status mkc_graph_constant(mkc_graph *graph, const mkc_tensor *tensor, const char *name,
                                      int *value) {
    return guard([&] {
        graph::Graph &g = graph_arg(graph);
        require_out(value, "value");
        const Tensor &t = api::tensor_arg(tensor, "graph constant", "tensor");
        std::shared_ptr<Tensor> copy = make_owned_tensor(t.desc, t.layout, t.dtype);
        std::memcpy(copy->data, t.data, t.desc.get_size());
        copy->constant = true;
        *value = g.add_constant(std::move(copy), text_or_empty(name));
    });
}

MKC_API mkc_status mkc_graph_node(mkc_graph *graph, mkc_op op, const void *params, int ninputs,
                                  const int *inputs, int *output) {
    return guard([&] {
        graph::Graph &g = graph_arg(graph);
        require_out(output, "output");
        // Read as a plain integer: loading a value outside the enum as the
        // enum is undefined behaviour.
        int32_t raw;
        static_assert(sizeof raw == sizeof op);
        std::memcpy(&raw, &op, sizeof raw);
        const graph::OpRow *row = graph::op_by_id(raw);
        if (!row)
            fail(MKC_STATUS_INVALID_ARGUMENT, "graph node: unknown operator ", raw);
        require(ninputs >= 0 && (ninputs == 0 || inputs != nullptr), "graph node (", row->name,
                "): inputs is NULL");
        std::string name;
        graph::NodeParams p = row->read_params(params, name, "graph node");
        *output =
            g.add_node(row->op, std::move(p), name, std::vector<int>(inputs, inputs + ninputs))[0];
    });
}

MKC_API mkc_status mkc_graph_output(mkc_graph *graph, int value, const char *name) {
    return guard([&] { graph_arg(graph).add_output(value, text_or_empty(name)); });
}

MKC_API mkc_status mkc_program_compile(const mkc_graph *graph, const mkc_program_options *options,
                                       mkc_program **program) {
    return guard([&] {
        const graph::Graph &g = graph_arg(const_cast<mkc_graph *>(graph));
        require_out(program, "program");
        mkc_program_options defaults;
        mkc_program_options_init(&defaults);
        mkc_program_options older;
        const mkc_program_options &o =
            options ? sized_params("program_compile", *options, older) : defaults;
        graph::ProgramOptions po;
        po.fuse = o.fuse != 0;
        po.compile.inplace = o.inplace != 0;
        po.compile.reuse = o.reuse != 0;
        po.capacity = o.capacity;
        po.exact_plans = o.exact_plans;
        po.impl = text_or_empty(o.impl);
        po.measure = o.measure != 0;
        po.choices = text_or_empty(o.choices);
        po.dump = text_or_empty(o.dump);
        po.precision = text_or_empty(o.precision);
        po.calibration = text_or_empty(o.calibration);
        auto p = std::make_unique<mkc_program>(g, po);
        p->p.compile_static();
        registry<mkc_program>().add(p.get());
        *program = p.release();
    });
}

MKC_API mkc_status mkc_program_destroy(mkc_program *program) {
    return guard([&] {
        if (program == nullptr)
            return;
        if (!registry<mkc_program>().remove(program))
            fail(MKC_STATUS_INVALID_HANDLE,
                 "program is not a live program (destroyed twice or foreign handle)");
        // No call can start on it now; the ones inside it finish first.
        while (program->users.load(std::memory_order_acquire) != 0)
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        delete program;
    });
}

MKC_API mkc_status mkc_program_inputs(const mkc_program *program, int *count) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        require_out(count, "count");
        *count = static_cast<int>(p.input_values().size());
    });
}

MKC_API mkc_status mkc_program_input_name(const mkc_program *program, int index,
                                          const char **name) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        require_out(name, "name");
        const int n = static_cast<int>(p.input_values().size());
        require(index >= 0 && index < n, "program: input index ", index, " is not in 0..", n - 1);
        *name = p.graph().values[p.input_values()[index]].name.c_str();
    });
}

MKC_API mkc_status mkc_program_outputs(const mkc_program *program, int *count) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        require_out(count, "count");
        *count = static_cast<int>(p.graph().outputs.size());
    });
}

MKC_API mkc_status mkc_program_output_name(const mkc_program *program, int index,
                                           const char **name) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        require_out(name, "name");
        const int n = static_cast<int>(p.graph().outputs.size());
        require(index >= 0 && index < n, "program: output index ", index, " is not in 0..", n - 1);
        *name = p.graph().outputs[index].name.c_str();
    });
}

MKC_API mkc_status mkc_program_run(mkc_program *program, int ninputs,
                                   const mkc_tensor *const *inputs, int noutputs,
                                   mkc_tensor **outputs) {
    return guard([&] { run_program(program, ninputs, inputs, noutputs, outputs, false); });
}

MKC_API mkc_status mkc_program_profile(mkc_program *program, int ninputs,
                                       const mkc_tensor *const *inputs, int noutputs,
                                       mkc_tensor **outputs) {
    return guard([&] { run_program(program, ninputs, inputs, noutputs, outputs, true); });
}

MKC_API mkc_status mkc_program_profile_text(const mkc_program *program, char *buf, size_t size,
                                            size_t *needed) {
    return guard([&] {
        const ProgramUse use(program);
        std::string text;
        {
            std::lock_guard<std::mutex> lock(program->profile_mutex);
            text = program->profile;
        }
        require(!text.empty(), "program: no profile yet (mkc_program_profile makes one)");
        api::copy_out(text, buf, size, needed);
    });
}

MKC_API mkc_status mkc_program_executor(const mkc_program *program, uint64_t *executor) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        require_out(executor, "executor");
        *executor = p.executor();
    });
}

MKC_API mkc_status mkc_program_plan(const mkc_program *program, char *buf, size_t size,
                                    size_t *needed) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        std::shared_ptr<const graph::Plan> hold;
        const graph::Plan &plan = last_plan(p, hold);
        api::copy_out(p.fuse_report().text() + p.precision_report() +
                          graph::plan_text(p.graph(), plan),
                      buf, size, needed);
    });
}

MKC_API mkc_status mkc_program_steps(const mkc_program *program, char *buf, size_t size,
                                     size_t *needed) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        std::shared_ptr<const graph::Plan> hold;
        api::copy_out(graph::plan_steps(last_plan(p, hold)), buf, size, needed);
    });
}

MKC_API mkc_status mkc_program_choices(const mkc_program *program, char *buf, size_t size,
                                       size_t *needed) {
    return guard([&] {
        const ProgramUse use(program);
        api::copy_out((*use).choices_text(), buf, size, needed);
    });
}

MKC_API mkc_status mkc_calibrate_options_init(mkc_calibrate_options *options) {
    return guard([&] {
        require_out(options, "options");
        *options = mkc_calibrate_options{};
        options->struct_size = sizeof(mkc_calibrate_options);
    });
}

MKC_API mkc_status mkc_program_calibrate(mkc_program *program, int ninputs,
                                         const mkc_tensor *const *inputs) {
    return mkc_program_calibrate_with(program, ninputs, inputs, nullptr);
}

MKC_API mkc_status mkc_program_calibrate_with(mkc_program *program, int ninputs,
                                              const mkc_tensor *const *inputs,
                                              const mkc_calibrate_options *options) {
    return guard([&] {
        mkc_calibrate_options defaults;
        mkc_calibrate_options_init(&defaults);
        mkc_calibrate_options older;
        const mkc_calibrate_options &o =
            options ? sized_params("calibrate", *options, older) : defaults;
        const graph::CalibrationMethod method =
            graph::CalibrationMethod::parse(o.method, o.percentile);
        const ProgramUse use(program);
        graph::Program &p = *use;
        const graph::Graph &g = p.graph();
        const int want = static_cast<int>(p.input_values().size());
        if (ninputs != want)
            fail(MKC_STATUS_INVALID_ARGUMENT, "calibrate: the program takes ", want,
                 " inputs, got ", ninputs);
        require(ninputs == 0 || inputs != nullptr, "calibrate: inputs is NULL");
        for (int k = 0; k < ninputs; ++k) {
            const graph::Value &value = g.values[p.input_values()[k]];
            const std::string what = "input '" + value.name + "'";
            const Tensor &t = api::tensor_arg(inputs[k], "calibrate", what.c_str());
            require(t.dtype == value.dtype, "calibrate: ", what, " is ", dtype_name(t.dtype),
                    ", the graph's input is ", dtype_name(value.dtype));
        }
        p.calibrate(inputs, method);
    });
}

MKC_API mkc_status mkc_program_calibration(const mkc_program *program, char *buf, size_t size,
                                           size_t *needed) {
    return guard([&] {
        const ProgramUse use(program);
        api::copy_out((*use).calibration_text(), buf, size, needed);
    });
}

MKC_API mkc_status mkc_program_memory_info(const mkc_program *program, mkc_program_memory *memory) {
    return guard([&] {
        const ProgramUse use(program);
        const graph::Program &p = *use;
        require_out(memory, "memory");
        std::shared_ptr<const graph::Plan> hold;
        const graph::Plan &plan = last_plan(p, hold);
        mkc_program_memory m{};
        m.struct_size = sizeof m;
        m.arena_bytes = plan.arena_bytes;
        m.lower_bound_bytes = plan.lower_bound_bytes;
        m.naive_bytes = plan.naive_bytes;
        m.constant_bytes = plan.constant_bytes;
        m.steps = static_cast<int>(plan.steps.size());
        m.converters = plan.converters;
        m.plans = static_cast<int>(p.plan_count());
        m.in_place = plan.in_place;
        m.views = static_cast<int>(plan.views.size());
        m.held_constant_bytes = p.held_constant_bytes();
        api::write_sized("program_memory_info", memory, m);
    });
}

MKC_API mkc_status mkc_program_output_shape(mkc_program *program, const int64_t *input_dims,
                                            int index, int *ndims, int64_t *dims) {
    return guard([&] {
        const ProgramUse use(program);
        graph::Program &p = *use;
        require(input_dims != nullptr, "program_output_shape: input_dims is NULL");
        require_out(ndims, "ndims");
        require_out(dims, "dims");
        require(index >= 0, "program: output index ", index, " is negative");
        const ops::ValueDesc o = p.output_desc(input_dims, static_cast<size_t>(index));
        const Dims d = layout::to_caller_order(o.dims, o.layout);
        std::copy(d.begin(), d.end(), dims);
        *ndims = static_cast<int>(d.size());
    });
}

MKC_API mkc_status mkc_program_output_dtype(mkc_program *program, const int64_t *input_dims,
                                            int index, mkc_dtype *dtype) {
    return guard([&] {
        const ProgramUse use(program);
        graph::Program &p = *use;
        require(input_dims != nullptr, "program_output_dtype: input_dims is NULL");
        require_out(dtype, "dtype");
        require(index >= 0, "program: output index ", index, " is negative");
        *dtype = p.output_desc(input_dims, static_cast<size_t>(index)).dtype;
    });
}

MKC_API mkc_status mkc_program_run_plain_ref(mkc_program *program, const int64_t *input_dims,
                                             const void *const *const *input_refs,
                                             void *const *const *output_refs) {
    return guard([&] {
        const ProgramUse use(program);
        graph::Program &p = *use;
        require(input_refs != nullptr || p.input_values().empty(), "run: input_refs is NULL");
        require(output_refs != nullptr, "run: output_refs is NULL");
        constexpr size_t kInline = 16; // most models' inputs and outputs
        const size_t n_in = p.input_values().size(), n_out = p.graph().outputs.size();
        const void *in_inline[kInline];
        void *out_inline[kInline];
        std::vector<const void *> in_heap;
        std::vector<void *> out_heap;
        const void **in = in_inline;
        void **out = out_inline;
        if (n_in > kInline) in = (in_heap.resize(n_in), in_heap.data());
        if (n_out > kInline) out = (out_heap.resize(n_out), out_heap.data());
        for (size_t k = 0; k < n_in; ++k) {
            require(input_refs[k] != nullptr, "run: input_refs[", k, "] is NULL");
            in[k] = *input_refs[k];
        }
        for (size_t k = 0; k < n_out; ++k) {
            require(output_refs[k] != nullptr, "run: output_refs[", k, "] is NULL");
            out[k] = *output_refs[k];
        }
        run_plain_checked(p, input_dims, in, out);
    });
}

MKC_API mkc_status mkc_program_run_plain(mkc_program *program, const int64_t *input_dims,
                                         const void *const *inputs, void *const *outputs) {
    return guard([&] {
        const ProgramUse use(program);
        run_plain_checked(*use, input_dims, inputs, outputs);
    });
}

} // extern "C"
