// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Locks the compiler checks. Every mutex of the library is a ps::Mutex (or ps::SharedMutex),
// every member it protects says so with GUARDED_BY, and every function that expects a lock
// held says REQUIRES. Clang's thread-safety analysis (-Wthread-safety, an error in every
// clang build of the library: see CMakeLists.txt) then rejects an access without the lock,
// a lock taken twice, or one not released on some path. Other compilers ignore the
// annotations. The pattern and the macro names are those of leveldb's port and abseil.
//
// Condition variables: CondVar waits on a Mutex the caller holds. A predicate passed to a
// wait reads guarded members, and the analysis sees a lambda as a function of its own, so
// such lambdas are annotated too:  cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return done_; });
#ifndef PS_COMMON_MUTEX_H_
#define PS_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define LAYERPS_TSA(x) __attribute__((x))
#else
#define LAYERPS_TSA(x)
#endif

#define CAPABILITY(x) LAYERPS_TSA(capability(x))
#define SCOPED_CAPABILITY LAYERPS_TSA(scoped_lockable)
#define GUARDED_BY(x) LAYERPS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) LAYERPS_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) LAYERPS_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) LAYERPS_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) LAYERPS_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) LAYERPS_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) LAYERPS_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) LAYERPS_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) LAYERPS_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) LAYERPS_TSA(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) LAYERPS_TSA(release_generic_capability(__VA_ARGS__))
#define EXCLUDES(...) LAYERPS_TSA(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) LAYERPS_TSA(assert_capability(x))
#define RETURN_CAPABILITY(x) LAYERPS_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS LAYERPS_TSA(no_thread_safety_analysis)

namespace ps {

class CondVar;

// std::mutex as a capability. Not recursive.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock where it cannot see it (a callback run
  // under a lock taken elsewhere). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for a scope; Unlock/Lock let a scope give it up for a while (a callback
// that must not run under it), and the destructor releases it only if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// std::shared_mutex as a capability: WriterLock for exclusive use, ReaderLock for shared.
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }
  // As Mutex::AssertHeld (exclusive use).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() RELEASE() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_->LockShared(); }
  ~ReaderLock() RELEASE() { mu_->UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// A condition variable for ps::Mutex. Every wait takes the mutex the caller holds; it is
// released while waiting and held again when the wait returns, as with std::unique_lock.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  template <typename Pred>
  void Wait(Mutex* mu, Pred pred) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, pred);
    lock.release();
  }
  // False when the time ran out (without a predicate: a spurious wake counts as a wake).
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& d) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woke = cv_.wait_for(lock, d) == std::cv_status::no_timeout;
    lock.release();
    return woke;
  }
  // pred()'s value when the wait ends: false only when the time ran out first.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& d, Pred pred) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool ok = cv_.wait_for(lock, d, pred);
    lock.release();
    return ok;
  }
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& t) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woke = cv_.wait_until(lock, t) == std::cv_status::no_timeout;
    lock.release();
    return woke;
  }
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& t, Pred pred)
      REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool ok = cv_.wait_until(lock, t, pred);
    lock.release();
    return ok;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ps

#endif  // PS_COMMON_MUTEX_H_
