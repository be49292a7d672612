#include "common/engine.hpp"

namespace mkc {

const dnnl::engine &cpu_engine() {
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

dnnl::stream &thread_stream() {
    thread_local dnnl::stream stream(cpu_engine());
    return stream;
}

} // namespace mkc
