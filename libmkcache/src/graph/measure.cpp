#include "graph/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <oneapi/dnnl/dnnl.h>

#include "common/error.hpp"
#include "common/serial.hpp"
#include "common/text_lines.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "layout/layout.hpp"
#include "tensor/tensor.hpp"

namespace mkc::graph {

namespace {

// A name without the characters the text form separates fields with.
std::string field(const std::string &s) {
    std::string out = s;
    for (char &c : out)
        if (c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '=')
            c = '_';
    return out;
}

// A buffer of `desc`'s size filled with small values (no NaN, no
// denormal: they would time differently from real data).
std::shared_ptr<void> filled(const dnnl::memory::desc &desc) {
    const size_t bytes = desc.get_size();
    std::shared_ptr<void> b = allocate(bytes, false);
    auto *f = static_cast<float *>(b.get());
    uint32_t state = 12345;
    for (size_t i = 0; i < bytes / sizeof(float); ++i) {
        state = state * 1664525u + 1013904223u;
        f[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    }
    return b;
}

} // namespace

bool Choices::find(const std::string &key, Measured &out) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = by_key_.find(key);
    if (found == by_key_.end())
        return false;
    out = found->second;
    return true;
}

void Choices::add(const std::string &key, Measured m) {
    std::lock_guard<std::mutex> lock(mutex_);
    by_key_.emplace(key, std::move(m));
}

std::string Choices::text() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string s;
    for (const auto &[key, m] : by_key_) {
        s += key + "\t" + m.impl + "\t";
        for (size_t i = 0; i < m.times.size(); ++i) {
            char us[32];
            std::snprintf(us, sizeof us, "%.3f", m.times[i].second);
            s += (i ? "," : "") + m.times[i].first + "=" + us;
        }
        s += "\n";
    }
    return s;
}

void Choices::load(const std::string &text) {
    each_tab_line(text, [&](const std::string &line, const std::vector<std::string> &fields,
                            int line_number) {
        if (fields.size() != 3)
            fail(MKC_STATUS_INVALID_ARGUMENT, "choices line ", line_number,
                 ": expected <key>\\t<implementation>\\t<times>, got '", line, "'");
        Measured m;
        m.impl = fields[1];
        m.loaded = true;
        const bool chain = fields[0].rfind(kAttentionKey, 0) == 0;
        if (chain ? m.impl != kAttentionStep && m.impl != kAttentionSteps
                  : !implementation_named(m.impl))
            fail(MKC_STATUS_INVALID_ARGUMENT, "choices line ", line_number,
                 ": unknown implementation '", m.impl, "'");
        const std::string &times = fields[2];
        for (size_t p = 0; p < times.size();) {
            const size_t comma = std::min(times.find(',', p), times.size());
            const std::string part = times.substr(p, comma - p);
            p = comma + 1;
            const size_t eq = part.find('=');
            char *stop = nullptr;
            const double us =
                eq == std::string::npos ? 0 : std::strtod(part.c_str() + eq + 1, &stop);
            if (eq == std::string::npos || stop == part.c_str() + eq + 1 || *stop != '\0')
                fail(MKC_STATUS_INVALID_ARGUMENT, "choices line ", line_number, ": '", part,
                     "' is not <implementation>=<microseconds>");
            m.times.emplace_back(part.substr(0, eq), us);
        }
        add(fields[0], std::move(m));
    });
}

std::string choice_key(const Graph &graph, int n, const NodeInputs &inputs) {
    const Node &node = graph.nodes[n];
    std::string key = "isa" + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa())) +
                      "|t" + std::to_string(openmp_max_threads()) + "|node" + std::to_string(n) +
                      "|" + row(node).name + "|" + field(node.name);
    for (const ops::ValueDesc *v : inputs) {
        key += "|";
        if (v) {
            // The shape keeps the form saved choices hold; the type follows.
            key += shape_text(v->dims) + layout::name(v->layout);
            keys::append_dtype(key, v->dtype);
        }
    }
    return key;
}

