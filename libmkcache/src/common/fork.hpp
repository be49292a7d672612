// fork() from any thread, while other threads run the library.
//
// A child process starts with a copy of every lock as it was at the fork,
// but with only the thread that called fork(). A lock another thread held at
// that moment would stay held in the child for good, and the child's first
// call needing it would hang. So fork handlers take every process-wide lock
// of the library before the fork (waiting for the calls holding them to get
// past them) and free them again in the parent and in the child.
//
// The locks, in the order the handlers take them (the order in which the
// library's own code nests them, so taking them cannot deadlock):
//   1. primitive_creation_mutex() (common/engine.hpp), exclusively. Every
//      oneDNN primitive and primitive descriptor is made under its shared
//      side (Handler::acquire_primitive), so holding it means no thread is
//      inside oneDNN's primitive cache: that cache's lock is free, and it
//      holds no half-made entry whose maker the child would wait for.
//      Primitive creation may look blobs up (a backward op finding what its
//      forward left), so this comes before 2.
//   2. The blob cache's lock, every stripe (cache/blob_cache.hpp). Nothing
//      is locked while it is held, and it is never held while 1 is taken
//      (a clearing-mode eviction flushes oneDNN's cache after unlocking).
//   3. The build-once table's lock (cache/build_once.hpp): held only to
//      claim or release a key. Claims whose builders did not come along
//      are dropped in the child.
//   4. The shards of the live-handle registries (common/handles.hpp):
//      tensors, then blob references. Nothing is locked while they are held.
//   5. The lock of every live tensor (mkc_tensor::mutex), taken while the
//      tensor registry is held so the set of tensors cannot change. Held
//      only around a tensor's lazily filled fields, never while any other
//      lock is taken. Only tensors handed out to callers are registered;
//      the library's own temporaries belong to the call that made them,
//      which does not exist in the child.
// The front caches (cache/front_cache.hpp) are per thread and have no lock.
//
// The OpenMP runtime oneDNN runs on registers its own fork handlers when it
// starts. Handlers run before the fork in the reverse order of registration
// and after it in the order of registration, so ours are registered after
// the runtime's: they then take our locks before the runtime takes its own
// (a thread we wait for may need the runtime's, e.g. to start a parallel
// region inside primitive creation), and run in the child after the runtime
// has reset itself.
#pragma once

namespace mkc {

// Registers the fork handlers, once. Called before the first of the locks
// above exists (by each accessor that creates one); cheap after the first.
void install_fork_handlers();

} // namespace mkc
