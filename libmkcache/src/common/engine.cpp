#include "common/engine.hpp"

#include "common/thread_state.hpp"

namespace mkc {

const dnnl::engine &cpu_engine() {
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

std::shared_mutex &primitive_creation_mutex() {
    static auto *mutex = new std::shared_mutex(); // leaked: used until exit
    return *mutex;
}

dnnl::stream &thread_stream(ThreadState &state) {
    auto &stream = state.stream;
    if (!stream) stream = std::make_unique<dnnl::stream>(cpu_engine());
    return *stream;
}

} // namespace mkc
