// Reading rcjit's environment switches (RCJIT_*): one parser per kind of value, each
// throwing rcjit::Error that names the variable, the value given and what it accepts.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace rcjit {

/// $name's value, or nullopt when it is unset or empty (an empty value means "unset" for
/// every switch). Thread-safe as far as getenv is (no concurrent setenv).
std::optional<std::string> envValue(const char *name);

/// The index in `words` of `value` (a word list's switch): `dflt` when `value` is nullopt;
/// anything else throws Error "NAME='VALUE': expected a, b or c" with ` (hint)` appended
/// when `hint` is given. `dflt` may be -1 (no word: the caller decides).
int parseEnvChoice(const char *name, const std::optional<std::string> &value,
                   std::initializer_list<const char *> words, int dflt, const char *hint = nullptr);
/// parseEnvChoice of $name.
int envChoice(const char *name, std::initializer_list<const char *> words, int dflt,
              const char *hint = nullptr);

/// `value` as a base-10 integer in [min, max]: `dflt` when nullopt; junk, trailing
/// characters or a value out of range throw Error "NAME='VALUE': expected an integer from
/// MIN to MAX" with ` (unit)` appended when `unit` is given.
int64_t parseEnvInteger(const char *name, const std::optional<std::string> &value, int64_t dflt,
                        int64_t min, int64_t max, const char *unit = nullptr);
/// parseEnvInteger of $name.
int64_t envInteger(const char *name, int64_t dflt, int64_t min, int64_t max,
                   const char *unit = nullptr);

/// A 0/1 switch: `dflt` when nullopt, "0" false, "1" true, anything else an Error naming
/// the variable, the value and "0 or 1".
bool parseEnvFlag(const char *name, const std::optional<std::string> &value, bool dflt);
/// parseEnvFlag of $name.
bool envFlag(const char *name, bool dflt);

/// `value` as a number greater than 0 (decimal, exponent, or inf as strtod reads them):
/// `dflt` when nullopt; anything else throws Error "NAME='VALUE': expected a positive
/// number" with ` of UNIT` appended when `unit` is given.
double parseEnvPositive(const char *name, const std::optional<std::string> &value, double dflt,
                        const char *unit = nullptr);
/// parseEnvPositive of $name.
double envPositive(const char *name, double dflt, const char *unit = nullptr);

} // namespace rcjit
