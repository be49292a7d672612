// The converted constants a program's plans share (graph/plan.hpp).
#include "graph/plan.hpp"

#include <iterator>

namespace mkc::graph {

std::shared_ptr<void> ConvertedConstants::find(const std::pair<int, std::string> &key) {
    auto found = copies.find(key);
    if (found == copies.end())
        return nullptr;
    std::shared_ptr<void> storage = found->second.storage.lock();
    if (!storage)
        copies.erase(found); // every plan holding it went
    return storage;
}

void ConvertedConstants::add(const std::pair<int, std::string> &key,
                             const std::shared_ptr<void> &storage,
                             const dnnl::memory::desc &desc) {
    for (auto it = copies.begin(); it != copies.end();) // those no plan holds any more
        it = it->second.storage.expired() ? copies.erase(it) : std::next(it);
    copies[key] = Copy{storage, desc, ++made};
}

const dnnl::memory::desc *ConvertedConstants::held(int v, const dnnl::memory::desc &like) {
    const Copy *earliest = nullptr;
    for (auto it = copies.lower_bound({v, std::string()}); it != copies.end() && it->first.first == v;
         ++it) {
        const Copy &c = it->second;
        if (c.storage.expired() || c.desc == like || c.desc.get_dims() != like.get_dims() ||
            c.desc.get_data_type() != like.get_data_type())
            continue;
        if (!earliest || c.made < earliest->made)
            earliest = &c;
    }
    return earliest ? &earliest->desc : nullptr;
}

size_t ConvertedConstants::held_bytes() const {
    size_t bytes = 0;
    for (const auto &kv : copies)
        if (!kv.second.storage.expired())
            bytes += kv.second.desc.get_size();
    return bytes;
}

} // namespace mkc::graph
