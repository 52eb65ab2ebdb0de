// libFuzzer harness: the persistent cache's entry reader, then a cached object's way into the JIT.
//
// Each input is read twice. First as an entry file (decodeEntry: header, lengths, checksum,
// tag). Then as the object code of an entry that is correctly signed — what a damaged blob
// brought in by `cache import` becomes — through the path a cache hit takes: the memory cache,
// the CPU JIT's object cache adapter, structural validation (objectProblem) and, when that
// passes, JITLink. Nothing is run: a linked object's code is never called.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBufferRef.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <rcjit/Cache.h>
#include <rcjit/Error.h>

#include "cache/EntryFormat.h"
#include "cache/Key.h"
#include "cache/ObjectStore.h"
#include "fuzz/FuzzSecret.h"
#include "targets/cpu/CpuJit.h"
#include "targets/cpu/ObjectCacheAdapter.h"
#include "targets/cpu/ObjectCheck.h"

namespace {

namespace cache = rcjit::cache;

const cache::Secret kSecret = rcjit::fuzz::fuzzSecret();

const std::string &entryKey() {
  static const std::string key = cache::contentKey({"rcjit-fuzz", "cache-entry"});
  return key;
}

// A module named by the key that defines `kernel` (what the JIT compiles on a miss).
std::unique_ptr<llvm::Module> kernelModule(rcjit::cpu::CpuJit &jit, llvm::LLVMContext &ctx) {
  auto m = std::make_unique<llvm::Module>(entryKey(), ctx);
  jit.prepareModule(*m);
  auto *fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                    llvm::Function::ExternalLinkage, "kernel", *m);
  llvm::IRBuilder<>(llvm::BasicBlock::Create(ctx, "entry", fn)).CreateRetVoid();
  return m;
}

// Links `object` as the cached object code of a module, the way a cache hit does.
void linkAsCached(const std::vector<uint8_t> &object) {
  static std::unique_ptr<rcjit::cpu::CpuJit> jit;
  static int uses = 0;
  if (!jit || ++uses % 256 == 0) { // every added module stays: start afresh now and then
    jit.reset();
    jit = rcjit::cpu::withObjectCache(rcjit::cpu::CpuJit::create());
  }
  cache::ObjectStore::instance().warm(entryKey(),
                                      std::make_shared<const std::vector<uint8_t>>(object));
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = kernelModule(*jit, *ctx);
  try {
    rcjit::cpu::CpuJit::ModuleHandle h = jit->addModule(std::move(m), std::move(ctx));
    (void)jit->lookup(h, "kernel");
  } catch (const rcjit::Error &e) {
    rcjit::cpu::forgetCachedObject(entryKey(), e.what());
  }
  cache::ObjectStore::instance().evict(entryKey(), "fuzz input done");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  rcjit::cache::set_dir("off"); // memory only: nothing is written to disk
  return 0;
}

// Any input may be refused (a verdict, an rcjit::Error); any other exception or crash is a
// finding.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> input(data, data + size);
  cache::EntryFields fields;
  (void)cache::decodeEntry(input, entryKey(), kSecret, fields);

  // The same bytes as the payload of an authentic entry: it must decode to exactly them.
  cache::EntryFields e;
  e.key = entryKey();
  e.payload = input;
  std::vector<uint8_t> entry = cache::encodeEntry(e, kSecret);
  cache::EntryFields back;
  if (cache::decodeEntry(entry, entryKey(), kSecret, back) != cache::Verdict::ok ||
      back.payload != input) {
    std::abort();
  }
  // Objects that fail validation are evicted and recompiled from IR (slow and not what is
  // fuzzed here); only those that pass go on into JITLink.
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  llvm::Triple host(llvm::sys::getProcessTriple());
  if (!rcjit::cpu::objectProblem(llvm::MemoryBufferRef(bytes, "fuzz"), host).empty()) return 0;
  linkAsCached(input);
  return 0;
}