namespace {

// Evicts `bytes` at `p` from every cache level.
void evict(const void *p, size_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
    const auto *c = static_cast<const char *>(p);
    for (size_t at = 0; at < bytes; at += 64)
        _mm_clflush(c + at);
    _mm_mfence();
#else
    (void)p;
    (void)bytes;
#endif
}

// Microseconds per call of `f`: a warm-up (first-touch pages, a kernel's
// set-up), then the median of up to 15 calls, fewer past 20 ms; or the
// warm-up's alone when it took longer than `enough_us` (positive).
// `before` runs untimed before each timed call.
template <typename F, typename B = void (*)()>
double median_us(F &&f, double enough_us = -1, B &&before = [] {}) {
    using clock = std::chrono::steady_clock;
    before();
    const auto first = clock::now();
    f();
    const double first_us = std::chrono::duration<double, std::micro>(clock::now() - first).count();
    if (enough_us > 0 && first_us > enough_us)
        return first_us;
    std::vector<double> us;
    const auto start = clock::now();
    for (int i = 0; i < 15; ++i) {
        before();
        const auto t0 = clock::now();
        f();
        us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
        if (i >= 4 && clock::now() - start > std::chrono::milliseconds(20))
            break;
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    return us[us.size() / 2];
}

// Buffers for a prepared step: each input it takes that `present` says is
// there and each of its first `outputs` results, in the arrangements it
// reads and writes, filled with small values.
struct StepBuffers {
    std::vector<std::shared_ptr<void>> held;
    std::vector<const void *> in;
    std::vector<void *> out;
    StepBuffers(const ops::Prepared &p, const std::vector<bool> &present, size_t outputs) {
        for (size_t i = 0; i < p.takes.size(); ++i) {
            const bool there = i < present.size() && present[i] && !p.takes[i].is_zero();
            held.push_back(there ? filled(p.takes[i]) : nullptr);
            in.push_back(held.back().get());
        }
        for (size_t o = 0; o < p.outputs.size(); ++o) {
            held.push_back(o < outputs ? filled(p.outputs[o].desc) : nullptr);
            out.push_back(held.back().get());
        }
    }
    ops::Buffers buffers() const { return {in.data(), out.data()}; }
};

} // namespace

double time_prepared(const CacheScope &scope, const ops::Prepared &p, NodeRun run,
                     const std::vector<bool> &present, size_t outputs) {
    const StepBuffers b(p, present, outputs);
    const ops::Buffers buffers = b.buffers();
    return median_us([&] { run(scope, *p.entry, buffers); });
}

double time_candidate(const CacheScope &scope, const Implementation &impl, const Node &node,
                      const NodeInputs &inputs,
                      const std::vector<const dnnl::memory::desc *> &arriving,
                      const Dims *y_strides, double best_us, std::string &why) {
    const bool writes_strided = y_strides && impl.reads_views(row(node));
    ops::Prepared p;
    try {
        p = impl.prepare(scope, node, inputs, writes_strided ? y_strides : nullptr);
    } catch (const std::exception &e) {
        why = e.what();
        return -1;
    }
    std::vector<bool> present;
    for (const ops::ValueDesc *v : inputs)
        present.push_back(v != nullptr);
    const StepBuffers b(p, present, node.outputs.size());
    const std::vector<const void *> &in = b.in;
    const std::vector<void *> &out = b.out;
    const NodeRun run = impl.run(row(node));
    const ops::Buffers buffers = b.buffers();
    // Constants: present inputs that arrive in no arrangement of their own.
    std::vector<std::pair<const void *, size_t>> constants;
    for (size_t i = 0; i < p.takes.size(); ++i)
        if (in[i] && (i >= arriving.size() || !arriving[i]))
            constants.emplace_back(in[i], p.takes[i].get_size());
    double total = median_us([&] { run(scope, *p.entry, buffers); },
                             best_us > 0 ? best_us * kHopeless : -1, [&] {
                                 for (const auto &[data, bytes] : constants)
                                     evict(data, bytes);
                             });
    // The conversions its inputs need on every run, from the arrangements
    // they arrive in (an input read through a view aside: a constant's).
    for (size_t i = 0; i < p.takes.size() && i < arriving.size(); ++i) {
        const bool viewed = i < p.views.size() && !p.views[i].view.is_zero();
        if (!arriving[i] || !in[i] || viewed || *arriving[i] == p.takes[i])
            continue;
        const std::shared_ptr<void> from = filled(*arriving[i]);
        const auto convert = reorder_entry(scope, *arriving[i], p.takes[i]);
        void *to = const_cast<void *>(in[i]);
        total += median_us([&] { run_reorder(scope, *convert, from.get(), to); });
    }
    if (y_strides && !writes_strided && !p.outputs.empty() && out[0]) {
        const dnnl::memory::desc &written = p.outputs[0].desc;
        const dnnl::memory::desc wanted(written.get_dims(), written.get_data_type(), *y_strides);
        const std::shared_ptr<void> to = filled(wanted);
        const auto convert = reorder_entry(scope, written, wanted);
        total += median_us([&] { run_reorder(scope, *convert, out[0], to.get()); });
    }
    return total;
}

std::string measured_text(const Measured &m) {
    std::string s = m.loaded ? "measured (loaded):" : "measured:";
    for (size_t i = 0; i < m.times.size(); ++i) {
        char us[32];
        std::snprintf(us, sizeof us, "%.2f", m.times[i].second);
        s += (i ? ", " : " ") + m.times[i].first + " " + us + " us";
    }
    return s;
}

} // namespace mkc::graph
