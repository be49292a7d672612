#include "cache/blob_cache.hpp"

#include <mutex>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "common/engine.hpp"
#include "common/fork.hpp"
#include "keys/keys.hpp"

namespace mkc {

namespace {
// Drops the entries of a thread when it exits, so callers that come from
// ever-new threads do not leak default-mode entries.
struct ThreadExitGuard {
    bool armed = false;
    ~ThreadExitGuard() {
        if (armed) BlobCache::instance().drop_thread(keys::thread_hash());
    }
};
thread_local ThreadExitGuard thread_exit_guard;
} // namespace

BlobCache &BlobCache::instance() {
    // Deliberately leaked: entries hold oneDNN primitives that must not be
    // destroyed after oneDNN's own globals during process exit.
    static BlobCache *cache = (install_fork_handlers(), new BlobCache());
    return *cache;
}

std::shared_ptr<void> BlobCache::get(int64_t session, const std::string &group,
                                     const std::string &key, BlobKind kind, HitTicket *ticket,
                                     bool count) {
    std::shared_ptr<void> found;
    Counters *session_counters = nullptr;
    {
        std::shared_lock<StripedSharedMutex> lock(mutex_);
        auto s = sessions_.find(session);
        if (s != sessions_.end()) {
            session_counters = &s->second->counters;
            auto g = s->second->index.find(group);
            if (g != s->second->index.end()) {
                auto e = g->second->entries.find(key);
                if (e != g->second->entries.end() && e->second.info.kind == kind)
                    found = e->second.blob;
            }
        }
        if (ticket && (found || !count)) {
            // Read under the lock: a removal after this lookup bumps it.
            ticket->generation = generation_.load(std::memory_order_relaxed);
            ticket->session = session_counters;
        }
    }
    if (!count) return found;
    if (found) {
        (session_counters ? session_counters : &totals_)->hits.add();
    } else {
        count_miss(HitTicket{0, session_counters}, session);
    }
    return found;
}

void BlobCache::count_miss(const HitTicket &ticket, int64_t session) {
    totals_.misses.add();
    if (ticket.session) {
        static_cast<Counters *>(ticket.session)->misses.add();
        return;
    }
    // The session's first lookup: it gets its counters now (the entry
    // about to be built would create them anyway).
    std::unique_lock<StripedSharedMutex> lock(mutex_);
    auto &s = sessions_[session];
    if (!s) s = std::make_unique<Session>();
    s->counters.misses.add();
}

void BlobCache::count_hit(const HitTicket &ticket, int stripe) {
    (ticket.session ? static_cast<Counters *>(ticket.session) : &totals_)->hits.add_at(stripe);
}

void BlobCache::set(int64_t session, const std::string &group, int64_t capacity,
                    const std::string &key, std::shared_ptr<void> blob, const BlobInfo &info) {
    std::vector<std::shared_ptr<void>> released; // destroyed after unlocking
    bool evicted = false;
    {
        std::unique_lock<StripedSharedMutex> lock(mutex_);
        auto &s = sessions_[session];
        if (!s) s = std::make_unique<Session>();
        auto g = s->index.find(group);
        if (g == s->index.end()) {
            while (capacity > 0 && static_cast<int64_t>(s->groups.size()) >= capacity) {
                Group &oldest = s->groups.front();
                for (auto &kv : oldest.entries) released.push_back(std::move(kv.second.blob));
                s->counters.evicted_entries.fetch_add(oldest.entries.size());
                totals_.evicted_entries.fetch_add(oldest.entries.size());
                s->counters.evictions.fetch_add(1);
                totals_.evictions.fetch_add(1);
                s->index.erase(oldest.shape);
                s->groups.pop_front();
                evicted = true;
                generation_.fetch_add(1, std::memory_order_release);
            }
            s->groups.push_back(Group{group, {}, 0});
            g = s->index.emplace(group, std::prev(s->groups.end())).first;
        }
        Group &target = *g->second;
        Entry &entry = target.entries[key];
        if (entry.blob) {
            generation_.fetch_add(1, std::memory_order_release);
            released.push_back(std::move(entry.blob));
            target.bytes -= entry.info.bytes;
        }
        entry.blob = std::move(blob);
        entry.info = info;
        entry.thread = info.thread_bound ? info.thread : 0;
        target.bytes += info.bytes;
        auto Counters::*counter =
            info.kind == BlobKind::transfer ? &Counters::transfers : &Counters::insertions;
        (s->counters.*counter).fetch_add(1, std::memory_order_relaxed);
        (totals_.*counter).fetch_add(1, std::memory_order_relaxed);
    }
    if (info.thread_bound) thread_exit_guard.armed = true;
    released.clear();
    if (evicted) flush_onednn_primitive_cache();
}

template <typename Pred>
std::vector<std::shared_ptr<void>> BlobCache::remove_if(Pred pred) {
    std::vector<std::shared_ptr<void>> released;
    std::unique_lock<StripedSharedMutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
    for (auto &kv : sessions_) {
        Session &s = *kv.second;
        for (auto g = s.groups.begin(); g != s.groups.end();) {
            for (auto e = g->entries.begin(); e != g->entries.end();) {
                if (pred(g->shape, e->second)) {
                    g->bytes -= e->second.info.bytes;
                    released.push_back(std::move(e->second.blob));
                    e = g->entries.erase(e);
                } else {
                    ++e;
                }
            }
            if (g->entries.empty()) {
                s.index.erase(g->shape);
                g = s.groups.erase(g);
            } else {
                ++g;
            }
        }
    }
    return released;
}

void BlobCache::reset() {
    auto released = remove_if([](const std::string &, const Entry &) { return true; });
}

void BlobCache::reset_executor(uint64_t executor) {
    auto released = remove_if([executor](const std::string &, const Entry &e) {
        return e.info.executor == executor;
    });
}

void BlobCache::evict_plan(uint64_t executor, int64_t session, const std::string &group,
                           bool group_kept) {
    std::vector<std::shared_ptr<void>> released;
    if (!group_kept)
        released = remove_if([&](const std::string &shape, const Entry &e) {
            return e.info.executor == executor && shape == group;
        });
    {
        std::unique_lock<StripedSharedMutex> lock(mutex_);
        auto &s = sessions_[session];
        if (!s) s = std::make_unique<Session>();
        for (Counters *c : {&s->counters, &totals_}) {
            c->evictions.fetch_add(1);
            c->evicted_entries.fetch_add(released.size());
        }
    }
    if (!released.empty()) {
        released.clear(); // the primitives go before oneDNN's cache lets go of its copies
        flush_onednn_primitive_cache();
    }
}

void BlobCache::drop_thread(uint64_t thread_hash) {
    auto released = remove_if(
        [thread_hash](const std::string &, const Entry &e) {
            return e.info.thread_bound && e.thread == thread_hash;
        });
}

void BlobCache::drop_threads_except(uint64_t thread_hash) {
    auto released = remove_if(
        [thread_hash](const std::string &, const Entry &e) {
            return e.info.thread_bound && e.thread != thread_hash;
        });
}

void BlobCache::fill(mkc_cache_stats &out, const Counters &c) {
    out.hits += c.hits.load();
    out.misses += c.misses.load();
    out.insertions += c.insertions.load(std::memory_order_relaxed);
    out.evictions += c.evictions.load(std::memory_order_relaxed);
    out.evicted_entries += c.evicted_entries.load(std::memory_order_relaxed);
    out.transfers += c.transfers.load(std::memory_order_relaxed);
}

mkc_cache_stats BlobCache::stats() const {
    mkc_cache_stats out{};
    std::shared_lock<StripedSharedMutex> lock(mutex_);
    fill(out, totals_);
    for (auto &kv : sessions_) {
        out.hits += kv.second->counters.hits.load(); // see Counters
        if (!kv.second->groups.empty()) ++out.sessions;
        for (auto &g : kv.second->groups) {
            ++out.groups;
            out.entries += g.entries.size();
            out.bytes += g.bytes;
        }
    }
    return out;
}

mkc_cache_stats BlobCache::session_stats(int64_t session) const {
    mkc_cache_stats out{};
    std::shared_lock<StripedSharedMutex> lock(mutex_);
    auto s = sessions_.find(session);
    if (s == sessions_.end()) return out;
    fill(out, s->second->counters);
    out.sessions = s->second->groups.empty() ? 0 : 1;
    for (auto &g : s->second->groups) {
        ++out.groups;
        out.entries += g.entries.size();
        out.bytes += g.bytes;
    }
    return out;
}

namespace {
// A field of the key listing: its separators (tab, newline) and the escape
// character itself written as \t, \n and \\, so any group or name lists
// unambiguously.
void append_listed(std::string &out, const std::string &field) {
    for (char c : field) {
        if (c == '\\') out += "\\\\";
        else if (c == '\t') out += "\\t";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
}
} // namespace

std::string BlobCache::keys(int64_t session) const {
    std::string out;
    std::shared_lock<StripedSharedMutex> lock(mutex_);
    auto s = sessions_.find(session);
    if (s == sessions_.end()) return out;
    for (auto &g : s->second->groups)
        for (auto &e : g.entries) {
            append_listed(out, g.shape);
            out += '\t';
            append_listed(out, e.first);
            out += '\n';
        }
    return out;
}

void flush_onednn_primitive_cache() {
    std::unique_lock<std::shared_mutex> no_creation(primitive_creation_mutex());
    int capacity = 0;
    if (dnnl_get_primitive_cache_capacity(&capacity) != dnnl_success || capacity == 0) return;
    dnnl_set_primitive_cache_capacity(0);
    dnnl_set_primitive_cache_capacity(capacity);
}

} // namespace mkc
