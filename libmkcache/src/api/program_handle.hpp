// The program handle of the C ABI, and a call's use of one: destroying a
// program waits for the calls inside it, and the fork handlers reach every
// live program's locks through these.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "common/handles.hpp"
#include "graph/program.hpp"

struct mkc_program {
    mkc_program(mkc::graph::Graph g, const mkc::graph::ProgramOptions &options)
        : p(std::move(g), options) {}
    mkc::graph::Program p;
    mutable std::mutex profile_mutex;
    std::string profile; // the last profile any thread made
    // Calls inside the program now: destroy waits for them (ProgramUse).
    mutable std::atomic<int64_t> users{0};
};

namespace mkc::api {

// A call's use of a program, from its check to its return. The use is
// counted while the handle is live in the registry, so a destroy (which
// removes the handle first, then waits for the count to reach zero) never
// frees a program a call is inside, and a call starting after the removal
// is refused.
class ProgramUse {
public:
    explicit ProgramUse(const mkc_program *p) : p_(const_cast<mkc_program *>(p)) {
        if (p == nullptr)
            fail(MKC_STATUS_INVALID_HANDLE, "program is NULL");
        if (!registry<mkc_program>().with_live(
                p, [&] { p->users.fetch_add(1, std::memory_order_acquire); }))
            fail(MKC_STATUS_INVALID_HANDLE,
                 "program is not a live program (destroyed or foreign handle)");
    }
    ~ProgramUse() { p_->users.fetch_sub(1, std::memory_order_release); }
    ProgramUse(const ProgramUse &) = delete;
    ProgramUse &operator=(const ProgramUse &) = delete;
    mkc::graph::Program &operator*() const { return p_->p; }

private:
    mkc_program *p_;
};

} // namespace mkc::api
