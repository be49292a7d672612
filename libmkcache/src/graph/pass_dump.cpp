#include "graph/pass_dump.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/error.hpp"

namespace mkc::graph {

PassDump::PassDump(std::string path)
    : path_(std::move(path)), mutex_(std::make_shared<std::mutex>()) {
    if (path_.empty())
        return;
    std::FILE *f = std::fopen(path_.c_str(), "a");
    require(f != nullptr, "compile: dump: cannot open '", path_, "' for appending");
    std::fclose(f);
}

void PassDump::section(const std::string &title, const std::string &text) const {
    if (path_.empty())
        return;
    std::lock_guard<std::mutex> lock(*mutex_);
    std::FILE *f = std::fopen(path_.c_str(), "a");
    require(f != nullptr, "compile: dump: cannot open '", path_, "' for appending");
    const std::string head = "=== " + title + " ===\n";
    const bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
                    std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool closed = std::fclose(f) == 0;
    require(ok && closed, "compile: dump: cannot write to '", path_, "'");
}

std::string dump_path(const std::string &option) {
    if (!option.empty())
        return option;
    const char *env = std::getenv("MKCACHE_DUMP");
    return env ? env : "";
}

} // namespace mkc::graph
