// Content keys (XXH3-128) and the library's build id, read from its ELF note.
#include "cache/Key.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "cache/EntryFormat.h"

namespace rcjit::cache {

namespace {

constexpr std::string_view kPrefix = "rcjit-";

std::string hex(const unsigned char *p, size_t n) {
  std::string s;
  char buf[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", p[i]);
    s += buf;
  }
  return s;
}

// The build id in the PT_NOTE segments of one loaded object.
std::string noteBuildId(const dl_phdr_info *info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    auto *p = reinterpret_cast<const unsigned char *>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char *end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) nh;
      std::memcpy(&nh, p, sizeof nh);
      const unsigned char *name = p + sizeof nh;
      const unsigned char *desc = name + ((nh.n_namesz + 3) & ~3u);
      if (desc + nh.n_descsz > end) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        return hex(desc, nh.n_descsz);
      }
      p = desc + ((nh.n_descsz + 3) & ~3u);
    }
  }
  return "";
}

struct Search {
  const void *base;
  std::string id;
};

std::string findBuildId() {
  Dl_info dl{};
  if (!dladdr(reinterpret_cast<const void *>(&findBuildId), &dl)) return "";
  Search s{dl.dli_fbase, ""};
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        auto *s = static_cast<Search *>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && ph.p_offset == 0 &&
              reinterpret_cast<const void *>(info->dlpi_addr + ph.p_vaddr) == s->base) {
            s->id = noteBuildId(info);
            return 1;
          }
        }
        return 0;
      },
      &s);
  return s.id;
}

} // namespace

const std::string &buildId() {
  static const std::string id = findBuildId();
  return id;
}

std::string contentKey(const std::vector<std::string_view> &parts) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_128bits_reset(st);
  auto add = [&](std::string_view s) {
    uint64_t n = s.size();
    XXH3_128bits_update(st, &n, sizeof n);
    XXH3_128bits_update(st, s.data(), s.size());
  };
  add(std::to_string(kFormatVersion));
  add(RCJIT_VERSION_STRING);
  add(buildId());
  for (std::string_view p : parts) add(p);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return std::string(kPrefix) + hex(c.digest, sizeof c.digest);
}

bool isContentKey(std::string_view key) {
  if (key.size() != kPrefix.size() + 32 || key.substr(0, kPrefix.size()) != kPrefix) return false;
  for (char ch : key.substr(kPrefix.size())) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

} // namespace rcjit::cache
