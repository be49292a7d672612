#include <sstream>

#include "graph/plan.hpp"

namespace mkc::graph {

namespace {

std::string where(const BufferRef &r, const Graph &g) {
    switch (r.kind) {
    case BufferRef::Kind::none:
        return "-";
    case BufferRef::Kind::input: {
        int k = 0;
        for (const Value &v : g.values)
            if (v.kind == Value::Kind::input && k++ == r.index)
                return "input '" + v.name + "'";
        return "input";
    }
    case BufferRef::Kind::constant:
        return "const#" + std::to_string(r.index);
    case BufferRef::Kind::arena:
        return "arena@" + std::to_string(r.offset) + "+" + std::to_string(r.bytes);
    case BufferRef::Kind::output:
        return "output '" + g.outputs[r.index].name + "'";
    }
    return "?";
}

std::string list(const std::vector<BufferRef> &refs, const std::vector<std::string> &formats,
                 const Graph &g) {
    std::string s;
    for (size_t i = 0; i < refs.size(); ++i) {
        if (refs[i].kind == BufferRef::Kind::none)
            continue;
        if (!s.empty())
            s += ", ";
        s += where(refs[i], g);
        if (i < formats.size())
            s += " " + formats[i];
    }
    return s;
}

// "[1,12,128,64] strides [98304,64,768,1]" (the strides only when they are
// not row-major).
std::string view_text(const dnnl::memory::desc &d) {
    const Dims dims = d.get_dims(), strides = d.get_strides();
    std::string s = shape_text(dims);
    if (strides != row_major_strides(dims))
        s += " strides " + shape_text(strides);
    return s;
}

// "1x12x128x64", with "/98304x64x768x1" when the strides are not row-major.
std::string compact(const dnnl::memory::desc &d) {
    const Dims dims = d.get_dims(), strides = d.get_strides();
    auto joined = [](const Dims &v) {
        std::string s;
        for (size_t i = 0; i < v.size(); ++i)
            s += (i ? "x" : "") + std::to_string(v[i]);
        return s;
    };
    std::string s = joined(dims);
    if (strides != row_major_strides(dims))
        s += "/" + joined(strides);
    return s;
}

// "input:0", "const:3", "arena:4096:768", "output:1".
std::string place(const BufferRef &r) {
    switch (r.kind) {
    case BufferRef::Kind::none:
        return "-";
    case BufferRef::Kind::input:
        return "input:" + std::to_string(r.index);
    case BufferRef::Kind::constant:
        return "const:" + std::to_string(r.index);
    case BufferRef::Kind::arena:
        return "arena:" + std::to_string(r.offset) + ":" + std::to_string(r.bytes);
    case BufferRef::Kind::output:
        return "output:" + std::to_string(r.index);
    }
    return "?";
}

// "place format" per buffer, joined by ", " (absent optional inputs left out).
std::string places(const std::vector<BufferRef> &refs, const std::vector<std::string> &formats) {
    std::string s;
    for (size_t i = 0; i < refs.size(); ++i) {
        if (refs[i].kind == BufferRef::Kind::none)
            continue;
        if (!s.empty())
            s += ", ";
        s += place(refs[i]) + " " + (i < formats.size() ? formats[i] : "-");
    }
    return s;
}

} // namespace

std::string plan_steps(const Plan &plan) {
    std::ostringstream out;
    size_t next_view = 0;
    auto views_before = [&](size_t step) {
        for (; next_view < plan.views.size() && plan.views[next_view].before_step <= int(step);
             ++next_view) {
            const View &v = plan.views[next_view];
            out << "-\t" << v.node << "\tview\t-\t-\t" << place(v.at) << " " << compact(v.desc)
                << "\t-\t-\n";
        }
    };
    for (size_t i = 0; i < plan.steps.size(); ++i) {
        views_before(i);
        const Step &s = plan.steps[i];
        out << i << "\t" << s.node << "\t" << (s.node < 0 ? "convert" : "node") << "\t" << s.impl
            << "\t" << (s.choice.empty() ? "-" : s.choice) << "\t" << places(s.in, s.in_formats) << "\t" << places(s.out, s.out_formats) << "\t"
            << (s.in_place ? "in place" : s.why.empty() ? "-" : s.why) << "\n";
    }
    views_before(plan.steps.size());
    return out.str();
}

std::string plan_text(const Graph &graph, const Plan &plan) {
    std::ostringstream out;
    out << "plan " << plan.shape_group << ": " << plan.steps.size() << " steps, "
        << plan.views.size() << " views\n";
    size_t next_view = 0;
    auto views_before = [&](size_t step) {
        for (; next_view < plan.views.size() && plan.views[next_view].before_step <= int(step);
             ++next_view) {
            const View &v = plan.views[next_view];
            out << "-: " << graph.describe_node(v.node) << " view  [" << where(v.at, graph)
                << "] as " << view_text(v.desc) << "\n";
        }
    };
    for (size_t i = 0; i < plan.steps.size(); ++i) {
        views_before(i);
        const Step &s = plan.steps[i];
        out << i << ": " << s.what << " " << s.impl;
        if (!s.choice.empty())
            out << " (" << s.choice << ")";
        out << "  [" << list(s.in, s.in_formats, graph) << "] -> [" << list(s.out, s.out_formats, graph)
            << "]";
        if (s.in_place)
            out << "  in place";
        if (!s.why.empty())
            out << "  (" << s.why << ")";
        out << "\n";
    }
    views_before(plan.steps.size());
    out << "converters " << plan.converters << ", in place " << plan.in_place << ", views "
        << plan.views.size() << ", arena " << plan.arena_bytes << " bytes, lower bound "
        << plan.lower_bound_bytes << " bytes, naive " << plan.naive_bytes << " bytes\n";
    return out.str();
}

} // namespace mkc::graph
