// Convolution primitives oneDNN 3.2 cannot free, kept and reused.
//
// oneDNN 3.2 puts every kernel a brgemm convolution generates into one
// process-wide set that it never empties, and reuses a stored kernel only
// when its machine code is identical. A kernel that embeds an absolute
// address (an element-wise post-op's constant table, a scaled sum, an AVX2
// channel tail mask) never matches an earlier one, so every creation of such
// a primitive adds kernels for good. Dropping the primitive frees none of
// them; creating it again - after an eviction, a plan dropped by a program's
// capacity, a flush of oneDNN's own cache - adds more. Unbounded growth under
// eviction would defeat the memory bound the cache exists for, so such
// primitives are made once per description and kept for the process: an
// entry that goes frees what it holds, and the next one built from the same
// description gets the kept primitive instead of new kernels.
//
// oneDNN 3.4 stopped sharing these kernels across primitives; on it this
// module can go. Called only while creating primitives (under
// primitive_creation_mutex() shared), so the fork handlers need not know its
// lock.
#pragma once

#include <dnnl.hpp>

#include <string>

namespace mkc {

// Whether a primitive of this description adds kernels oneDNN never frees.
bool never_freed(const dnnl::primitive_desc &pd);
// Everything that makes two descriptions one primitive, as text.
std::string description_key(const dnnl::primitive_desc &pd);
// The primitive kept under `key`, or an empty one; keep() adds one.
dnnl::primitive find_kept(const std::string &key);
void keep(const std::string &key, const dnnl::primitive &p);

// The primitive for `pd`: the one kept for an identical description if
// there is one, else a new one, kept when it would leak (see above).
template <typename Prim>
dnnl::primitive make_kept_primitive(const typename Prim::primitive_desc &pd) {
    if (!never_freed(pd)) return Prim(pd);
    const std::string key = description_key(pd);
    if (dnnl::primitive p = find_kept(key)) return p;
    dnnl::primitive p = Prim(pd);
    keep(key, p);
    return p;
}

} // namespace mkc
