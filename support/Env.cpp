// The environment switch parsers (Env.h).
#include "support/Env.h"

#include <cerrno>
#include <cstdlib>

#include <rcjit/Error.h>

namespace rcjit {

namespace {

// "NAME='VALUE': expected " — the head of every message.
std::string envBadValue(const char *name, const std::string &value) {
  return std::string(name) + "='" + value + "': expected ";
}

} // namespace

std::optional<std::string> envValue(const char *name) {
  const char *v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int parseEnvChoice(const char *name, const std::optional<std::string> &value,
                   std::initializer_list<const char *> words, int dflt, const char *hint) {
  if (!value) return dflt;
  int i = 0;
  for (const char *w : words) {
    if (*value == w) return i;
    ++i;
  }
  std::string list;
  i = 0;
  for (const char *w : words) {
    if (i > 0) list += i + 1 == static_cast<int>(words.size()) ? " or " : ", ";
    list += w;
    ++i;
  }
  throw Error(envBadValue(name, *value) + list + (hint ? std::string(" (") + hint + ")" : ""));
}

int envChoice(const char *name, std::initializer_list<const char *> words, int dflt,
              const char *hint) {
  return parseEnvChoice(name, envValue(name), words, dflt, hint);
}

int64_t parseEnvInteger(const char *name, const std::optional<std::string> &value, int64_t dflt,
                        int64_t min, int64_t max, const char *unit) {
  if (!value) return dflt;
  const char *s = value->c_str();
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw Error(envBadValue(name, *value) + "an integer from " + std::to_string(min) + " to " +
                std::to_string(max) + (unit ? std::string(" (") + unit + ")" : ""));
  }
  return static_cast<int64_t>(v);
}

int64_t envInteger(const char *name, int64_t dflt, int64_t min, int64_t max, const char *unit) {
  return parseEnvInteger(name, envValue(name), dflt, min, max, unit);
}

bool parseEnvFlag(const char *name, const std::optional<std::string> &value, bool dflt) {
  return parseEnvChoice(name, value, {"0", "1"}, dflt ? 1 : 0) == 1;
}

bool envFlag(const char *name, bool dflt) { return parseEnvFlag(name, envValue(name), dflt); }

double parseEnvPositive(const char *name, const std::optional<std::string> &value, double dflt,
                        const char *unit) {
  if (!value) return dflt;
  const char *s = value->c_str();
  char *end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v > 0)) {
    throw Error(envBadValue(name, *value) + "a positive number" +
                (unit ? std::string(" of ") + unit : ""));
  }
  return v;
}

double envPositive(const char *name, double dflt, const char *unit) {
  return parseEnvPositive(name, envValue(name), dflt, unit);
}

} // namespace rcjit
