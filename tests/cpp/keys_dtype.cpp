// Keys and signatures tell values apart by their element type as well as
// their dims: an entry made for one type is never served to a call with
// another. Only float32 reaches the operators yet (their checks refuse any
// other type before they sign), so these sign descriptions directly - the
// two helpers every key goes through: Handler::sign_value for signatures,
// keys::append_value / append_dtype for text keys.
#include "graph/graph.hpp"
#include "graph/measure.hpp"
#include "handler/handler.hpp"
#include "internal_test.hpp"
#include "keys/keys.hpp"

namespace mkc::test {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// A type no public call has yet (as the operators' dtype checks use).
const mkc_dtype kOther = static_cast<mkc_dtype>(7);

// The entry a Handler under one key ("probe" over `key_dims`) gives for a
// signature `sign` writes; `built` counts the entries built.
template <typename Sign>
std::shared_ptr<PrimitiveEntry> acquire(const CacheScope &scope, const Dims &key_dims,
                                        int &built, Sign &&sign) {
    Handler h(scope, "probe", "probe", nullptr, nullptr, key_dims);
    sign(h);
    return h.acquire_primitive<PrimitiveEntry>([&] {
        ++built;
        return std::make_shared<PrimitiveEntry>();
    });
}

TEST(signature_of_dims_and_type_keeps_types_apart) {
    const CacheScope scope = program_scope(0xd7e01);
    const Dims x{2, 3, 4};
    int built = 0;
    auto of = [&](mkc_dtype type) {
        return acquire(scope, x, built, [&](Handler &h) { h.sign_value(x, type); });
    };
    const auto f32 = of(MKC_DTYPE_F32);
    CHECK(built == 1);
    CHECK(of(MKC_DTYPE_F32) == f32); // the same description: served
    CHECK(built == 1);
    const auto other = of(kOther); // same key and dims, another type: built anew
    CHECK(built == 2);
    CHECK(other != f32);
    CHECK(of(kOther) == other);
    CHECK(built == 2);
    CHECK(of(MKC_DTYPE_F32) != other); // and back: not the other type's entry
    CHECK(built == 3);
}

TEST(signature_of_a_description_keeps_types_and_layouts_apart) {
    const CacheScope scope = program_scope(0xd7e02);
    const Dims x{2, 32, 3, 3};
    const dnnl::memory::desc f32(x, dt::f32, tag::nchw), bf16(x, dt::bf16, tag::nchw),
        s8(x, dt::s8, tag::nchw), f32_blocked(x, dt::f32, tag::nChw16c);
    int built = 0;
    auto of = [&](const dnnl::memory::desc &d) {
        return acquire(scope, x, built, [&](Handler &h) { h.sign_value(d); });
    };
    const auto a = of(f32);
    CHECK(of(f32) == a);
    CHECK(built == 1);
    for (const dnnl::memory::desc *d : {&bf16, &s8, &f32_blocked}) {
        const int before = built;
        const auto e = of(*d);
        CHECK(built == before + 1); // never the entry of the description signed before
        CHECK(e != a);
        CHECK(of(*d) == e);
        CHECK(built == before + 1);
    }
}

TEST(text_keys_of_values_name_their_type) {
    const int64_t dims[] = {1, 64, 56, 56};
    auto value = [&](mkc_dtype type) {
        std::string s;
        keys::append_value(s, dims, 4, type);
        return s;
    };
    // Float32 keeps the text every key had before other types.
    CHECK_EQ_TEXT(value(MKC_DTYPE_F32), "1x64x56x56");
    CHECK(value(kOther) != value(MKC_DTYPE_F32));

    // A description's (the compiler's arrangement keys): dims and data type.
    const Dims x(dims, dims + 4);
    auto desc = [&](dt type) {
        std::string s;
        keys::append_value(s, dnnl::memory::desc(x, type, tag::nchw));
        return s;
    };
    CHECK_EQ_TEXT(desc(dt::f32), "1x64x56x56");
    CHECK_EQ_TEXT(desc(dt::bf16), "1x64x56x56:bf16");
    CHECK_EQ_TEXT(desc(dt::s8), "1x64x56x56:s8");
    CHECK_EQ_TEXT(desc(dt::u8), "1x64x56x56:u8");

    std::string none;
    keys::append_dtype(none, dt::f32);
    keys::append_dtype(none, MKC_DTYPE_F32);
    CHECK(none.empty());
}

TEST(measured_choice_key_names_its_inputs_types) {
    graph::Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {2, 3}, MKC_LAYOUT_CHANNELS_FIRST);
    g.add_node(graph::NodeOp::activation, graph::ActivationParams{}, "act", {x});
    ops::ValueDesc f32 = ops::plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, {2, 3});
    ops::ValueDesc other = f32;
    other.dtype = kOther;
    const std::string a = graph::choice_key(g, 0, {&f32}), b = graph::choice_key(g, 0, {&other});
    CHECK(a != b);
    CHECK(a.find(":dtype") == std::string::npos); // float32: the text saved choices hold
    CHECK(a.find("[2, 3]") != std::string::npos);
}

} // namespace
} // namespace mkc::test
