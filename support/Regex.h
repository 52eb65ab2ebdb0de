// <regex>, with GCC 12's -Wmaybe-uninitialized inside libstdc++'s regex compiler silenced:
// a false positive in the library's own code when it is instrumented (-fsanitize=address at
// -O1; GCC bug 105562). Include this instead of <regex>.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
