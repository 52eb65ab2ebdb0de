// The per-user secret that authenticates disk entries, kept outside the cache directory.
#pragma once
#include <optional>
#include <string>

#include "cache/EntryFormat.h"

namespace rcjit::cache {

/// The key file to use: env RCJIT_CACHE_KEY_FILE, else $XDG_CONFIG_HOME/rcjit/cache.key,
/// else ~/.config/rcjit/cache.key ("" when there is no home directory).
std::string defaultKeyFile();

/// Reads the 32-byte secret in `path`, first creating it (mode 0600, from the kernel's
/// random source, atomically even with several processes racing) when it does not exist.
/// Refuses a key file that others may read or that another user owns. On failure returns
/// nullopt and sets `why`. Thread-safe.
std::optional<Secret> loadOrCreateSecret(const std::string &path, std::string &why);

} // namespace rcjit::cache
