// The saved texts a program reads back (measured choices, calibrations):
// one record per line, fields separated by tabs, empty lines skipped.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace mkc {

// f(line, fields, number) for each non-empty line of `text` (numbered from
// 1, empty ones counted), its fields split at every tab.
template <typename F> void each_tab_line(const std::string &text, F &&f) {
    size_t at = 0;
    int number = 0;
    while (at < text.size()) {
        const size_t end = std::min(text.find('\n', at), text.size());
        const std::string line = text.substr(at, end - at);
        at = end + 1;
        ++number;
        if (line.empty())
            continue;
        std::vector<std::string> fields;
        for (size_t p = 0;;) {
            const size_t tab = line.find('\t', p);
            fields.push_back(line.substr(p, tab == std::string::npos ? tab : tab - p));
            if (tab == std::string::npos)
                break;
            p = tab + 1;
        }
        f(line, fields, number);
    }
}

} // namespace mkc
