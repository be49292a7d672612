// A short list of dims kept inline, for the shape arithmetic an operator does
// on every call: a std::vector would allocate on each hit (conv2d computed
// six of them per call). Converts to a vector only for oneDNN's descriptor
// constructors, which run on a miss.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace mkc {

class SmallDims {
public:
    static constexpr int kCapacity = 8; // rank 5 + groups: the most any op needs

    void push_back(int64_t v) {
        if (size_ == kCapacity) throw std::length_error("SmallDims: more than 8 dims");
        data_[size_++] = v;
    }
    int64_t operator[](size_t i) const { return data_[i]; }
    size_t size() const { return static_cast<size_t>(size_); }
    const int64_t *data() const { return data_; }
    const int64_t *begin() const { return data_; }
    const int64_t *end() const { return data_ + size_; }
    std::vector<int64_t> vec() const { return {begin(), end()}; }

    friend bool operator==(const SmallDims &a, const std::vector<int64_t> &b) {
        return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
    }
    friend bool operator==(const std::vector<int64_t> &b, const SmallDims &a) { return a == b; }
    friend bool operator!=(const SmallDims &a, const std::vector<int64_t> &b) { return !(a == b); }
    friend bool operator!=(const std::vector<int64_t> &b, const SmallDims &a) { return !(a == b); }

private:
    int64_t data_[kCapacity];
    int size_ = 0;
};

} // namespace mkc
