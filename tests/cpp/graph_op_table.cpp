// The operator table: one row per public operator id, found by id and by
// name, complete (every function a pass may call is there), and every row
// known to the override parser (the compile option and MKCACHE_IMPL).
#include <set>
#include <string>

#include "graph/implementations.hpp"
#include "graph/op_table.hpp"
#include "internal_test.hpp"

namespace mkc::test {
namespace {

TEST(every_row_is_found_by_id_and_name) {
    const auto &rows = graph::op_rows();
    CHECK(rows.size() >= 15);
    std::set<std::string> names;
    int64_t last = 0;
    for (const graph::OpRow &r : rows) {
        const int64_t id = static_cast<int64_t>(r.op);
        CHECK(id > last); // in public id order, no id twice
        last = id;
        CHECK(graph::op_by_id(id) == &r);
        CHECK(&graph::op_row(r.op) == &r);
        CHECK(graph::op_named(r.name) == &r);
        CHECK(names.insert(r.name).second);
    }
    CHECK(graph::op_by_id(0) == nullptr && graph::op_by_id(last + 1) == nullptr);
    CHECK(graph::op_named("") == nullptr && graph::op_named("relu") == nullptr);
    CHECK(static_cast<int64_t>(graph::NodeOp::conv2d) == MKC_OP_CONV2D);
    CHECK(static_cast<int64_t>(graph::NodeOp::reshape) == MKC_OP_RESHAPE);
}

TEST(every_row_is_complete) {
    for (const graph::OpRow &r : graph::op_rows()) {
        CHECK(r.name && r.name[0]);
        CHECK(r.arity.min_inputs >= 1 && r.arity.min_inputs <= r.arity.max_inputs);
        CHECK(r.arity.outputs >= 1);
        CHECK(r.first_optional >= r.arity.min_inputs);
        CHECK(r.read_params && r.residual_port && r.infer && r.reference && r.attrs_text);
        CHECK(!r.prepare == !r.run); // oneDNN phases: both or none
        // Traits that come with functions the passes then call.
        CHECK(!r.view || r.view_of);
        CHECK(!r.convolution || (r.data_format && r.window_stride && r.set_activation));
        CHECK(r.shaping != graph::Shaping::spatial || r.window_stride);
        CHECK(!r.channel_axis || r.data_format);
    }
}

TEST(every_row_can_be_overridden) {
    for (const graph::OpRow &r : graph::op_rows()) {
        const std::string text = std::string(r.name) + "=reference";
        const auto o = graph::parse_overrides(text, "test");
        CHECK(o.size() == 1 && o.at(r.name) == "reference");
    }
}

TEST(abi_params_are_checked_by_the_row) {
    std::string name;
    const ops::Verdict v =
        error_of([&] { graph::op_row(graph::NodeOp::conv2d).read_params(nullptr, name, "graph node"); });
    CHECK(v.status == MKC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_TEXT(v.reason, "graph node (conv2d): params is NULL");
}

} // namespace
} // namespace mkc::test
