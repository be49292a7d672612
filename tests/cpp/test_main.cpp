#include <cstdlib>
#include <exception>

#include "handler/handler.hpp"
#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"

namespace mkc::test {

namespace {
struct Test {
    const char *name;
    void (*fn)();
};
std::vector<Test> &tests() {
    static std::vector<Test> all;
    return all;
}
int failures = 0;
} // namespace

Registration::Registration(const char *name, void (*fn)()) { tests().push_back({name, fn}); }

void report_failure(const char *file, int line, const std::string &what) {
    std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what.c_str());
    ++failures;
}

CacheScope program_scope(uint64_t executor) {
    CacheScope scope = thread_state().scope;
    scope.executor = executor;
    scope.thread_bound = false;
    scope.memo_context = fresh_memo_context();
    return scope;
}

std::unique_ptr<Tensor> tensor(const Dims &dims, mkc_layout layout, unsigned seed,
                               mkc_dtype dtype) {
    auto t = make_owned_tensor(layout::plain_desc(dims, to_onednn(dtype), layout), layout, dtype);
    if (dtype == MKC_DTYPE_F32) {
        auto *p = static_cast<float *>(t->data);
        uint32_t s = seed * 2654435761u + 12345u;
        for (int64_t i = 0; i < element_count(*t); ++i) {
            s = s * 1664525u + 1013904223u;
            p[i] = static_cast<float>(static_cast<int32_t>(s >> 8) % 2001) / 1000.f - 1.f;
        }
    } else {
        std::memset(t->data, 0, t->nbytes);
    }
    return t;
}

std::unique_ptr<Tensor> zeros(const Dims &dims, mkc_layout layout) {
    auto t = make_owned_tensor(layout::plain_desc(dims, dnnl::memory::data_type::f32, layout),
                               layout, MKC_DTYPE_F32);
    std::memset(t->data, 0, t->nbytes);
    return t;
}

std::unique_ptr<Tensor> converted(const Tensor &t, mkc_dtype dtype) {
    auto out = make_owned_tensor(layout::plain_desc(t.dims, to_onednn(dtype), t.layout), t.layout,
                                 dtype);
    reorder(thread_state().scope, t.desc, t.data, out->desc, out->data);
    return out;
}

std::vector<float> values(const dnnl::memory::desc &desc, const void *data, mkc_layout layout) {
    const dnnl::memory::desc plain =
        layout::plain_desc(desc.get_dims(), dnnl::memory::data_type::f32, layout);
    std::vector<float> out(plain.get_size() / sizeof(float));
    reorder(thread_state().scope, desc, data, plain, out.data());
    return out;
}

std::vector<float> values(const Tensor &t) { return values(t.desc, t.data, t.layout); }

ops::Verdict error_of(const std::function<void()> &call) { return ops::verdict_of(call); }

std::vector<const void *> arranged_inputs(const CacheScope &scope, const ops::Prepared &prepared,
                                          const std::vector<const Tensor *> &inputs,
                                          std::vector<std::shared_ptr<void>> &held) {
    std::vector<const void *> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i]) {
            in.push_back(nullptr);
            continue;
        }
        const dnnl::memory::desc &want = prepared.takes.at(i);
        const void *from = inputs[i]->data;
        dnnl::memory::desc from_desc = inputs[i]->desc;
        if (i < prepared.views.size() && !prepared.views[i].view.is_zero()) {
            // Its bytes as the view's base, then read through the view.
            const ops::InputView &v = prepared.views[i];
            held.push_back(allocate(v.base.get_size(), false));
            reorder(scope, from_desc, from, v.base, held.back().get());
            from = held.back().get();
            from_desc = v.view;
        }
        held.push_back(allocate(want.get_size(), false));
        reorder(scope, from_desc, from, want, held.back().get());
        in.push_back(held.back().get());
    }
    return in;
}

std::vector<std::vector<float>> run_some(const CacheScope &scope, const ops::Prepared &prepared,
                                         const std::vector<const Tensor *> &inputs,
                                         const std::vector<bool> &wanted, RunPhase run) {
    std::vector<std::shared_ptr<void>> held;
    const std::vector<const void *> in = arranged_inputs(scope, prepared, inputs, held);
    std::vector<void *> out;
    for (size_t j = 0; j < prepared.outputs.size(); ++j) {
        held.push_back(wanted.at(j) ? allocate(prepared.outputs[j].desc.get_size(), true)
                                    : nullptr);
        out.push_back(held.back().get());
    }
    run(scope, *prepared.entry, ops::Buffers{in.data(), out.data()});
    std::vector<std::vector<float>> results;
    for (size_t j = 0; j < out.size(); ++j)
        results.push_back(out[j] ? values(prepared.outputs[j].desc, out[j],
                                          prepared.outputs[j].layout)
                                 : std::vector<float>{});
    return results;
}

std::vector<std::vector<float>> run_prepared(const CacheScope &scope, const ops::Prepared &prepared,
                                             const std::vector<const Tensor *> &inputs,
                                             RunPhase run) {
    return run_some(scope, prepared, inputs, std::vector<bool>(prepared.outputs.size(), true),
                    run);
}

ProgramRun run_program(const graph::Graph &graph, const graph::ProgramOptions &options,
                       const std::vector<const Tensor *> &inputs) {
    graph::Program program(graph, options);
    std::vector<mkc_tensor *> out(graph.outputs.size(), nullptr);
    program.run(inputs.data(), out.data());
    ProgramRun r;
    for (mkc_tensor *t : out)
        r.outputs.push_back(take_values(t));
    r.plan = program.last_plan();
    return r;
}

std::shared_ptr<Tensor> constant(const Dims &dims, unsigned seed) {
    std::shared_ptr<Tensor> t = tensor(dims, MKC_LAYOUT_CHANNELS_FIRST, seed);
    t->constant = true;
    return t;
}

const ops::ValueDesc *described(const Tensor *t, ops::ValueDesc &holder) {
    if (!t) return nullptr;
    holder = ops::describe(*t);
    return &holder;
}

std::unique_ptr<Tensor> blocked(const Tensor &t) {
    const dnnl::memory::desc want(t.dims, dnnl::memory::data_type::f32,
                                  dnnl::memory::format_tag::nChw16c);
    auto out = make_owned_tensor(want, t.layout, t.dtype);
    reorder(thread_state().scope, t.desc, t.data, want, out->data);
    return out;
}

std::vector<float> take_values(mkc_tensor *t) {
    std::vector<float> v = values(*t);
    mkc_tensor_destroy(t);
    return v;
}

double max_rel_diff(const std::vector<float> &a, const std::vector<float> &b) {
    if (a.size() != b.size()) return INFINITY;
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(double(a[i]) - double(b[i])) / std::fmax(1.0, std::fabs(b[i]));
        if (!(d <= worst)) worst = d; // NaN counts as the worst
    }
    return worst;
}

} // namespace mkc::test

int main() {
    using namespace mkc::test;
    for (const Test &t : tests()) {
        const int before = failures;
        try {
            t.fn();
        } catch (const std::exception &e) {
            report_failure(t.name, 0, std::string("threw: ") + e.what());
        }
        std::printf("%s %s\n", failures == before ? "ok  " : "FAIL", t.name);
    }
    if (failures) {
        std::fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    std::printf("internal: all checks passed\n");
    return 0;
}
