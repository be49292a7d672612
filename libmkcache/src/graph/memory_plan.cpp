#include "graph/memory_plan.hpp"

#include <algorithm>
#include <numeric>

namespace mkc::graph {

namespace {

size_t aligned(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

bool lives_overlap(const BufferLife &a, const BufferLife &b) {
    return a.first <= b.last && b.first <= a.last;
}

} // namespace

MemoryPlan plan_memory(const std::vector<BufferLife> &buffers, bool reuse) {
    MemoryPlan plan;
    const size_t n = buffers.size();
    plan.offsets.assign(n, 0);
    int steps = 0;
    for (const BufferLife &b : buffers) {
        plan.naive_bytes += aligned(b.bytes);
        steps = std::max(steps, b.last + 1);
    }
    std::vector<size_t> live(static_cast<size_t>(steps), 0);
    for (const BufferLife &b : buffers)
        for (int s = b.first; s <= b.last; ++s)
            live[static_cast<size_t>(s)] += aligned(b.bytes);
    for (size_t l : live)
        plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, l);

    if (!reuse) {
        size_t offset = 0;
        for (size_t i = 0; i < n; ++i) {
            plan.offsets[i] = offset;
            offset += aligned(buffers[i].bytes);
        }
        plan.arena_bytes = offset;
        return plan;
    }

    // Largest first; ties by earlier birth, then index, so a plan is the
    // same for the same buffers.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (buffers[a].bytes != buffers[b].bytes)
            return buffers[a].bytes > buffers[b].bytes;
        return buffers[a].first < buffers[b].first;
    });
    struct Placed {
        size_t offset, end;
        size_t index;
    };
    std::vector<Placed> placed; // by offset
    for (size_t i : order) {
        const size_t size = aligned(buffers[i].bytes);
        // Walk the placed buffers whose lives overlap, lowest offset first,
        // and take the first gap that fits.
        size_t offset = 0;
        for (const Placed &p : placed) {
            if (!lives_overlap(buffers[p.index], buffers[i]))
                continue;
            if (p.offset >= offset + size)
                break; // the gap below p fits
            offset = std::max(offset, p.end);
        }
        plan.offsets[i] = offset;
        const Placed mine{offset, offset + size, i};
        placed.insert(
            std::upper_bound(placed.begin(), placed.end(), mine,
                             [](const Placed &a, const Placed &b) { return a.offset < b.offset; }),
            mine);
        plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    }
    return plan;
}

} // namespace mkc::graph
