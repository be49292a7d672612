#include "graph/implementations.hpp"

#include <algorithm>
#include <cctype>

#include "common/error.hpp"

namespace mkc::graph {

// ------------------------------------------------------------------ onednn

ops::Verdict onednn_supports(const Node &node, const NodeInputs &inputs) {
    // The operator's own errors first: they are the node's, whoever runs it.
    ops::Verdict v = ops::verdict_of([&] { infer_node(node, inputs); });
    if (v.ok() && !row(node).prepare)
        v = {MKC_STATUS_UNSUPPORTED,
             std::string("no oneDNN primitive is bound for ") + row(node).name};
    if (v.ok() && row(node).onednn_supports)
        v = row(node).onednn_supports(node, inputs);
    return v;
}

NodeRun onednn_run(const OpRow &op) { return op.run; }
bool onednn_overwrites_input(const OpRow &op) { return op.onednn_in_place; }

namespace {

ops::Prepared onednn_prepare(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                             const Dims *y_strides) {
    return prepare_node(scope, node, inputs, y_strides);
}

bool onednn_reads_views(const OpRow &op) { return op.onednn_reads_views; }

const Implementation kOnednn{"onednn",       100,        onednn_supports,
                             onednn_prepare, onednn_run, onednn_overwrites_input,
                             onednn_reads_views, false, false, nullptr};

std::string trimmed(const std::string &s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
        ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
        --e;
    return s.substr(b, e - b);
}

std::string known_names() {
    std::string s;
    for (const Implementation *impl : implementations())
        s += (s.empty() ? "" : ", ") + std::string(impl->name);
    return s;
}

} // namespace

extern const Implementation kReference;                        // impl_reference.cpp
// impl_onednn_variants.cpp
extern const Implementation kOnednnMatmul, kOnednnMatmulShared, kOnednnConv1x1,
    kOnednnContiguous;

const std::vector<const Implementation *> &implementations() {
    static const std::vector<const Implementation *> all = [] {
        std::vector<const Implementation *> v{&kOnednn, &kOnednnMatmul,
                                              &kOnednnMatmulShared, &kOnednnConv1x1,
                                              &kOnednnContiguous, &kReference};
        std::stable_sort(v.begin(), v.end(), [](const Implementation *a, const Implementation *b) {
            return a->priority > b->priority;
        });
        return v;
    }();
    return all;
}

std::vector<const Implementation *> by_priority(const Node &node, const NodeInputs &inputs,
                                                bool shared_rows) {
    std::vector<const Implementation *> order;
    for (const Implementation *impl : implementations())
        if (impl->variant && impl->preferred && impl->preferred(node, inputs))
            order.push_back(impl == &kOnednnMatmul && shared_rows ? &kOnednnMatmulShared : impl);
    for (const Implementation *impl : implementations())
        if (!impl->variant)
            order.push_back(impl);
    return order;
}

const Implementation *implementation_named(const std::string &name) {
    for (const Implementation *impl : implementations())
        if (name == impl->name)
            return impl;
    return nullptr;
}

std::map<std::string, std::string> parse_operator_pairs(const std::string &text,
                                                        const char *source, const char *what,
                                                        bool (*valid)(const std::string &),
                                                        const std::string &known) {
    std::map<std::string, std::string> out;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string part = trimmed(text.substr(at, comma - at));
        at = comma + 1;
        if (part.empty())
            continue;
        const size_t eq = part.find('=');
        if (eq == std::string::npos)
            fail(MKC_STATUS_INVALID_ARGUMENT, source, ": '", part, "' is not operator=", what);
        const std::string op = trimmed(part.substr(0, eq)), value = trimmed(part.substr(eq + 1));
        if (!op_named(op))
            fail(MKC_STATUS_INVALID_ARGUMENT, source, ": unknown operator '", op, "' in '", part,
                 "'");
        if (!valid(value))
            fail(MKC_STATUS_INVALID_ARGUMENT, source, ": unknown ", what, " '", value, "' in '",
                 part, "' (known: ", known, ")");
        if (!out.emplace(op, value).second)
            fail(MKC_STATUS_INVALID_ARGUMENT, source, ": ", op, " is given twice");
    }
    return out;
}

std::map<std::string, std::string> parse_overrides(const std::string &text, const char *source) {
    return parse_operator_pairs(
        text, source, "implementation",
        [](const std::string &name) { return implementation_named(name) != nullptr; },
        known_names());
}

std::map<std::string, std::string> parse_precision_overrides(const std::string &text) {
    return parse_operator_pairs(
        text, "compile: precision", "precision",
        [](const std::string &p) { return p == "f32" || p == "bf16" || p == "int8"; },
        "f32, bf16");
}

const std::string *Overrides::asked(const std::string &op, const char **by) const {
    for (const auto *source : {&by_option, &by_environment}) {
        auto found = source->find(op);
        if (found == source->end())
            continue;
        if (by)
            *by = source == &by_option ? "option" : "MKCACHE_IMPL";
        return &found->second;
    }
    return nullptr;
}

Choice choose(const Node &node, const NodeInputs &inputs, const Overrides &overrides,
              const std::string &what, bool shared_rows) {
    Choice c;
    const char *by = nullptr;
    if (const std::string *asked = overrides.asked(row(node).name, &by)) {
        c.impl = implementation_named(*asked);
        c.overridden = true;
        c.why = std::string("override (") + by + ")";
        const ops::Verdict v = c.impl->supports(node, inputs);
        if (!v.ok())
            fail(MKC_STATUS_INVALID_ARGUMENT, what, ": implementation '", c.impl->name,
                 "' was asked for (", by, ") but cannot run it: ", v.reason);
        return c;
    }
    for (const Implementation *impl : by_priority(node, inputs, shared_rows)) {
        const ops::Verdict v = impl->supports(node, inputs);
        if (v.ok()) {
            c.impl = impl;
            c.why = impl == &kOnednnMatmulShared ? "priority, past the program's exact plans"
                                                 : "priority";
            return c;
        }
        c.refused.push_back(std::string(impl->name) + ": " + v.reason);
    }
    // No implementation runs it: the best one's reason is the node's error.
    fail(MKC_STATUS_INVALID_ARGUMENT, what, ": ",
         c.refused.empty() ? std::string("no implementation") : c.refused.front());
}

} // namespace mkc::graph
