// The compile passes' record: after every pass, the IR as text, appended
// to one file (the compile option `dump`, else MKCACHE_DUMP), so what a
// pass did - a fusion, a converter, a choice - is found by reading two
// sections one after the other.
#pragma once

#include <memory>
#include <mutex>
#include <string>

namespace mkc::graph {

class PassDump {
public:
    // `path` empty: nothing is written. Checks that the file can be opened
    // for appending (INVALID_ARGUMENT naming it otherwise).
    explicit PassDump(std::string path);

    bool enabled() const { return !path_.empty(); }
    // Appends "=== <title> ===\n<text>" (several compiles may write at once).
    void section(const std::string &title, const std::string &text) const;

private:
    std::string path_;
    std::shared_ptr<std::mutex> mutex_;
};

// The path the compile option gives, else MKCACHE_DUMP's, else "".
std::string dump_path(const std::string &option);

} // namespace mkc::graph
