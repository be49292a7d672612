// Offsets of a program's intermediate buffers in one arena.
//
// Each buffer is live from the step that writes it to the last step that
// reads it (inclusive). Two buffers may share bytes only if their lives do
// not overlap. Placement is greedy by size, largest first, each at the
// lowest offset where it overlaps no placed buffer it shares a step with:
// the large buffers that decide the arena's size get the first choice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mkc::graph {

struct BufferLife {
    size_t bytes = 0;
    int first = 0; // the step that writes it
    int last = 0;  // the last step that reads it (>= first)
};

struct MemoryPlan {
    std::vector<size_t> offsets;  // per buffer, multiples of kArenaAlignment
    size_t arena_bytes = 0;       // what the offsets need
    size_t lower_bound_bytes = 0; // max over steps of the bytes live at that step
    size_t naive_bytes = 0;       // every buffer its own allocation
};

constexpr size_t kArenaAlignment = 64;

// `reuse` false: every buffer gets its own bytes (offsets one after another).
MemoryPlan plan_memory(const std::vector<BufferLife> &buffers, bool reuse);

} // namespace mkc::graph
