// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <rcjit/Error.h>

namespace rcjit::test {

/// The message of the rcjit::Error `f` throws; "(no error)" and a test failure when it
/// throws none.
inline std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const rcjit::Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an rcjit::Error";
  return "(no error)";
}

} // namespace rcjit::test
