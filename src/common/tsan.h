// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Happens-before edges for ThreadSanitizer where the synchronization is real but invisible
// to it: hand-offs through uninstrumented libraries (libzmq's queues), and a buffer's
// owner count read with use_count() (a relaxed load) before writing to a buffer another
// thread has released. TsanRelease(addr) in the thread that is done, TsanAcquire(addr) in
// the one that goes on. No-ops in builds without -fsanitize=thread.
#ifndef PS_COMMON_TSAN_H_
#define PS_COMMON_TSAN_H_

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LAYERPS_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(LAYERPS_TSAN)
#define LAYERPS_TSAN 1
#endif

#ifdef LAYERPS_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace ps {

inline void TsanAcquire(const void* addr) {
#ifdef LAYERPS_TSAN
  __tsan_acquire(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

inline void TsanRelease(const void* addr) {
#ifdef LAYERPS_TSAN
  __tsan_release(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

}  // namespace ps

#endif  // PS_COMMON_TSAN_H_
