// The time compiled programs spend blocked on their collectives (the shape check a collective
// step starts with, and its wait step), summed over the process: what `rcjit train` reports
// as communication wait for graphs whose collectives the compiler placed (the ZeRO passes).
#pragma once

namespace rcjit::dist::detail {

/// Adds `seconds` blocked on a compiled collective. Thread-safe.
void addCompiledCollectiveWait(double seconds);
/// The sum so far. Thread-safe.
double compiledCollectiveWaitSeconds();

} // namespace rcjit::dist::detail
