// The arena planner: no two buffers alive at one step share a byte, the
// arena meets the lower bound where lives allow, and a plan is repeatable.
#include <random>

#include "graph/memory_plan.hpp"
#include "internal_test.hpp"

namespace mkc::test {
namespace {

using graph::BufferLife;
using graph::plan_memory;

bool consistent(const std::vector<BufferLife> &b, const graph::MemoryPlan &p) {
    for (size_t i = 0; i < b.size(); ++i) {
        if (p.offsets[i] % graph::kArenaAlignment != 0)
            return false;
        if (p.offsets[i] + b[i].bytes > p.arena_bytes)
            return false;
        for (size_t j = i + 1; j < b.size(); ++j) {
            const bool same_time = b[i].first <= b[j].last && b[j].first <= b[i].last;
            const bool same_bytes = p.offsets[i] < p.offsets[j] + b[j].bytes &&
                                    p.offsets[j] < p.offsets[i] + b[i].bytes;
            if (same_time && same_bytes && b[i].bytes > 0 && b[j].bytes > 0)
                return false;
        }
    }
    return true;
}

TEST(memory_plan_chain_reuses_what_died) {
    // a -> b -> c -> d: each step reads the last value and writes the next.
    const std::vector<BufferLife> chain = {{1000, 0, 1}, {3000, 1, 2}, {1000, 2, 3}, {3000, 3, 4}};
    const auto p = plan_memory(chain, true);
    CHECK(consistent(chain, p));
    CHECK(p.lower_bound_bytes == 1024 + 3008);
    CHECK(p.arena_bytes == p.lower_bound_bytes);
    CHECK(p.naive_bytes == 2 * 1024 + 2 * 3008);
    const auto naive = plan_memory(chain, false);
    CHECK(consistent(chain, naive) && naive.arena_bytes == naive.naive_bytes);
}

TEST(memory_plan_random_lives_are_consistent_and_repeatable) {
    std::mt19937 rng(7);
    for (int round = 0; round < 200; ++round) {
        std::vector<BufferLife> b(1 + rng() % 40);
        for (auto &x : b) {
            x.first = static_cast<int>(rng() % 30);
            x.last = x.first + static_cast<int>(rng() % 6);
            x.bytes = (rng() % 4 == 0) ? 0 : 1 + rng() % 100000;
        }
        const auto p = plan_memory(b, true);
        CHECK(consistent(b, p));
        CHECK(p.arena_bytes >= p.lower_bound_bytes && p.arena_bytes <= p.naive_bytes);
        CHECK(plan_memory(b, true).offsets == p.offsets);
    }
}

} // namespace
} // namespace mkc::test
