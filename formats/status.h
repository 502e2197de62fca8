// Status and StatusOr: the channel for expected failures (bad trace, missing file, CUDA
// error, version mismatch). A Status names what failed and why, in words a user can act on:
// "trace.ndt: chunk at bytes 4096..8191: checksum mismatch". Bugs use NDT_CHECK instead
// (formats/check.h); nothing here throws.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "formats/check.h"

namespace ndt {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  // The error message; empty for ok.
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Returns this status with "context: " put in front of its message.
  Status Prefixed(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : value_(std::move(status)) {  // NOLINT: implicit by design
    NDT_CHECK(!std::get<Status>(value_).ok()) << "StatusOr built from an ok Status";
  }

  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(value_);
  }
  T& value() & {
    NDT_CHECK(ok()) << status().message();
    return std::get<T>(value_);
  }
  const T& value() const& {
    NDT_CHECK(ok()) << status().message();
    return std::get<T>(value_);
  }
  T&& value() && {
    NDT_CHECK(ok()) << status().message();
    return std::get<T>(std::move(value_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace ndt

// Returns the Status of `expr` from the enclosing function if it is not ok.
#define NDT_RETURN_IF_ERROR(expr)         \
  do {                                    \
    ::ndt::Status ndt_status_ = (expr);   \
    if (!ndt_status_.ok()) return ndt_status_; \
  } while (0)
