// Giving the heap's free pages back to the system after a plan is compiled.
//
// Building a primitive allocates and frees far more than the primitive
// keeps: oneDNN makes and discards candidate implementations, and its
// kernel generators take buffers they free once the code is written. The
// freed chunks end up between chunks that stay, where the allocator does not
// return them by itself, so a program compiled for many input shapes keeps
// their pages resident. glibc's malloc_trim returns every whole free page,
// wherever it lies. Where the C library is not glibc this does nothing (and
// where another allocator replaces malloc, glibc's heap is all but empty).
//
// It walks the whole process's heap, not only the library's: it is called
// where far more has just been spent - a plan compiled, or a larger arena
// replacing the smaller ones (a run of a longer input than any before) -
// never on a run that reuses what the program holds.
#pragma once

namespace mkc {

// Gives free heap pages back to the system, unless MKCACHE_HEAP_TRIM=0.
void trim_heap();

} // namespace mkc
