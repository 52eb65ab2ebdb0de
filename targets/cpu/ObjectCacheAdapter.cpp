// llvm::ObjectCache over cache::ObjectStore: the only place where LLVM meets the cache.
#include "targets/cpu/ObjectCacheAdapter.h"

#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>

#include "cache/ObjectStore.h"

namespace rcjit::cpu {

namespace {

// The module's identifier is its cache key; its source file name, when set apart, says what
// it was compiled for (CpuCompileOptions::name).
std::string nameOf(const llvm::Module &m) {
  const std::string &file = m.getSourceFileName();
  return file == m.getModuleIdentifier() ? std::string() : file;
}

// Stateless: the store it forwards to is thread-safe.
class ObjectCacheAdapter : public llvm::ObjectCache {
public:
  void notifyObjectCompiled(const llvm::Module *m, llvm::MemoryBufferRef obj) override {
    auto *p = reinterpret_cast<const uint8_t *>(obj.getBufferStart());
    cache::ObjectStore::instance().store(m->getModuleIdentifier(), {p, obj.getBufferSize()},
                                         nameOf(*m));
  }

  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module *m) override {
    cache::Bytes b = cache::ObjectStore::instance().lookup(m->getModuleIdentifier(), nameOf(*m));
    if (!b) return nullptr;
    llvm::StringRef data(reinterpret_cast<const char *>(b->data()), b->size());
    return llvm::MemoryBuffer::getMemBufferCopy(data, m->getModuleIdentifier());
  }
};

} // namespace

std::unique_ptr<CpuJit> withObjectCache(std::unique_ptr<CpuJit> jit) {
  static ObjectCacheAdapter *adapter = new ObjectCacheAdapter(); // outlives every JIT
  jit->setObjectCache(adapter);
  return jit;
}

} // namespace rcjit::cpu
