#include "common/engine.hpp"

#include "common/fork.hpp"
#include "common/thread_state.hpp"

namespace mkc {

const dnnl::engine &cpu_engine() {
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

std::shared_mutex &primitive_creation_mutex() {
    // Leaked: used until exit.
    static auto *mutex = (install_fork_handlers(), new std::shared_mutex());
    return *mutex;
}

dnnl::stream &thread_stream(ThreadState &state) {
    auto &stream = state.stream;
    if (!stream) stream = std::make_unique<dnnl::stream>(cpu_engine());
    return *stream;
}

} // namespace mkc
