// rcjit::region: mark a piece of a traced function as a region by name.
#pragma once
#include <functional>
#include <string_view>

#include <rcjit/Tensor.h>

namespace rcjit {

/// Runs body() and returns its result. Inside a traced function the ops it records form
/// a region named `name` (regional mode compiles each distinct region once); outside one
/// it is a plain call. Thread-safe.
Tensor region(std::string_view name, const std::function<Tensor()> &body);

} // namespace rcjit
