#include "graph/run_context.hpp"

#include <chrono>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/serial.hpp"
#include "common/thread_state.hpp"
#include "handler/handler.hpp"

namespace mkc::graph {

namespace {

void *fixed_address(const Plan &plan, char *arena, const BufferRef &r) {
    switch (r.kind) {
    case BufferRef::Kind::arena:
        return arena + r.offset;
    case BufferRef::Kind::constant:
        return const_cast<void *>(plan.constant_data[r.index]);
    default:
        return nullptr;
    }
}

bool per_run(const BufferRef &r) {
    return r.kind == BufferRef::Kind::input || r.kind == BufferRef::Kind::output;
}

// The OpenMP setting of a run: a step built for few elements runs on the
// calling thread alone, as its operator's run() would (SerialRegion), but
// the setting changes only between steps that differ.
class SerialSteps {
public:
    ~SerialSteps() { leave(); }
    void before(int64_t elements) {
        if (elements <= kSerialElements) {
            if (!region_)
                region_ = std::make_unique<SerialRegion>(elements);
        } else {
            leave();
        }
    }

private:
    void leave() { region_.reset(); }
    std::unique_ptr<SerialRegion> region_;
};

} // namespace

RunContext::RunContext(const Plan &plan, char *arena) : plan_id_(plan.id), arena_(arena) {
    steps_.resize(plan.steps.size());
    for (size_t i = 0; i < plan.steps.size(); ++i) {
        const Step &s = plan.steps[i];
        if (s.in_args.empty() && s.out_args.empty())
            continue;
        Bound &b = steps_[i];
        const PrimitiveEntry &e = *s.entry;
        auto add = [&](int arg, const BufferRef &ref) {
            if (arg == 0 || ref.kind == BufferRef::Kind::none)
                return;
            const int index = static_cast<int>(b.args.size());
            b.memories.emplace_back(e.arg_desc(arg), cpu_engine(), fixed_address(plan, arena, ref));
            b.args.push_back({arg, b.memories.back().get()});
            if (per_run(ref))
                b.per_run.push_back({index, ref});
        };
        b.memories.reserve(s.in.size() + s.out.size() + 1);
        for (size_t k = 0; k < s.in.size(); ++k)
            add(s.in_args[k], s.in[k]);
        for (size_t k = 0; k < s.out.size(); ++k)
            add(s.out_args[k], s.out[k]);
        if (e.scratchpad_bytes > 0) {
            b.scratchpad = static_cast<int>(b.args.size());
            b.scratchpad_bytes = e.scratchpad_bytes;
            b.memories.emplace_back(e.arg_desc(DNNL_ARG_SCRATCHPAD), cpu_engine(), nullptr);
            b.args.push_back({DNNL_ARG_SCRATCHPAD, b.memories.back().get()});
        }
        b.last.assign(b.args.size(), nullptr);
        b.direct = true;
    }
}

void RunContext::run(const Plan &plan, const CacheScope &scope, ThreadState &state,
                     const void *const *inputs, void *const *outputs,
                     std::vector<double> *seconds) {
    if (seconds) {
        // One step at a time, each timed (the steps' own work only).
        seconds->assign(plan.steps.size(), 0.0);
        for (size_t i = 0; i < plan.steps.size(); ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            run_steps(plan, scope, state, inputs, outputs, i, i + 1);
            (*seconds)[i] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        return;
    }
    run_steps(plan, scope, state, inputs, outputs, 0, plan.steps.size());
}

void RunContext::run_steps(const Plan &plan, const CacheScope &scope, ThreadState &state,
                           const void *const *inputs, void *const *outputs, size_t begin,
                           size_t end) {
    SerialSteps serial;
    std::vector<const void *> ins;
    std::vector<void *> outs;
    for (size_t i = begin; i < end; ++i) {
        const Step &step = plan.steps[i];
        Bound &b = steps_[i];
        if (!b.direct) {
            // The operator's own run binds and executes (it may take several
            // primitives or conversions), under the thread's own setting.
            serial.before(INT64_MAX);
            auto address = [&](const BufferRef &r) -> void * {
                switch (r.kind) {
                case BufferRef::Kind::input:
                    return const_cast<void *>(inputs[r.index]);
                case BufferRef::Kind::output:
                    return outputs[r.index];
                default:
                    return fixed_address(plan, arena_, r);
                }
            };
            ins.clear();
            outs.clear();
            for (const BufferRef &r : step.in)
                ins.push_back(address(r));
            for (const BufferRef &r : step.out)
                outs.push_back(address(r));
            step.run(scope, *step.entry,
                     ops::Buffers{ins.data(), outs.data(), step.weights_checked});
            continue;
        }
        for (const PerRun &p : b.per_run) {
            void *data = p.ref.kind == BufferRef::Kind::input
                             ? const_cast<void *>(inputs[p.ref.index])
                             : outputs[p.ref.index];
            if (b.last[p.arg] != data) {
                if (dnnl_memory_set_data_handle(b.args[p.arg].memory, data) != dnnl_success)
                    fail(MKC_STATUS_ONEDNN_ERROR, "binding a program's buffer");
                b.last[p.arg] = data;
            }
        }
        if (b.scratchpad >= 0) {
            void *pad = state.scratchpad(b.scratchpad_bytes);
            if (b.last[b.scratchpad] != pad) {
                if (dnnl_memory_set_data_handle(b.args[b.scratchpad].memory, pad) != dnnl_success)
                    fail(MKC_STATUS_ONEDNN_ERROR, "binding the scratchpad");
                b.last[b.scratchpad] = pad;
            }
        }
        serial.before(step.serial_elements);
        execute(state, step.entry->primitive.get(), static_cast<int>(b.args.size()), b.args.data());
    }
}

} // namespace mkc::graph
