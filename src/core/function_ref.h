// FunctionRef: a non-owning reference to a callable (as llvm::function_ref), for functions
// that call a callback before returning (ParallelFor). Unlike std::function it never
// allocates, so a kernel's parallel loop costs no heap traffic per call.
// REQUIRES: the callable outlives the FunctionRef (pass lambdas straight to the call).
#pragma once

#include <type_traits>
#include <utility>

namespace pagoda {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as a std::function parameter would be
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace pagoda
